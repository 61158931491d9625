// RUN: mpmd-opt %s -split-input-file -verify-diagnostics

func.func @call_counter_wrong_int_type(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'mpmd.call' op attribute `call_counter` must be a ui32 integer, got 0 : i32}}
  %0 = mpmd.call @f(%arg0) {call_counter = 0 : i32} : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

func.func private @f(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  return %arg0 : tensor<4xf32>
}

// -----

func.func @call_counter_ui64(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'mpmd.call' op attribute `call_counter` must be a ui32 integer, got 3 : ui64}}
  %0 = mpmd.call @f(%arg0) {call_counter = 3 : ui64} : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

func.func private @f(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  return %arg0 : tensor<4xf32>
}

// -----

func.func @call_counter_not_integer(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'mpmd.call' op attribute `call_counter` must be a ui32 integer, got "0"}}
  %0 = mpmd.call @f(%arg0) {call_counter = "0"} : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

func.func private @f(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  return %arg0 : tensor<4xf32>
}

// -----

func.func @missing_callee(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'mpmd.call' op calls @missing which is not a func.func in the module}}
  %0 = mpmd.call @missing(%arg0) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @operand_type_mismatch(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'mpmd.call' op has type '(tensor<4xf32>) -> tensor<4xf32>' but callee @f has type '(tensor<8xf32>) -> tensor<4xf32>'}}
  %0 = mpmd.call @f(%arg0) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

func.func private @f(%arg0: tensor<8xf32>) -> tensor<4xf32> {
  %0 = "stablehlo.slice"(%arg0) {start_indices = array<i64: 0>, limit_indices = array<i64: 4>, strides = array<i64: 1>} : (tensor<8xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @result_count_mismatch(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'mpmd.call' op has type '(tensor<4xf32>) -> tensor<4xf32>' but callee @f has type '(tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)'}}
  %0 = mpmd.call @f(%arg0) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

func.func private @f(%arg0: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  return %arg0, %arg0 : tensor<4xf32>, tensor<4xf32>
}

// -----

// Mesh tensor types must match exactly, sharding included.
func.func @mesh_tensor_sharding_mismatch(%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // expected-error @+1 {{'mpmd.call' op has type '(!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>' but callee @f has type '(!mpmd.mesh_tensor<"m1", tensor<4xf32>, sharding=<@mesh, [{"x"}]>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>'}}
  %0 = mpmd.call @f(%arg0) : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
  return %0 : !mpmd.mesh_tensor<"m1", tensor<4xf32>>
}

func.func private @f(%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>, sharding=<@mesh, [{"x"}]>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  %0 = mpmd.transfer %arg0 : (!mpmd.mesh_tensor<"m1", tensor<4xf32>, sharding=<@mesh, [{"x"}]>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
  return %0 : !mpmd.mesh_tensor<"m1", tensor<4xf32>>
}

// -----

// The callee must be a func.func, not just any symbol.
func.func @callee_not_a_func(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'mpmd.call' op calls @not_a_func which is not a func.func in the module}}
  %0 = mpmd.call @not_a_func(%arg0) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

"test.symbol"() {sym_name = "not_a_func"} : () -> ()

// -----

func.func @call_inside_another_op(%arg0: tensor<4xf32>, %p: tensor<i1>) -> tensor<4xf32> {
  %0 = "stablehlo.if"(%p) ({
    // expected-error @+1 {{'mpmd.call' op calls @f from inside 'stablehlo.if': an mpmd.call can only be made in a function or an mpmd.for body}}
    %1 = mpmd.call @f(%arg0) : (tensor<4xf32>) -> tensor<4xf32>
    "stablehlo.return"(%1) : (tensor<4xf32>) -> ()
  }, {
    "stablehlo.return"(%arg0) : (tensor<4xf32>) -> ()
  }) : (tensor<i1>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

func.func private @f(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  return %arg0 : tensor<4xf32>
}

// -----

func.func public @main(%arg0: tensor<4xf32>) -> tensor<4xf32>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=1]>>>} {
  %0 = mpmd.call @f(%arg0) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

func.func private @f(%arg0: tensor<4xf32>) -> tensor<4xf32>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=1]>>>} {
  // expected-error @+1 {{'mpmd.call' op calls @g from @f, a function with a topology that is not the entry point}}
  %0 = mpmd.call @g(%arg0) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

func.func private @g(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  return %arg0 : tensor<4xf32>
}
