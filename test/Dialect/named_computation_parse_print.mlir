// RUN: mpmd-opt %s | FileCheck %s
// RUN: mpmd-opt %s | mpmd-opt | FileCheck %s
// RUN: mpmd-opt %s --mlir-print-op-generic | mpmd-opt | FileCheck %s

// Round trip of `mpmd.named_computation`: the origin is printed in its short
// form `"name"` / `"name"(k)`, a transpose count of 0 is elided, and
// discardable attributes are printed between the operands and the block
// arguments.

// CHECK-LABEL: func.func @single_operand
func.func @single_operand(%arg0: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // CHECK-NEXT: %[[NC:.*]] = mpmd.named_computation<"stage0"> (%arg0) (%[[A:arg[0-9]+]]: tensor<4x8xf32>) {
  // CHECK-NEXT:   %[[ADD:.*]] = "stablehlo.add"(%[[A]], %[[A]]) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  // CHECK-NEXT:   mpmd.return %[[ADD]] : tensor<4x8xf32>
  // CHECK-NEXT: } : (tensor<4x8xf32>) -> tensor<4x8xf32>
  // CHECK-NEXT: return %[[NC]] : tensor<4x8xf32>
  %0 = mpmd.named_computation<"stage0"> (%arg0) (%arg1: tensor<4x8xf32>) {
    %1 = "stablehlo.add"(%arg1, %arg1) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
    mpmd.return %1 : tensor<4x8xf32>
  } : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// CHECK-LABEL: func.func @transpose_count
func.func @transpose_count(%arg0: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  // CHECK-NEXT: %[[BWD:.*]] = mpmd.named_computation<"stage0"(2)> (%arg0)
  %0 = mpmd.named_computation<"stage0"(2)> (%arg0) (%arg1: tensor<4xf32>) {
    mpmd.return %arg1 : tensor<4xf32>
  } : (tensor<4xf32>) -> tensor<4xf32>
  // An explicit transpose count of 0 is the default and is not printed.
  // CHECK:      %[[FWD:.*]] = mpmd.named_computation<"stage0"> (%arg0)
  %1 = mpmd.named_computation<"stage0"(0)> (%arg0) (%arg1: tensor<4xf32>) {
    mpmd.return %arg1 : tensor<4xf32>
  } : (tensor<4xf32>) -> tensor<4xf32>
  // CHECK:      return %[[BWD]], %[[FWD]] : tensor<4xf32>, tensor<4xf32>
  return %0, %1 : tensor<4xf32>, tensor<4xf32>
}

// CHECK-LABEL: func.func @multiple_operands_and_results
func.func @multiple_operands_and_results(%arg0: tensor<4xf32>, %arg1: tensor<2x2xi32>) -> (tensor<2x2xi32>, tensor<4xf32>) {
  // CHECK-NEXT: %[[NC:.*]]:2 = mpmd.named_computation<"swap"(1)> (%arg0, %arg1) (%[[A:arg[0-9]+]]: tensor<4xf32>, %[[B:arg[0-9]+]]: tensor<2x2xi32>) {
  // CHECK-NEXT:   mpmd.return %[[B]], %[[A]] : tensor<2x2xi32>, tensor<4xf32>
  // CHECK-NEXT: } : (tensor<4xf32>, tensor<2x2xi32>) -> (tensor<2x2xi32>, tensor<4xf32>)
  // CHECK-NEXT: return %[[NC]]#0, %[[NC]]#1 : tensor<2x2xi32>, tensor<4xf32>
  %0:2 = mpmd.named_computation<"swap"(1)> (%arg0, %arg1) (%arg2: tensor<4xf32>, %arg3: tensor<2x2xi32>) {
    mpmd.return %arg3, %arg2 : tensor<2x2xi32>, tensor<4xf32>
  } : (tensor<4xf32>, tensor<2x2xi32>) -> (tensor<2x2xi32>, tensor<4xf32>)
  return %0#0, %0#1 : tensor<2x2xi32>, tensor<4xf32>
}

// CHECK-LABEL: func.func @no_operands_no_results
func.func @no_operands_no_results() {
  // CHECK-NEXT: mpmd.named_computation<"empty"> () () {
  // CHECK-NEXT:   mpmd.return
  // CHECK-NEXT: } : () -> ()
  mpmd.named_computation<"empty"> () () {
    mpmd.return
  } : () -> ()
  return
}

// CHECK-LABEL: func.func @discardable_attrs
func.func @discardable_attrs(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  // CHECK-NEXT: %{{.*}} = mpmd.named_computation<"f"> (%arg0) {call_counter = 1 : ui32, some.attr = "x"} (%{{.*}}: tensor<4xf32>) {
  %0 = mpmd.named_computation<"f"> (%arg0) {some.attr = "x", call_counter = 1 : ui32} (%arg1: tensor<4xf32>) {
    mpmd.return %arg1 : tensor<4xf32>
  } : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// Named computations nest, and may carry non-tensor values.
// CHECK-LABEL: func.func @nested
func.func @nested(%arg0: tensor<4xf32>, %arg1: !stablehlo.token) -> tensor<4xf32> {
  // CHECK-NEXT: %[[OUTER:.*]] = mpmd.named_computation<"outer"> (%arg0, %arg1) (%[[A:arg[0-9]+]]: tensor<4xf32>, %{{.*}}: !stablehlo.token) {
  // CHECK-NEXT:   %[[INNER:.*]] = mpmd.named_computation<"inner"(1)> (%[[A]]) (%[[B:arg[0-9]+]]: tensor<4xf32>) {
  // CHECK-NEXT:     mpmd.return %[[B]] : tensor<4xf32>
  // CHECK-NEXT:   } : (tensor<4xf32>) -> tensor<4xf32>
  // CHECK-NEXT:   mpmd.return %[[INNER]] : tensor<4xf32>
  // CHECK-NEXT: } : (tensor<4xf32>, !stablehlo.token) -> tensor<4xf32>
  %0 = mpmd.named_computation<"outer"> (%arg0, %arg1) (%arg2: tensor<4xf32>, %arg3: !stablehlo.token) {
    %1 = mpmd.named_computation<"inner"(1)> (%arg2) (%arg4: tensor<4xf32>) {
      mpmd.return %arg4 : tensor<4xf32>
    } : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %1 : tensor<4xf32>
  } : (tensor<4xf32>, !stablehlo.token) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
