// RUN: mpmd-opt %s -split-input-file -mpmd-rule-based-merge='rules="m1: F0 B0; m1: F1.s1 B1"' | FileCheck %s

!m0 = !mpmd.mesh_tensor<"m0", tensor<4xf32>>
!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>

// The last stage's forward and backward of each microbatch become one program.

// CHECK-LABEL: func.func @fuse_last_stage
func.func @fuse_last_stage(%x0: !m1, %x1: !m1) -> (!m1, !m1)
    attributes {topology = #mpmd.topology<<"m0" : <["x"=2]>>, <"m1" : <["x"=2]>>>} {
  // CHECK-NEXT: %[[A:.*]] = mpmd.fragment<mesh="m1", origin=["s1", "s1"(1)]> (%arg0) {call_counter = 0 : ui32} (%[[X:.*]]: tensor<4xf32>) {
  // CHECK-NEXT:   %[[N:.*]] = "stablehlo.negate"(%[[X]])
  // CHECK-NEXT:   %[[E:.*]] = "stablehlo.exponential"(%[[N]])
  // CHECK-NEXT:   mpmd.return %[[E]]
  // CHECK:      %[[B:.*]] = mpmd.fragment<mesh="m1", origin=["s1", "s1"(1)]> (%arg1) {call_counter = 1 : ui32}
  // CHECK:      return %[[A]], %[[B]]
  %f0 = mpmd.fragment<mesh="m1", origin=["s1"]> (%x0) {call_counter = 0 : ui32} (%a: tensor<4xf32>) {
    %n = "stablehlo.negate"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %n : tensor<4xf32>
  } : (!m1) -> !m1
  %b0 = mpmd.fragment<mesh="m1", origin=["s1"(1)]> (%f0) {call_counter = 0 : ui32} (%a: tensor<4xf32>) {
    %e = "stablehlo.exponential"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %e : tensor<4xf32>
  } : (!m1) -> !m1
  %f1 = mpmd.fragment<mesh="m1", origin=["s1"]> (%x1) {call_counter = 1 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m1) -> !m1
  %b1 = mpmd.fragment<mesh="m1", origin=["s1"(1)]> (%f1) {call_counter = 1 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m1) -> !m1
  return %b0, %b1 : !m1, !m1
}
