// RUN: mpmd-opt %s -split-input-file -mpmd-merge-inferred-fragments | FileCheck %s
// Shardy's merge-any-consumer is accepted and changes nothing.
// RUN: mpmd-opt %s -split-input-file -mpmd-merge-inferred-fragments=merge-any-consumer=true | FileCheck %s
// RUN: mpmd-opt %s -split-input-file -mpmd-merge-inferred-fragments=merge-sideways=true \
// RUN:   | FileCheck %s --check-prefix=SIDE

!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>
!m2 = !mpmd.mesh_tensor<"m2", tensor<4xf32>>

// An inferred fragment merges into its producer on the same mesh when all its
// operands are available there: the loss joins the last forward stage.

// CHECK-LABEL: func.func @merge_into_producer
func.func @merge_into_producer(%arg0: !m1, %arg1: !m1) -> (!m1, !m1)
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  // CHECK-NEXT: %[[M:.*]]:2 = mpmd.fragment<mesh="m1", origin=["f"]> (%arg0, %arg1) (%[[A:.*]]: tensor<4xf32>, %[[B:.*]]: tensor<4xf32>) {
  // CHECK-NEXT:   %[[N:.*]] = "stablehlo.negate"(%[[A]])
  // CHECK-NEXT:   %[[S:.*]] = "stablehlo.subtract"(%[[N]], %[[B]])
  // CHECK-NEXT:   mpmd.return %[[N]], %[[S]] : tensor<4xf32>, tensor<4xf32>
  // CHECK-NEXT: }
  // CHECK-NEXT: return %[[M]]#0, %[[M]]#1
  %0 = mpmd.fragment<mesh="m1", origin=["f"]> (%arg0) (%a: tensor<4xf32>) {
    %n = "stablehlo.negate"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %n : tensor<4xf32>
  } : (!m1) -> !m1
  %1 = mpmd.fragment<mesh="m1", origin=[]> (%0, %arg1) (%a: tensor<4xf32>, %b: tensor<4xf32>) {
    %s = "stablehlo.subtract"(%a, %b) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %s : tensor<4xf32>
  } : (!m1, !m1) -> !m1
  return %0, %1 : !m1, !m1
}

// -----

!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>

// No producer: merge into the first consumer on the same mesh.

// CHECK-LABEL: func.func @merge_into_consumer
func.func @merge_into_consumer(%arg0: !m1) -> !m1
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // CHECK-NEXT: %[[M:.*]] = mpmd.fragment<mesh="m1", origin=["g"]> (%arg0) (%[[A:.*]]: tensor<4xf32>) {
  // CHECK-NEXT:   %[[C:.*]] = "stablehlo.constant"
  // CHECK-NEXT:   %[[X:.*]] = "stablehlo.multiply"(%[[A]], %[[C]])
  // CHECK-NEXT:   mpmd.return %[[X]]
  // CHECK-NEXT: }
  // CHECK-NEXT: return %[[M]]
  %0 = mpmd.fragment<mesh="m1", origin=[]> () () {
    %c = "stablehlo.constant"() <{value = dense<2.0> : tensor<4xf32>}> : () -> tensor<4xf32>
    mpmd.return %c : tensor<4xf32>
  } : () -> !m1
  %1 = mpmd.fragment<mesh="m1", origin=["g"]> (%arg0, %0) (%a: tensor<4xf32>, %c: tensor<4xf32>) {
    %x = "stablehlo.multiply"(%a, %c) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %x : tensor<4xf32>
  } : (!m1, !m1) -> !m1
  return %1 : !m1
}

// -----

!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>
!m2 = !mpmd.mesh_tensor<"m2", tensor<4xf32>>

// Never across meshes, never two user fragments, and not into a producer when
// an operand (here a transfer of a fragment of m2 that runs after it) is only
// available after it.

// CHECK-LABEL: func.func @no_merge
func.func @no_merge(%arg0: !m1, %arg1: !m2) -> (!m1, !m1, !m2)
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  // CHECK-NEXT: mpmd.fragment<mesh="m1", origin=["f"]>
  // CHECK:      mpmd.fragment<mesh="m1", origin=["g"]>
  // CHECK:      mpmd.fragment<mesh="m2", origin=["h"]>
  // CHECK:      mpmd.transfer
  // CHECK:      mpmd.fragment<mesh="m1", origin=[]>
  // CHECK-NOT:  mpmd.fragment
  %0 = mpmd.fragment<mesh="m1", origin=["f"]> (%arg0) (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m1) -> !m1
  %1 = mpmd.fragment<mesh="m1", origin=["g"]> (%0) (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m1) -> !m1
  %2 = mpmd.fragment<mesh="m2", origin=["h"]> (%arg1) (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m2) -> !m2
  %3 = mpmd.transfer %2 : (!m2) -> !m1
  %4 = mpmd.fragment<mesh="m1", origin=[]> (%1, %3) (%a: tensor<4xf32>, %b: tensor<4xf32>) {
    %s = "stablehlo.add"(%a, %b) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %s : tensor<4xf32>
  } : (!m1, !m1) -> !m1
  return %1, %4, %2 : !m1, !m1, !m2
}

