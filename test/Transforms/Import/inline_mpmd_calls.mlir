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

// -----

// Calls are inlined from the public function down: a callee reached through
// per-microbatch wrappers is copied into @main only, and the wrappers and the
// callee are erased even though the module holds ops with regions that MLIR
// does not know (`stablehlo.reduce`, which could be a symbol table). A
// private function still referenced (here by an attribute) stays.

// CHECK-LABEL: func.func @wrapped
func.func @wrapped(%arg0: tensor<4xf32>) -> (tensor<f32>, tensor<f32>) {
  // CHECK-NEXT: %[[C0:.*]] = "stablehlo.constant"()
  // CHECK-NEXT: "stablehlo.reduce"(%arg0, %[[C0]])
  // CHECK:      %[[C1:.*]] = "stablehlo.constant"()
  // CHECK-NEXT: "stablehlo.reduce"(%arg0, %[[C1]])
  // CHECK:      "test.keep"() {ref = @kept}
  %0 = mpmd.call @wrapper_0(%arg0) {call_counter = 0 : ui32} : (tensor<4xf32>) -> tensor<f32>
  %1 = mpmd.call @wrapper_1(%arg0) {call_counter = 1 : ui32} : (tensor<4xf32>) -> tensor<f32>
  "test.keep"() {ref = @kept} : () -> ()
  return %0, %1 : tensor<f32>, tensor<f32>
}
// CHECK-NOT: func.func private @wrapper
// CHECK-NOT: func.func private @body
// CHECK: func.func private @kept
// CHECK-NOT: func.func private @wrapper
// CHECK-NOT: func.func private @body
func.func private @wrapper_0(%arg0: tensor<4xf32>) -> tensor<f32> {
  %0 = mpmd.call @body(%arg0) : (tensor<4xf32>) -> tensor<f32>
  return %0 : tensor<f32>
}
func.func private @wrapper_1(%arg0: tensor<4xf32>) -> tensor<f32> {
  %0 = mpmd.call @body(%arg0) : (tensor<4xf32>) -> tensor<f32>
  return %0 : tensor<f32>
}
func.func private @body(%arg0: tensor<4xf32>) -> tensor<f32> {
  %c = "stablehlo.constant"() <{value = dense<0.0> : tensor<f32>}> : () -> tensor<f32>
  %r = "stablehlo.reduce"(%arg0, %c) <{dimensions = array<i64: 0>}> ({
  ^bb0(%x: tensor<f32>, %y: tensor<f32>):
    %s = "stablehlo.add"(%x, %y) : (tensor<f32>, tensor<f32>) -> tensor<f32>
    "stablehlo.return"(%s) : (tensor<f32>) -> ()
  }) : (tensor<4xf32>, tensor<f32>) -> tensor<f32>
  return %r : tensor<f32>
}
func.func private @kept(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  return %arg0 : tensor<4xf32>
}
