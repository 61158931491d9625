// RUN: mpmd-opt %s -split-input-file -mpmd-mark-aliasing-and-donation | FileCheck %s
// RUN: mpmd-opt %s -split-input-file -mpmd-mark-aliasing-and-donation -mpmd-lower-to-fragment-calls | FileCheck %s --check-prefix=CALLS

!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>
!m2 = !mpmd.mesh_tensor<"m2", tensor<4xf32>>

// Operands at their last use are donated; arguments only when the caller
// donated them; values used later, passed twice, or returned are kept.

// CHECK-LABEL: func.func @main
func.func @main(%arg0: !m1 {jax.buffer_donor = true}, %arg1: !m1, %arg2: !m1 {tf.aliasing_output = 0 : i32}) -> (!m1, !m2)
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  // %arg0 is used again below; %arg1 is not donated by the caller.
  // CHECK: %[[A:.*]] = mpmd.fragment<mesh="m1", origin=["f"]> (%arg0, %arg1)
  // CHECK-NOT: mpmd.donated_operands
  // CHECK-SAME: (%
  %0 = mpmd.fragment<mesh="m1", origin=["f"]> (%arg0, %arg1) (%a: tensor<4xf32>, %b: tensor<4xf32>) {
    %s = "stablehlo.add"(%a, %b) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %s : tensor<4xf32>
  } : (!m1, !m1) -> !m1
  // Last use of %arg0 (donated by the caller); %0 is returned below; %arg2 is
  // passed twice.
  // CHECK: %[[B:.*]] = mpmd.fragment<mesh="m1", origin=["f"]> (%arg0, %[[A]], %arg2, %arg2) {mpmd.donated_operands = array<i64: 0>}
  %1 = mpmd.fragment<mesh="m1", origin=["f"]> (%arg0, %0, %arg2, %arg2) (%a: tensor<4xf32>, %b: tensor<4xf32>, %c: tensor<4xf32>, %d: tensor<4xf32>) {
    %s = "stablehlo.add"(%a, %b) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %t = "stablehlo.add"(%c, %d) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %u = "stablehlo.add"(%s, %t) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %u : tensor<4xf32>
  } : (!m1, !m1, !m1, !m1) -> !m1
  // The transfer is the last use of %1; the fragment's operand is returned.
  // CHECK: %[[T:.*]] = mpmd.transfer {mpmd.donate} %[[B]]
  %2 = mpmd.transfer %1 : (!m1) -> !m2
  // CHECK: %[[C:.*]] = mpmd.fragment<mesh="m2", origin=["g"]> (%[[T]]) (
  %3 = mpmd.fragment<mesh="m2", origin=["g"]> (%2) (%a: tensor<4xf32>) {
    %n = "stablehlo.negate"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %n : tensor<4xf32>
  } : (!m2) -> !m2
  // CHECK: %[[D:.*]] = mpmd.fragment<mesh="m2", origin=["g"]> (%[[C]]) {mpmd.donated_operands = array<i64: 0>}
  %4 = mpmd.fragment<mesh="m2", origin=["g"]> (%3) (%a: tensor<4xf32>) {
    %n = "stablehlo.negate"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %n : tensor<4xf32>
  } : (!m2) -> !m2
  return %0, %2 : !m1, !m2
}

// Identical bodies that donate differently are different functions; the
// donated arguments name the results computed from them (tf.aliasing_output).
// CALLS-LABEL: func.func @main
// CALLS: mpmd.fragment_call<mesh="m1", origin=["f"]> @p0_f.main(%arg0, %arg1)
// CALLS: mpmd.fragment_call<mesh="m1", origin=["f"]> @p1_f.main(
// CALLS: mpmd.transfer {mpmd.donate}
// CALLS: mpmd.fragment_call<mesh="m2", origin=["g"]> @p2_g.main(
// CALLS: mpmd.fragment_call<mesh="m2", origin=["g"]> @p3_g.main(
// CALLS: func.func @p0_f.main(%arg0: tensor<4xf32>, %arg1: tensor<4xf32>)
// CALLS: func.func @p1_f.main(%arg0: tensor<4xf32> {tf.aliasing_output = 0 : i32}, %arg1: tensor<4xf32>, %arg2: tensor<4xf32>, %arg3: tensor<4xf32>)
// CALLS: func.func @p2_g.main(%arg0: tensor<4xf32>)
// CALLS: func.func @p3_g.main(%arg0: tensor<4xf32> {tf.aliasing_output = 0 : i32})

// -----

!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>

// Microbatches that donate alike share one function.

