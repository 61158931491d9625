// RUN: mpmd-opt %s -split-input-file -mpmd-batch-weight-gradients='verbose=true' -verify-diagnostics

// Runs of W units whose bodies the rules do not cover stay one call per
// microbatch; `verbose` says why, on the run's last unit.

!acc = !mpmd.mesh_tensor<"m0", tensor<4x3xf32>>
!bias = !mpmd.mesh_tensor<"m0", tensor<3xf32>>
!x = !mpmd.mesh_tensor<"m0", tensor<2x4xf32>>
!dy = !mpmd.mesh_tensor<"m0", tensor<2x3xf32>>

// A maximum over the batch is not a sum of the microbatches' maxima.
func.func @max_over_the_batch(%bias: !bias, %d0: !dy, %d1: !dy) -> !bias
    attributes {topology = #mpmd.topology<<"m0" : <["x"=1]>>>} {
  %w0 = mpmd.fragment<mesh="m0", origin=["s"(1)], stage=0> (%bias, %d0) {call_counter = 0 : ui32, split_drop_transferred}
      (%b: tensor<3xf32>, %d: tensor<2x3xf32>) {
    %z = "stablehlo.constant"() <{value = dense<0.0> : tensor<f32>}> : () -> tensor<f32>
    %s = "stablehlo.reduce"(%d, %z) <{dimensions = array<i64: 0>}> ({
    ^bb0(%p: tensor<f32>, %q: tensor<f32>):
      %r = "stablehlo.maximum"(%p, %q) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%r) : (tensor<f32>) -> ()
    }) : (tensor<2x3xf32>, tensor<f32>) -> tensor<3xf32>
    %b2 = "stablehlo.add"(%b, %s) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
    mpmd.return %b2 : tensor<3xf32>
  } : (!bias, !dy) -> !bias
  // expected-remark @+1 {{stay one call each: stablehlo.reduce: reduces the microbatches' dimension other than by a sum from zero}}
  %w1 = mpmd.fragment<mesh="m0", origin=["s"(1)], stage=0> (%w0, %d1) {call_counter = 1 : ui32, split_drop_transferred}
      (%b: tensor<3xf32>, %d: tensor<2x3xf32>) {
    %z = "stablehlo.constant"() <{value = dense<0.0> : tensor<f32>}> : () -> tensor<f32>
    // expected-note @+1 {{the op}}
    %s = "stablehlo.reduce"(%d, %z) <{dimensions = array<i64: 0>}> ({
    ^bb0(%p: tensor<f32>, %q: tensor<f32>):
      %r = "stablehlo.maximum"(%p, %q) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%r) : (tensor<f32>) -> ()
    }) : (tensor<2x3xf32>, tensor<f32>) -> tensor<3xf32>
    %b2 = "stablehlo.add"(%b, %s) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
    mpmd.return %b2 : tensor<3xf32>
  } : (!bias, !dy) -> !bias
  return %w1 : !bias
}

// -----

!acc = !mpmd.mesh_tensor<"m0", tensor<4x3xf32>>
!bias = !mpmd.mesh_tensor<"m0", tensor<3xf32>>
!x = !mpmd.mesh_tensor<"m0", tensor<2x4xf32>>
!dy = !mpmd.mesh_tensor<"m0", tensor<2x3xf32>>

// An outer product pairs every row of one microbatch with every row of the
// same microbatch only: on the concatenation it would pair rows across microbatches.
func.func @outer_product(%acc: !acc, %x0: !x, %x1: !x, %d0: !dy, %d1: !dy) -> !acc
    attributes {topology = #mpmd.topology<<"m0" : <["x"=1]>>>} {
  %w0 = mpmd.fragment<mesh="m0", origin=["s"(1)], stage=0> (%acc, %x0, %d0) {call_counter = 0 : ui32, split_drop_transferred}
      (%a: tensor<4x3xf32>, %x: tensor<2x4xf32>, %d: tensor<2x3xf32>) {
    %o = "stablehlo.dot_general"(%x, %d) <{dot_dimension_numbers = #stablehlo.dot<>}> : (tensor<2x4xf32>, tensor<2x3xf32>) -> tensor<2x4x2x3xf32>
    %z = "stablehlo.constant"() <{value = dense<0.0> : tensor<f32>}> : () -> tensor<f32>
    %s = "stablehlo.reduce"(%o, %z) <{dimensions = array<i64: 0, 2>}> ({
    ^bb0(%p: tensor<f32>, %q: tensor<f32>):
      %r = "stablehlo.add"(%p, %q) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%r) : (tensor<f32>) -> ()
    }) : (tensor<2x4x2x3xf32>, tensor<f32>) -> tensor<4x3xf32>
    %a2 = "stablehlo.add"(%a, %s) : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
    mpmd.return %a2 : tensor<4x3xf32>
  } : (!acc, !x, !dy) -> !acc
  // expected-remark @+1 {{stay one call each: stablehlo.dot_general: multiplies two microbatches' values outer-product-wise}}
  %w1 = mpmd.fragment<mesh="m0", origin=["s"(1)], stage=0> (%w0, %x1, %d1) {call_counter = 1 : ui32, split_drop_transferred}
      (%a: tensor<4x3xf32>, %x: tensor<2x4xf32>, %d: tensor<2x3xf32>) {
    // expected-note @+1 {{the op}}
    %o = "stablehlo.dot_general"(%x, %d) <{dot_dimension_numbers = #stablehlo.dot<>}> : (tensor<2x4xf32>, tensor<2x3xf32>) -> tensor<2x4x2x3xf32>
    %z = "stablehlo.constant"() <{value = dense<0.0> : tensor<f32>}> : () -> tensor<f32>
    %s = "stablehlo.reduce"(%o, %z) <{dimensions = array<i64: 0, 2>}> ({
    ^bb0(%p: tensor<f32>, %q: tensor<f32>):
      %r = "stablehlo.add"(%p, %q) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%r) : (tensor<f32>) -> ()
    }) : (tensor<2x4x2x3xf32>, tensor<f32>) -> tensor<4x3xf32>
    %a2 = "stablehlo.add"(%a, %s) : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
    mpmd.return %a2 : tensor<4x3xf32>
  } : (!acc, !x, !dy) -> !acc
  return %w1 : !acc
}

