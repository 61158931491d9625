// RUN: mpmd-opt %s -split-input-file -verify-diagnostics

func.func @return_in_func(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'mpmd.return' op expects parent op to be one of 'mpmd.named_computation, mpmd.fragment, mpmd.for'}}
  mpmd.return %arg0 : tensor<4xf32>
}

// -----

func.func @return_in_other_op(%arg0: tensor<4xf32>) {
  "test.region_op"() ({
    // expected-error @+1 {{'mpmd.return' op expects parent op to be one of 'mpmd.named_computation, mpmd.fragment, mpmd.for'}}
    mpmd.return
  }) : () -> ()
  return
}

// -----

// `mpmd.return` must terminate the body.
func.func @return_not_last(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = mpmd.named_computation<"f"> (%arg0) (%arg1: tensor<4xf32>) {
    // expected-error @+1 {{'mpmd.return' op must be the last operation in the parent block}}
    mpmd.return %arg1 : tensor<4xf32>
    %1 = mpmd.named_tensor %arg1 name="x" : tensor<4xf32>
  } : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// The body of a named computation (likewise fragment, for) needs a terminator.
func.func @missing_return(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = mpmd.named_computation<"f"> (%arg0) (%arg1: tensor<4xf32>) {
    // expected-error @+1 {{block with no terminator}}
    %1 = mpmd.named_tensor %arg1 name="x" : tensor<4xf32>
  } : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @missing_types(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = mpmd.named_computation<"f"> (%arg0) (%arg1: tensor<4xf32>) {
    // expected-error @+1 {{number of operands and types do not match: got 1 operands and 0 types}}
    mpmd.return %arg1
  } : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
