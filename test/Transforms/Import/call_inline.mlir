// RUN: mpmd-opt %s -split-input-file -mpmd-call-inline -verify-diagnostics | FileCheck %s

// Two microbatches of the same function: each inlined copy's named
// computations carry the call's counter; the callee is erased.

// CHECK-LABEL: func.func @main
func.func @main(%arg0: tensor<4xf32>, %arg1: tensor<4xf32>) -> tensor<4xf32>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // CHECK-NEXT: %[[A:.*]] = mpmd.named_computation<"f"> (%arg0, %arg1) {call_counter = 0 : ui32}
  // CHECK:      %[[S:.*]] = "stablehlo.add"(%arg1, %[[A]])
  // CHECK-NEXT: %[[B:.*]] = mpmd.named_computation<"f"> (%arg0, %[[S]]) {call_counter = 1 : ui32}
  // CHECK:      %[[T:.*]] = "stablehlo.add"(%[[S]], %[[B]])
  // CHECK-NEXT: return %[[T]]
  %0 = mpmd.call @microbatch(%arg0, %arg1) {call_counter = 0 : ui32} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %1 = mpmd.call @microbatch(%arg0, %0) {call_counter = 1 : ui32} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}
// CHECK-NOT: func.func private @microbatch
func.func private @microbatch(%w: tensor<4xf32>, %acc: tensor<4xf32>) -> tensor<4xf32> {
  %0 = mpmd.named_computation<"f"> (%w, %acc) (%a: tensor<4xf32>, %b: tensor<4xf32>) {
    %1 = "stablehlo.multiply"(%a, %b) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %1 : tensor<4xf32>
  } : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %2 = "stablehlo.add"(%acc, %0) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %2 : tensor<4xf32>
}

// -----

// A counter already present (an inner call) is kept.

// CHECK-LABEL: func.func @nested
func.func @nested(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  // CHECK-NEXT: mpmd.named_tensor %arg0 name="t" {call_counter = 7 : ui32}
  %0 = mpmd.call @outer(%arg0) {call_counter = 3 : ui32} : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
func.func private @outer(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = mpmd.call @inner(%arg0) {call_counter = 7 : ui32} : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
func.func private @inner(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = mpmd.named_tensor %arg0 name="t" : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @recursive(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = mpmd.call @loop(%arg0) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
func.func private @loop(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{recursive mpmd.call of @loop cannot be inlined}}
  %0 = mpmd.call @loop(%arg0) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// Two calls with one call_counter running the same named computations: a
// warning naming both calls (they form one microbatch).

// CHECK-LABEL: func.func @duplicate_counter
func.func @duplicate_counter(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  // expected-note @+1 {{the earlier call with call_counter 0}}
  %0 = mpmd.call @twice(%arg0) {call_counter = 0 : ui32} : (tensor<4xf32>) -> tensor<4xf32>
  // expected-warning @+1 {{mpmd.call with call_counter 0 runs the same named computations as an earlier call with that counter: both form one microbatch; give each microbatch its own call_counter}}
  %1 = mpmd.call @twice(%0) {call_counter = 0 : ui32} : (tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}
func.func private @twice(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = mpmd.named_tensor %arg0 name="t" : tensor<4xf32>
  return %0 : tensor<4xf32>
}
