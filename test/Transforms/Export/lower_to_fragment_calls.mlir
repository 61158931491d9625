// RUN: mpmd-opt %s -split-input-file -mpmd-lower-to-fragment-calls | FileCheck %s

!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>
!m2 = !mpmd.mesh_tensor<"m2", tensor<4xf32>>

// Each fragment becomes a function with the mesh's shape; identical bodies on
// meshes of the same shape share one function; names say fwd/bwd.

// CHECK-LABEL: func.func @main
func.func @main(%arg0: !m1) -> !m1
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  // Calls of scheduling units carry the unit's name.
  // CHECK-NEXT: %[[A:.*]] = mpmd.fragment_call<mesh="m1", origin=["f"]> @p0_f_fwd.main(%arg0) {call_counter = 0 : ui32, mpmd.unit = "F0"} : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
  // CHECK-NEXT: %[[T:.*]] = mpmd.transfer %[[A]]
  // CHECK-NEXT: %[[B:.*]] = mpmd.fragment_call<mesh="m2", origin=["f"]> @p0_f_fwd.main(%[[T]]) {call_counter = 1 : ui32, mpmd.unit = "F1.s0"}
  // CHECK-NEXT: %[[C:.*]] = mpmd.fragment_call<mesh="m2", origin=["f"(1), "g"]> @p1_f_g_fwd_bwd.main(%[[B]])
  // CHECK-NEXT: %[[U:.*]] = mpmd.transfer %[[C]]
  // CHECK-NEXT: %[[D:.*]] = mpmd.fragment_call<mesh="m1", origin=[]> @p2_inferred.main(%[[U]], %[[A]])
  // CHECK-NEXT: return %[[D]]
  %0 = mpmd.fragment<mesh="m1", origin=["f"]> (%arg0) {call_counter = 0 : ui32} (%a: tensor<4xf32>) {
    %n = "stablehlo.negate"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %n : tensor<4xf32>
  } : (!m1) -> !m1
  %1 = mpmd.transfer %0 : (!m1) -> !m2
  %2 = mpmd.fragment<mesh="m2", origin=["f"], stage=0> (%1) {call_counter = 1 : ui32} (%a: tensor<4xf32>) {
    %n = "stablehlo.negate"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %n : tensor<4xf32>
  } : (!m2) -> !m2
  %3 = mpmd.fragment<mesh="m2", origin=["f"(1), "g"]> (%2) (%a: tensor<4xf32>) {
    %n = "stablehlo.abs"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %n : tensor<4xf32>
  } : (!m2) -> !m2
  %4 = mpmd.transfer %3 : (!m2) -> !m1
  %5 = mpmd.fragment<mesh="m1", origin=[]> (%4, %0) (%a: tensor<4xf32>, %b: tensor<4xf32>) {
    %s = "stablehlo.add"(%a, %b) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %s : tensor<4xf32>
  } : (!m1, !m1) -> !m1
  return %5 : !m1
}
// CHECK:      func.func @p0_f_fwd.main(%arg0: tensor<4xf32>) -> tensor<4xf32> attributes {mesh_shape = #sdy.mesh<["x"=2]>} {
// CHECK-NEXT:   %[[N:.*]] = "stablehlo.negate"(%arg0)
// CHECK-NEXT:   return %[[N]] : tensor<4xf32>
// CHECK:      func.func @p1_f_g_fwd_bwd.main(%arg0: tensor<4xf32>) -> tensor<4xf32> attributes {mesh_shape = #sdy.mesh<["x"=2]>}
// CHECK:      func.func @p2_inferred.main(%arg0: tensor<4xf32>, %arg1: tensor<4xf32>) -> tensor<4xf32>
// CHECK-NOT:  func.func

// -----

!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>
!m2 = !mpmd.mesh_tensor<"m2", tensor<4xf32>>

// Same body on meshes of different shapes: two functions.

// CHECK-LABEL: func.func @main
func.func @main(%arg0: !m1, %arg1: !m2) -> (!m1, !m2)
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=4]>>>} {
  // CHECK: mpmd.fragment_call<mesh="m1", origin=["f", "g"(1)]> @p0_f_g_fwd_bwd.main
  // CHECK: mpmd.fragment_call<mesh="m2", origin=["f", "g"(1)]> @p1_f_g_fwd_bwd.main
  %0 = mpmd.fragment<mesh="m1", origin=["f", "g"(1)]> (%arg0) (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m1) -> !m1
  %1 = mpmd.fragment<mesh="m2", origin=["f", "g"(1)]> (%arg1) (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m2) -> !m2
  return %0, %1 : !m1, !m2
}
// CHECK: func.func @p0_f_g_fwd_bwd.main(%arg0: tensor<4xf32>) -> tensor<4xf32> attributes {mesh_shape = #sdy.mesh<["x"=2]>}
// CHECK: func.func @p1_f_g_fwd_bwd.main(%arg0: tensor<4xf32>) -> tensor<4xf32> attributes {mesh_shape = #sdy.mesh<["x"=4]>}

