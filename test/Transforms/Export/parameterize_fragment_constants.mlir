// RUN: mpmd-opt %s -split-input-file -mpmd-parameterize-fragment-constants | FileCheck %s
// RUN: mpmd-opt %s -split-input-file -mpmd-parameterize-fragment-constants -mpmd-lower-to-fragment-calls | FileCheck %s --check-prefix=OUTLINED

!xs = !mpmd.mesh_tensor<"m0", tensor<3x4xf32>>
!x = !mpmd.mesh_tensor<"m0", tensor<1x4xf32>>

// Microbatch i of a stacked batch: the slices differ only in their row offset,
// which becomes an operand (the column offset stays a constant inside); the
// offsets are new arguments of @main, one per value, marked `mpmd.constant`.

// CHECK-LABEL: func.func @stacked
// CHECK-SAME: (%arg0: !mpmd.mesh_tensor<"m0", tensor<3x4xf32>>, %[[O0:.*]]: !mpmd.mesh_tensor<"m0", tensor<i32>> {mpmd.constant = dense<0> : tensor<i32>}, %[[O1:.*]]: !mpmd.mesh_tensor<"m0", tensor<i32>> {mpmd.constant = dense<1> : tensor<i32>}, %[[O2:.*]]: !mpmd.mesh_tensor<"m0", tensor<i32>> {mpmd.constant = dense<2> : tensor<i32>})
func.func @stacked(%xs: !xs) -> (!x, !x, !x)
    attributes {topology = #mpmd.topology<<"m0" : <["x"=1]>>>} {
  // CHECK: mpmd.fragment<mesh="m0", origin=["f"]> (%arg0, %[[O0]]) {call_counter = 0 : ui32} (%[[A:.*]]: tensor<3x4xf32>, %[[I:.*]]: tensor<i32>)
  // CHECK-NEXT: %[[C:.*]] = "stablehlo.constant"() <{value = dense<0> : tensor<i32>}>
  // CHECK-NEXT: "stablehlo.dynamic_slice"(%[[A]], %[[I]], %[[C]]) <{slice_sizes = array<i64: 1, 4>}> : (tensor<3x4xf32>, tensor<i32>, tensor<i32>) -> tensor<1x4xf32>
  // CHECK: mpmd.fragment<mesh="m0", origin=["f"]> (%arg0, %[[O1]]) {call_counter = 1 : ui32}
  // CHECK: mpmd.fragment<mesh="m0", origin=["f"]> (%arg0, %[[O2]]) {call_counter = 2 : ui32}
  %0 = mpmd.fragment<mesh="m0", origin=["f"]> (%xs) {call_counter = 0 : ui32} (%a: tensor<3x4xf32>) {
    %s = "stablehlo.slice"(%a) <{limit_indices = array<i64: 1, 4>, start_indices = array<i64: 0, 0>, strides = array<i64: 1, 1>}> : (tensor<3x4xf32>) -> tensor<1x4xf32>
    mpmd.return %s : tensor<1x4xf32>
  } : (!xs) -> !x
  %1 = mpmd.fragment<mesh="m0", origin=["f"]> (%xs) {call_counter = 1 : ui32} (%a: tensor<3x4xf32>) {
    %s = "stablehlo.slice"(%a) <{limit_indices = array<i64: 2, 4>, start_indices = array<i64: 1, 0>, strides = array<i64: 1, 1>}> : (tensor<3x4xf32>) -> tensor<1x4xf32>
    mpmd.return %s : tensor<1x4xf32>
  } : (!xs) -> !x
  %2 = mpmd.fragment<mesh="m0", origin=["f"]> (%xs) {call_counter = 2 : ui32} (%a: tensor<3x4xf32>) {
    %s = "stablehlo.slice"(%a) <{limit_indices = array<i64: 3, 4>, start_indices = array<i64: 2, 0>, strides = array<i64: 1, 1>}> : (tensor<3x4xf32>) -> tensor<1x4xf32>
    mpmd.return %s : tensor<1x4xf32>
  } : (!xs) -> !x
  return %0, %1, %2 : !x, !x, !x
}

// One function serves all three microbatches.
// OUTLINED-LABEL: func.func @stacked
// OUTLINED-COUNT-3: mpmd.fragment_call<mesh="m0", origin=["f"]> @p0_f.main
// OUTLINED-NOT: func.func @p1_f.main

// -----

!s = !mpmd.mesh_tensor<"m0", tensor<ui32>>
!v = !mpmd.mesh_tensor<"m0", tensor<4xf32>>

