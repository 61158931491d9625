// RUN: mpmd-opt %s | FileCheck %s
// RUN: mpmd-opt %s | mpmd-opt | FileCheck %s
// RUN: mpmd-opt %s --mlir-print-op-generic | mpmd-opt | FileCheck %s

// CHECK-LABEL: func.func @named_tensor
func.func @named_tensor(%arg0: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // CHECK-NEXT: %[[N:.*]] = mpmd.named_tensor %arg0 name="x" : tensor<4x8xf32>
  // CHECK-NEXT: return %[[N]] : tensor<4x8xf32>
  %0 = mpmd.named_tensor %arg0 name="x" : tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// Discardable attributes follow the name; scalars can be named too.
// CHECK-LABEL: func.func @attrs_and_other_types
func.func @attrs_and_other_types(%arg0: tensor<f32>) -> tensor<f32> {
  // CHECK-NEXT: %[[A:.*]] = mpmd.named_tensor %arg0 name="activations" {foo = 1 : i64} : tensor<f32>
  // CHECK-NEXT: return %[[A]] : tensor<f32>
  %0 = mpmd.named_tensor %arg0 name="activations" {foo = 1} : tensor<f32>
  return %0 : tensor<f32>
}

// Names are string attributes and are printed escaped.
// CHECK-LABEL: func.func @escaped_name
func.func @escaped_name(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  // CHECK-NEXT: mpmd.named_tensor %arg0 name="a\22b c" : tensor<4xf32>
  %0 = mpmd.named_tensor %arg0 name="a\"b c" : tensor<4xf32>
  return %0 : tensor<4xf32>
}
