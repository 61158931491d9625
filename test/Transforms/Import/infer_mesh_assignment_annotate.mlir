// RUN: mpmd-opt %s -mpmd-infer-mesh-assignment='annotate-only=true' | FileCheck %s

!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>
!m2 = !mpmd.mesh_tensor<"m2", tensor<4xf32>>

// The analysis: src (meshes the inputs are on), use (meshes consuming the
// results) and the chosen placement.

// CHECK-LABEL: func.func @analysis
func.func @analysis(%arg0: !m1, %w: tensor<4xf32>) -> (!m1, !m2)
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  // CHECK: "stablehlo.constant"() {{.*}} {mpmd.placement = ["m1", "m2"], mpmd.src_set = ["m1", "m2"], mpmd.use_set = ["m1", "m2"]}
  // CHECK: "stablehlo.negate"(%{{.*}}) {mpmd.placement = ["m1"], mpmd.src_set = ["m1"], mpmd.use_set = ["m2"]}
  // CHECK: "stablehlo.add"(%{{.*}}, %{{.*}}) {mpmd.placement = ["m1"], mpmd.src_set = ["m1"], mpmd.use_set = []}
  %c = "stablehlo.constant"() <{value = dense<1.0> : tensor<4xf32>}> : () -> tensor<4xf32>
  %0 = mpmd.unassign %arg0 : (!m1) -> tensor<4xf32>
  %1 = "stablehlo.negate"(%0) : (tensor<4xf32>) -> tensor<4xf32>
  %2 = "stablehlo.add"(%0, %w) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %3 = mpmd.assign %c : (tensor<4xf32>) -> !m1
  %4 = mpmd.assign %c : (tensor<4xf32>) -> !m2
  %5 = mpmd.assign %1 : (tensor<4xf32>) -> !m2
  return %3, %5 : !m1, !m2
}
