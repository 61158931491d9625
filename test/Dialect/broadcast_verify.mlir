// RUN: mpmd-opt %s -split-input-file -verify-diagnostics

// `mpmd.broadcast` has no custom verifier; these are its ODS constraints.

func.func @result_type_mismatch(%arg0: tensor<4xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{'mpmd.broadcast' op failed to verify that all of {tensor, result} have same type}}
  %0 = "mpmd.broadcast"(%arg0) : (tensor<4xf32>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

func.func @non_tensor_operand(%arg0: !stablehlo.token) -> !stablehlo.token {
  // expected-error @+1 {{'mpmd.broadcast' op operand #0 must be tensor of any type values, but got '!stablehlo.token'}}
  %0 = "mpmd.broadcast"(%arg0) : (!stablehlo.token) -> !stablehlo.token
  return %0 : !stablehlo.token
}

// -----

// The custom form's type must be a tensor type.
func.func @non_tensor_custom_form(%arg0: !stablehlo.token) -> !stablehlo.token {
  // expected-error @+1 {{custom op 'mpmd.broadcast' invalid kind of type specified}}
  %0 = mpmd.broadcast %arg0 : !stablehlo.token
  return %0 : !stablehlo.token
}