// An unrolled loop's index (a scalar constant) becomes an operand; equal
// values share one argument; a constant that is the same in every member
// (1.0 here) stays inside.

// CHECK-LABEL: func.func @loop_index
// CHECK-SAME: %[[K0:[^:]*]]: !mpmd.mesh_tensor<"m0", tensor<ui32>> {mpmd.constant = dense<0> : tensor<ui32>}, %[[K1:[^:]*]]: !mpmd.mesh_tensor<"m0", tensor<ui32>> {mpmd.constant = dense<1> : tensor<ui32>})
func.func @loop_index(%x: !v) -> (!v, !v, !v)
    attributes {topology = #mpmd.topology<<"m0" : <["x"=1]>>>} {
  // CHECK: mpmd.fragment<mesh="m0", origin=["g"]> (%arg0, %[[K0]])
  // CHECK: "stablehlo.constant"() <{value = dense<1.000000e+00> : tensor<f32>}>
  // CHECK: mpmd.fragment<mesh="m0", origin=["g"]> (%arg0, %[[K1]])
  // CHECK: mpmd.fragment<mesh="m0", origin=["g"]> (%arg0, %[[K0]])
  %0 = mpmd.fragment<mesh="m0", origin=["g"]> (%x) (%a: tensor<4xf32>) {
    %i = "stablehlo.constant"() <{value = dense<0> : tensor<ui32>}> : () -> tensor<ui32>
    %one = "stablehlo.constant"() <{value = dense<1.0> : tensor<f32>}> : () -> tensor<f32>
    %f = "stablehlo.convert"(%i) : (tensor<ui32>) -> tensor<f32>
    %g = "stablehlo.add"(%f, %one) : (tensor<f32>, tensor<f32>) -> tensor<f32>
    %b = "stablehlo.broadcast_in_dim"(%g) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<4xf32>
    %r = "stablehlo.add"(%a, %b) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %r : tensor<4xf32>
  } : (!v) -> !v
  %1 = mpmd.fragment<mesh="m0", origin=["g"]> (%x) (%a: tensor<4xf32>) {
    %i = "stablehlo.constant"() <{value = dense<1> : tensor<ui32>}> : () -> tensor<ui32>
    %one = "stablehlo.constant"() <{value = dense<1.0> : tensor<f32>}> : () -> tensor<f32>
    %f = "stablehlo.convert"(%i) : (tensor<ui32>) -> tensor<f32>
    %g = "stablehlo.add"(%f, %one) : (tensor<f32>, tensor<f32>) -> tensor<f32>
    %b = "stablehlo.broadcast_in_dim"(%g) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<4xf32>
    %r = "stablehlo.add"(%a, %b) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %r : tensor<4xf32>
  } : (!v) -> !v
  %2 = mpmd.fragment<mesh="m0", origin=["g"]> (%x) (%a: tensor<4xf32>) {
    %i = "stablehlo.constant"() <{value = dense<0> : tensor<ui32>}> : () -> tensor<ui32>
    %one = "stablehlo.constant"() <{value = dense<1.0> : tensor<f32>}> : () -> tensor<f32>
    %f = "stablehlo.convert"(%i) : (tensor<ui32>) -> tensor<f32>
    %g = "stablehlo.add"(%f, %one) : (tensor<f32>, tensor<f32>) -> tensor<f32>
    %b = "stablehlo.broadcast_in_dim"(%g) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<4xf32>
    %r = "stablehlo.add"(%a, %b) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %r : tensor<4xf32>
  } : (!v) -> !v
  return %0, %1, %2 : !v, !v, !v
}

// -----

!v = !mpmd.mesh_tensor<"m0", tensor<4xf32>>

// Left alone: a fragment alone in its group, fragments that differ in more
// than masked values, and 64-bit constants (their runtime type would depend
// on JAX's 64-bit mode).