// -----

!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>
!m2 = !mpmd.mesh_tensor<"m2", tensor<4xf32>>

// An operand of the inferred fragment is a transfer (of a transfer) of a
// function argument, issued after the producer: the transfers move up before
// the producer, and the fragment merges into it there, ahead of the
// producer's other reader.

// CHECK-LABEL: func.func @transfers_move_up_to_the_producer
func.func @transfers_move_up_to_the_producer(%arg0: !m1, %arg1: !m1) -> (!m1, !m2)
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  // CHECK-NEXT: %[[T1:.*]] = mpmd.transfer %arg1 : {{.*}} -> !mpmd.mesh_tensor<"m2"
  // CHECK-NEXT: %[[T2:.*]] = mpmd.transfer %[[T1]] : {{.*}} -> !mpmd.mesh_tensor<"m1"
  // CHECK-NEXT: %[[G:.*]]:2 = mpmd.fragment<mesh="m1", origin=["g"]> (%arg0, %[[T2]])
  // CHECK:      %[[T:.*]] = mpmd.transfer %[[G]]#0
  // CHECK-NEXT: return %[[G]]#1, %[[T]]
  %0 = mpmd.fragment<mesh="m1", origin=["g"]> (%arg0) (%a: tensor<4xf32>) {
    %n = "stablehlo.negate"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %n : tensor<4xf32>
  } : (!m1) -> !m1
  %t = mpmd.transfer %0 : (!m1) -> !m2
  %1 = mpmd.transfer %arg1 : (!m1) -> !m2
  %2 = mpmd.transfer %1 : (!m2) -> !m1
  %3 = mpmd.fragment<mesh="m1", origin=[]> (%0, %2) (%a: tensor<4xf32>, %b: tensor<4xf32>) {
    %s = "stablehlo.add"(%a, %b) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %s : tensor<4xf32>
  } : (!m1, !m1) -> !m1
  return %3, %t : !m1, !m2
}

// -----

!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>
!m2 = !mpmd.mesh_tensor<"m2", tensor<4xf32>>

// The same, but the transfers bring back the producer's own result: they
// cannot run before it, so nothing moves and nothing merges.

// CHECK-LABEL: func.func @a_transfer_of_the_producer_stays_after_it
func.func @a_transfer_of_the_producer_stays_after_it(%arg0: !m1) -> !m1
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  // CHECK-NEXT: %[[G:.*]] = mpmd.fragment<mesh="m1", origin=["g"]> (%arg0)
  // CHECK:      %[[T1:.*]] = mpmd.transfer %[[G]]
  // CHECK-NEXT: %[[T2:.*]] = mpmd.transfer %[[T1]]
  // CHECK-NEXT: mpmd.fragment<mesh="m1", origin=[]> (%[[G]], %[[T2]])
  %0 = mpmd.fragment<mesh="m1", origin=["g"]> (%arg0) (%a: tensor<4xf32>) {
    %n = "stablehlo.negate"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %n : tensor<4xf32>
  } : (!m1) -> !m1
  %1 = mpmd.transfer %0 : (!m1) -> !m2
  %2 = mpmd.transfer %1 : (!m2) -> !m1
  %3 = mpmd.fragment<mesh="m1", origin=[]> (%0, %2) (%a: tensor<4xf32>, %b: tensor<4xf32>) {
    %s = "stablehlo.add"(%a, %b) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %s : tensor<4xf32>
  } : (!m1, !m1) -> !m1
  return %3 : !m1
}

// -----

!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>

// Another use of the result comes before the consumer (it is sent to m2):
// the consumer, the next fragment of m1, moves up to the inferred fragment,
// whose place keeps the mesh's order.

