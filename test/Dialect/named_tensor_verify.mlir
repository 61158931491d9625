// RUN: mpmd-opt %s -split-input-file -verify-diagnostics

func.func @empty_name(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'mpmd.named_tensor' op name must not be empty}}
  %0 = mpmd.named_tensor %arg0 name="" : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @empty_name_generic(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'mpmd.named_tensor' op name must not be empty}}
  %0 = "mpmd.named_tensor"(%arg0) <{name = ""}> : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @missing_name(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'mpmd.named_tensor' op requires attribute 'name'}}
  %0 = "mpmd.named_tensor"(%arg0) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @result_type_mismatch(%arg0: tensor<4xf32>) -> tensor<4xf16> {
  // expected-error @+1 {{'mpmd.named_tensor' op failed to verify that all of {tensor, result} have same type}}
  %0 = "mpmd.named_tensor"(%arg0) <{name = "x"}> : (tensor<4xf32>) -> tensor<4xf16>
  return %0 : tensor<4xf16>
}

// -----

func.func @token(%arg0: !stablehlo.token) -> !stablehlo.token {
  // expected-error @+1 {{'mpmd.named_tensor' op operand #0 must be tensor of any type values, but got '!stablehlo.token'}}
  %0 = "mpmd.named_tensor"(%arg0) <{name = "t"}> : (!stablehlo.token) -> !stablehlo.token
  return %0 : !stablehlo.token
}
