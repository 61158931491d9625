// RUN: mpmd-opt %s | FileCheck %s
// RUN: mpmd-opt %s | mpmd-opt | FileCheck %s
// RUN: mpmd-opt %s --mlir-print-op-generic | mpmd-opt | FileCheck %s

// CHECK-LABEL: func.func @reduce_none
func.func @reduce_none(%arg0: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // CHECK-NEXT: %[[R:.*]] = mpmd.reduce<none> %arg0 : (tensor<4x8xf32>) -> tensor<4x8xf32>
  // CHECK-NEXT: return %[[R]] : tensor<4x8xf32>
  %0 = mpmd.reduce<none> %arg0 : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// In generic form the reduction defaults to `none`.
// CHECK-LABEL: func.func @reduce_default_is_none
func.func @reduce_default_is_none(%arg0: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // CHECK-NEXT: %[[R:.*]] = mpmd.reduce<none> %arg0 : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %0 = "mpmd.reduce"(%arg0) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// CHECK-LABEL: func.func @reduce_all_kinds
func.func @reduce_all_kinds(%arg0: tensor<4x8xf32>, %arg1: tensor<4x8xf32>, %arg2: tensor<4xi1>) {
  // CHECK-NEXT: %{{.*}} = mpmd.reduce<add> %arg0, %arg1 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  // CHECK-NEXT: %{{.*}} = mpmd.reduce<max> %arg0, %arg1, %arg0 : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  // CHECK-NEXT: %{{.*}} = mpmd.reduce<min> %arg0, %arg1 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  // CHECK-NEXT: %{{.*}} = mpmd.reduce<mul> %arg0, %arg1 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  // CHECK-NEXT: %{{.*}} = mpmd.reduce<or> %arg2, %arg2 : (tensor<4xi1>, tensor<4xi1>) -> tensor<4xi1>
  // CHECK-NEXT: %{{.*}} = mpmd.reduce<and> %arg2, %arg2 : (tensor<4xi1>, tensor<4xi1>) -> tensor<4xi1>
  // CHECK-NEXT: return
  %0 = mpmd.reduce<add> %arg0, %arg1 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = mpmd.reduce<max> %arg0, %arg1, %arg0 : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %2 = mpmd.reduce<min> %arg0, %arg1 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %3 = mpmd.reduce<mul> %arg0, %arg1 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %4 = mpmd.reduce<or> %arg2, %arg2 : (tensor<4xi1>, tensor<4xi1>) -> tensor<4xi1>
  %5 = mpmd.reduce<and> %arg2, %arg2 : (tensor<4xi1>, tensor<4xi1>) -> tensor<4xi1>
  return
}

// A single operand is allowed for every kind; attributes follow the kind.
// CHECK-LABEL: func.func @reduce_single_operand_with_attrs
func.func @reduce_single_operand_with_attrs(%arg0: tensor<f32>) -> tensor<f32> {
  // CHECK-NEXT: %[[R:.*]] = mpmd.reduce<add> {foo} %arg0 : (tensor<f32>) -> tensor<f32>
  %0 = mpmd.reduce<add> {foo} %arg0 : (tensor<f32>) -> tensor<f32>
  return %0 : tensor<f32>
}
