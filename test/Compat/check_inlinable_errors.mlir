// RUN: mpmd-opt %s -split-input-file -mpmd-check-inlinable -verify-diagnostics

// An unregistered op with one region, here in a fragment's body: MLIR's
// symbol-use analysis cannot look into it. The first is reported, with how
// many more there are.
!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>
func.func @reduce_in_fragment(%arg0: !m1) -> !m1 attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  %0 = mpmd.fragment<mesh="m1", origin=["f"]> (%arg0) (%a: tensor<4xf32>) {
    %c = "stablehlo.constant"() {value = dense<0.0> : tensor<f32>} : () -> tensor<f32>
    // expected-error @+1 {{'stablehlo.reduce' is unregistered in mpmd-opt and has a region, which MLIR's symbol-use analysis cannot look into, and MLIR's inliner (-inline) needs it for the whole module (the module has 1 more such ops): inline func.calls with -mpmd-inline-func-calls}}
    %r = "stablehlo.reduce"(%a, %c) ({
    ^bb0(%x: tensor<f32>, %y: tensor<f32>):
      %s = "stablehlo.add"(%x, %y) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%s) : (tensor<f32>) -> ()
    }) {dimensions = array<i64: 0>} : (tensor<4xf32>, tensor<f32>) -> tensor<f32>
    %b = "stablehlo.broadcast_in_dim"(%r) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
    mpmd.return %b : tensor<4xf32>
  } : (!m1) -> !m1
  return %0 : !m1
}
func.func private @sort(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "stablehlo.sort"(%arg0) ({
  ^bb0(%x: tensor<f32>, %y: tensor<f32>):
    %lt = "stablehlo.compare"(%x, %y) {comparison_direction = #stablehlo<comparison_direction LT>} : (tensor<f32>, tensor<f32>) -> tensor<i1>
    "stablehlo.return"(%lt) : (tensor<i1>) -> ()
  }) {dimension = 0 : i64} : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
