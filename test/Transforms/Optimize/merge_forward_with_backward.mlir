// RUN: mpmd-opt %s -split-input-file -mpmd-merge-forward-with-backward | FileCheck %s

!m0 = !mpmd.mesh_tensor<"m0", tensor<4xf32>>
!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>

// Last stage of 1F1B on m1: F0 B0 F1 B1. Each forward merges with the
// backward right after it (fragments of m0 and transfers in between do not
// count), at the backward's position, and names both units (`F0+B0`). A
// result of F still used after B stays a result of the merged fragment.

// CHECK-LABEL: func.func @last_stage_1f1b
func.func @last_stage_1f1b(%x0: !m1, %x1: !m1, %y: !m0) -> (!m0, !m0, !m1, !m0)
    attributes {topology = #mpmd.topology<<"m0" : <["x"=2]>>, <"m1" : <["x"=2]>>>} {
  // CHECK-NEXT: %[[G:.*]] = mpmd.fragment<mesh="m0", origin=["g"]> (%arg2) {call_counter = 0 : ui32}
  // CHECK:      %[[FB0:.*]]:2 = mpmd.fragment<mesh="m1", origin=["s", "s"(1)], stage=1> (%arg0) {call_counter = 0 : ui32, mpmd.unit = "F0+B0"} (%[[A:.*]]: tensor<4xf32>) {
  // CHECK-NEXT:   %[[T:.*]] = "stablehlo.tanh"(%[[A]])
  // CHECK-NEXT:   %[[L:.*]] = "stablehlo.multiply"(%[[T]], %[[T]])
  // CHECK-NEXT:   mpmd.return %[[T]], %[[L]] : tensor<4xf32>, tensor<4xf32>
  // CHECK-NEXT: }
  // CHECK-NEXT: %[[T0:.*]] = mpmd.transfer %[[FB0]]#1
  // CHECK-NEXT: %[[FB1:.*]] = mpmd.fragment<mesh="m1", origin=["s", "s"(1)], stage=1> (%arg1) {call_counter = 1 : ui32, mpmd.unit = "F1+B1"}
  // CHECK:      %[[T1:.*]] = mpmd.transfer %[[FB1]]
  // CHECK-NEXT: return %[[T0]], %[[T1]], %[[FB0]]#0, %[[G]]
  %f0 = mpmd.fragment<mesh="m1", origin=["s"], stage=1> (%x0) {call_counter = 0 : ui32} (%a: tensor<4xf32>) {
    %t = "stablehlo.tanh"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %t : tensor<4xf32>
  } : (!m1) -> !m1
  %g = mpmd.fragment<mesh="m0", origin=["g"]> (%y) {call_counter = 0 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m0) -> !m0
  %b0 = mpmd.fragment<mesh="m1", origin=["s"(1)], stage=1> (%f0) {call_counter = 0 : ui32} (%t: tensor<4xf32>) {
    %l = "stablehlo.multiply"(%t, %t) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %l : tensor<4xf32>
  } : (!m1) -> !m1
  %t0 = mpmd.transfer %b0 : (!m1) -> !m0
  %f1 = mpmd.fragment<mesh="m1", origin=["s"], stage=1> (%x1) {call_counter = 1 : ui32} (%a: tensor<4xf32>) {
    %t = "stablehlo.tanh"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %t : tensor<4xf32>
  } : (!m1) -> !m1
  %b1 = mpmd.fragment<mesh="m1", origin=["s"(1)], stage=1> (%f1) {call_counter = 1 : ui32} (%t: tensor<4xf32>) {
    %l = "stablehlo.multiply"(%t, %t) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %l : tensor<4xf32>
  } : (!m1) -> !m1
  %t1 = mpmd.transfer %b1 : (!m1) -> !m0
  return %t0, %t1, %f0, %g : !m0, !m0, !m1, !m0
}

// -----

!m0 = !mpmd.mesh_tensor<"m0", tensor<4xf32>>
!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>

// A result of F is transferred before B runs: merging at B's position would
// delay that transfer, but every operand of B is available before F, so the
// pair merges at F's position.

// CHECK-LABEL: func.func @merge_at_forward
func.func @merge_at_forward(%x: !m1, %ct: !m1) -> (!m0, !m1)
    attributes {topology = #mpmd.topology<<"m0" : <["x"=2]>>, <"m1" : <["x"=2]>>>} {
  // CHECK-NEXT: %[[FB:.*]]:2 = mpmd.fragment<mesh="m1", origin=["s", "s"(1)]> (%arg0, %arg1) {call_counter = 0 : ui32, mpmd.unit = "F0+B0"}
  // CHECK:      %[[T:.*]] = mpmd.transfer %[[FB]]#0
  // CHECK-NEXT: return %[[T]], %[[FB]]#1
  %f = mpmd.fragment<mesh="m1", origin=["s"]> (%x) {call_counter = 0 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m1) -> !m1
  %t = mpmd.transfer %f : (!m1) -> !m0
  %b = mpmd.fragment<mesh="m1", origin=["s"(1)]> (%f, %ct) {call_counter = 0 : ui32} (%a: tensor<4xf32>, %c: tensor<4xf32>) {
    %m = "stablehlo.multiply"(%a, %c) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %m : tensor<4xf32>
  } : (!m1, !m1) -> !m1
  return %t, %b : !m0, !m1
}

// -----

!m0 = !mpmd.mesh_tensor<"m0", tensor<4xf32>>
!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>

