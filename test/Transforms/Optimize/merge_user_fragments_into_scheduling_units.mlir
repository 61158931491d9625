// RUN: mpmd-opt %s -split-input-file -mpmd-merge-user-fragments-into-scheduling-units | FileCheck %s

!m0 = !mpmd.mesh_tensor<"m0", tensor<4xf32>>
!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>

// Three blocks labelled one by one, two on m0 and one on m1, for one
// microbatch: m0's two forwards become one fragment, and so do its two
// backwards; m1's block stays as it is.

// CHECK-LABEL: func.func @blocks_of_a_stage
func.func @blocks_of_a_stage(%x: !m0) -> !m0
    attributes {topology = #mpmd.topology<<"m0" : <["x"=1]>>, <"m1" : <["x"=1]>>>} {
  // CHECK-NEXT: %[[F:.*]] = mpmd.fragment<mesh="m0", origin=["b0", "b1"]> (%arg0) {call_counter = 0 : ui32}
  // CHECK-NEXT:   "stablehlo.tanh"
  // CHECK-NEXT:   "stablehlo.tanh"
  // CHECK-NEXT:   mpmd.return
  // CHECK:      mpmd.transfer %[[F]]
  // CHECK:      mpmd.fragment<mesh="m1", origin=["b2", "b2"(1)]>
  // CHECK:      %[[B:.*]] = mpmd.fragment<mesh="m0", origin=["b1"(1), "b0"(1)]>
  // CHECK-NEXT:   "stablehlo.negate"
  // CHECK-NEXT:   "stablehlo.negate"
  // CHECK-NEXT:   mpmd.return
  // CHECK:      return %[[B]]
  %0 = mpmd.fragment<mesh="m0", origin=["b0"]> (%x) {call_counter = 0 : ui32} (%a: tensor<4xf32>) {
    %t = "stablehlo.tanh"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %t : tensor<4xf32>
  } : (!m0) -> !m0
  %1 = mpmd.fragment<mesh="m0", origin=["b1"]> (%0) {call_counter = 0 : ui32} (%a: tensor<4xf32>) {
    %t = "stablehlo.tanh"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %t : tensor<4xf32>
  } : (!m0) -> !m0
  %2 = mpmd.transfer %1 : (!m0) -> !m1
  %3 = mpmd.fragment<mesh="m1", origin=["b2", "b2"(1)]> (%2) {call_counter = 0 : ui32} (%a: tensor<4xf32>) {
    %t = "stablehlo.sine"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %t : tensor<4xf32>
  } : (!m1) -> !m1
  %4 = mpmd.transfer %3 : (!m1) -> !m0
  %5 = mpmd.fragment<mesh="m0", origin=["b1"(1)]> (%4) {call_counter = 0 : ui32} (%a: tensor<4xf32>) {
    %t = "stablehlo.negate"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %t : tensor<4xf32>
  } : (!m0) -> !m0
  %6 = mpmd.fragment<mesh="m0", origin=["b0"(1)]> (%5) {call_counter = 0 : ui32} (%a: tensor<4xf32>) {
    %t = "stablehlo.negate"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %t : tensor<4xf32>
  } : (!m0) -> !m0
  return %6 : !m0
}

// -----

!m0 = !mpmd.mesh_tensor<"m0", tensor<4xf32>>

// Fragments of different units stay apart: another microbatch, a forward
// feeding a backward, another stage of the same mesh, an inferred fragment.

// CHECK-LABEL: func.func @different_units
func.func @different_units(%x: !m0) -> !m0
    attributes {topology = #mpmd.topology<<"m0" : <["x"=1]>>>} {
  // CHECK-COUNT-5: mpmd.fragment<mesh="m0"
  %0 = mpmd.fragment<mesh="m0", origin=["b0"]> (%x) {call_counter = 0 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m0) -> !m0
  %1 = mpmd.fragment<mesh="m0", origin=["b0"]> (%0) {call_counter = 1 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m0) -> !m0
  %2 = mpmd.fragment<mesh="m0", origin=["b0"(1)]> (%1) {call_counter = 1 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m0) -> !m0
  %3 = mpmd.fragment<mesh="m0", origin=["b1"(1)], stage=1> (%2) {call_counter = 1 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m0) -> !m0
  %4 = mpmd.fragment<mesh="m0", origin=[]> (%3) (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m0) -> !m0
  return %4 : !m0
}

// -----

!m0 = !mpmd.mesh_tensor<"m0", tensor<4xf32>>
!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>

// The producer's result goes to m1 and the consumer waits for m1's answer:
// neither position works, the pair stays apart.