// CHECK-LABEL: func.func @use_before_consumer
func.func @use_before_consumer(%arg0: !m1) -> (!m1, !m1)
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  // CHECK-NEXT: %[[M:.*]]:2 = mpmd.fragment<mesh="m1", origin=["g"]> (%arg0)
  // CHECK:      mpmd.transfer %[[M]]#0
  // CHECK-NEXT: return %[[M]]#1, %[[M]]#0
  %0 = mpmd.fragment<mesh="m1", origin=[]> () () {
    %c = "stablehlo.constant"() <{value = dense<2.0> : tensor<4xf32>}> : () -> tensor<4xf32>
    mpmd.return %c : tensor<4xf32>
  } : () -> !m1
  %t = mpmd.transfer %0 : (!m1) -> !mpmd.mesh_tensor<"m2", tensor<4xf32>>
  %1 = mpmd.fragment<mesh="m1", origin=["g"]> (%arg0, %0) (%a: tensor<4xf32>, %c: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m1, !m1) -> !m1
  return %1, %0 : !m1, !m1
}

// -----

!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>

// The same, but another fragment of m1 runs between the two: moving the
// consumer up would change m1's order, so nothing merges.

// CHECK-LABEL: func.func @use_before_consumer_with_a_fragment_between
func.func @use_before_consumer_with_a_fragment_between(%arg0: !m1) -> (!m1, !m1, !m1)
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  // CHECK-NEXT: mpmd.fragment<mesh="m1", origin=[]>
  // CHECK:      mpmd.transfer
  // CHECK-NEXT: mpmd.fragment<mesh="m1", origin=["h"]>
  // CHECK:      mpmd.fragment<mesh="m1", origin=["g"]>
  %0 = mpmd.fragment<mesh="m1", origin=[]> () () {
    %c = "stablehlo.constant"() <{value = dense<2.0> : tensor<4xf32>}> : () -> tensor<4xf32>
    mpmd.return %c : tensor<4xf32>
  } : () -> !m1
  %t = mpmd.transfer %0 : (!m1) -> !mpmd.mesh_tensor<"m2", tensor<4xf32>>
  %h = mpmd.fragment<mesh="m1", origin=["h"]> (%arg0) (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m1) -> !m1
  %1 = mpmd.fragment<mesh="m1", origin=["g"]> (%arg0, %0) (%a: tensor<4xf32>, %c: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m1, !m1) -> !m1
  return %1, %0, %h : !m1, !m1, !m1
}

// -----

!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>
!s1 = !mpmd.mesh_tensor<"m1", tensor<2x4xf32>>

// Work done once for several microbatches (slicing a stacked batch into both
// microbatches) stays a fragment of its own: merged into microbatch 0's
// fragment it would give microbatch 0 a program of its own.

// CHECK-LABEL: func.func @not_into_one_microbatch_of_several
func.func @not_into_one_microbatch_of_several(%arg0: !s1) -> (!m1, !m1)
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // CHECK-NEXT: %[[S:.*]]:2 = mpmd.fragment<mesh="m1", origin=[]> (%arg0)
  // CHECK:      mpmd.fragment<mesh="m1", origin=["f"]> (%[[S]]#0) {call_counter = 0 : ui32}
  // CHECK:      mpmd.fragment<mesh="m1", origin=["f"]> (%[[S]]#1) {call_counter = 1 : ui32}
  %0:2 = mpmd.fragment<mesh="m1", origin=[]> (%arg0) (%a: tensor<2x4xf32>) {
    %s0 = "stablehlo.slice"(%a) <{start_indices = array<i64: 0, 0>, limit_indices = array<i64: 1, 4>, strides = array<i64: 1, 1>}> : (tensor<2x4xf32>) -> tensor<1x4xf32>
    %r0 = "stablehlo.reshape"(%s0) : (tensor<1x4xf32>) -> tensor<4xf32>
    %s1 = "stablehlo.slice"(%a) <{start_indices = array<i64: 1, 0>, limit_indices = array<i64: 2, 4>, strides = array<i64: 1, 1>}> : (tensor<2x4xf32>) -> tensor<1x4xf32>
    %r1 = "stablehlo.reshape"(%s1) : (tensor<1x4xf32>) -> tensor<4xf32>
    mpmd.return %r0, %r1 : tensor<4xf32>, tensor<4xf32>
  } : (!s1) -> (!m1, !m1)
  %1 = mpmd.fragment<mesh="m1", origin=["f"]> (%0#0) {call_counter = 0 : ui32} (%a: tensor<4xf32>) {
    %n = "stablehlo.negate"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %n : tensor<4xf32>
  } : (!m1) -> !m1
  %2 = mpmd.fragment<mesh="m1", origin=["f"]> (%0#1) {call_counter = 1 : ui32} (%a: tensor<4xf32>) {
    %n = "stablehlo.negate"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %n : tensor<4xf32>
  } : (!m1) -> !m1
  return %1, %2 : !m1, !m1
}

