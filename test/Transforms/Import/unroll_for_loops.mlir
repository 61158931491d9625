// RUN: mpmd-opt %s -split-input-file -mpmd-unroll-for-loops -verify-diagnostics | FileCheck %s
// A function without loops passes whatever its size (the cap is on unrolling):
// RUN: %python -c "print('func.func @no_loop(%%x: tensor<4xf32>) -> tensor<4xf32> {' + ' %%x = \"stablehlo.negate\"(%%x) : (tensor<4xf32>) -> tensor<4xf32>'.replace('%%x =', '%%y =') + ' return %%x : tensor<4xf32> }')" | mpmd-opt -mpmd-unroll-for-loops=max-unrolled-ops=1 | FileCheck %s --check-prefix=NOLOOP
// NOLOOP-LABEL: func.func @no_loop
// A function of exactly max-unrolled-ops ops once unrolled (@at_cap below: 9)
// unrolls; one op over is an error (unroll_for_loops_errors.mlir):
// RUN: sed -n '/^\/\/ AT-CAP-BEGIN/,/^\/\/ AT-CAP-END/p' %s | mpmd-opt -mpmd-unroll-for-loops=max-unrolled-ops=9 | FileCheck %s --check-prefix=ATCAP

// Two iterations: each copy gets its index constant and numbers its call.

// CHECK-LABEL: func.func @unroll
func.func @unroll(%w: tensor<4xf32>, %acc: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  // CHECK-NEXT: %[[I0:.*]] = "stablehlo.constant"() <{value = dense<0> : tensor<ui32>}> : () -> tensor<ui32>
  // CHECK-NEXT: %[[C0:.*]] = mpmd.call @body(%[[I0]], %arg0, %arg1) {call_counter = 0 : ui32}
  // CHECK-NEXT: %[[I1:.*]] = "stablehlo.constant"() <{value = dense<1> : tensor<ui32>}> : () -> tensor<ui32>
  // CHECK-NEXT: %[[C1:.*]] = mpmd.call @body(%[[I1]], %arg0, %[[C0]]) {call_counter = 1 : ui32}
  // CHECK-NEXT: return %arg0, %[[C1]]
  %0:2 = mpmd.for (%w, %acc) {iterations = 2 : ui32, unroll_factor = 2 : ui32} (%a: tensor<4xf32>, %b: tensor<4xf32>, %index: tensor<ui32>) {
    %1 = mpmd.call @body(%index, %a, %b) : (tensor<ui32>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %a, %1 : tensor<4xf32>, tensor<4xf32>
  } : tensor<4xf32>, tensor<4xf32>
  return %0#0, %0#1 : tensor<4xf32>, tensor<4xf32>
}
func.func private @body(%i: tensor<ui32>, %w: tensor<4xf32>, %acc: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "stablehlo.add"(%w, %acc) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @partial(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{only full unrolling is supported: unroll_factor 2 must equal iterations 4}}
  %0 = mpmd.for (%a) {iterations = 4 : ui32, unroll_factor = 2 : ui32} (%x: tensor<4xf32>, %index: tensor<ui32>) {
    mpmd.return %x : tensor<4xf32>
  } : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// AT-CAP-BEGIN
// Unrolled, @at_cap has 9 ops: the function, 3 x (index constant, add) and
// the return (the loop's terminator is not copied).

// ATCAP-LABEL: func.func @at_cap
// ATCAP-COUNT-3: "stablehlo.add"
// ATCAP-NOT:     mpmd.for
// ATCAP:         return
func.func @at_cap(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = mpmd.for (%a) {iterations = 3 : ui32} (%x: tensor<4xf32>, %i: tensor<ui32>) {
    %1 = "stablehlo.add"(%x, %x) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %1 : tensor<4xf32>
  } : tensor<4xf32>
  return %0 : tensor<4xf32>
}
// AT-CAP-END