// -----

!acc = !mpmd.mesh_tensor<"m0", tensor<4x3xf32>>
!bias = !mpmd.mesh_tensor<"m0", tensor<3xf32>>
!x = !mpmd.mesh_tensor<"m0", tensor<2x4xf32>>
!dy = !mpmd.mesh_tensor<"m0", tensor<2x3xf32>>

// The last unit's own microbatch's value (%h) is read after the run: the
// batched fragment only has all microbatches' values.
func.func @a_microbatch_value_read_after(%acc: !acc, %x0: !x, %x1: !x, %d0: !dy, %d1: !dy) -> (!acc, !x)
    attributes {topology = #mpmd.topology<<"m0" : <["x"=1]>>>} {
  %w0:2 = mpmd.fragment<mesh="m0", origin=["s"(1)], stage=0> (%acc, %x0, %d0) {call_counter = 0 : ui32, split_drop_transferred}
      (%a: tensor<4x3xf32>, %x: tensor<2x4xf32>, %d: tensor<2x3xf32>) {
    %g = "stablehlo.dot_general"(%x, %d) <{dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [0], rhs_contracting_dimensions = [0]>}> : (tensor<2x4xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>

    %a2 = "stablehlo.add"(%a, %g) : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
    %h = "stablehlo.negate"(%x) : (tensor<2x4xf32>) -> tensor<2x4xf32>
    mpmd.return %a2, %h : tensor<4x3xf32>, tensor<2x4xf32>
  } : (!acc, !x, !dy) -> (!acc, !x)
  // expected-remark @+1 {{stay one call each: a result read after the run is not an accumulator carried from unit to unit}}
  %w1:2 = mpmd.fragment<mesh="m0", origin=["s"(1)], stage=0> (%w0#0, %x1, %d1) {call_counter = 1 : ui32, split_drop_transferred}
      (%a: tensor<4x3xf32>, %x: tensor<2x4xf32>, %d: tensor<2x3xf32>) {
    %g = "stablehlo.dot_general"(%x, %d) <{dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [0], rhs_contracting_dimensions = [0]>}> : (tensor<2x4xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>

    %a2 = "stablehlo.add"(%a, %g) : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
    %h = "stablehlo.negate"(%x) : (tensor<2x4xf32>) -> tensor<2x4xf32>
    mpmd.return %a2, %h : tensor<4x3xf32>, tensor<2x4xf32>
  } : (!acc, !x, !dy) -> (!acc, !x)
  return %w1#0, %w1#1 : !acc, !x
}

// -----

!acc = !mpmd.mesh_tensor<"m0", tensor<4x3xf32>>
!x = !mpmd.mesh_tensor<"m0", tensor<2x4xf32>>
!dy = !mpmd.mesh_tensor<"m0", tensor<2x3xf32>>

// A custom call (here a host callback) runs once per microbatch; batched, it
// would run once.
func.func @custom_call(%acc: !acc, %x0: !x, %x1: !x, %d0: !dy, %d1: !dy) -> !acc
    attributes {topology = #mpmd.topology<<"m0" : <["x"=1]>>>} {
  %w0 = mpmd.fragment<mesh="m0", origin=["s"(1)], stage=0> (%acc, %x0, %d0) {call_counter = 0 : ui32, split_drop_transferred}
      (%a: tensor<4x3xf32>, %x: tensor<2x4xf32>, %d: tensor<2x3xf32>) {
    "stablehlo.custom_call"(%a) <{call_target_name = "xla_python_cpu_callback", has_side_effect = true}> : (tensor<4x3xf32>) -> ()
    %g = "stablehlo.dot_general"(%x, %d) <{dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [0], rhs_contracting_dimensions = [0]>}> : (tensor<2x4xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>
    %a2 = "stablehlo.add"(%a, %g) : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
    mpmd.return %a2 : tensor<4x3xf32>
  } : (!acc, !x, !dy) -> !acc
  // expected-remark @+1 {{stay one call each: stablehlo.custom_call: may act outside the program, once per microbatch}}
  %w1 = mpmd.fragment<mesh="m0", origin=["s"(1)], stage=0> (%w0, %x1, %d1) {call_counter = 1 : ui32, split_drop_transferred}
      (%a: tensor<4x3xf32>, %x: tensor<2x4xf32>, %d: tensor<2x3xf32>) {
    // expected-note @+1 {{the op}}
    "stablehlo.custom_call"(%a) <{call_target_name = "xla_python_cpu_callback", has_side_effect = true}> : (tensor<4x3xf32>) -> ()
    %g = "stablehlo.dot_general"(%x, %d) <{dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [0], rhs_contracting_dimensions = [0]>}> : (tensor<2x4xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>
    %a2 = "stablehlo.add"(%a, %g) : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
    mpmd.return %a2 : tensor<4x3xf32>
  } : (!acc, !x, !dy) -> !acc
  return %w1 : !acc
}
