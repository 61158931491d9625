// RUN: mpmd-opt %s -split-input-file -mpmd-split-bwd-fragments | FileCheck %s
// Idempotent, and the split program prints and parses back:
// RUN: mpmd-opt %s -split-input-file -mpmd-split-bwd-fragments \
// RUN:   | mpmd-opt -split-input-file -mpmd-split-bwd-fragments | FileCheck %s

!m0 = !mpmd.mesh_tensor<"m0", tensor<4xf32>>
!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>

// The cotangent of the activation (sent to m0) is computed by B; the weight
// gradient by W, which reads the intermediate %d from B (a residual) and the
// activation directly. Both keep origin, mesh, stage and call_counter.

// CHECK-LABEL: func.func @split
func.func @split(%act: !m1, %w: !m1, %ct: !m1) -> (!m0, !m1)
    attributes {topology = #mpmd.topology<<"m0" : <["x"=2]>>, <"m1" : <["x"=2]>>>} {
  // CHECK-NEXT: %[[B:.*]]:2 = mpmd.fragment<mesh="m1", origin=["stage1"(1)], stage=1> (%arg1, %arg2) {call_counter = 3 : ui32, split_keep_transferred} (%[[W:.*]]: tensor<4xf32>, %[[CT:.*]]: tensor<4xf32>) {
  // CHECK-NEXT:   %[[D:.*]] = "stablehlo.multiply"(%[[CT]], %[[W]])
  // CHECK-NEXT:   %[[DA:.*]] = "stablehlo.negate"(%[[D]])
  // CHECK-NEXT:   mpmd.return %[[DA]], %[[D]] : tensor<4xf32>, tensor<4xf32>
  // CHECK-NEXT: } : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>, !mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> (!mpmd.mesh_tensor<"m1", tensor<4xf32>>, !mpmd.mesh_tensor<"m1", tensor<4xf32>>)
  // CHECK-NEXT: %[[WG:.*]] = mpmd.fragment<mesh="m1", origin=["stage1"(1)], stage=1> (%arg0, %[[B]]#1) {call_counter = 3 : ui32, split_drop_transferred} (%[[A:.*]]: tensor<4xf32>, %[[R:.*]]: tensor<4xf32>) {
  // CHECK-NEXT:   %[[DW:.*]] = "stablehlo.multiply"(%[[R]], %[[A]])
  // CHECK-NEXT:   mpmd.return %[[DW]] : tensor<4xf32>
  // CHECK-NEXT: } : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>, !mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
  // CHECK-NEXT: %[[T:.*]] = mpmd.transfer %[[B]]#0
  // CHECK-NEXT: return %[[T]], %[[WG]]
  %0:2 = mpmd.fragment<mesh="m1", origin=["stage1"(1)], stage=1> (%act, %w, %ct) {call_counter = 3 : ui32}
      (%a: tensor<4xf32>, %b: tensor<4xf32>, %c: tensor<4xf32>) {
    %d = "stablehlo.multiply"(%c, %b) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %da = "stablehlo.negate"(%d) : (tensor<4xf32>) -> tensor<4xf32>
    %dw = "stablehlo.multiply"(%d, %a) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %da, %dw : tensor<4xf32>, tensor<4xf32>
  } : (!m1, !m1, !m1) -> (!m1, !m1)
  %1 = mpmd.transfer %0#0 : (!m1) -> !m0
  return %1, %0#1 : !m0, !m1
}

// -----

!m0 = !mpmd.mesh_tensor<"m0", tensor<4xf32>>
!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>

// Results are routed to the part that has them: a transferred result also
// returned keeps its other uses on B; W returns every non-transferred result,
// even one computed in B (passed as a residual, once, though W also computes
// with it) or a block argument. Results keep their order within each part.