// -----

!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>
!s1 = !mpmd.mesh_tensor<"m1", tensor<2x4xf32>>
!b1 = !mpmd.mesh_tensor<"m1", tensor<8xf32>>

// The reshape of a stacked batch feeds the slices of both microbatches: it
// stays a fragment of its own, and each slice merges into its microbatch's
// fragment rather than into the reshape or the other slice (together they
// would make one program with a result per microbatch).

// CHECK-LABEL: func.func @slices_into_their_microbatches
func.func @slices_into_their_microbatches(%arg0: !b1) -> (!m1, !m1)
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // CHECK-NEXT: %[[R:.*]] = mpmd.fragment<mesh="m1", origin=[]> (%arg0)
  // CHECK-NEXT:   "stablehlo.reshape"
  // CHECK-NEXT:   mpmd.return
  // CHECK-NEXT: }
  // CHECK-NEXT: mpmd.fragment<mesh="m1", origin=["f"]> (%[[R]]) {call_counter = 0 : ui32}
  // CHECK-NEXT:   "stablehlo.slice"
  // CHECK:        "stablehlo.negate"
  // CHECK:      mpmd.fragment<mesh="m1", origin=["f"]> (%[[R]]) {call_counter = 1 : ui32}
  // CHECK-NEXT:   "stablehlo.slice"
  // CHECK:        "stablehlo.negate"
  %0 = mpmd.fragment<mesh="m1", origin=[]> (%arg0) (%a: tensor<8xf32>) {
    %r = "stablehlo.reshape"(%a) : (tensor<8xf32>) -> tensor<2x4xf32>
    mpmd.return %r : tensor<2x4xf32>
  } : (!b1) -> !s1
  %1 = mpmd.fragment<mesh="m1", origin=[]> (%0) (%a: tensor<2x4xf32>) {
    %s0 = "stablehlo.slice"(%a) <{start_indices = array<i64: 0, 0>, limit_indices = array<i64: 1, 4>, strides = array<i64: 1, 1>}> : (tensor<2x4xf32>) -> tensor<1x4xf32>
    %r0 = "stablehlo.reshape"(%s0) : (tensor<1x4xf32>) -> tensor<4xf32>
    mpmd.return %r0 : tensor<4xf32>
  } : (!s1) -> !m1
  %2 = mpmd.fragment<mesh="m1", origin=[]> (%0) (%a: tensor<2x4xf32>) {
    %s1 = "stablehlo.slice"(%a) <{start_indices = array<i64: 1, 0>, limit_indices = array<i64: 2, 4>, strides = array<i64: 1, 1>}> : (tensor<2x4xf32>) -> tensor<1x4xf32>
    %r1 = "stablehlo.reshape"(%s1) : (tensor<1x4xf32>) -> tensor<4xf32>
    mpmd.return %r1 : tensor<4xf32>
  } : (!s1) -> !m1
  %3 = mpmd.fragment<mesh="m1", origin=["f"]> (%1) {call_counter = 0 : ui32} (%a: tensor<4xf32>) {
    %n = "stablehlo.negate"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %n : tensor<4xf32>
  } : (!m1) -> !m1
  %4 = mpmd.fragment<mesh="m1", origin=["f"]> (%2) {call_counter = 1 : ui32} (%a: tensor<4xf32>) {
    %n = "stablehlo.negate"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %n : tensor<4xf32>
  } : (!m1) -> !m1
  return %3, %4 : !m1, !m1
}

// -----

!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>
!s1 = !mpmd.mesh_tensor<"m1", tensor<2x4xf32>>

// What only one microbatch uses still merges into that microbatch's fragment.