// CHECK-LABEL: func.func @main
// CALLS-LABEL: func.func @main
func.func @main(%arg0: !m1) -> !m1
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // CALLS: @p0_f.main(%arg0)
  // CALLS: @p1_f.main(%0)
  // CALLS: @p1_f.main(%1)
  // CALLS-NOT: func.func @p2
  %0 = mpmd.fragment<mesh="m1", origin=["f"]> (%arg0) {call_counter = 0 : ui32} (%a: tensor<4xf32>) {
    %n = "stablehlo.negate"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %n : tensor<4xf32>
  } : (!m1) -> !m1
  %1 = mpmd.fragment<mesh="m1", origin=["f"]> (%0) {call_counter = 1 : ui32} (%a: tensor<4xf32>) {
    %n = "stablehlo.negate"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %n : tensor<4xf32>
  } : (!m1) -> !m1
  %2 = mpmd.fragment<mesh="m1", origin=["f"]> (%1) {call_counter = 2 : ui32} (%a: tensor<4xf32>) {
    %n = "stablehlo.negate"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %n : tensor<4xf32>
  } : (!m1) -> !m1
  return %2 : !m1
}

// -----

!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>
!s1 = !mpmd.mesh_tensor<"m1", tensor<2x4xf32>>

// A value every microbatch of a computation reads (a stacked batch each
// slices) is not donated to the last of them: that would give the last
// microbatch a program of its own (also when an earlier microbatch consumes
// another operand).

// CHECK-LABEL: func.func @shared_by_microbatches
// CALLS-LABEL: func.func @shared_by_microbatches
func.func @shared_by_microbatches(%arg0: !s1 {jax.buffer_donor = true}, %arg1: !m1 {jax.buffer_donor = true}) -> (!m1, !m1)
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // CHECK: mpmd.fragment<mesh="m1", origin=["f"]> (%arg0, %arg1) {call_counter = 0 : ui32, mpmd.donated_operands = array<i64: 1>} (
  // CHECK: mpmd.fragment<mesh="m1", origin=["f"]> (%arg0) {call_counter = 1 : ui32} (
  %0 = mpmd.fragment<mesh="m1", origin=["f"]> (%arg0, %arg1) {call_counter = 0 : ui32} (%a: tensor<2x4xf32>, %b: tensor<4xf32>) {
    %s = "stablehlo.slice"(%a) <{start_indices = array<i64: 0, 0>, limit_indices = array<i64: 1, 4>, strides = array<i64: 1, 1>}> : (tensor<2x4xf32>) -> tensor<1x4xf32>
    %r = "stablehlo.reshape"(%s) : (tensor<1x4xf32>) -> tensor<4xf32>
    %t = "stablehlo.add"(%r, %b) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %t : tensor<4xf32>
  } : (!s1, !m1) -> !m1
  %1 = mpmd.fragment<mesh="m1", origin=["f"]> (%arg0) {call_counter = 1 : ui32} (%a: tensor<2x4xf32>) {
    %s = "stablehlo.slice"(%a) <{start_indices = array<i64: 1, 0>, limit_indices = array<i64: 2, 4>, strides = array<i64: 1, 1>}> : (tensor<2x4xf32>) -> tensor<1x4xf32>
    %r = "stablehlo.reshape"(%s) : (tensor<1x4xf32>) -> tensor<4xf32>
    mpmd.return %r : tensor<4xf32>
  } : (!s1) -> !m1
  return %0, %1 : !m1, !m1
}

// Another computation's last use still consumes it.

// CHECK-LABEL: func.func @last_use_by_another_computation
// CALLS-LABEL: func.func @last_use_by_another_computation
func.func @last_use_by_another_computation(%arg0: !s1 {jax.buffer_donor = true}) -> (!m1, !m1)
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // CHECK: mpmd.fragment<mesh="m1", origin=["f"]> (%arg0) {call_counter = 0 : ui32} (
  // CHECK: mpmd.fragment<mesh="m1", origin=["g"]> (%arg0) {call_counter = 1 : ui32, mpmd.donated_operands = array<i64: 0>}
  %0 = mpmd.fragment<mesh="m1", origin=["f"]> (%arg0) {call_counter = 0 : ui32} (%a: tensor<2x4xf32>) {
    %s = "stablehlo.slice"(%a) <{start_indices = array<i64: 0, 0>, limit_indices = array<i64: 1, 4>, strides = array<i64: 1, 1>}> : (tensor<2x4xf32>) -> tensor<1x4xf32>
    %r = "stablehlo.reshape"(%s) : (tensor<1x4xf32>) -> tensor<4xf32>
    mpmd.return %r : tensor<4xf32>
  } : (!s1) -> !m1
  %1 = mpmd.fragment<mesh="m1", origin=["g"]> (%arg0) {call_counter = 1 : ui32} (%a: tensor<2x4xf32>) {
    %s = "stablehlo.slice"(%a) <{start_indices = array<i64: 0, 0>, limit_indices = array<i64: 1, 4>, strides = array<i64: 1, 1>}> : (tensor<2x4xf32>) -> tensor<1x4xf32>
    %r = "stablehlo.reshape"(%s) : (tensor<1x4xf32>) -> tensor<4xf32>
    mpmd.return %r : tensor<4xf32>
  } : (!s1) -> !m1
  return %0, %1 : !m1, !m1
}
