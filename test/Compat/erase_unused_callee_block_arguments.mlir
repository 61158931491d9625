// RUN: mpmd-opt %s -split-input-file -mpmd-erase-unused-callee-block-arguments | FileCheck %s

// @step returns its second argument unchanged: the calls read their operand
// instead, and the argument, now unread, goes from the function and the calls.
// CHECK-LABEL: func.func @forwarded
// CHECK-NEXT:    %[[C0:.*]] = mpmd.call @step(%arg0) {call_counter = 0 : ui32} : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:    %[[C1:.*]] = mpmd.call @step(%[[C0]]) {call_counter = 1 : ui32} : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:    return %[[C1]], %arg1
// CHECK-LABEL: func.func private @step(%arg0: tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:    "stablehlo.negate"(%arg0)
func.func @forwarded(%arg0: tensor<4xf32>, %arg1: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
    attributes {topology = #mpmd.topology<<"m1" : <["x"=1]>>>} {
  %0:2 = mpmd.call @step(%arg0, %arg1) {call_counter = 0 : ui32} : (tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
  %1:2 = mpmd.call @step(%0#0, %0#1) {call_counter = 1 : ui32} : (tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
  return %1#0, %1#1 : tensor<4xf32>, tensor<4xf32>
}
func.func private @step(%arg0: tensor<4xf32>, %arg1: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
    attributes {topology = #mpmd.topology<<"m1" : <["x"=1]>>>} {
  %0 = "stablehlo.negate"(%arg0) : (tensor<4xf32>) -> tensor<4xf32>
  return %0, %arg1 : tensor<4xf32>, tensor<4xf32>
}

// -----

// An identity leaves nothing to compute: its calls and itself go. A public
// function, or one a func.call also calls, keeps its signature.
// CHECK-LABEL: func.func @identity_and_kept
// CHECK-NEXT:    %[[P:.*]] = mpmd.call @public_identity(%arg0)
// CHECK-NEXT:    %[[F:.*]] = mpmd.call @also_func_called(%[[P]])
// CHECK-NEXT:    %[[G:.*]] = call @also_func_called(%[[F]])
// CHECK-NEXT:    return %[[G]]
// CHECK-NOT:   @identity(
// CHECK:       func.func public @public_identity(%arg0: tensor<4xf32>) -> tensor<4xf32>
// CHECK:       func.func private @also_func_called(%arg0: tensor<4xf32>) -> tensor<4xf32>
func.func @identity_and_kept(%arg0: tensor<4xf32>) -> tensor<4xf32>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=1]>>>} {
  %0 = mpmd.call @identity(%arg0) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = mpmd.call @public_identity(%0) : (tensor<4xf32>) -> tensor<4xf32>
  %2 = mpmd.call @also_func_called(%1) : (tensor<4xf32>) -> tensor<4xf32>
  %3 = func.call @also_func_called(%2) : (tensor<4xf32>) -> tensor<4xf32>
  return %3 : tensor<4xf32>
}
func.func private @identity(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  return %arg0 : tensor<4xf32>
}
func.func public @public_identity(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  return %arg0 : tensor<4xf32>
}
func.func private @also_func_called(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  return %arg0 : tensor<4xf32>
}