// CHECK-LABEL: func.func @round_trip_keeps_fragments_apart
func.func @round_trip_keeps_fragments_apart(%x: !m0) -> !m0
    attributes {topology = #mpmd.topology<<"m0" : <["x"=1]>>, <"m1" : <["x"=1]>>>} {
  // CHECK-COUNT-2: mpmd.fragment<mesh="m0", origin=["b
  %0 = mpmd.fragment<mesh="m0", origin=["b0"]> (%x) {call_counter = 0 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m0) -> !m0
  %1 = mpmd.transfer %0 : (!m0) -> !m1
  %2 = mpmd.fragment<mesh="m1", origin=["c"]> (%1) {call_counter = 0 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m1) -> !m1
  %3 = mpmd.transfer %2 : (!m1) -> !m0
  %4 = mpmd.fragment<mesh="m0", origin=["b1"]> (%0, %3) {call_counter = 0 : ui32} (%a: tensor<4xf32>, %b: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m0, !m0) -> !m0
  return %4 : !m0
}

// -----

!m0 = !mpmd.mesh_tensor<"m0", tensor<4xf32>>

// jax.checkpoint around a label: the backward runs the label's forward
// again. That second forward of "b0" (microbatch 0), read only by b0's
// backward, is part of the backward unit: it merges into the backward
// fragment, marked remat, with transpose count 1. The first forward stays a
// forward of its own.

// CHECK-LABEL: func.func @recomputation_joins_the_backward
func.func @recomputation_joins_the_backward(%x: !m0) -> (!m0, !m0)
    attributes {topology = #mpmd.topology<<"m0" : <["x"=1]>>>} {
  // CHECK-NEXT: %[[F:.*]] = mpmd.fragment<mesh="m0", origin=["b0"]> (%arg0) {call_counter = 0 : ui32}
  // CHECK-NEXT:   "stablehlo.tanh"
  // CHECK-NEXT:   mpmd.return
  // CHECK-NEXT: }
  // CHECK-NEXT: %[[B:.*]] = mpmd.fragment<mesh="m0", origin=["b0"(1)]> (%arg0, %[[F]])
  // CHECK-SAME:   {call_counter = 0 : ui32, remat}
  // CHECK-NEXT:   "stablehlo.tanh"
  // CHECK-NEXT:   "stablehlo.multiply"
  // CHECK-NEXT:   mpmd.return
  // CHECK-NEXT: }
  // CHECK-NEXT: return %[[F]], %[[B]]
  %0 = mpmd.fragment<mesh="m0", origin=["b0"]> (%x) {call_counter = 0 : ui32} (%a: tensor<4xf32>) {
    %t = "stablehlo.tanh"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %t : tensor<4xf32>
  } : (!m0) -> !m0
  %1 = mpmd.fragment<mesh="m0", origin=["b0"]> (%x) {call_counter = 0 : ui32} (%a: tensor<4xf32>) {
    %t = "stablehlo.tanh"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %t : tensor<4xf32>
  } : (!m0) -> !m0
  %2 = mpmd.fragment<mesh="m0", origin=["b0"(1)]> (%1, %0) {call_counter = 0 : ui32} (%a: tensor<4xf32>, %g: tensor<4xf32>) {
    %t = "stablehlo.multiply"(%a, %g) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %t : tensor<4xf32>
  } : (!m0, !m0) -> !m0
  return %0, %2 : !m0, !m0
}

// -----

!m0 = !mpmd.mesh_tensor<"m0", tensor<4xf32>>

// The same without microbatches (no call_counter): the recomputation joins
// the backward, so a mesh runs one forward and one backward call.

// CHECK-LABEL: func.func @recomputation_joins_the_backward_without_microbatches
func.func @recomputation_joins_the_backward_without_microbatches(%x: !m0) -> (!m0, !m0)
    attributes {topology = #mpmd.topology<<"m0" : <["x"=1]>>>} {
  // CHECK-NEXT: %[[F:.*]] = mpmd.fragment<mesh="m0", origin=["b0"]> (%arg0) (
  // CHECK-NEXT:   "stablehlo.tanh"
  // CHECK-NEXT:   mpmd.return
  // CHECK-NEXT: }
  // CHECK-NEXT: %[[B:.*]] = mpmd.fragment<mesh="m0", origin=["b0"(1)]> (%arg0, %[[F]]) {remat}
  // CHECK-NEXT:   "stablehlo.tanh"
  // CHECK-NEXT:   "stablehlo.multiply"
  // CHECK-NEXT:   mpmd.return
  // CHECK-NEXT: }
  // CHECK-NEXT: return %[[F]], %[[B]]
  %0 = mpmd.fragment<mesh="m0", origin=["b0"]> (%x) (%a: tensor<4xf32>) {
    %t = "stablehlo.tanh"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %t : tensor<4xf32>
  } : (!m0) -> !m0
  %1 = mpmd.fragment<mesh="m0", origin=["b0"]> (%x) (%a: tensor<4xf32>) {
    %t = "stablehlo.tanh"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %t : tensor<4xf32>
  } : (!m0) -> !m0
  %2 = mpmd.fragment<mesh="m0", origin=["b0"(1)]> (%1, %0) (%a: tensor<4xf32>, %g: tensor<4xf32>) {
    %t = "stablehlo.multiply"(%a, %g) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %t : tensor<4xf32>
  } : (!m0, !m0) -> !m0
  return %0, %2 : !m0, !m0
}

