// RUN: mpmd-opt %s | FileCheck %s
// RUN: mpmd-opt %s | mpmd-opt | FileCheck %s
// RUN: mpmd-opt %s --mlir-print-op-generic | mpmd-opt | FileCheck %s

!m1_t = !mpmd.mesh_tensor<"m1", tensor<4x8xf32>>
!m2_t = !mpmd.mesh_tensor<"m2", tensor<4x8xf32>>

// CHECK-LABEL: func.func @stage_origin_and_call_counter
func.func @stage_origin_and_call_counter(%arg0: !m2_t) -> !m2_t
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  // CHECK-NEXT: %[[F:.*]] = mpmd.fragment<mesh="m2", origin=["f"(1), "g"], stage=3> (%arg0) {call_counter = 0 : ui32} (%[[A:arg[0-9]+]]: tensor<4x8xf32>) {
  // CHECK-NEXT:   %[[ADD:.*]] = "stablehlo.add"(%[[A]], %[[A]]) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  // CHECK-NEXT:   mpmd.return %[[ADD]] : tensor<4x8xf32>
  // CHECK-NEXT: } : (!mpmd.mesh_tensor<"m2", tensor<4x8xf32>>) -> !mpmd.mesh_tensor<"m2", tensor<4x8xf32>>
  // CHECK-NEXT: return %[[F]] : !mpmd.mesh_tensor<"m2", tensor<4x8xf32>>
  %0 = mpmd.fragment<mesh="m2", origin=["f"(1), "g"], stage=3> (%arg0) {call_counter = 0 : ui32} (%arg1: tensor<4x8xf32>) {
    %1 = "stablehlo.add"(%arg1, %arg1) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
    mpmd.return %1 : tensor<4x8xf32>
  } : (!m2_t) -> !m2_t
  return %0 : !m2_t
}

// An empty origin marks an inferred fragment; a transpose count of 0 and a
// stage of 0 print as written.
// CHECK-LABEL: func.func @empty_origin_and_stage_zero
func.func @empty_origin_and_stage_zero(%arg0: !m1_t) -> (!m1_t, !m1_t)
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // CHECK-NEXT: %[[F0:.*]] = mpmd.fragment<mesh="m1", origin=[]> (%arg0) {mpmd.inferred_by = "pass"} (%{{.*}}: tensor<4x8xf32>) {
  %0 = mpmd.fragment<mesh="m1", origin=[]> (%arg0) {mpmd.inferred_by = "pass"} (%arg1: tensor<4x8xf32>) {
    mpmd.return %arg1 : tensor<4x8xf32>
  } : (!m1_t) -> !m1_t
  // CHECK:      %[[F1:.*]] = mpmd.fragment<mesh="m1", origin=["a", "b"(3)], stage=0> (%[[F0]]) (%{{.*}}: tensor<4x8xf32>) {
  %1 = mpmd.fragment<mesh="m1", origin=["a"(0), "b"(3)], stage=0> (%0) (%arg1: tensor<4x8xf32>) {
    mpmd.return %arg1 : tensor<4x8xf32>
  } : (!m1_t) -> !m1_t
  // CHECK:      return %[[F0]], %[[F1]]
  return %0, %1 : !m1_t, !m1_t
}