// CHECK-LABEL: func.func @result_routing
func.func @result_routing(%arg0: !m1, %arg1: !m1) -> (!m1, !m0, !m1, !m1, !m1)
    attributes {topology = #mpmd.topology<<"m0" : <["x"=2]>>, <"m1" : <["x"=2]>>>} {
  // CHECK-NEXT: %[[B:.*]]:2 = mpmd.fragment<mesh="m1", origin=["s"(1)]> (%arg0) {call_counter = 0 : ui32, split_keep_transferred} (%[[A:.*]]: tensor<4xf32>) {
  // CHECK-NEXT:   %[[X:.*]] = "stablehlo.exponential"(%[[A]])
  // CHECK-NEXT:   %[[Y:.*]] = "stablehlo.sine"(%[[X]])
  // CHECK-NEXT:   mpmd.return %[[Y]], %[[X]]
  // CHECK-NEXT: }
  // CHECK-NEXT: %[[W:.*]]:3 = mpmd.fragment<mesh="m1", origin=["s"(1)]> (%arg1, %[[B]]#1) {call_counter = 0 : ui32, split_drop_transferred} (%[[C:.*]]: tensor<4xf32>, %[[R:.*]]: tensor<4xf32>) {
  // CHECK-NEXT:   %[[Z:.*]] = "stablehlo.add"(%[[R]], %[[C]])
  // CHECK-NEXT:   mpmd.return %[[Z]], %[[R]], %[[C]]
  // CHECK-NEXT: }
  // CHECK-NEXT: %[[T:.*]] = mpmd.transfer %[[B]]#0
  // CHECK-NEXT: return %[[B]]#0, %[[T]], %[[W]]#0, %[[W]]#1, %[[W]]#2
  %0:4 = mpmd.fragment<mesh="m1", origin=["s"(1)]> (%arg0, %arg1) {call_counter = 0 : ui32}
      (%a: tensor<4xf32>, %c: tensor<4xf32>) {
    %x = "stablehlo.exponential"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    %y = "stablehlo.sine"(%x) : (tensor<4xf32>) -> tensor<4xf32>
    %z = "stablehlo.add"(%x, %c) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %z, %y, %x, %c : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
  } : (!m1, !m1) -> (!m1, !m1, !m1, !m1)
  %1 = mpmd.transfer %0#1 : (!m1) -> !m0
  return %0#1, %1, %0#0, %0#2, %0#3 : !m1, !m0, !m1, !m1, !m1
}

// -----

!m0 = !mpmd.mesh_tensor<"m0", tensor<4xf32>>
!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>

// Ops with regions move as a whole, with the values their regions capture:
// the reduction in B needs %b (captured), the one in W needs %s from B (a
// residual). An op without results feeds no result: it goes to W. Residuals
// are typed fully replicated on the mesh.

// CHECK-LABEL: func.func @regions
func.func @regions(%arg0: !m1, %arg1: !m1) -> (!m0, tensor<f32>)
    attributes {topology = #mpmd.topology<<"m0" : <["x"=2]>>, <"m1" : <["x"=2]>>>} {
  // CHECK-NEXT: %[[B:.*]]:2 = mpmd.fragment<mesh="m1", origin=["s"(1)]> (%arg0, %arg1) {split_keep_transferred} (%[[A:.*]]: tensor<4xf32>, %[[BB:.*]]: tensor<4xf32>) {
  // CHECK-NEXT:   %[[S:.*]] = "stablehlo.custom_call"(%[[A]]) ({
  // CHECK-NEXT:     "stablehlo.add"(%[[A]], %[[BB]])
  // CHECK:        %[[N:.*]] = "stablehlo.negate"(%[[S]])
  // CHECK-NEXT:   mpmd.return %[[N]], %[[S]]
  // CHECK-NEXT: } : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>, !mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> (!mpmd.mesh_tensor<"m1", tensor<4xf32>>, !mpmd.mesh_tensor<"m1", tensor<4xf32>>)
  // CHECK-NEXT: %[[W:.*]] = mpmd.fragment<mesh="m1", origin=["s"(1)]> (%arg1, %[[B]]#1) {split_drop_transferred} (%[[WB:.*]]: tensor<4xf32>, %[[R:.*]]: tensor<4xf32>) {
  // CHECK-NEXT:   %[[CST:.*]] = "stablehlo.constant"
  // CHECK-NEXT:   %[[RED:.*]] = "stablehlo.reduce"(%[[CST]]) ({
  // CHECK-NEXT:   ^bb0(%[[P:.*]]: tensor<f32>, %[[Q:.*]]: tensor<f32>):
  // CHECK-NEXT:     "stablehlo.multiply"(%[[R]], %[[R]])
  // CHECK:        "stablehlo.custom_call"(%[[WB]]) {call_target_name = "print"}
  // CHECK-NEXT:   mpmd.return %[[RED]] : tensor<f32>
  // CHECK-NEXT: } : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>, !mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<f32>>
  %0:2 = mpmd.fragment<mesh="m1", origin=["s"(1)]> (%arg0, %arg1) (%a: tensor<4xf32>, %b: tensor<4xf32>) {
    %s = "stablehlo.custom_call"(%a) ({
      %i = "stablehlo.add"(%a, %b) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
      "stablehlo.return"(%i) : (tensor<4xf32>) -> ()
    }) : (tensor<4xf32>) -> tensor<4xf32>
    %n = "stablehlo.negate"(%s) : (tensor<4xf32>) -> tensor<4xf32>
    %cst = "stablehlo.constant"() <{value = dense<0.0> : tensor<f32>}> : () -> tensor<f32>
    %r = "stablehlo.reduce"(%cst) ({
    ^bb0(%p: tensor<f32>, %q: tensor<f32>):
      %j = "stablehlo.multiply"(%s, %s) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
      "stablehlo.return"(%p) : (tensor<f32>) -> ()
    }) : (tensor<f32>) -> tensor<f32>
    "stablehlo.custom_call"(%b) {call_target_name = "print"} : (tensor<4xf32>) -> ()
    mpmd.return %n, %r : tensor<4xf32>, tensor<f32>
  } : (!m1, !m1) -> (!m1, !mpmd.mesh_tensor<"m1", tensor<f32>>)
  %1 = mpmd.transfer %0#0 : (!m1) -> !m0
  %2 = mpmd.unassign %0#1 : (!mpmd.mesh_tensor<"m1", tensor<f32>>) -> tensor<f32>
  return %1, %2 : !m0, tensor<f32>
}