// -----

!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>
!s1 = !mpmd.mesh_tensor<"m1", tensor<f32>>

// Bodies are compared whole: equal bodies with nested regions (a reduction)
// share one function; a different constant, a different op inside the
// reduction's region or operands read in another order give functions of
// their own.

// CHECK-LABEL: func.func @main
func.func @main(%arg0: !m1, %arg1: !m1) -> (!s1, !s1, !s1, !s1, !m1, !m1)
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // CHECK-NEXT: mpmd.fragment_call<mesh="m1", origin=["sum"]> @p0_sum.main(%arg0)
  // CHECK-NEXT: mpmd.fragment_call<mesh="m1", origin=["sum"]> @p0_sum.main(%arg1)
  // CHECK-NEXT: mpmd.fragment_call<mesh="m1", origin=["sum"]> @p1_sum.main(%arg0)
  // CHECK-NEXT: mpmd.fragment_call<mesh="m1", origin=["sum"]> @p2_sum.main(%arg0)
  // CHECK-NEXT: mpmd.fragment_call<mesh="m1", origin=["sub"]> @p3_sub.main(%arg0, %arg1)
  // CHECK-NEXT: mpmd.fragment_call<mesh="m1", origin=["sub"]> @p4_sub.main(%arg0, %arg1)
  %0 = mpmd.fragment<mesh="m1", origin=["sum"]> (%arg0) (%a: tensor<4xf32>) {
    %c = "stablehlo.constant"() <{value = dense<0.0> : tensor<f32>}> : () -> tensor<f32>
    %r = "stablehlo.reduce"(%a, %c) <{dimensions = array<i64: 0>}> ({
    ^bb0(%x: tensor<f32>, %y: tensor<f32>):
      %s = "stablehlo.add"(%x, %y) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%s) : (tensor<f32>) -> ()
    }) : (tensor<4xf32>, tensor<f32>) -> tensor<f32>
    mpmd.return %r : tensor<f32>
  } : (!m1) -> !s1
  %1 = mpmd.fragment<mesh="m1", origin=["sum"]> (%arg1) (%a: tensor<4xf32>) {
    %c = "stablehlo.constant"() <{value = dense<0.0> : tensor<f32>}> : () -> tensor<f32>
    %r = "stablehlo.reduce"(%a, %c) <{dimensions = array<i64: 0>}> ({
    ^bb0(%x: tensor<f32>, %y: tensor<f32>):
      %s = "stablehlo.add"(%x, %y) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%s) : (tensor<f32>) -> ()
    }) : (tensor<4xf32>, tensor<f32>) -> tensor<f32>
    mpmd.return %r : tensor<f32>
  } : (!m1) -> !s1
  %2 = mpmd.fragment<mesh="m1", origin=["sum"]> (%arg0) (%a: tensor<4xf32>) {
    %c = "stablehlo.constant"() <{value = dense<1.0> : tensor<f32>}> : () -> tensor<f32>
    %r = "stablehlo.reduce"(%a, %c) <{dimensions = array<i64: 0>}> ({
    ^bb0(%x: tensor<f32>, %y: tensor<f32>):
      %s = "stablehlo.add"(%x, %y) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%s) : (tensor<f32>) -> ()
    }) : (tensor<4xf32>, tensor<f32>) -> tensor<f32>
    mpmd.return %r : tensor<f32>
  } : (!m1) -> !s1
  %3 = mpmd.fragment<mesh="m1", origin=["sum"]> (%arg0) (%a: tensor<4xf32>) {
    %c = "stablehlo.constant"() <{value = dense<0.0> : tensor<f32>}> : () -> tensor<f32>
    %r = "stablehlo.reduce"(%a, %c) <{dimensions = array<i64: 0>}> ({
    ^bb0(%x: tensor<f32>, %y: tensor<f32>):
      %s = "stablehlo.maximum"(%x, %y) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%s) : (tensor<f32>) -> ()
    }) : (tensor<4xf32>, tensor<f32>) -> tensor<f32>
    mpmd.return %r : tensor<f32>
  } : (!m1) -> !s1
  %4 = mpmd.fragment<mesh="m1", origin=["sub"]> (%arg0, %arg1) (%a: tensor<4xf32>, %b: tensor<4xf32>) {
    %d = "stablehlo.subtract"(%a, %b) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %d : tensor<4xf32>
  } : (!m1, !m1) -> !m1
  %5 = mpmd.fragment<mesh="m1", origin=["sub"]> (%arg0, %arg1) (%a: tensor<4xf32>, %b: tensor<4xf32>) {
    %d = "stablehlo.subtract"(%b, %a) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %d : tensor<4xf32>
  } : (!m1, !m1) -> !m1
  return %0, %1, %2, %3, %4, %5 : !s1, !s1, !s1, !s1, !m1, !m1
}
// CHECK: func.func @p0_sum.main
// CHECK: func.func @p1_sum.main
// CHECK: dense<1.000000e+00>
// CHECK: func.func @p2_sum.main
// CHECK: stablehlo.maximum
// CHECK: func.func @p3_sub.main
// CHECK: func.func @p4_sub.main
// CHECK-NOT: func.func