// Operands and results are mesh tensors (possibly sharded); block arguments
// and returned values are the global tensor types; non-tensor values pass
// through unchanged.
// CHECK-LABEL: func.func @sharded_multi_operand
func.func @sharded_multi_operand(
    %arg0: !mpmd.mesh_tensor<"m1", tensor<4x8xf32>, sharding=<@mesh, [{"x"}, {?}]>>,
    %arg1: !mpmd.mesh_tensor<"m1", tensor<16xi32>, memory_kind="device">,
    %arg2: !stablehlo.token)
    -> (!mpmd.mesh_tensor<"m1", tensor<16xi32>>, !mpmd.mesh_tensor<"m1", tensor<4x8xf32>, sharding=<@mesh, [{}, {"y"}]>>, !stablehlo.token)
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2, "y"=4]>>>} {
  // CHECK-NEXT: %[[F:.*]]:3 = mpmd.fragment<mesh="m1", origin=["f"]> (%arg0, %arg1, %arg2) (%[[A:arg[0-9]+]]: tensor<4x8xf32>, %[[B:arg[0-9]+]]: tensor<16xi32>, %[[C:arg[0-9]+]]: !stablehlo.token) {
  // CHECK-NEXT:   mpmd.return %[[B]], %[[A]], %[[C]] : tensor<16xi32>, tensor<4x8xf32>, !stablehlo.token
  // CHECK-NEXT: } : (!mpmd.mesh_tensor<"m1", tensor<4x8xf32>, sharding=<@mesh, [{"x"}, {?}]>>, !mpmd.mesh_tensor<"m1", tensor<16xi32>, memory_kind="device">, !stablehlo.token) -> (!mpmd.mesh_tensor<"m1", tensor<16xi32>>, !mpmd.mesh_tensor<"m1", tensor<4x8xf32>, sharding=<@mesh, [{}, {"y"}]>>, !stablehlo.token)
  // CHECK-NEXT: return %[[F]]#0, %[[F]]#1, %[[F]]#2
  %0:3 = mpmd.fragment<mesh="m1", origin=["f"]> (%arg0, %arg1, %arg2) (%arg3: tensor<4x8xf32>, %arg4: tensor<16xi32>, %arg5: !stablehlo.token) {
    mpmd.return %arg4, %arg3, %arg5 : tensor<16xi32>, tensor<4x8xf32>, !stablehlo.token
  } : (!mpmd.mesh_tensor<"m1", tensor<4x8xf32>, sharding=<@mesh, [{"x"}, {?}]>>, !mpmd.mesh_tensor<"m1", tensor<16xi32>, memory_kind="device">, !stablehlo.token)
    -> (!mpmd.mesh_tensor<"m1", tensor<16xi32>>, !mpmd.mesh_tensor<"m1", tensor<4x8xf32>, sharding=<@mesh, [{}, {"y"}]>>, !stablehlo.token)
  return %0#0, %0#1, %0#2 : !mpmd.mesh_tensor<"m1", tensor<16xi32>>, !mpmd.mesh_tensor<"m1", tensor<4x8xf32>, sharding=<@mesh, [{}, {"y"}]>>, !stablehlo.token
}

// CHECK-LABEL: func.func @no_operands_no_results
func.func @no_operands_no_results() attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // CHECK-NEXT: mpmd.fragment<mesh="m1", origin=["f"]> () () {
  // CHECK-NEXT:   mpmd.return
  // CHECK-NEXT: } : () -> ()
  mpmd.fragment<mesh="m1", origin=["f"]> () () {
    mpmd.return
  } : () -> ()
  return
}

