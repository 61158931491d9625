// RUN: not mpmd-opt %s -inline 2>&1 | FileCheck %s

// MLIR's inliner cannot analyse a module with an unregistered op of one
// region (StableHLO's reduce, sort, ...: unregistered in mpmd-opt) and
// crashes on it; mpmd-opt's -inline runs -mpmd-check-inlinable first, which
// names the op, and the inliner does not run.

// CHECK: inline_errors.mlir:[[@LINE+7]]:8: error: 'stablehlo.sort' is unregistered in mpmd-opt and has a region, which MLIR's symbol-use analysis cannot look into, and MLIR's inliner (-inline) needs it for the whole module: inline func.calls with -mpmd-inline-func-calls, which does not need it
// CHECK-NOT: error:
func.func @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = call @sort(%arg0) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
func.func private @sort(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "stablehlo.sort"(%arg0) ({
  ^bb0(%x: tensor<f32>, %y: tensor<f32>):
    %lt = "stablehlo.compare"(%x, %y) {comparison_direction = 3 : i64} : (tensor<f32>, tensor<f32>) -> tensor<i1>
    "stablehlo.return"(%lt) : (tensor<i1>) -> ()
  }) {dimension = 0 : i64} : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
