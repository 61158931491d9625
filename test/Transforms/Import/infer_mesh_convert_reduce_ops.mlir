// RUN: mpmd-opt %s -split-input-file -mpmd-infer-mesh-convert-reduce-ops | FileCheck %s

// The transpose of a broadcast used three times: reduce<none> of a tree of
// single-use adds becomes one reduce<add> of the leaves.

// CHECK-LABEL: func.func @flatten
func.func @flatten(%a: tensor<4xf32>, %b: tensor<4xf32>, %c: tensor<4xf32>) -> tensor<4xf32> {
  // CHECK-NEXT: %[[R:.*]] = mpmd.reduce<add> %arg0, %arg1, %arg2 : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  // CHECK-NEXT: return %[[R]]
  %0 = "stablehlo.add"(%a, %b) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %1 = "stablehlo.add"(%0, %c) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %2 = mpmd.reduce<none> %1 : (tensor<4xf32>) -> tensor<4xf32>
  return %2 : tensor<4xf32>
}

// -----

// An add with another use stays (its value is needed as is).

// CHECK-LABEL: func.func @shared_add
func.func @shared_add(%a: tensor<4xf32>, %b: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  // CHECK-NEXT: %[[S:.*]] = "stablehlo.add"
  // CHECK-NEXT: %[[R:.*]] = mpmd.reduce<none> %[[S]]
  %0 = "stablehlo.add"(%a, %b) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %1 = mpmd.reduce<none> %0 : (tensor<4xf32>) -> tensor<4xf32>
  return %1, %0 : tensor<4xf32>, tensor<4xf32>
}

// -----

// Other reductions and non-add operands are left alone.

// CHECK-LABEL: func.func @untouched
func.func @untouched(%a: tensor<4xf32>, %b: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  // CHECK-NEXT: mpmd.reduce<max> %arg0, %arg1
  // CHECK-NEXT: "stablehlo.multiply"
  // CHECK-NEXT: mpmd.reduce<none>
  %0 = mpmd.reduce<max> %a, %b : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %1 = "stablehlo.multiply"(%a, %b) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %2 = mpmd.reduce<none> %1 : (tensor<4xf32>) -> tensor<4xf32>
  return %0, %2 : tensor<4xf32>, tensor<4xf32>
}