// -----

!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>

// First stage: nothing is transferred, so B is empty and W does everything;
// both parts exist so that every backward has a B and a W.

// CHECK-LABEL: func.func @first_stage
func.func @first_stage(%arg0: !m1, %arg1: !m1) -> !m1
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // CHECK-NEXT: mpmd.fragment<mesh="m1", origin=["stage0"(1)], stage=0> () {call_counter = 1 : ui32, split_keep_transferred} () {
  // CHECK-NEXT:   mpmd.return
  // CHECK-NEXT: } : () -> ()
  // CHECK-NEXT: %[[W:.*]] = mpmd.fragment<mesh="m1", origin=["stage0"(1)], stage=0> (%arg0, %arg1) {call_counter = 1 : ui32, split_drop_transferred} (%[[A:.*]]: tensor<4xf32>, %[[C:.*]]: tensor<4xf32>) {
  // CHECK-NEXT:   %[[DW:.*]] = "stablehlo.multiply"(%[[C]], %[[A]])
  // CHECK-NEXT:   mpmd.return %[[DW]]
  // CHECK-NEXT: }
  // CHECK-NEXT: return %[[W]]
  %0 = mpmd.fragment<mesh="m1", origin=["stage0"(1)], stage=0> (%arg0, %arg1) {call_counter = 1 : ui32}
      (%a: tensor<4xf32>, %c: tensor<4xf32>) {
    %dw = "stablehlo.multiply"(%c, %a) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %dw : tensor<4xf32>
  } : (!m1, !m1) -> !m1
  return %0 : !m1
}

// -----

!m0 = !mpmd.mesh_tensor<"m0", tensor<4xf32>>
!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>

// Everything is transferred: W exists, empty.

// CHECK-LABEL: func.func @all_transferred
func.func @all_transferred(%arg0: !m1) -> !m0
    attributes {topology = #mpmd.topology<<"m0" : <["x"=2]>>, <"m1" : <["x"=2]>>>} {
  // CHECK-NEXT: %[[B:.*]] = mpmd.fragment<mesh="m1", origin=["s"(1)]> (%arg0) {split_keep_transferred} (%[[A:.*]]: tensor<4xf32>) {
  // CHECK-NEXT:   %[[N:.*]] = "stablehlo.negate"(%[[A]])
  // CHECK-NEXT:   mpmd.return %[[N]]
  // CHECK-NEXT: }
  // CHECK-NEXT: mpmd.fragment<mesh="m1", origin=["s"(1)]> () {split_drop_transferred} () {
  // CHECK-NEXT:   mpmd.return
  // CHECK-NEXT: } : () -> ()
  // CHECK-NEXT: mpmd.transfer %[[B]]
  %0 = mpmd.fragment<mesh="m1", origin=["s"(1)]> (%arg0) (%a: tensor<4xf32>) {
    %n = "stablehlo.negate"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %n : tensor<4xf32>
  } : (!m1) -> !m1
  %1 = mpmd.transfer %0 : (!m1) -> !m0
  return %1 : !m0
}