// -----

// Donated operands alias the result computed from them elementwise, whatever
// the order of the results (gradient accumulators returned in the reverse
// order of the operands, as a backward pass produces them): XLA would pair
// them by position and copy each twice. A result computed otherwise takes a
// donated operand of its type that is no longer used when it is computed
// (the stashed activation %x, read only by the first op); a donated operand
// no result can take (the scalar %s) stays a buffer donor.

!v = !mpmd.mesh_tensor<"m1", tensor<4xf32>>
!w = !mpmd.mesh_tensor<"m1", tensor<2x4xf32>>
!s = !mpmd.mesh_tensor<"m1", tensor<f32>>

// CHECK-LABEL: func.func @accumulators
// CHECK: func.func @p0_f_bwd.main(
// CHECK-SAME: %arg0: tensor<4xf32> {tf.aliasing_output = 2 : i32}
// CHECK-SAME: %arg1: tensor<4xf32> {tf.aliasing_output = 1 : i32}
// CHECK-SAME: %arg2: tensor<2x4xf32> {tf.aliasing_output = 0 : i32}
// CHECK-SAME: %arg3: tensor<f32> {jax.buffer_donor = true}
// CHECK-SAME: %arg4: tensor<2x4xf32>)
// CHECK-SAME: -> (tensor<2x4xf32>, tensor<4xf32>, tensor<4xf32>)
func.func @accumulators(%a: !v, %acc_b: !v, %acc_w: !w, %t: !s, %g: !w) -> (!w, !v, !v)
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  %0:3 = mpmd.fragment<mesh="m1", origin=["f"(1)]> (%a, %acc_b, %acc_w, %t, %g)
      {mpmd.donated_operands = array<i64: 0, 1, 2, 3>}
      (%x: tensor<4xf32>, %ab: tensor<4xf32>, %aw: tensor<2x4xf32>, %s: tensor<f32>, %gw: tensor<2x4xf32>) {
    %gb = "stablehlo.multiply"(%x, %x) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %sw = "stablehlo.multiply"(%gw, %gw) : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
    %nw = "stablehlo.add"(%aw, %sw) : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
    %nb = "stablehlo.add"(%gb, %ab) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %dx = "stablehlo.reverse"(%gb) <{dimensions = array<i64: 0>}> : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %nw, %nb, %dx : tensor<2x4xf32>, tensor<4xf32>, tensor<4xf32>
  } : (!v, !v, !w, !s, !w) -> (!w, !v, !v)
  return %0#0, %0#1, %0#2 : !w, !v, !v
}

// -----

// A donated operand still read by an op that the only result of its type does
// not depend on (the activation %h, read by the weight gradient, while the
// activation gradient is computed from the cotangent alone) is not donated:
// XLA would pair it with that result and copy it to keep both. It is freed
// after the call instead.

!a = !mpmd.mesh_tensor<"m1", tensor<2x4xf32>>
!m = !mpmd.mesh_tensor<"m1", tensor<4x4xf32>>

// CHECK-LABEL: func.func @activation_read_after_its_result_is_written
// CHECK: func.func @p0_f_bwd.main(%arg0: tensor<2x4xf32>, %arg1: tensor<4x4xf32>, %arg2: tensor<2x4xf32>)
// CHECK-SAME: -> (tensor<4x4xf32>, tensor<2x4xf32>)
func.func @activation_read_after_its_result_is_written(%h: !a, %w: !m, %ct: !a) -> (!m, !a)
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  %0:2 = mpmd.fragment<mesh="m1", origin=["f"(1)]> (%h, %w, %ct)
      {mpmd.donated_operands = array<i64: 0>}
      (%x: tensor<2x4xf32>, %k: tensor<4x4xf32>, %c: tensor<2x4xf32>) {
    %dw = "stablehlo.dot_general"(%x, %c) <{dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [0], rhs_contracting_dimensions = [0]>}> : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<4x4xf32>
    %dx = "stablehlo.dot_general"(%c, %k) <{dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [1]>}> : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
    mpmd.return %dw, %dx : tensor<4x4xf32>, tensor<2x4xf32>
  } : (!a, !m, !a) -> (!m, !a)
  return %0#0, %0#1 : !m, !a
}

