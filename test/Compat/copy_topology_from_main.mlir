// RUN: mpmd-opt %s -split-input-file -mpmd-copy-topology-from-main | FileCheck %s

// A callee of the entry point gets its topology and becomes private; a
// function only func.call calls, or nothing calls, stays as it is.
// CHECK-LABEL: func.func public @main
// CHECK-LABEL: func.func private @layer(%arg0: tensor<4xf32>) -> tensor<4xf32> attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["y"=4]>>>}
// CHECK-LABEL: func.func @helper(%arg0: tensor<4xf32>) -> tensor<4xf32> {
// CHECK-LABEL: func.func @unused(%arg0: tensor<4xf32>) -> tensor<4xf32> {
func.func public @main(%arg0: tensor<4xf32>) -> tensor<4xf32>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["y"=4]>>>} {
  %0 = mpmd.call @layer(%arg0) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = mpmd.call @layer(%0) : (tensor<4xf32>) -> tensor<4xf32>
  %2 = func.call @helper(%1) : (tensor<4xf32>) -> tensor<4xf32>
  return %2 : tensor<4xf32>
}
func.func @layer(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  return %arg0 : tensor<4xf32>
}
func.func @helper(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  return %arg0 : tensor<4xf32>
}
func.func @unused(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  return %arg0 : tensor<4xf32>
}

// -----

// Then mesh inference places through the calls.
// RUN: mpmd-opt %s -split-input-file -mpmd-copy-topology-from-main -mpmd-infer-mesh-assignment | FileCheck %s --check-prefix=INFER
// INFER-LABEL: func.func public @then_inferred
// INFER-SAME:    (%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
// INFER-NEXT:    mpmd.call @body(%arg0) : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
// INFER-LABEL: func.func private @body(%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
func.func public @then_inferred(%arg0: tensor<4xf32>) -> tensor<4xf32>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  %0 = mpmd.call @body(%arg0) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
func.func @body(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "stablehlo.abs"(%arg0) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