// -----

!m0 = !mpmd.mesh_tensor<"m0", tensor<4xf32>>
!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>

// Forward, forward+backward (merged), inferred and already split fragments
// are left alone.

// CHECK-LABEL: func.func @untouched
func.func @untouched(%arg0: !m1) -> (!m0, !m0, !m0, !m1, !m1)
    attributes {topology = #mpmd.topology<<"m0" : <["x"=2]>>, <"m1" : <["x"=2]>>>} {
  // CHECK-NEXT: %[[F:.*]] = mpmd.fragment<mesh="m1", origin=["s"]> (%arg0) {call_counter = 0 : ui32} (
  // CHECK:      %[[FB:.*]]:2 = mpmd.fragment<mesh="m1", origin=["s", "s"(1)]> (%arg0) {call_counter = 0 : ui32} (
  // CHECK:      %[[I:.*]] = mpmd.fragment<mesh="m1", origin=[]> (%arg0) (
  // CHECK:      %[[K:.*]]:2 = mpmd.fragment<mesh="m1", origin=["s"(1)]> (%arg0) {call_counter = 0 : ui32, split_keep_transferred} (
  // CHECK:      %[[D:.*]] = mpmd.fragment<mesh="m1", origin=["s"(1)]> (%arg0, %[[K]]#1) {call_counter = 0 : ui32, split_drop_transferred} (
  // CHECK-NOT:  mpmd.fragment
  %0 = mpmd.fragment<mesh="m1", origin=["s"]> (%arg0) {call_counter = 0 : ui32} (%a: tensor<4xf32>) {
    %n = "stablehlo.negate"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %n : tensor<4xf32>
  } : (!m1) -> !m1
  %1:2 = mpmd.fragment<mesh="m1", origin=["s", "s"(1)]> (%arg0) {call_counter = 0 : ui32} (%a: tensor<4xf32>) {
    %n = "stablehlo.negate"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %n, %a : tensor<4xf32>, tensor<4xf32>
  } : (!m1) -> (!m1, !m1)
  %2 = mpmd.fragment<mesh="m1", origin=[]> (%arg0) (%a: tensor<4xf32>) {
    %n = "stablehlo.negate"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %n : tensor<4xf32>
  } : (!m1) -> !m1
  %3:2 = mpmd.fragment<mesh="m1", origin=["s"(1)]> (%arg0) {call_counter = 0 : ui32, split_keep_transferred} (%a: tensor<4xf32>) {
    %n = "stablehlo.negate"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %n, %n : tensor<4xf32>, tensor<4xf32>
  } : (!m1) -> (!m1, !m1)
  %4 = mpmd.fragment<mesh="m1", origin=["s"(1)]> (%arg0, %3#1) {call_counter = 0 : ui32, split_drop_transferred} (%a: tensor<4xf32>, %r: tensor<4xf32>) {
    %m = "stablehlo.multiply"(%a, %r) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %m : tensor<4xf32>
  } : (!m1, !m1) -> !m1
  %t0 = mpmd.transfer %0 : (!m1) -> !m0
  %t1 = mpmd.transfer %1#0 : (!m1) -> !m0
  %t3 = mpmd.transfer %3#0 : (!m1) -> !m0
  return %t0, %t1, %t3, %2, %4 : !m0, !m0, !m0, !m1, !m1
}

// -----

!m = !mpmd.mesh_tensor<"m0", tensor<4xf32>>

// V-shaped placement: stages 3 and 4 share the mesh, so stage 4's activation
// gradient reaches stage 3's backward without a transfer; it still belongs to
// B (stage 3's backward waits for it), the weight gradient to W.