// CHECK-LABEL: func.func @into_its_own_microbatch
func.func @into_its_own_microbatch(%arg0: !s1) -> (!m1, !m1)
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // CHECK-NEXT: mpmd.fragment<mesh="m1", origin=["f"]> (%arg0) {call_counter = 0 : ui32}
  // CHECK:      "stablehlo.slice"
  // CHECK:      "stablehlo.negate"
  // CHECK:      mpmd.fragment<mesh="m1", origin=["f"]> (%arg0) {call_counter = 1 : ui32}
  // CHECK:      "stablehlo.slice"
  // CHECK:      "stablehlo.negate"
  %0 = mpmd.fragment<mesh="m1", origin=[]> (%arg0) (%a: tensor<2x4xf32>) {
    %s0 = "stablehlo.slice"(%a) <{start_indices = array<i64: 0, 0>, limit_indices = array<i64: 1, 4>, strides = array<i64: 1, 1>}> : (tensor<2x4xf32>) -> tensor<1x4xf32>
    %r0 = "stablehlo.reshape"(%s0) : (tensor<1x4xf32>) -> tensor<4xf32>
    mpmd.return %r0 : tensor<4xf32>
  } : (!s1) -> !m1
  %1 = mpmd.fragment<mesh="m1", origin=["f"]> (%0) {call_counter = 0 : ui32} (%a: tensor<4xf32>) {
    %n = "stablehlo.negate"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %n : tensor<4xf32>
  } : (!m1) -> !m1
  %2 = mpmd.fragment<mesh="m1", origin=[]> (%arg0) (%a: tensor<2x4xf32>) {
    %s1 = "stablehlo.slice"(%a) <{start_indices = array<i64: 1, 0>, limit_indices = array<i64: 2, 4>, strides = array<i64: 1, 1>}> : (tensor<2x4xf32>) -> tensor<1x4xf32>
    %r1 = "stablehlo.reshape"(%s1) : (tensor<1x4xf32>) -> tensor<4xf32>
    mpmd.return %r1 : tensor<4xf32>
  } : (!s1) -> !m1
  %3 = mpmd.fragment<mesh="m1", origin=["f"]> (%2) {call_counter = 1 : ui32} (%a: tensor<4xf32>) {
    %n = "stablehlo.negate"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %n : tensor<4xf32>
  } : (!m1) -> !m1
  return %1, %3 : !m1, !m1
}

// -----

!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>

// Work after each microbatch (adding its gradient to the running sum) merges
// into that microbatch's fragment; work done once after the last microbatch
// (an optimizer update) stays a fragment of its own: merged into the last
// microbatch's fragment, it would give that microbatch a program of its own.

// CHECK-LABEL: func.func @once_after_the_last_microbatch
func.func @once_after_the_last_microbatch(%w: !m1, %x: !m1) -> !m1
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // CHECK-NEXT: %[[B0:.*]] = mpmd.fragment<mesh="m1", origin=["f"(1)]> (%arg1) {call_counter = 0 : ui32}
  // CHECK:        "stablehlo.negate"
  // CHECK:        "stablehlo.add"
  // CHECK:      %[[B1:.*]] = mpmd.fragment<mesh="m1", origin=["f"(1)]> (%[[B0]], %arg1) {call_counter = 1 : ui32}
  // CHECK:        "stablehlo.negate"
  // CHECK-NEXT:   "stablehlo.add"
  // CHECK:      %[[U:.*]] = mpmd.fragment<mesh="m1", origin=[]> (%arg0, %[[B1]])
  // CHECK-NEXT:   "stablehlo.subtract"
  // CHECK:      return %[[U]]
  %z = mpmd.fragment<mesh="m1", origin=[]> () () {
    %c = "stablehlo.constant"() <{value = dense<0.0> : tensor<4xf32>}> : () -> tensor<4xf32>
    mpmd.return %c : tensor<4xf32>
  } : () -> !m1
  %g0 = mpmd.fragment<mesh="m1", origin=["f"(1)]> (%x) {call_counter = 0 : ui32} (%a: tensor<4xf32>) {
    %n = "stablehlo.negate"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %n : tensor<4xf32>
  } : (!m1) -> !m1
  %s0 = mpmd.fragment<mesh="m1", origin=[]> (%z, %g0) (%a: tensor<4xf32>, %b: tensor<4xf32>) {
    %s = "stablehlo.add"(%a, %b) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %s : tensor<4xf32>
  } : (!m1, !m1) -> !m1
  %g1 = mpmd.fragment<mesh="m1", origin=["f"(1)]> (%x) {call_counter = 1 : ui32} (%a: tensor<4xf32>) {
    %n = "stablehlo.negate"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %n : tensor<4xf32>
  } : (!m1) -> !m1
  %s1 = mpmd.fragment<mesh="m1", origin=[]> (%s0, %g1) (%a: tensor<4xf32>, %b: tensor<4xf32>) {
    %s = "stablehlo.add"(%a, %b) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %s : tensor<4xf32>
  } : (!m1, !m1) -> !m1
  %u = mpmd.fragment<mesh="m1", origin=[]> (%w, %s1) (%a: tensor<4xf32>, %b: tensor<4xf32>) {
    %d = "stablehlo.subtract"(%a, %b) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %d : tensor<4xf32>
  } : (!m1, !m1) -> !m1
  return %u : !m1
}

// -----

!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>

// Three one-off fragments on one mesh (each parameter's update after the last
// microbatch) merge with each other into one fragment, in program order: the
// first into the second, that into the third.

