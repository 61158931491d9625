// RUN: mpmd-opt %s | FileCheck %s
// RUN: mpmd-opt %s | mpmd-opt | FileCheck %s
// RUN: mpmd-opt %s --mlir-print-op-generic | mpmd-opt | FileCheck %s

// `mpmd.for`: the inherent `iterations` / `unroll_factor` and any discardable
// attributes are printed together in one sorted dictionary; the trailing
// block argument is always named `%index`.

// CHECK-LABEL: func.func @for_two_values
func.func @for_two_values(%arg0: tensor<4xf32>, %arg1: tensor<2x2xi32>) -> (tensor<4xf32>, tensor<2x2xi32>) {
  // CHECK-NEXT: %[[FOR:.*]]:2 = mpmd.for (%arg0, %arg1) {iterations = 3 : ui32, unroll_factor = 3 : ui32} (%[[A:arg[0-9]+]]: tensor<4xf32>, %[[B:arg[0-9]+]]: tensor<2x2xi32>, %index: tensor<ui32>) {
  // CHECK-NEXT:   %[[ADD:.*]] = "stablehlo.add"(%[[A]], %[[A]]) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  // CHECK-NEXT:   mpmd.return %[[ADD]], %[[B]] : tensor<4xf32>, tensor<2x2xi32>
  // CHECK-NEXT: } : tensor<4xf32>, tensor<2x2xi32>
  // CHECK-NEXT: return %[[FOR]]#0, %[[FOR]]#1 : tensor<4xf32>, tensor<2x2xi32>
  %0:2 = mpmd.for (%arg0, %arg1) {iterations = 3 : ui32, unroll_factor = 3 : ui32} (%arg2: tensor<4xf32>, %arg3: tensor<2x2xi32>, %index: tensor<ui32>) {
    %1 = "stablehlo.add"(%arg2, %arg2) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %1, %arg3 : tensor<4xf32>, tensor<2x2xi32>
  } : tensor<4xf32>, tensor<2x2xi32>
  return %0#0, %0#1 : tensor<4xf32>, tensor<2x2xi32>
}

// The same value may be carried twice; the index is usable in the body; the
// block argument name given in the input is not kept.
// CHECK-LABEL: func.func @for_same_value_uses_index
func.func @for_same_value_uses_index(%arg0: tensor<ui32>) -> (tensor<ui32>, tensor<ui32>) {
  // CHECK-NEXT: %[[FOR:.*]]:2 = mpmd.for (%arg0, %arg0) {iterations = 4 : ui32} (%[[A:arg[0-9]+]]: tensor<ui32>, %[[B:arg[0-9]+]]: tensor<ui32>, %index: tensor<ui32>) {
  // CHECK-NEXT:   mpmd.return %index, %[[B]] : tensor<ui32>, tensor<ui32>
  // CHECK-NEXT: } : tensor<ui32>, tensor<ui32>
  %0:2 = mpmd.for (%arg0, %arg0) {iterations = 4 : ui32} (%a: tensor<ui32>, %b: tensor<ui32>, %i: tensor<ui32>) {
    mpmd.return %i, %b : tensor<ui32>, tensor<ui32>
  } : tensor<ui32>, tensor<ui32>
  return %0#0, %0#1 : tensor<ui32>, tensor<ui32>
}

// CHECK-LABEL: func.func @for_discardable_attrs
func.func @for_discardable_attrs(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  // CHECK-NEXT: %{{.*}} = mpmd.for (%arg0) {a.attr, iterations = 6 : ui32, unroll_factor = 2 : ui32, z.attr = "z"} (%{{.*}}: tensor<4xf32>, %index: tensor<ui32>) {
  %0 = mpmd.for (%arg0) {z.attr = "z", unroll_factor = 2 : ui32, a.attr, iterations = 6 : ui32} (%arg1: tensor<4xf32>, %index: tensor<ui32>) {
    mpmd.return %arg1 : tensor<4xf32>
  } : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// Nested loops each get their own `%index`.
// CHECK-LABEL: func.func @nested_for
func.func @nested_for(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  // CHECK-NEXT: %[[OUTER:.*]] = mpmd.for (%arg0) {iterations = 2 : ui32} (%[[A:arg[0-9]+]]: tensor<4xf32>, %index: tensor<ui32>) {
  // CHECK-NEXT:   %[[INNER:.*]] = mpmd.for (%[[A]]) {iterations = 5 : ui32} (%[[B:arg[0-9]+]]: tensor<4xf32>, %[[IDX:index_[0-9]+]]: tensor<ui32>) {
  // CHECK-NEXT:     mpmd.return %[[B]] : tensor<4xf32>
  // CHECK-NEXT:   } : tensor<4xf32>
  // CHECK-NEXT:   mpmd.return %[[INNER]] : tensor<4xf32>
  // CHECK-NEXT: } : tensor<4xf32>
  %0 = mpmd.for (%arg0) {iterations = 2 : ui32} (%arg1: tensor<4xf32>, %index: tensor<ui32>) {
    %1 = mpmd.for (%arg1) {iterations = 5 : ui32} (%arg2: tensor<4xf32>, %index2: tensor<ui32>) {
      mpmd.return %arg2 : tensor<4xf32>
    } : tensor<4xf32>
    mpmd.return %1 : tensor<4xf32>
  } : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// Loops over mesh tensors, with calls in the body (the usual form of a
// microbatched MPMD program).
// CHECK-LABEL: func.func @for_mesh_tensors_with_call
func.func @for_mesh_tensors_with_call(%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // CHECK-NEXT: %[[FOR:.*]] = mpmd.for (%arg0) {iterations = 2 : ui32, unroll_factor = 1 : ui32} (%[[A:arg[0-9]+]]: !mpmd.mesh_tensor<"m1", tensor<4xf32>>, %index: tensor<ui32>) {
  // CHECK-NEXT:   %[[C:.*]] = mpmd.call @body(%[[A]], %index) : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>, tensor<ui32>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
  // CHECK-NEXT:   mpmd.return %[[C]] : !mpmd.mesh_tensor<"m1", tensor<4xf32>>
  // CHECK-NEXT: } : !mpmd.mesh_tensor<"m1", tensor<4xf32>>
  %0 = mpmd.for (%arg0) {iterations = 2 : ui32, unroll_factor = 1 : ui32} (%arg1: !mpmd.mesh_tensor<"m1", tensor<4xf32>>, %index: tensor<ui32>) {
    %1 = mpmd.call @body(%arg1, %index) : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>, tensor<ui32>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
    mpmd.return %1 : !mpmd.mesh_tensor<"m1", tensor<4xf32>>
  } : !mpmd.mesh_tensor<"m1", tensor<4xf32>>
  return %0 : !mpmd.mesh_tensor<"m1", tensor<4xf32>>
}

func.func private @body(%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>>, %arg1: tensor<ui32>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  return %arg0 : !mpmd.mesh_tensor<"m1", tensor<4xf32>>
}
