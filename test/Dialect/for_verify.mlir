// RUN: mpmd-opt %s -split-input-file -verify-diagnostics

func.func @zero_iterations(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'mpmd.for' op must have at least one iteration}}
  %0 = mpmd.for (%arg0) {iterations = 0 : ui32} (%arg1: tensor<4xf32>, %index: tensor<ui32>) {
    mpmd.return %arg1 : tensor<4xf32>
  } : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @unroll_factor_not_dividing(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'mpmd.for' op unroll_factor 2 must divide iterations 3}}
  %0 = mpmd.for (%arg0) {iterations = 3 : ui32, unroll_factor = 2 : ui32} (%arg1: tensor<4xf32>, %index: tensor<ui32>) {
    mpmd.return %arg1 : tensor<4xf32>
  } : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @unroll_factor_larger_than_iterations(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'mpmd.for' op unroll_factor 6 must divide iterations 3}}
  %0 = mpmd.for (%arg0) {iterations = 3 : ui32, unroll_factor = 6 : ui32} (%arg1: tensor<4xf32>, %index: tensor<ui32>) {
    mpmd.return %arg1 : tensor<4xf32>
  } : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @zero_unroll_factor(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'mpmd.for' op unroll_factor 0 must divide iterations 4}}
  %0 = mpmd.for (%arg0) {iterations = 4 : ui32, unroll_factor = 0 : ui32} (%arg1: tensor<4xf32>, %index: tensor<ui32>) {
    mpmd.return %arg1 : tensor<4xf32>
  } : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @iterations_not_ui32(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'mpmd.for' op attribute 'iterations' failed to satisfy constraint: 32-bit unsigned integer attribute}}
  %0 = mpmd.for (%arg0) {iterations = 4 : i32} (%arg1: tensor<4xf32>, %index: tensor<ui32>) {
    mpmd.return %arg1 : tensor<4xf32>
  } : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @unroll_factor_not_ui32(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'mpmd.for' op attribute 'unroll_factor' failed to satisfy constraint: 32-bit unsigned integer attribute}}
  %0 = mpmd.for (%arg0) {iterations = 4 : ui32, unroll_factor = 2 : i64} (%arg1: tensor<4xf32>, %index: tensor<ui32>) {
    mpmd.return %arg1 : tensor<4xf32>
  } : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @missing_iterations(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'mpmd.for' op requires attribute 'iterations'}}
  %0 = mpmd.for (%arg0) {unroll_factor = 2 : ui32} (%arg1: tensor<4xf32>, %index: tensor<ui32>) {
    mpmd.return %arg1 : tensor<4xf32>
  } : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// Only reachable in generic form: the custom form uses one type list for both.
func.func @result_types_differ_from_operands(%arg0: tensor<4xf32>) -> tensor<4xf16> {
  // expected-error @+1 {{'mpmd.for' op result types must equal the carried operand types}}
  %0 = "mpmd.for"(%arg0) <{iterations = 2 : ui32}> ({
  ^bb0(%arg1: tensor<4xf32>, %index: tensor<ui32>):
    "mpmd.return"(%arg1) : (tensor<4xf32>) -> ()
  }) : (tensor<4xf32>) -> tensor<4xf16>
  return %0 : tensor<4xf16>
}

// -----