// CHECK-LABEL: func.func @three_one_offs_merge_into_one
func.func @three_one_offs_merge_into_one(%w0: !m1, %w1: !m1, %w2: !m1, %x: !m1) -> (!m1, !m1, !m1)
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // CHECK-NEXT: %[[B0:.*]] = mpmd.fragment<mesh="m1", origin=["f"(1)]> (%arg3) {call_counter = 0 : ui32}
  // CHECK:      %[[B1:.*]] = mpmd.fragment<mesh="m1", origin=["f"(1)]> (%[[B0]], %arg3) {call_counter = 1 : ui32}
  // CHECK:      %[[U:.*]]:3 = mpmd.fragment<mesh="m1", origin=[]> (%arg0, %[[B1]], %arg1, %arg2)
  // CHECK-NEXT:   %[[D0:.*]] = "stablehlo.subtract"
  // CHECK-NEXT:   "stablehlo.multiply"
  // CHECK-NEXT:   %[[D1:.*]] = "stablehlo.subtract"
  // CHECK-NEXT:   "stablehlo.add"
  // CHECK-NEXT:   %[[D2:.*]] = "stablehlo.subtract"
  // CHECK-NEXT:   mpmd.return %[[D0]], %[[D1]], %[[D2]]
  // CHECK-NEXT: }
  // CHECK-NEXT: return %[[U]]#0, %[[U]]#1, %[[U]]#2
  %z = mpmd.fragment<mesh="m1", origin=[]> () () {
    %c = "stablehlo.constant"() <{value = dense<0.0> : tensor<4xf32>}> : () -> tensor<4xf32>
    mpmd.return %c : tensor<4xf32>
  } : () -> !m1
  %g0 = mpmd.fragment<mesh="m1", origin=["f"(1)]> (%x) {call_counter = 0 : ui32} (%a: tensor<4xf32>) {
    %n = "stablehlo.negate"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %n : tensor<4xf32>
  } : (!m1) -> !m1
  %s0 = mpmd.fragment<mesh="m1", origin=[]> (%z, %g0) (%a: tensor<4xf32>, %b: tensor<4xf32>) {
    %s = "stablehlo.add"(%a, %b) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %s : tensor<4xf32>
  } : (!m1, !m1) -> !m1
  %g1 = mpmd.fragment<mesh="m1", origin=["f"(1)]> (%x) {call_counter = 1 : ui32} (%a: tensor<4xf32>) {
    %n = "stablehlo.negate"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %n : tensor<4xf32>
  } : (!m1) -> !m1
  %s1 = mpmd.fragment<mesh="m1", origin=[]> (%s0, %g1) (%a: tensor<4xf32>, %b: tensor<4xf32>) {
    %s = "stablehlo.add"(%a, %b) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %s : tensor<4xf32>
  } : (!m1, !m1) -> !m1
  %u0 = mpmd.fragment<mesh="m1", origin=[]> (%w0, %s1) (%a: tensor<4xf32>, %b: tensor<4xf32>) {
    %d = "stablehlo.subtract"(%a, %b) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %d : tensor<4xf32>
  } : (!m1, !m1) -> !m1
  %u1 = mpmd.fragment<mesh="m1", origin=[]> (%w1, %s1) (%a: tensor<4xf32>, %b: tensor<4xf32>) {
    %m = "stablehlo.multiply"(%b, %b) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %d = "stablehlo.subtract"(%a, %m) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %d : tensor<4xf32>
  } : (!m1, !m1) -> !m1
  %u2 = mpmd.fragment<mesh="m1", origin=[]> (%w2, %s1) (%a: tensor<4xf32>, %b: tensor<4xf32>) {
    %p = "stablehlo.add"(%b, %b) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %d = "stablehlo.subtract"(%a, %p) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %d : tensor<4xf32>
  } : (!m1, !m1) -> !m1
  return %u0, %u1, %u2 : !m1, !m1, !m1
}

// -----

!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>

// A fragment of optimization barriers only (jax.checkpoint's barrier over the
// input of a recomputation) joins its consumer, the recomputation, although
// its producer, the forward, is on the same mesh: there it would return its
// value a second time.