// F's activation goes to m0, whose result comes back to B: there is no
// position for a merged fragment (it would wait for itself). No merge.

// CHECK-LABEL: func.func @round_trip
func.func @round_trip(%x: !m0) -> !m0
    attributes {topology = #mpmd.topology<<"m0" : <["x"=2]>>, <"m1" : <["x"=2]>>>} {
  // CHECK:     mpmd.fragment<mesh="m0", origin=["s"]>
  // CHECK:     mpmd.fragment<mesh="m1", origin=["t"]>
  // CHECK:     mpmd.fragment<mesh="m0", origin=["s"(1)]>
  %f = mpmd.fragment<mesh="m0", origin=["s"]> (%x) {call_counter = 0 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m0) -> !m0
  %t = mpmd.transfer %f : (!m0) -> !m1
  %g = mpmd.fragment<mesh="m1", origin=["t"]> (%t) {call_counter = 0 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m1) -> !m1
  %u = mpmd.transfer %g : (!m1) -> !m0
  %b = mpmd.fragment<mesh="m0", origin=["s"(1)]> (%f, %u) {call_counter = 0 : ui32} (%a: tensor<4xf32>, %c: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m0, !m0) -> !m0
  return %b : !m0
}

// -----

!m0 = !mpmd.mesh_tensor<"m0", tensor<4xf32>>

// No merge: another fragment of the mesh runs in between; the next fragment
// is the backward of another microbatch, of another stage, or does not use
// F; one of the two has a call_counter and the other none.

// CHECK-LABEL: func.func @no_merge
func.func @no_merge(%x: !m0) -> (!m0, !m0, !m0, !m0, !m0)
    attributes {topology = #mpmd.topology<<"m0" : <["x"=2]>>>} {
  // CHECK-COUNT-11: mpmd.fragment<mesh="m0", origin=["{{[a-z]}}"{{(\(1\))?}}]
  // CHECK-NOT:      mpmd.fragment
  %f = mpmd.fragment<mesh="m0", origin=["s"]> (%x) {call_counter = 0 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m0) -> !m0
  %o = mpmd.fragment<mesh="m0", origin=["o"]> (%x) {call_counter = 0 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m0) -> !m0
  %b = mpmd.fragment<mesh="m0", origin=["s"(1)]> (%f) {call_counter = 0 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m0) -> !m0
  // Another microbatch.
  %f1 = mpmd.fragment<mesh="m0", origin=["s"]> (%x) {call_counter = 1 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m0) -> !m0
  %b0 = mpmd.fragment<mesh="m0", origin=["s"(1)]> (%f1) {call_counter = 0 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m0) -> !m0
  // Another stage.
  %fs = mpmd.fragment<mesh="m0", origin=["t"], stage=0> (%x) {call_counter = 2 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m0) -> !m0
  %bs = mpmd.fragment<mesh="m0", origin=["t"(1)], stage=1> (%fs) {call_counter = 2 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m0) -> !m0
  // Independent.
  %fi = mpmd.fragment<mesh="m0", origin=["u"]> (%x) {call_counter = 3 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m0) -> !m0
  %bi = mpmd.fragment<mesh="m0", origin=["u"(1)]> (%x) {call_counter = 3 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m0) -> !m0
  // A call_counter on the backward only.
  %fn = mpmd.fragment<mesh="m0", origin=["v"]> (%x) (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m0) -> !m0
  %bn = mpmd.fragment<mesh="m0", origin=["v"(1)]> (%fn) {call_counter = 4 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m0) -> !m0
  return %o, %b, %b0, %bs, %bn : !m0, !m0, !m0, !m0, !m0
}

// -----

!m0 = !mpmd.mesh_tensor<"m0", tensor<4xf32>>
!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>

// Fragments without call_counter (no microbatches) pair with each other:
// F and the B after it on m0 merge at B's position (m1's fragment between
// them is on another mesh). The merged fragment is no unit (no mpmd.unit).

// CHECK-LABEL: func.func @no_call_counters
func.func @no_call_counters(%x: !m0, %y: !m1) -> (!m0, !m1)
    attributes {topology = #mpmd.topology<<"m0" : <["x"=2]>>, <"m1" : <["x"=2]>>>} {
  // CHECK-NEXT: %[[G:.*]] = mpmd.fragment<mesh="m1", origin=["g"]> (%arg1) (
  // CHECK:      %[[FB:.*]] = mpmd.fragment<mesh="m0", origin=["s", "s"(1)]> (%arg0) (%[[A:.*]]: tensor<4xf32>) {
  // CHECK-NEXT:   %[[N:.*]] = "stablehlo.negate"(%[[A]])
  // CHECK-NEXT:   %[[M:.*]] = "stablehlo.multiply"(%[[N]], %[[N]])
  // CHECK-NEXT:   mpmd.return %[[M]]
  // CHECK:      return %[[FB]], %[[G]]
  %f = mpmd.fragment<mesh="m0", origin=["s"]> (%x) (%a: tensor<4xf32>) {
    %n = "stablehlo.negate"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %n : tensor<4xf32>
  } : (!m0) -> !m0
  %g = mpmd.fragment<mesh="m1", origin=["g"]> (%y) (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m1) -> !m1
  %b = mpmd.fragment<mesh="m0", origin=["s"(1)]> (%f) (%a: tensor<4xf32>) {
    %m = "stablehlo.multiply"(%a, %a) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %m : tensor<4xf32>
  } : (!m0) -> !m0
  return %b, %g : !m0, !m1
}
