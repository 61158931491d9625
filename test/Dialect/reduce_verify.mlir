// RUN: mpmd-opt %s -split-input-file -verify-diagnostics

func.func @no_operands() -> tensor<4xf32> {
  // expected-error @+1 {{'mpmd.reduce' op needs at least one operand}}
  %0 = mpmd.reduce<add> : () -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @none_with_two_operands(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'mpmd.reduce' op with reduction `none` takes exactly one operand, got 2}}
  %0 = mpmd.reduce<none> %arg0, %arg0 : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// The reduction defaults to `none` in generic form.
func.func @default_none_with_three_operands(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'mpmd.reduce' op with reduction `none` takes exactly one operand, got 3}}
  %0 = "mpmd.reduce"(%arg0, %arg0, %arg0) : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @operand_type_mismatch(%arg0: tensor<4xf32>, %arg1: tensor<4xf16>) -> tensor<4xf32> {
  // expected-error @+1 {{'mpmd.reduce' op operand #1 has type 'tensor<4xf16>' but the result has type 'tensor<4xf32>'}}
  %0 = mpmd.reduce<max> %arg0, %arg1 : (tensor<4xf32>, tensor<4xf16>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @single_operand_type_mismatch(%arg0: tensor<4xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{'mpmd.reduce' op operand #0 has type 'tensor<4xf32>' but the result has type 'tensor<8xf32>'}}
  %0 = mpmd.reduce<none> %arg0 : (tensor<4xf32>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

func.func @unknown_reduction(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+2 {{expected ::mlir::mpmd::ReductionType to be one of: none, add, max, min, mul, or, and}}
  // expected-error @+1 {{failed to parse Mpmd_ReductionAttr parameter 'reduction_type' which is to be a `::mlir::mpmd::ReductionType`}}
  %0 = mpmd.reduce<sum> %arg0, %arg0 : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// Cross-mesh reductions act on local tensors, not on mesh tensors.
func.func @mesh_tensor_operand(%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // expected-error @+1 {{'mpmd.reduce' op operand #0 must be variadic of tensor of any type values, but got '!mpmd.mesh_tensor<"m1", tensor<4xf32>>'}}
  %0 = mpmd.reduce<add> %arg0, %arg0 : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>, !mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
  return %0 : !mpmd.mesh_tensor<"m1", tensor<4xf32>>
}