// CHECK-LABEL: func.func @left_alone
// CHECK-SAME: (%arg0: !mpmd.mesh_tensor<"m0", tensor<4xf32>>) -> (
// CHECK-NOT: mpmd.constant
// CHECK: return
func.func @left_alone(%x: !v) -> (!v, !v, !v, !v)
    attributes {topology = #mpmd.topology<<"m0" : <["x"=1]>>>} {
  %0 = mpmd.fragment<mesh="m0", origin=["a"]> (%x) (%a: tensor<4xf32>) {
    %c = "stablehlo.constant"() <{value = dense<3.0> : tensor<f32>}> : () -> tensor<f32>
    %b = "stablehlo.broadcast_in_dim"(%c) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<4xf32>
    %r = "stablehlo.add"(%a, %b) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %r : tensor<4xf32>
  } : (!v) -> !v
  %1 = mpmd.fragment<mesh="m0", origin=["a"]> (%x) (%a: tensor<4xf32>) {
    %c = "stablehlo.constant"() <{value = dense<4.0> : tensor<f32>}> : () -> tensor<f32>
    %b = "stablehlo.broadcast_in_dim"(%c) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<4xf32>
    %r = "stablehlo.multiply"(%a, %b) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %r : tensor<4xf32>
  } : (!v) -> !v
  %2 = mpmd.fragment<mesh="m0", origin=["b"]> (%x) (%a: tensor<4xf32>) {
    %c = "stablehlo.constant"() <{value = dense<3.0> : tensor<f64>}> : () -> tensor<f64>
    %d = "stablehlo.convert"(%c) : (tensor<f64>) -> tensor<f32>
    %b = "stablehlo.broadcast_in_dim"(%d) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<4xf32>
    %r = "stablehlo.add"(%a, %b) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %r : tensor<4xf32>
  } : (!v) -> !v
  %3 = mpmd.fragment<mesh="m0", origin=["b"]> (%x) (%a: tensor<4xf32>) {
    %c = "stablehlo.constant"() <{value = dense<4.0> : tensor<f64>}> : () -> tensor<f64>
    %d = "stablehlo.convert"(%c) : (tensor<f64>) -> tensor<f32>
    %b = "stablehlo.broadcast_in_dim"(%d) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<4xf32>
    %r = "stablehlo.add"(%a, %b) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %r : tensor<4xf32>
  } : (!v) -> !v
  return %0, %1, %2, %3 : !v, !v, !v, !v
}

// -----

!v = !mpmd.mesh_tensor<"m0", tensor<4xf32>>
!s = !mpmd.mesh_tensor<"m0", tensor<f32>>

// The first microbatch starts its accumulators from zeros (`0 + g`) where the
// later ones add to the running sum (`acc + g`): the zeros it has in excess
// become operands, fed by new arguments that carry their value and are
// donated (the runtime passes a fresh copy), in the order of the later
// microbatches' operands. The splat every microbatch has (2.0) stays inside.

// CHECK-LABEL: func.func @accumulators_start_from_zeros
// CHECK-SAME: %[[Z:[^:]*]]: !mpmd.mesh_tensor<"m0", tensor<4xf32>> {jax.buffer_donor = true, mpmd.constant = dense<0.000000e+00> : tensor<4xf32>}
// CHECK-SAME: %[[T:[^:]*]]: !mpmd.mesh_tensor<"m0", tensor<f32>> {jax.buffer_donor = true, mpmd.constant = dense<0.000000e+00> : tensor<f32>}
func.func @accumulators_start_from_zeros(%x: !v, %l: !s) -> (!v, !s)
    attributes {topology = #mpmd.topology<<"m0" : <["x"=1]>>>} {
  // CHECK: mpmd.fragment<mesh="m0", origin=["f"(1)]> (%[[Z]], %arg0, %[[T]], %arg1) {call_counter = 0 : ui32} (%[[A:.*]]: tensor<4xf32>, %[[X:.*]]: tensor<4xf32>, %[[U:.*]]: tensor<f32>, %[[L:.*]]: tensor<f32>)
  // CHECK-NEXT: %[[C:.*]] = "stablehlo.constant"() <{value = dense<2.000000e+00> : tensor<4xf32>}>
  // CHECK-NEXT: %[[G:.*]] = "stablehlo.multiply"(%[[X]], %[[C]])
  // CHECK-NEXT: "stablehlo.add"(%[[A]], %[[G]])
  // CHECK-NEXT: "stablehlo.add"(%[[U]], %[[L]])
  %0:2 = mpmd.fragment<mesh="m0", origin=["f"(1)]> (%x, %l) {call_counter = 0 : ui32} (%a: tensor<4xf32>, %b: tensor<f32>) {
    %c = "stablehlo.constant"() <{value = dense<2.0> : tensor<4xf32>}> : () -> tensor<4xf32>
    %g = "stablehlo.multiply"(%a, %c) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %z = "stablehlo.constant"() <{value = dense<0.0> : tensor<f32>}> : () -> tensor<f32>
    %zs = "stablehlo.broadcast_in_dim"(%z) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<4xf32>
    %s = "stablehlo.add"(%zs, %g) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %t0 = "stablehlo.constant"() <{value = dense<0.0> : tensor<f32>}> : () -> tensor<f32>
    %t = "stablehlo.add"(%t0, %b) : (tensor<f32>, tensor<f32>) -> tensor<f32>
    mpmd.return %s, %t : tensor<4xf32>, tensor<f32>
  } : (!v, !s) -> (!v, !s)
  // CHECK: mpmd.fragment<mesh="m0", origin=["f"(1)]> (%{{.*}}#0, %arg0, %{{.*}}#1, %arg1) {call_counter = 1 : ui32}
  %1:2 = mpmd.fragment<mesh="m0", origin=["f"(1)]> (%0#0, %x, %0#1, %l) {call_counter = 1 : ui32} (%acc: tensor<4xf32>, %a: tensor<4xf32>, %tot: tensor<f32>, %b: tensor<f32>) {
    %c = "stablehlo.constant"() <{value = dense<2.0> : tensor<4xf32>}> : () -> tensor<4xf32>
    %g = "stablehlo.multiply"(%a, %c) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %s = "stablehlo.add"(%acc, %g) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %t = "stablehlo.add"(%tot, %b) : (tensor<f32>, tensor<f32>) -> tensor<f32>
    mpmd.return %s, %t : tensor<4xf32>, tensor<f32>
  } : (!v, !v, !s, !s) -> (!v, !s)
  %2:2 = mpmd.fragment<mesh="m0", origin=["f"(1)]> (%1#0, %x, %1#1, %l) {call_counter = 2 : ui32} (%acc: tensor<4xf32>, %a: tensor<4xf32>, %tot: tensor<f32>, %b: tensor<f32>) {
    %c = "stablehlo.constant"() <{value = dense<2.0> : tensor<4xf32>}> : () -> tensor<4xf32>
    %g = "stablehlo.multiply"(%a, %c) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %s = "stablehlo.add"(%acc, %g) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %t = "stablehlo.add"(%tot, %b) : (tensor<f32>, tensor<f32>) -> tensor<f32>
    mpmd.return %s, %t : tensor<4xf32>, tensor<f32>
  } : (!v, !v, !s, !s) -> (!v, !s)
  return %2#0, %2#1 : !v, !s
}