// -----

!m = !mpmd.mesh_tensor<"m", tensor<4xf32>>

// A program without a backward pass: names are the origins only, and end with
// the module's name without JAX's `jit_` prefix.

// CHECK-LABEL: module @jit_train_step
module @jit_train_step {
// CHECK-LABEL: func.func @main
func.func @main(%arg0: !m) -> (!m, !m)
    attributes {topology = #mpmd.topology<<"m" : <["x"=2]>>>} {
  // CHECK-NEXT: mpmd.fragment_call<mesh="m", origin=["layer.0"]> @p0_layer_0.train_step(%arg0)
  // CHECK-NEXT: mpmd.fragment_call<mesh="m", origin=[]> @p1_inferred.train_step(%arg0)
  %0 = mpmd.fragment<mesh="m", origin=["layer.0"]> (%arg0) (%a: tensor<4xf32>) {
    %n = "stablehlo.negate"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %n : tensor<4xf32>
  } : (!m) -> !m
  %1 = mpmd.fragment<mesh="m", origin=[]> (%arg0) (%a: tensor<4xf32>) {
    %n = "stablehlo.abs"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %n : tensor<4xf32>
  } : (!m) -> !m
  return %0, %1 : !m, !m
}
}
// CHECK: func.func @p0_layer_0.train_step(
// CHECK: func.func @p1_inferred.train_step(

// -----

!m = !mpmd.mesh_tensor<"m", tensor<4xf32>>

// A fragment's reserved_hbm_bytes goes to its function (the largest of the
// calls that share it), its arg_attrs and res_attrs to the function's
// arguments and results: fragments whose attributes differ get functions of
// their own.

// CHECK-LABEL: func.func @main
func.func @main(%arg0: !m) -> (!m, !m, !m, !m)
    attributes {topology = #mpmd.topology<<"m" : <["x"=2]>>>} {
  // CHECK-NEXT: mpmd.fragment_call<mesh="m", origin=["f"]> @p0_f.main(%arg0) {remat} :
  // CHECK-NEXT: mpmd.fragment_call<mesh="m", origin=["f"]> @p0_f.main(%arg0) :
  // CHECK-NEXT: mpmd.fragment_call<mesh="m", origin=["f"]> @p1_f.main(%arg0) :
  // CHECK-NEXT: mpmd.fragment_call<mesh="m", origin=["f"]> @p2_f.main(%arg0) :
  %0 = mpmd.fragment<mesh="m", origin=["f"]> (%arg0) {remat, reserved_hbm_bytes = 64 : i64} (%a: tensor<4xf32>) {
    %n = "stablehlo.negate"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %n : tensor<4xf32>
  } : (!m) -> !m
  %1 = mpmd.fragment<mesh="m", origin=["f"]> (%arg0) {reserved_hbm_bytes = 96 : i64} (%a: tensor<4xf32>) {
    %n = "stablehlo.negate"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %n : tensor<4xf32>
  } : (!m) -> !m
  %2 = mpmd.fragment<mesh="m", origin=["f"]> (%arg0) {arg_attrs = [{mhlo.layout_mode = "default"}]} (%a: tensor<4xf32>) {
    %n = "stablehlo.negate"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %n : tensor<4xf32>
  } : (!m) -> !m
  %3 = mpmd.fragment<mesh="m", origin=["f"]> (%arg0) {res_attrs = [{mhlo.layout_mode = "default"}]} (%a: tensor<4xf32>) {
    %n = "stablehlo.negate"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %n : tensor<4xf32>
  } : (!m) -> !m
  return %0, %1, %2, %3 : !m, !m, !m, !m
}
// CHECK: func.func @p0_f.main(%arg0: tensor<4xf32>) -> tensor<4xf32> attributes {mesh_shape = #sdy.mesh<["x"=2]>, reserved_hbm_bytes = 96 : i64}
// CHECK: func.func @p1_f.main(%arg0: tensor<4xf32> {mhlo.layout_mode = "default"}) -> tensor<4xf32> attributes {mesh_shape = #sdy.mesh<["x"=2]>} {
// CHECK: func.func @p2_f.main(%arg0: tensor<4xf32>) -> (tensor<4xf32> {mhlo.layout_mode = "default"}) attributes {mesh_shape = #sdy.mesh<["x"=2]>} {