// CHECK-LABEL: func.func @barrier_joins_its_consumer
func.func @barrier_joins_its_consumer(%arg0: !m1, %arg1: !m1) -> (!m1, !m1)
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // CHECK-NEXT: %[[F:.*]] = mpmd.fragment<mesh="m1", origin=["f"]> (%arg0) (%[[A:.*]]: tensor<4xf32>) {
  // CHECK-NEXT:   %[[N:.*]] = "stablehlo.negate"(%[[A]])
  // CHECK-NEXT:   mpmd.return %[[N]] : tensor<4xf32>
  // CHECK-NEXT: }
  // CHECK-NEXT: %[[B:.*]] = mpmd.fragment<mesh="m1", origin=["f"(1)]> (%[[F]], %arg1) (%[[X:.*]]: tensor<4xf32>, %[[G:.*]]: tensor<4xf32>) {
  // CHECK-NEXT:   %[[O:.*]] = "stablehlo.optimization_barrier"(%[[X]])
  // CHECK-NEXT:   %[[R:.*]] = "stablehlo.negate"(%[[O]])
  // CHECK-NEXT:   %[[M:.*]] = "stablehlo.multiply"(%[[R]], %[[G]])
  // CHECK-NEXT:   mpmd.return %[[M]] : tensor<4xf32>
  // CHECK-NEXT: }
  // CHECK-NEXT: return %[[F]], %[[B]]
  %f = mpmd.fragment<mesh="m1", origin=["f"]> (%arg0) (%a: tensor<4xf32>) {
    %n = "stablehlo.negate"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %n : tensor<4xf32>
  } : (!m1) -> !m1
  %o = mpmd.fragment<mesh="m1", origin=[]> (%f) (%a: tensor<4xf32>) {
    %b = "stablehlo.optimization_barrier"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %b : tensor<4xf32>
  } : (!m1) -> !m1
  %g = mpmd.fragment<mesh="m1", origin=["f"(1)]> (%o, %arg1) (%a: tensor<4xf32>, %c: tensor<4xf32>) {
    %r = "stablehlo.negate"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    %m = "stablehlo.multiply"(%r, %c) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %m : tensor<4xf32>
  } : (!m1, !m1) -> !m1
  return %f, %g : !m1, !m1
}

// -----

!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>

// The merged fragment's discardable attributes: the call counter of the user
// fragment, not the inferred one's; none when both are inferred; the passes
// that inferred either, in order.

// CHECK-LABEL: func.func @attributes_of_the_merged_fragment
func.func @attributes_of_the_merged_fragment(%arg0: !m1) -> (!m1, !m1)
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // CHECK-NEXT: mpmd.fragment<mesh="m1", origin=["f"]> (%arg0) {call_counter = 0 : ui32} (
  // CHECK:      mpmd.fragment<mesh="m1", origin=[]> (%arg0) {mpmd.inferred_by = ["pass1", "pass2"]} (
  %0 = mpmd.fragment<mesh="m1", origin=["f"]> (%arg0) {call_counter = 0 : ui32} (%a: tensor<4xf32>) {
    %n = "stablehlo.negate"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %n : tensor<4xf32>
  } : (!m1) -> !m1
  %1 = mpmd.fragment<mesh="m1", origin=[]> (%0) {call_counter = 1 : ui32} (%a: tensor<4xf32>) {
    %n = "stablehlo.negate"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %n : tensor<4xf32>
  } : (!m1) -> !m1
  %2 = mpmd.fragment<mesh="m1", origin=[]> (%arg0) {call_counter = 0 : ui32, mpmd.inferred_by = ["pass1"]} (%a: tensor<4xf32>) {
    %n = "stablehlo.abs"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %n : tensor<4xf32>
  } : (!m1) -> !m1
  %3 = mpmd.fragment<mesh="m1", origin=[]> (%2) {call_counter = 1 : ui32, mpmd.inferred_by = ["pass2"]} (%a: tensor<4xf32>) {
    %n = "stablehlo.sine"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %n : tensor<4xf32>
  } : (!m1) -> !m1
  return %1, %3 : !m1, !m1
}

// -----

!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>

// A one-operand, one-result fragment read only by the other merges in place:
// the other keeps its operands, with the fragment's operand where its result
// was, and its ops come first.

// CHECK-LABEL: func.func @merge_in_place
func.func @merge_in_place(%arg0: !m1, %arg1: !m1) -> !m1
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // CHECK-NEXT: %[[M:.*]] = mpmd.fragment<mesh="m1", origin=["f"]> (%arg1, %arg0) (%[[B:.*]]: tensor<4xf32>, %[[A:.*]]: tensor<4xf32>) {
  // CHECK-NEXT:   %[[N:.*]] = "stablehlo.negate"(%[[A]])
  // CHECK-NEXT:   %[[S:.*]] = "stablehlo.subtract"(%[[B]], %[[N]])
  // CHECK-NEXT:   mpmd.return %[[S]]
  // CHECK-NEXT: }
  // CHECK-NEXT: return %[[M]]
  %0 = mpmd.fragment<mesh="m1", origin=[]> (%arg0) (%a: tensor<4xf32>) {
    %n = "stablehlo.negate"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %n : tensor<4xf32>
  } : (!m1) -> !m1
  %1 = mpmd.fragment<mesh="m1", origin=["f"]> (%arg1, %0) (%b: tensor<4xf32>, %a: tensor<4xf32>) {
    %s = "stablehlo.subtract"(%b, %a) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %s : tensor<4xf32>
  } : (!m1, !m1) -> !m1
  return %1 : !m1
}