func.func @missing_index_arg(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'mpmd.for' op body must take the 1 carried values and a trailing tensor<ui32> index, got 1 arguments}}
  %0 = mpmd.for (%arg0) {iterations = 2 : ui32} (%arg1: tensor<4xf32>) {
    mpmd.return %arg1 : tensor<4xf32>
  } : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @too_many_block_args(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'mpmd.for' op body must take the 1 carried values and a trailing tensor<ui32> index, got 3 arguments}}
  %0 = mpmd.for (%arg0) {iterations = 2 : ui32} (%arg1: tensor<4xf32>, %arg2: tensor<4xf32>, %index: tensor<ui32>) {
    mpmd.return %arg1 : tensor<4xf32>
  } : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @index_signed(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'mpmd.for' op last body argument must be the index of type tensor<ui32>, got 'tensor<i32>'}}
  %0 = mpmd.for (%arg0) {iterations = 2 : ui32} (%arg1: tensor<4xf32>, %index: tensor<i32>) {
    mpmd.return %arg1 : tensor<4xf32>
  } : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @index_not_scalar(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'mpmd.for' op last body argument must be the index of type tensor<ui32>, got 'tensor<1xui32>'}}
  %0 = mpmd.for (%arg0) {iterations = 2 : ui32} (%arg1: tensor<4xf32>, %index: tensor<1xui32>) {
    mpmd.return %arg1 : tensor<4xf32>
  } : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @index_not_a_tensor(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'mpmd.for' op last body argument must be the index of type tensor<ui32>, got 'ui32'}}
  %0 = mpmd.for (%arg0) {iterations = 2 : ui32} (%arg1: tensor<4xf32>, %index: ui32) {
    mpmd.return %arg1 : tensor<4xf32>
  } : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @block_arg_type_mismatch(%arg0: tensor<4xf32>, %arg1: tensor<2xi32>) -> (tensor<4xf32>, tensor<2xi32>) {
  // expected-error @+1 {{'mpmd.for' op body argument #1 has type 'tensor<2xi64>' but operand #1 has type 'tensor<2xi32>'}}
  %0:2 = mpmd.for (%arg0, %arg1) {iterations = 2 : ui32} (%arg2: tensor<4xf32>, %arg3: tensor<2xi64>, %index: tensor<ui32>) {
    mpmd.return %arg2, %arg1 : tensor<4xf32>, tensor<2xi32>
  } : tensor<4xf32>, tensor<2xi32>
  return %0#0, %0#1 : tensor<4xf32>, tensor<2xi32>
}

// -----

func.func @wrong_returned_types(%arg0: tensor<4xf32>, %arg1: tensor<2xi32>) -> (tensor<4xf32>, tensor<2xi32>) {
  // expected-error @+1 {{'mpmd.for' op body must return the carried types 'tensor<4xf32>', 'tensor<2xi32>'}}
  %0:2 = mpmd.for (%arg0, %arg1) {iterations = 2 : ui32} (%arg2: tensor<4xf32>, %arg3: tensor<2xi32>, %index: tensor<ui32>) {
    mpmd.return %arg3, %arg2 : tensor<2xi32>, tensor<4xf32>
  } : tensor<4xf32>, tensor<2xi32>
  return %0#0, %0#1 : tensor<4xf32>, tensor<2xi32>
}

// -----

func.func @wrong_returned_count(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'mpmd.for' op body must return the carried types 'tensor<4xf32>'}}
  %0 = mpmd.for (%arg0) {iterations = 2 : ui32} (%arg1: tensor<4xf32>, %index: tensor<ui32>) {
    mpmd.return %arg1, %index : tensor<4xf32>, tensor<ui32>
  } : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// The body ends with `mpmd.return` (as jaxlib's implicit-terminator trait
// requires).
func.func @body_not_ending_with_return(%arg0: tensor<4xf32>) {
  // expected-error @+1 {{'mpmd.for' op expects regions to end with 'mpmd.return', found 'foo.terminator'}}
  "mpmd.for"(%arg0) <{iterations = 1 : ui32}> ({
  ^bb0(%x: tensor<4xf32>, %i: tensor<ui32>):
    "foo.terminator"() : () -> ()
  }) : (tensor<4xf32>) -> (tensor<4xf32>)
  return
}

// -----

!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>

// The carried values are either all on meshes (after import) or all local
// (before): one of each is an error.
func.func @mixed_mesh_and_local_tensors(%arg0: !m1, %arg1: tensor<4xf32>) -> (!m1, tensor<4xf32>)
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // expected-error @+1 {{'mpmd.for' op carried values must be all mesh tensors or all local tensors}}
  %0:2 = mpmd.for (%arg0, %arg1) {iterations = 2 : ui32} (%a: !m1, %b: tensor<4xf32>, %index: tensor<ui32>) {
    mpmd.return %a, %b : !m1, tensor<4xf32>
  } : !m1, tensor<4xf32>
  return %0#0, %0#1 : !m1, tensor<4xf32>
}
