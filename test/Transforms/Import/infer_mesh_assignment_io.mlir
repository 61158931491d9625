// RUN: mpmd-opt %s -mpmd-infer-mesh-assignment="input-assignment=0@m2 output-assignment=0@m1" | FileCheck %s
// RUN: mpmd-opt %s -mpmd-infer-mesh-assignment | FileCheck %s --check-prefix=INFERRED

// Explicit input and output meshes.

// CHECK-LABEL: func.func @io_assignment
// INFERRED-LABEL: func.func @io_assignment
// INFERRED-SAME: (%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
// INFERRED-NOT: mpmd.transfer
// CHECK-SAME: (%arg0: !mpmd.mesh_tensor<"m2", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
func.func @io_assignment(%arg0: tensor<4xf32>) -> tensor<4xf32>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  // Computed where its input is, then moved to the requested output mesh.
  // CHECK-NEXT: %[[N:.*]] = mpmd.fragment<mesh="m2", origin=[]> (%arg0)
  // CHECK:      %[[T:.*]] = mpmd.transfer %[[N]] : (!mpmd.mesh_tensor<"m2", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
  // CHECK-NEXT: return %[[T]]
  %0 = "stablehlo.negate"(%arg0) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
