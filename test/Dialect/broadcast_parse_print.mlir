// RUN: mpmd-opt %s | FileCheck %s
// RUN: mpmd-opt %s | mpmd-opt | FileCheck %s
// RUN: mpmd-opt %s --mlir-print-op-generic | mpmd-opt | FileCheck %s

// CHECK-LABEL: func.func @broadcast
func.func @broadcast(%arg0: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // CHECK-NEXT: %[[B:.*]] = mpmd.broadcast %arg0 : tensor<4x8xf32>
  // CHECK-NEXT: return %[[B]] : tensor<4x8xf32>
  %0 = mpmd.broadcast %arg0 : tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// The attribute dictionary comes before the operand.
// CHECK-LABEL: func.func @broadcast_with_attrs
func.func @broadcast_with_attrs(%arg0: tensor<i32>) -> tensor<i32> {
  // CHECK-NEXT: %[[B:.*]] = mpmd.broadcast {foo = "bar"} %arg0 : tensor<i32>
  // CHECK-NEXT: %[[C:.*]] = mpmd.broadcast %[[B]] : tensor<i32>
  // CHECK-NEXT: return %[[C]] : tensor<i32>
  %0 = mpmd.broadcast {foo = "bar"} %arg0 : tensor<i32>
  %1 = mpmd.broadcast %0 : tensor<i32>
  return %1 : tensor<i32>
}
