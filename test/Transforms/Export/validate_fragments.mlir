// RUN: mpmd-opt %s -split-input-file -mpmd-validate-fragments | FileCheck %s
// RUN: mpmd-opt %s -split-input-file -verify-diagnostics \
// RUN:   -mpmd-validate-fragments='warn-on-inferred-fragments=true fail-on-reshard-only-fragments=true'
// RUN: not mpmd-opt %s -split-input-file -mpmd-validate-fragments='fail-on-inferred-fragments=true' 2>&1 \
// RUN:   | FileCheck %s --check-prefix=FAIL
// Shardy's spelling on the export pipeline: false warns, true fails.
// RUN: mpmd-opt %s -split-input-file -mpmd-export-pipeline='fail-on-inferred-fragments=false' 2>&1 \
// RUN:   | FileCheck %s --check-prefix=EXPORT

!m1 = !mpmd.mesh_tensor<"m1", tensor<4x8xf32>>

// An inferred fragment left on its own: reported only when asked, naming the
// passes that made it.

// CHECK-LABEL: func.func @inferred_fragment
// FAIL: error: inferred fragment on mesh "m1" (inferred by extract_reshards, other) was not merged into a user fragment
// EXPORT: warning: inferred fragment on mesh "m1" (inferred by extract_reshards, other) was not merged into a user fragment: it runs as a program of its own
// EXPORT-LABEL: func.func @inferred_fragment
// EXPORT: mpmd.fragment_call
func.func @inferred_fragment(%arg0: !m1) -> !m1
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // expected-warning @+1 {{inferred fragment on mesh "m1" (inferred by extract_reshards, other) was not merged into a user fragment: it runs as a program of its own; label the computation it belongs to, or merge inferred fragments (-mpmd-merge-inferred-fragments)}}
  %0 = mpmd.fragment<mesh="m1", origin=[]> (%arg0) {mpmd.inferred_by = ["extract_reshards", "other"]} (%a: tensor<4x8xf32>) {
    %1 = "stablehlo.add"(%a, %a) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
    mpmd.return %1 : tensor<4x8xf32>
  } : (!m1) -> !m1
  return %0 : !m1
}

// -----

!m1 = !mpmd.mesh_tensor<"m1", tensor<4x8xf32>>
!m1_x = !mpmd.mesh_tensor<"m1", tensor<4x8xf32>, sharding=<@mesh, [{"x"}, {?}]>>

// A user fragment that computes nothing and returns its operand sharded
// differently only reshards.

// CHECK-LABEL: func.func @reshard_only
func.func @reshard_only(%arg0: !m1) -> !m1_x
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // expected-error @+1 {{fragment on mesh "m1" only reshards: it computes nothing and returns operand #0 of type '!mpmd.mesh_tensor<"m1", tensor<4x8xf32>>' as result #0 of type '!mpmd.mesh_tensor<"m1", tensor<4x8xf32>, sharding=<@mesh, [{"x"}, {?}]>>'; this usually is an unintended reshard}}
  %0 = mpmd.fragment<mesh="m1", origin=["f"]> (%arg0) (%a: tensor<4x8xf32>) {
    mpmd.return %a : tensor<4x8xf32>
  } : (!m1) -> !m1_x
  return %0 : !m1_x
}

// -----

!m1 = !mpmd.mesh_tensor<"m1", tensor<4x8xf32>>

// Returning an operand unchanged, or computing something, is no reshard; a
// user fragment is no inferred one.

// CHECK-LABEL: func.func @nothing_to_report
func.func @nothing_to_report(%arg0: !m1) -> (!m1, !m1)
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  %0:2 = mpmd.fragment<mesh="m1", origin=["f"]> (%arg0) (%a: tensor<4x8xf32>) {
    %1 = "stablehlo.add"(%a, %a) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
    mpmd.return %a, %1 : tensor<4x8xf32>, tensor<4x8xf32>
  } : (!m1) -> (!m1, !m1)
  return %0#0, %0#1 : !m1, !m1
}