// `in_shardings` / `out_shardings` are Shardy's sharding-per-value, printed in
// their stripped list form after `stage`.
// CHECK-LABEL: func.func @shardings
func.func @shardings(%arg0: !m1_t, %arg1: !m1_t) -> !m1_t
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2, "y"=4]>>>} {
  // CHECK-NEXT: %[[F0:.*]] = mpmd.fragment<mesh="m1", origin=["f1"], stage=123, in_shardings=[<@mesh, [{"x"}, {?}]>, <@mesh, [{}, {}]>], out_shardings=[<@mesh, [{"x"}, {?}]>]> (%arg0, %arg1) (%{{.*}}: tensor<4x8xf32>, %{{.*}}: tensor<4x8xf32>) {
  %0 = mpmd.fragment<mesh="m1", origin=["f1"], stage=123, in_shardings=[<@mesh, [{"x"}, {?}]>, <@mesh, [{}, {}]>], out_shardings=[<@mesh, [{"x"}, {?}]>]> (%arg0, %arg1) (%arg2: tensor<4x8xf32>, %arg3: tensor<4x8xf32>) {
    mpmd.return %arg2 : tensor<4x8xf32>
  } : (!m1_t, !m1_t) -> !m1_t
  // Only in_shardings, no stage.
  // CHECK:      %[[F1:.*]] = mpmd.fragment<mesh="m1", origin=["f1"], in_shardings=[<@mesh, [{"x", "y"}, {?}]>]> (%[[F0]])
  %1 = mpmd.fragment<mesh="m1", origin=["f1"], in_shardings=[<@mesh, [{"x", "y"}, {?}]>]> (%0) (%arg2: tensor<4x8xf32>) {
    mpmd.return %arg2 : tensor<4x8xf32>
  } : (!m1_t) -> !m1_t
  // Only out_shardings, with sub-axes, priorities, open dimensions and
  // replicated / unreduced axes.
  // CHECK:      %[[F2:.*]] = mpmd.fragment<mesh="m1", origin=["f1"], out_shardings=[<@mesh, [{"y":(1)2, ?}p0, {"x"}p1], replicated={"y":(2)2}, unreduced={"x"}>]> (%[[F1]])
  %2 = mpmd.fragment<mesh="m1", origin=["f1"], out_shardings=[<@mesh, [{"y":(1)2, ?}p0, {"x"}p1], replicated={"y":(2)2}, unreduced={"x"}>]> (%1) (%arg2: tensor<4x8xf32>) {
    mpmd.return %arg2 : tensor<4x8xf32>
  } : (!m1_t) -> !m1_t
  // The keywords may come in any order; they print in canonical order.
  // CHECK:      %[[F3:.*]] = mpmd.fragment<mesh="m1", origin=["f1"], stage=1, in_shardings=[<@mesh, [{}, {"y"}]>], out_shardings=[<@mesh, [{"x"}, {}]>]> (%[[F2]])
  %3 = mpmd.fragment<mesh="m1", origin=["f1"], out_shardings=[<@mesh, [{"x"}, {}]>], in_shardings=[<@mesh, [{}, {"y"}]>], stage=1> (%2) (%arg2: tensor<4x8xf32>) {
    mpmd.return %arg2 : tensor<4x8xf32>
  } : (!m1_t) -> !m1_t
  // The full Shardy attribute is accepted too and prints stripped.
  // CHECK:      %[[F4:.*]] = mpmd.fragment<mesh="m1", origin=["f1"], in_shardings=[<@mesh, [{"x"}, {?}]>]> (%[[F3]])
  %4 = mpmd.fragment<mesh="m1", origin=["f1"], in_shardings=#sdy.sharding_per_value<[<@mesh, [{"x"}, {?}]>]>> (%3) (%arg2: tensor<4x8xf32>) {
    mpmd.return %arg2 : tensor<4x8xf32>
  } : (!m1_t) -> !m1_t
  // Empty lists, for a fragment without operands or results.
  // CHECK:      mpmd.fragment<mesh="m1", origin=[], in_shardings=[], out_shardings=[]> () () {
  mpmd.fragment<mesh="m1", origin=[], in_shardings=[], out_shardings=[]> () () {
    mpmd.return
  } : () -> ()
  // CHECK:      return %[[F4]]
  return %4 : !m1_t
}

// Fragments are isolated from above and may nest other ops, including
// unregistered ones with regions.
// CHECK-LABEL: func.func @body_with_regions
func.func @body_with_regions(%arg0: !m1_t) -> !m1_t
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // CHECK-NEXT: %[[F:.*]] = mpmd.fragment<mesh="m1", origin=["f"]> (%arg0) (%[[A:arg[0-9]+]]: tensor<4x8xf32>) {
  // CHECK-NEXT:   %[[R:.*]] = "stablehlo.custom_call"(%[[A]]) ({
  // CHECK-NEXT:     "stablehlo.return"(%[[A]]) : (tensor<4x8xf32>) -> ()
  // CHECK-NEXT:   }) {call_target_name = "foo"} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  // CHECK-NEXT:   mpmd.return %[[R]] : tensor<4x8xf32>
  // CHECK-NEXT: } : (!mpmd.mesh_tensor<"m1", tensor<4x8xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4x8xf32>>
  %0 = mpmd.fragment<mesh="m1", origin=["f"]> (%arg0) (%arg1: tensor<4x8xf32>) {
    %1 = "stablehlo.custom_call"(%arg1) ({
      "stablehlo.return"(%arg1) : (tensor<4x8xf32>) -> ()
    }) {call_target_name = "foo"} : (tensor<4x8xf32>) -> tensor<4x8xf32>
    mpmd.return %1 : tensor<4x8xf32>
  } : (!m1_t) -> !m1_t
  return %0 : !m1_t
}
