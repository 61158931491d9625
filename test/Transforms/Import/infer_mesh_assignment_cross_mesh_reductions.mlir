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

// A global norm: the sum of one value per mesh, then read back by every mesh
// (gradient clipping). The sum is a cross-mesh reduction and what is computed
// from it alone goes to each mesh that reads it, as an all-reduce's result.

// CHECK-LABEL: func.func @global_norm_read_by_every_mesh
func.func @global_norm_read_by_every_mesh(%arg0: !m1, %arg1: !m2) -> (tensor<4xf32>, tensor<4xf32>)
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  // CHECK:      %[[T:.*]] = mpmd.transfer %arg1
  // CHECK:      %[[S:.*]] = mpmd.fragment<mesh="m1", origin=[]> (%arg0, %[[T]])
  // CHECK-NEXT:   "stablehlo.add"
  // CHECK:      %[[S2:.*]] = mpmd.transfer %[[S]] : {{.*}}"m1"{{.*}} -> {{.*}}"m2"
  // CHECK:      %[[N:.*]] = mpmd.fragment<mesh="m1", origin=[]> (%[[S]])
  // CHECK-NEXT:   "stablehlo.sqrt"
  // CHECK:      %[[N2:.*]] = mpmd.fragment<mesh="m2", origin=[]> (%[[S2]])
  // CHECK-NEXT:   "stablehlo.sqrt"
  // CHECK:      mpmd.fragment<mesh="m1", origin=[]> (%arg0, %[[N]])
  // CHECK-NEXT:   "stablehlo.divide"
  // CHECK:      mpmd.fragment<mesh="m2", origin=[]> (%arg1, %[[N2]])
  // CHECK-NEXT:   "stablehlo.divide"
  %0 = mpmd.unassign %arg0 : (!m1) -> tensor<4xf32>
  // expected-note @+1 {{the value is computed here, on mesh "m2"}}
  %1 = mpmd.unassign %arg1 : (!m2) -> tensor<4xf32>
  // expected-error @+1 {{it sums values from meshes "m1" and "m2"}}
  %sum = "stablehlo.add"(%0, %1) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  // expected-note @+1 {{the value is computed here, on mesh "m1"}}
  %norm = "stablehlo.sqrt"(%sum) : (tensor<4xf32>) -> tensor<4xf32>
  %a = "stablehlo.divide"(%0, %norm) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  // expected-error @+1 {{'stablehlo.divide' on mesh "m2" needs result #0 of 'stablehlo.sqrt', which is on mesh "m1": no label implies this transfer}}
  %b = "stablehlo.divide"(%1, %norm) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %a, %b : tensor<4xf32>, tensor<4xf32>
}

// A sum of three terms from two meshes, ((a + b) + c), is one cross-mesh sum
// (optax's global norm adds one term per parameter): the norm computed from
// it goes to both meshes.

// CHECK-LABEL: func.func @chained_sum_read_by_every_mesh
func.func @chained_sum_read_by_every_mesh(%arg0: !m1, %arg1: !m2, %arg2: !m2) -> (tensor<4xf32>, tensor<4xf32>)
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  // CHECK:      %[[S:.*]] = mpmd.fragment<mesh="m1", origin=[]>
  // CHECK-NEXT:   "stablehlo.add"
  // CHECK:      %[[T:.*]] = mpmd.fragment<mesh="m1", origin=[]> (%[[S]], %{{.*}})
  // CHECK-NEXT:   "stablehlo.add"
  // CHECK:      mpmd.transfer %[[T]] : {{.*}}"m1"{{.*}} -> {{.*}}"m2"
  // CHECK:      mpmd.fragment<mesh="m1", origin=[]> (%arg0, %{{.*}})
  // CHECK-NEXT:   "stablehlo.divide"
  // CHECK:      mpmd.fragment<mesh="m2", origin=[]> (%arg1, %{{.*}})
  // CHECK-NEXT:   "stablehlo.divide"
  %0 = mpmd.unassign %arg0 : (!m1) -> tensor<4xf32>
  // expected-note @+1 {{the value is computed here, on mesh "m2"}}
  %1 = mpmd.unassign %arg1 : (!m2) -> tensor<4xf32>
  // expected-note @+1 {{the value is computed here, on mesh "m2"}}
  %2 = mpmd.unassign %arg2 : (!m2) -> tensor<4xf32>
  // expected-error @+1 {{it sums values from meshes "m1" and "m2"}}
  %s = "stablehlo.add"(%0, %1) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  // expected-error @+1 {{it sums values from meshes "m1" and "m2"}}
  %t = "stablehlo.add"(%s, %2) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  // expected-note @+1 {{the value is computed here, on mesh "m1"}}
  %norm = "stablehlo.sqrt"(%t) : (tensor<4xf32>) -> tensor<4xf32>
  %a = "stablehlo.divide"(%0, %norm) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  // expected-error @+1 {{'stablehlo.divide' on mesh "m2" needs result #0 of 'stablehlo.sqrt'}}
  %b = "stablehlo.divide"(%1, %norm) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %a, %b : tensor<4xf32>, tensor<4xf32>
}