// CHECK-LABEL: func.func @same_mesh_stage_boundary
func.func @same_mesh_stage_boundary(%ct: !m, %w: !m, %x: !m) -> (!m, !m)
    attributes {topology = #mpmd.topology<<"m0" : <["x"=2]>>>} {
  // CHECK:      %[[B:.*]] = mpmd.fragment<mesh="m0", origin=["s4"(1)], stage=4> (%arg0, %arg1) {{.*}}split_keep_transferred
  // CHECK-NEXT:   "stablehlo.multiply"
  // CHECK:      %[[W:.*]] = mpmd.fragment<mesh="m0", origin=["s4"(1)], stage=4> (%arg0, %arg2) {{.*}}split_drop_transferred
  // CHECK:      mpmd.fragment<mesh="m0", origin=["s3"(1)], stage=3> (%[[B]])
  %0:2 = mpmd.fragment<mesh="m0", origin=["s4"(1)], stage=4> (%ct, %w, %x) {call_counter = 0 : ui32} (%c: tensor<4xf32>, %a: tensor<4xf32>, %b: tensor<4xf32>) {
    %dx = "stablehlo.multiply"(%c, %a) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %dw = "stablehlo.multiply"(%c, %b) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %dx, %dw : tensor<4xf32>, tensor<4xf32>
  } : (!m, !m, !m) -> (!m, !m)
  %1 = mpmd.fragment<mesh="m0", origin=["s3"(1)], stage=3> (%0#0) {call_counter = 0 : ui32} (%c: tensor<4xf32>) {
    mpmd.return %c : tensor<4xf32>
  } : (!m) -> !m
  return %1, %0#1 : !m, !m
}

// -----

!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>

// Two labelled blocks in one stage: block2's activation gradient feeds
// block1's backward of the same microbatch on the same mesh, so it is B
// (before, it went to W, and zero-bubble schedules deadlocked: B0 of block1
// waited for a W). A later microbatch's backward reading a result (an
// accumulated weight gradient) does not make it B.

// CHECK-LABEL: func.func @same_stage_blocks
func.func @same_stage_blocks(%w: !m1, %ct: !m1) -> (!m1, !m1, !m1)
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // CHECK-NEXT: %[[B2:.*]] = mpmd.fragment<mesh="m1", origin=["block2"(1)], stage=1> (%arg0, %arg1) {call_counter = 0 : ui32, split_keep_transferred}
  // CHECK-NEXT:   %[[DA:.*]] = "stablehlo.multiply"
  // CHECK-NEXT:   mpmd.return %[[DA]] : tensor<4xf32>
  // CHECK:      %[[W2:.*]] = mpmd.fragment<mesh="m1", origin=["block2"(1)], stage=1> (%arg1) {call_counter = 0 : ui32, split_drop_transferred}
  // CHECK-NEXT:   "stablehlo.negate"
  // CHECK:      %[[W1:.*]] = mpmd.fragment<mesh="m1", origin=["block1"(1)], stage=1> (%[[B2]]) {call_counter = 0 : ui32, split_drop_transferred}
  // CHECK:      %[[W3:.*]] = mpmd.fragment<mesh="m1", origin=["block2"(1)], stage=1> (%[[W2]]) {call_counter = 1 : ui32, split_drop_transferred}
  // CHECK:      return %[[W1]], %[[W3]], %[[W2]]
  %0:2 = mpmd.fragment<mesh="m1", origin=["block2"(1)], stage=1> (%w, %ct) {call_counter = 0 : ui32}
      (%a: tensor<4xf32>, %c: tensor<4xf32>) {
    %da = "stablehlo.multiply"(%c, %a) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %dw = "stablehlo.negate"(%c) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %da, %dw : tensor<4xf32>, tensor<4xf32>
  } : (!m1, !m1) -> (!m1, !m1)
  // block1's backward of microbatch 0 reads block2's activation gradient.
  %1 = mpmd.fragment<mesh="m1", origin=["block1"(1)], stage=1> (%0#0) {call_counter = 0 : ui32}
      (%a: tensor<4xf32>) {
    %s = "stablehlo.add"(%a, %a) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %s : tensor<4xf32>
  } : (!m1) -> !m1
  // Microbatch 1's backward reads microbatch 0's weight gradient: no B.
  %2 = mpmd.fragment<mesh="m1", origin=["block2"(1)], stage=1> (%0#1) {call_counter = 1 : ui32}
      (%a: tensor<4xf32>) {
    %n = "stablehlo.negate"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %n : tensor<4xf32>
  } : (!m1) -> !m1
  return %1, %2, %0#1 : !m1, !m1, !m1
}