// -----

!m0 = !mpmd.mesh_tensor<"m0", tensor<4xf32>>
!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>

// A label called twice in one microbatch (two blocks under one name): the
// second forward feeds another mesh, not only the backward, so it is a
// forward, not a recomputation (the two forwards merge as one unit).

// CHECK-LABEL: func.func @a_label_used_twice_is_not_a_recomputation
func.func @a_label_used_twice_is_not_a_recomputation(%x: !m0) -> (!m1, !m0)
    attributes {topology = #mpmd.topology<<"m0" : <["x"=1]>>, <"m1" : <["x"=1]>>>} {
  // CHECK:      mpmd.fragment<mesh="m0", origin=["b0"]> (%arg0) {call_counter = 0 : ui32}
  // CHECK-NEXT:   "stablehlo.tanh"
  // CHECK-NEXT:   "stablehlo.tanh"
  // CHECK-NOT:  remat
  // CHECK:      mpmd.fragment<mesh="m0", origin=["b0"(1)]> (%0) {call_counter = 0 : ui32}
  %0 = mpmd.fragment<mesh="m0", origin=["b0"]> (%x) {call_counter = 0 : ui32} (%a: tensor<4xf32>) {
    %t = "stablehlo.tanh"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %t : tensor<4xf32>
  } : (!m0) -> !m0
  %1 = mpmd.fragment<mesh="m0", origin=["b0"]> (%0) {call_counter = 0 : ui32} (%a: tensor<4xf32>) {
    %t = "stablehlo.tanh"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %t : tensor<4xf32>
  } : (!m0) -> !m0
  %2 = mpmd.transfer %1 : (!m0) -> !m1
  %3 = mpmd.fragment<mesh="m0", origin=["b0"(1)]> (%1) {call_counter = 0 : ui32} (%a: tensor<4xf32>) {
    %t = "stablehlo.negate"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %t : tensor<4xf32>
  } : (!m0) -> !m0
  return %2, %3 : !m1, !m0
}

// -----

!m0 = !mpmd.mesh_tensor<"m0", tensor<4xf32>>
!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>

// Two backward fragments of one unit with what jax.checkpoint puts between
// them: the barrier on the first one's cotangent (an inferred fragment only
// the second reads), and a residual sent again from another mesh (a
// transfer, and the barrier it sends, that can run earlier). The residual's
// transfer moves before the first, the cotangent's barrier merges into the
// second, and the two backwards become one fragment.

// CHECK-LABEL: func.func @what_checkpoint_puts_between_backwards
func.func @what_checkpoint_puts_between_backwards(%x: !m0, %r: !m1, %g: !m0) -> (!m0, !m0)
    attributes {topology = #mpmd.topology<<"m0" : <["x"=1]>>, <"m1" : <["x"=1]>>>} {
  // CHECK-NEXT: %[[R:.*]] = mpmd.fragment<mesh="m1", origin=[]> (%arg1)
  // CHECK:      %[[T:.*]] = mpmd.transfer %[[R]]
  // CHECK-NEXT: %[[B:.*]]:2 = mpmd.fragment<mesh="m0", origin=["b1"(1), "b0"(1)]> (%arg2, %[[T]], %arg0) {call_counter = 0 : ui32}
  // CHECK-NEXT:   "stablehlo.negate"
  // CHECK-NEXT:   "stablehlo.optimization_barrier"
  // CHECK-NEXT:   "stablehlo.multiply"
  // CHECK-NEXT:   mpmd.return
  // CHECK-NEXT: }
  // CHECK-NEXT: return %[[B]]#0, %[[B]]#1
  %0 = mpmd.fragment<mesh="m0", origin=["b1"(1)]> (%g) {call_counter = 0 : ui32} (%a: tensor<4xf32>) {
    %t = "stablehlo.negate"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %t : tensor<4xf32>
  } : (!m0) -> !m0
  %1 = mpmd.fragment<mesh="m1", origin=[]> (%r) (%a: tensor<4xf32>) {
    %t = "stablehlo.optimization_barrier"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %t : tensor<4xf32>
  } : (!m1) -> !m1
  %2 = mpmd.transfer %1 : (!m1) -> !m0
  %3 = mpmd.fragment<mesh="m0", origin=[]> (%0) (%a: tensor<4xf32>) {
    %t = "stablehlo.optimization_barrier"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %t : tensor<4xf32>
  } : (!m0) -> !m0
  %4 = mpmd.fragment<mesh="m0", origin=["b0"(1)]> (%3, %2, %x) {call_counter = 0 : ui32} (%a: tensor<4xf32>, %b: tensor<4xf32>, %c: tensor<4xf32>) {
    %t = "stablehlo.multiply"(%a, %b) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %t : tensor<4xf32>
  } : (!m0, !m0, !m0) -> !m0
  return %0, %4 : !m0, !m0
}
