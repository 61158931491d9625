// RUN: mpmd-opt %s -split-input-file -verify-diagnostics

func.func @origin_empty_name(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{user origin name must not be empty}}
  %0 = mpmd.named_computation<""> (%arg0) (%arg1: tensor<4xf32>) {
    mpmd.return %arg1 : tensor<4xf32>
  } : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @origin_negative_count(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{transpose count of "f" must be >= 0, got -1}}
  %0 = mpmd.named_computation<"f"(-1)> (%arg0) (%arg1: tensor<4xf32>) {
    mpmd.return %arg1 : tensor<4xf32>
  } : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @origin_not_a_string(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{expected string}}
  %0 = mpmd.named_computation<f> (%arg0) (%arg1: tensor<4xf32>) {
    mpmd.return %arg1 : tensor<4xf32>
  } : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @missing_origin(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{expected '<'}}
  %0 = mpmd.named_computation (%arg0) (%arg1: tensor<4xf32>) {
    mpmd.return %arg1 : tensor<4xf32>
  } : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @operand_count_mismatch(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'mpmd.named_computation' op has 1 operands but its body takes 0 arguments}}
  %0 = mpmd.named_computation<"f"> (%arg0) () {
    %1 = "stablehlo.constant"() {value = dense<1.0> : tensor<4xf32>} : () -> tensor<4xf32>
    mpmd.return %1 : tensor<4xf32>
  } : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @block_arg_type_mismatch(%arg0: tensor<4xf32>, %arg1: tensor<8xi32>) -> tensor<4xf32> {
  // expected-error @+1 {{'mpmd.named_computation' op body argument #1 has type 'tensor<8xf32>' but operand #1 requires 'tensor<8xi32>'}}
  %0 = mpmd.named_computation<"f"> (%arg0, %arg1) (%arg2: tensor<4xf32>, %arg3: tensor<8xf32>) {
    mpmd.return %arg2 : tensor<4xf32>
  } : (tensor<4xf32>, tensor<8xi32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @result_count_mismatch(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'mpmd.named_computation' op has 1 results but its body returns 2 values}}
  %0 = mpmd.named_computation<"f"> (%arg0) (%arg1: tensor<4xf32>) {
    mpmd.return %arg1, %arg1 : tensor<4xf32>, tensor<4xf32>
  } : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @result_type_mismatch(%arg0: tensor<4xf32>) -> tensor<4xf64> {
  // expected-error @+1 {{'mpmd.named_computation' op body returns 'tensor<4xf32>' as value #0 but result #0 requires 'tensor<4xf64>'}}
  %0 = mpmd.named_computation<"f"> (%arg0) (%arg1: tensor<4xf32>) {
    mpmd.return %arg1 : tensor<4xf32>
  } : (tensor<4xf32>) -> tensor<4xf64>
  return %0 : tensor<4xf64>
}

// -----

// Named computations are isolated from above.
func.func @uses_value_from_above(%arg0: tensor<4xf32>, %arg1: tensor<4xf32>) -> tensor<4xf32> {
  // expected-note @+1 {{required by region isolation constraints}}
  %0 = mpmd.named_computation<"f"> (%arg0) (%arg2: tensor<4xf32>) {
    // expected-error @+1 {{using value defined outside the region}}
    mpmd.return %arg1 : tensor<4xf32>
  } : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// The body ends with `mpmd.return` (as jaxlib's implicit-terminator trait
// requires).
func.func @body_not_ending_with_return(%arg0: tensor<4xf32>) {
  // expected-error @+1 {{'mpmd.named_computation' op expects regions to end with 'mpmd.return', found 'foo.terminator'}}
  "mpmd.named_computation"(%arg0) <{origin = #mpmd.user_origin<"f">}> ({
  ^bb0(%x: tensor<4xf32>):
    "foo.terminator"() : () -> ()
  }) : (tensor<4xf32>) -> ()
  return
}
