// RUN: mpmd-opt %s -mpmd-infer-mesh-assignment='infer-cross-mesh-reductions=true' | FileCheck %s
// RUN: mpmd-opt %s -mpmd-infer-mesh-assignment -verify-diagnostics

!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>
!m2 = !mpmd.mesh_tensor<"m2", tensor<4xf32>>

// The tied-embedding update: the gradient is the sum of contributions from
// two meshes, then the parameter is updated. With cross-mesh reductions the
// sum is computed once, on the mesh of the update; without, the transfer it
// needs is reported.

// CHECK-LABEL: func.func @tied_gradient
// CHECK-SAME: -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
func.func @tied_gradient(%w: tensor<4xf32>, %arg0: !m1, %arg1: !m2) -> tensor<4xf32>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  // CHECK:      %[[T:.*]] = mpmd.transfer %arg2 : (!mpmd.mesh_tensor<"m2", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
  // CHECK:      %[[S:.*]] = mpmd.fragment<mesh="m1", origin=[]> (%arg1, %[[T]])
  // CHECK-NEXT:   "stablehlo.add"
  // CHECK:      %[[U:.*]] = mpmd.fragment<mesh="m1", origin=[]> (%arg0, %[[S]])
  // CHECK-NEXT:   "stablehlo.subtract"
  // CHECK:      return %[[U]]
  %0 = mpmd.unassign %arg0 : (!m1) -> tensor<4xf32>
  // expected-note @+1 {{the value is computed here, on mesh "m2"}}
  %1 = mpmd.unassign %arg1 : (!m2) -> tensor<4xf32>
  // expected-error @+1 {{'stablehlo.add' on mesh "m1" needs a value, which is on mesh "m2": no label implies this transfer; it sums values from meshes "m1" and "m2" (e.g. the gradients of a weight used on both, such as a tied embedding): set the partitioning option mpmd_infer_cross_mesh_reductions to sum them once across meshes, or use mpmd.broadcast on the weight}}
  %g = "stablehlo.add"(%0, %1) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %u = "stablehlo.subtract"(%w, %g) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %u : tensor<4xf32>
}

// `x * x` of a value whose operands come from two meshes (Adam's second moment
// of a gradient clipped by a global norm computed on another mesh) squares
// one value: it is not a cross-mesh reduction (which would combine its one
// distinct operand with nothing and return `x`). Its input `x` is.

// CHECK-LABEL: func.func @square_of_a_cross_mesh_value
func.func @square_of_a_cross_mesh_value(%arg0: !m1, %arg1: !m2) -> tensor<4xf32>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  // CHECK:      %[[T:.*]] = mpmd.transfer %arg1
  // CHECK:      %[[S:.*]] = mpmd.fragment<mesh="m1", origin=[]> (%arg0, %[[T]])
  // CHECK-NEXT:   %[[A:.*]] = "stablehlo.add"
  // CHECK:      mpmd.fragment<mesh="m1", origin=[]> (%[[S]])
  // CHECK-NEXT:   "stablehlo.multiply"(%[[X:.*]], %[[X]])
  %0 = mpmd.unassign %arg0 : (!m1) -> tensor<4xf32>
  // expected-note @+1 {{the value is computed here, on mesh "m2"}}
  %1 = mpmd.unassign %arg1 : (!m2) -> tensor<4xf32>
  // expected-error @+1 {{'stablehlo.add' on mesh "m1" needs a value, which is on mesh "m2": no label implies this transfer; it sums values}}
  %x = "stablehlo.add"(%0, %1) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %sq = "stablehlo.multiply"(%x, %x) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %sq : tensor<4xf32>
}