// -----

!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>
!m2 = !mpmd.mesh_tensor<"m2", tensor<4xf32>>

// An inferred fragment with neither producer nor consumer on its mesh stays
// on its own; with merge-sideways it merges with the next fragment of its
// mesh, at that one's position (its result is not read before), past a
// transfer into the mesh that neither reads.

// CHECK-LABEL: func.func @sideways
// CHECK-NEXT:  mpmd.fragment<mesh="m1", origin=["f"]>
// CHECK:       mpmd.fragment<mesh="m1", origin=[]>
// CHECK:       mpmd.transfer
// CHECK-NEXT:  mpmd.fragment<mesh="m1", origin=["g"]>

// SIDE-LABEL: func.func @sideways
// SIDE-NEXT:  %[[F:.*]] = mpmd.fragment<mesh="m1", origin=["f"]>
// SIDE:       %[[T:.*]] = mpmd.transfer %arg1
// SIDE-NEXT:  %[[G:.*]]:2 = mpmd.fragment<mesh="m1", origin=["g"]> (%arg0, %[[F]])
// SIDE-NEXT:    "stablehlo.multiply"
// SIDE-NEXT:    "stablehlo.subtract"
// SIDE-NEXT:    mpmd.return
// SIDE-NEXT:  }
// SIDE-NEXT:  return %[[G]]#1, %[[G]]#0, %[[T]]
func.func @sideways(%arg0: !m1, %arg1: !m2) -> (!m1, !m1, !m1)
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  %0 = mpmd.fragment<mesh="m1", origin=["f"]> (%arg0) (%a: tensor<4xf32>) {
    %n = "stablehlo.add"(%a, %a) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %n : tensor<4xf32>
  } : (!m1) -> !m1
  %1 = mpmd.fragment<mesh="m1", origin=[]> (%arg0) (%a: tensor<4xf32>) {
    %m = "stablehlo.multiply"(%a, %a) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %m : tensor<4xf32>
  } : (!m1) -> !m1
  %t = mpmd.transfer %arg1 : (!m2) -> !m1
  %2 = mpmd.fragment<mesh="m1", origin=["g"]> (%0) (%a: tensor<4xf32>) {
    %d = "stablehlo.subtract"(%a, %a) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %d : tensor<4xf32>
  } : (!m1) -> !m1
  return %2, %1, %t : !m1, !m1, !m1
}

// -----

!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>
!m2 = !mpmd.mesh_tensor<"m2", tensor<4xf32>>

// Sideways, but the next fragment of the mesh reads (through m2) what the
// inferred fragment computes: it can go to neither position.

// SIDE-LABEL: func.func @sideways_blocked_by_the_data_flow
// SIDE-NEXT:  mpmd.fragment<mesh="m1", origin=[]>
// SIDE:       mpmd.transfer
// SIDE-NEXT:  mpmd.fragment<mesh="m2", origin=["g"]>
// SIDE:       mpmd.transfer
// SIDE-NEXT:  mpmd.fragment<mesh="m1", origin=["f"]>
func.func @sideways_blocked_by_the_data_flow(%arg0: !m1) -> (!m1, !m1)
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  %0 = mpmd.fragment<mesh="m1", origin=[]> (%arg0) (%a: tensor<4xf32>) {
    %n = "stablehlo.add"(%a, %a) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %n : tensor<4xf32>
  } : (!m1) -> !m1
  %1 = mpmd.transfer %0 : (!m1) -> !m2
  %2 = mpmd.fragment<mesh="m2", origin=["g"]> (%1) (%a: tensor<4xf32>) {
    %m = "stablehlo.multiply"(%a, %a) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %m : tensor<4xf32>
  } : (!m2) -> !m2
  %3 = mpmd.transfer %2 : (!m2) -> !m1
  %4 = mpmd.fragment<mesh="m1", origin=["f"]> (%3) (%a: tensor<4xf32>) {
    %d = "stablehlo.subtract"(%a, %a) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %d : tensor<4xf32>
  } : (!m1) -> !m1
  return %0, %4 : !m1, !m1
}
