// RUN: mpmd-opt %s -split-input-file -mpmd-inline-func-calls -verify-diagnostics | FileCheck %s

// Calls (also inside named computations, and calls in callees) are inlined;
// private callees left without uses are erased, public ones kept.

// CHECK-LABEL: func.func @main
func.func @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  // CHECK-NEXT: %[[NC:.*]] = mpmd.named_computation<"f"> (%arg0) (%[[A:.*]]: tensor<4xf32>) {
  // CHECK-NEXT:   %[[R:.*]] = "stablehlo.maximum"(%[[A]], %[[A]])
  // CHECK-NEXT:   %[[N:.*]] = "stablehlo.negate"(%[[R]])
  // CHECK-NEXT:   mpmd.return %[[N]]
  // CHECK:      %[[P:.*]] = "stablehlo.negate"(%[[NC]])
  // CHECK-NEXT: return %[[P]]
  %0 = mpmd.named_computation<"f"> (%arg0) (%a: tensor<4xf32>) {
    %1 = func.call @relu_neg(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %1 : tensor<4xf32>
  } : (tensor<4xf32>) -> tensor<4xf32>
  %2 = func.call @neg(%0) : (tensor<4xf32>) -> tensor<4xf32>
  return %2 : tensor<4xf32>
}
// CHECK-NOT: func.func private @relu_neg
func.func private @relu_neg(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "stablehlo.maximum"(%arg0, %arg0) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %1 = func.call @neg(%0) : (tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}
// CHECK: func.func @neg
func.func @neg(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "stablehlo.negate"(%arg0) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{cannot inline call to @ext: no function body in the module}}
  %0 = func.call @ext(%arg0) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
func.func private @ext(tensor<4xf32>) -> tensor<4xf32>

// -----

func.func @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = func.call @loop(%arg0) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
func.func private @loop(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{recursive call to @loop cannot be inlined}}
  %0 = func.call @loop(%arg0) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
