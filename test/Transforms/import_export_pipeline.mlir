// RUN: mpmd-opt %s -mpmd-import-pipeline='assignment=stage0@m0,stage1@m1' -mpmd-export-pipeline | FileCheck %s

// A two-stage training step as JAX lowers it: forward and backward of each
// stage are named computations (transpose count 0 and 1); the loss seed and
// the SGD updates are unlabelled. After import and export: four fragment
// calls, one transfer per labelled boundary crossing, updates on the mesh of
// their parameter, and no other transfer.

// CHECK-LABEL: func.func @main
// CHECK-SAME: (%arg0: !mpmd.mesh_tensor<"m0", tensor<4x4xf32>>, %arg1: !mpmd.mesh_tensor<"m1", tensor<4x4xf32>>, %arg2: !mpmd.mesh_tensor<"m0", tensor<2x4xf32>>)
// CHECK-SAME: -> (!mpmd.mesh_tensor<"m1", tensor<f32>>, !mpmd.mesh_tensor<"m0", tensor<4x4xf32>>, !mpmd.mesh_tensor<"m1", tensor<4x4xf32>>)
// stage0 returns its activation twice (to stage1 and, as a residual, to its
// backward): one result, read by both.
// CHECK-NEXT: %[[F0:.*]] = mpmd.fragment_call<mesh="m0", origin=["stage0"]> @p0_stage0_fwd.main(%arg0, %arg2) {{.*}} -> !mpmd.mesh_tensor<"m0", tensor<2x4xf32>>
// CHECK-NEXT: %[[T0:.*]] = mpmd.transfer %[[F0]] : (!mpmd.mesh_tensor<"m0", tensor<2x4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<2x4xf32>>
// The loss is computed in stage1's forward, which only returns it.
// CHECK-NEXT: %[[F1:.*]] = mpmd.fragment_call<mesh="m1", origin=["stage1"]> @p1_stage1_fwd.main(%arg1, %[[T0]]) {{.*}} -> !mpmd.mesh_tensor<"m1", tensor<f32>>
// The seed constant was merged into stage1's backward.
// CHECK-NEXT: %[[B1:.*]]:2 = mpmd.fragment_call<mesh="m1", origin=["stage1"(1)]> @p2_stage1_bwd.main(%arg1, %[[T0]])
// CHECK-NEXT: %[[T1:.*]] = mpmd.transfer {mpmd.donate} %[[B1]]#0 : (!mpmd.mesh_tensor<"m1", tensor<2x4xf32>>) -> !mpmd.mesh_tensor<"m0", tensor<2x4xf32>>
// CHECK-NEXT: %[[B0:.*]] = mpmd.fragment_call<mesh="m0", origin=["stage0"(1)]> @p3_stage0_bwd.main(%[[T1]], %arg2, %[[F0]], %arg0)
// CHECK-NEXT: return %[[F1]], %[[B0]], %[[B1]]#1
// CHECK-NOT: mpmd.transfer
// Each function reserves the bytes other arrays hold on its mesh while it
// runs (per device): only stage1's backward, during which the loss (a scalar
// the step returns) is kept.
// CHECK: func.func @p0_stage0_fwd.main(%arg0: tensor<4x4xf32>, %arg1: tensor<2x4xf32>) -> tensor<2x4xf32> attributes {mesh_shape = #sdy.mesh<["x"=2]>, reserved_hbm_bytes = 0 : i64}
// CHECK: func.func @p1_stage1_fwd.main
// The loss reduction was merged into the last forward stage.
// CHECK: "stablehlo.reduce"
// Values at their last use are donated to the fragment that reads them (and
// name the result that reuses their buffer where one can), but not where
// the only result of their type is written while they are still read: the
// activation gradient does not depend on the weight gradient that reads the
// activation, and XLA would copy the activation to keep both.
// CHECK: func.func @p2_stage1_bwd.main(%arg0: tensor<4x4xf32>, %arg1: tensor<2x4xf32>) {{.*}}reserved_hbm_bytes = 4 : i64
// CHECK: "stablehlo.constant"() <{value = dense<1.000000e+00> : tensor<2x4xf32>}>
// The update of stage1's weight was merged into stage1's backward.
// CHECK: "stablehlo.subtract"
// CHECK: func.func @p3_stage0_bwd.main(%arg0: tensor<2x4xf32> {jax.buffer_donor = true}, %arg1: tensor<2x4xf32>, %arg2: tensor<2x4xf32> {jax.buffer_donor = true}, %arg3: tensor<4x4xf32>)
// CHECK: "stablehlo.subtract"
"builtin.module"() ({
  "func.func"() <{function_type = (tensor<4x4xf32>, tensor<4x4xf32>, tensor<2x4xf32>) -> (tensor<f32>, tensor<4x4xf32>, tensor<4x4xf32>), sym_name = "main"}> ({
  ^bb0(%w0: tensor<4x4xf32>, %w1: tensor<4x4xf32>, %x: tensor<2x4xf32>):
    %h:2 = "mpmd.named_computation"(%w0, %x) <{origin = #mpmd.user_origin<"stage0">}> ({
    ^bb0(%a: tensor<4x4xf32>, %b: tensor<2x4xf32>):
      %0 = "stablehlo.dot_general"(%b, %a) <{dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [0]>}> : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
      %1 = "stablehlo.tanh"(%0) : (tensor<2x4xf32>) -> tensor<2x4xf32>
      "mpmd.return"(%1, %1) : (tensor<2x4xf32>, tensor<2x4xf32>) -> ()
    }) : (tensor<4x4xf32>, tensor<2x4xf32>) -> (tensor<2x4xf32>, tensor<2x4xf32>)
    %o = "mpmd.named_computation"(%w1, %h#0) <{origin = #mpmd.user_origin<"stage1">}> ({
    ^bb0(%a: tensor<4x4xf32>, %b: tensor<2x4xf32>):
      %0 = "stablehlo.dot_general"(%b, %a) <{dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [0]>}> : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
      "mpmd.return"(%0) : (tensor<2x4xf32>) -> ()
    }) : (tensor<4x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
    %zero = "stablehlo.constant"() <{value = dense<0.0> : tensor<f32>}> : () -> tensor<f32>
    %loss = "stablehlo.reduce"(%o, %zero) <{dimensions = array<i64: 0, 1>}> ({
    ^bb0(%p: tensor<f32>, %q: tensor<f32>):
      %s = "stablehlo.add"(%p, %q) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%s) : (tensor<f32>) -> ()
    }) : (tensor<2x4xf32>, tensor<f32>) -> tensor<f32>
    %seed = "stablehlo.constant"() <{value = dense<1.0> : tensor<2x4xf32>}> : () -> tensor<2x4xf32>
    %g1:2 = "mpmd.named_computation"(%seed, %w1, %h#0) <{origin = #mpmd.user_origin<"stage1"(1)>}> ({
    ^bb0(%ct: tensor<2x4xf32>, %a: tensor<4x4xf32>, %b: tensor<2x4xf32>):
      %0 = "stablehlo.dot_general"(%b, %ct) <{dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [0], rhs_contracting_dimensions = [0]>}> : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<4x4xf32>
      %1 = "stablehlo.dot_general"(%ct, %a) <{dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [1]>}> : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
      "mpmd.return"(%0, %1) : (tensor<4x4xf32>, tensor<2x4xf32>) -> ()
    }) : (tensor<2x4xf32>, tensor<4x4xf32>, tensor<2x4xf32>) -> (tensor<4x4xf32>, tensor<2x4xf32>)
    %g0 = "mpmd.named_computation"(%g1#1, %x, %h#1) <{origin = #mpmd.user_origin<"stage0"(1)>}> ({
    ^bb0(%ct: tensor<2x4xf32>, %b: tensor<2x4xf32>, %t: tensor<2x4xf32>):
      %0 = "stablehlo.multiply"(%ct, %t) : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
      %1 = "stablehlo.dot_general"(%b, %0) <{dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [0], rhs_contracting_dimensions = [0]>}> : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<4x4xf32>
      "mpmd.return"(%1) : (tensor<4x4xf32>) -> ()
    }) : (tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<4x4xf32>
    %nw0 = "stablehlo.subtract"(%w0, %g0) : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
    %nw1 = "stablehlo.subtract"(%w1, %g1#0) : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
    "func.return"(%loss, %nw0, %nw1) : (tensor<f32>, tensor<4x4xf32>, tensor<4x4xf32>) -> ()
  }) {topology = #mpmd.topology<<"m0" : <["x"=2]>>, <"m1" : <["x"=2]>>>} : () -> ()
}) : () -> ()