// One function serves all three microbatches.
// OUTLINED-LABEL: func.func @accumulators_start_from_zeros
// OUTLINED-COUNT-3: mpmd.fragment_call<mesh="m0", origin=["f"(1)]> @p0_f_bwd.main
// OUTLINED-NOT: func.func @p1_f_bwd.main

// -----

!v = !mpmd.mesh_tensor<"m0", tensor<4xf32>>

// Splats are lifted only when that makes the bodies equal: here the first
// microbatch computes something else as well, so nothing changes.

// The two microbatches keep a function each.
// OUTLINED-LABEL: func.func @no_lift_when_bodies_still_differ
// OUTLINED: func.func @p0_f_bwd.main
// OUTLINED: func.func @p1_f_bwd.main

// CHECK-LABEL: func.func @no_lift_when_bodies_still_differ
// CHECK-SAME: (%arg0: !mpmd.mesh_tensor<"m0", tensor<4xf32>>) ->
// CHECK: mpmd.fragment<mesh="m0", origin=["f"(1)]> (%arg0) {call_counter = 0 : ui32}
// CHECK: "stablehlo.broadcast_in_dim"
func.func @no_lift_when_bodies_still_differ(%x: !v) -> !v
    attributes {topology = #mpmd.topology<<"m0" : <["x"=1]>>>} {
  %0 = mpmd.fragment<mesh="m0", origin=["f"(1)]> (%x) {call_counter = 0 : ui32} (%a: tensor<4xf32>) {
    %g = "stablehlo.negate"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    %z = "stablehlo.constant"() <{value = dense<0.0> : tensor<f32>}> : () -> tensor<f32>
    %zs = "stablehlo.broadcast_in_dim"(%z) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<4xf32>
    %s = "stablehlo.add"(%zs, %g) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %e = "stablehlo.exponential"(%s) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %e : tensor<4xf32>
  } : (!v) -> !v
  %1 = mpmd.fragment<mesh="m0", origin=["f"(1)]> (%0, %x) {call_counter = 1 : ui32} (%acc: tensor<4xf32>, %a: tensor<4xf32>) {
    %g = "stablehlo.negate"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    %s = "stablehlo.add"(%acc, %g) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %s : tensor<4xf32>
  } : (!v, !v) -> !v
  return %1 : !v
}
