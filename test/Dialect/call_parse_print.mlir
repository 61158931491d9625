// RUN: mpmd-opt %s | FileCheck %s
// RUN: mpmd-opt %s | mpmd-opt | FileCheck %s
// RUN: mpmd-opt %s --mlir-print-op-generic | mpmd-opt | FileCheck %s

// CHECK-LABEL: func.func @main
func.func @main(%arg0: tensor<4xf32>, %arg1: tensor<2xi32>) -> tensor<4xf32>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // CHECK-NEXT: %[[C0:.*]] = mpmd.call @microbatch(%arg0) {call_counter = 0 : ui32} : (tensor<4xf32>) -> tensor<4xf32>
  // CHECK-NEXT: %[[C1:.*]] = mpmd.call @microbatch(%[[C0]]) {call_counter = 1 : ui32} : (tensor<4xf32>) -> tensor<4xf32>
  // CHECK-NEXT: %[[C2:.*]] = mpmd.call @microbatch(%[[C1]]) : (tensor<4xf32>) -> tensor<4xf32>
  %0 = mpmd.call @microbatch(%arg0) {call_counter = 0 : ui32} : (tensor<4xf32>) -> tensor<4xf32>
  %1 = mpmd.call @microbatch(%0) {call_counter = 1 : ui32} : (tensor<4xf32>) -> tensor<4xf32>
  %2 = mpmd.call @microbatch(%1) : (tensor<4xf32>) -> tensor<4xf32>
  // CHECK-NEXT: %[[M:.*]]:2 = mpmd.call @multi(%arg1, %[[C2]]) {call_counter = 2 : ui32, other = "x"} : (tensor<2xi32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<2xi32>)
  %3:2 = mpmd.call @multi(%arg1, %2) {other = "x", call_counter = 2 : ui32} : (tensor<2xi32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<2xi32>)
  // CHECK-NEXT: mpmd.call @nothing() : () -> ()
  mpmd.call @nothing() : () -> ()
  // CHECK-NEXT: return %[[M]]#0 : tensor<4xf32>
  return %3#0 : tensor<4xf32>
}

// CHECK-LABEL: func.func private @microbatch
func.func private @microbatch(%arg0: tensor<4xf32>) -> tensor<4xf32>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  return %arg0 : tensor<4xf32>
}

// CHECK-LABEL: func.func private @multi
func.func private @multi(%arg0: tensor<2xi32>, %arg1: tensor<4xf32>) -> (tensor<4xf32>, tensor<2xi32>) {
  return %arg1, %arg0 : tensor<4xf32>, tensor<2xi32>
}

// CHECK-LABEL: func.func private @nothing
func.func private @nothing() {
  return
}

// A call in an mpmd.for body, and one in a function without a topology
// (called from the entry point): both allowed.
// CHECK-LABEL: func.func public @calls_in_a_loop_and_nested
func.func public @calls_in_a_loop_and_nested(%arg0: tensor<4xf32>) -> tensor<4xf32>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // CHECK: mpmd.for
  // CHECK-NEXT: mpmd.call @outer
  %0 = mpmd.for (%arg0) {iterations = 2 : ui32} (%x: tensor<4xf32>, %i: tensor<ui32>) {
    %1 = mpmd.call @outer(%x) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %1 : tensor<4xf32>
  } : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// CHECK-LABEL: func.func private @outer
// CHECK: mpmd.call @multi
func.func private @outer(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "stablehlo.constant"() {value = dense<0> : tensor<2xi32>} : () -> tensor<2xi32>
  %1:2 = mpmd.call @multi(%0, %arg0) : (tensor<2xi32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<2xi32>)
  return %1#0 : tensor<4xf32>
}
