// RUN: not mpmd-opt %s -split-input-file -mpmd-builtin-schedule=schedule=ZeroBubbleH1 2>&1 | FileCheck %s --check-prefix=NAME
// RUN: mpmd-opt %s -split-input-file -mpmd-builtin-schedule=schedule=GPipe -verify-diagnostics

!m0 = !mpmd.mesh_tensor<"m0", tensor<4xf32>>

// A schedule that is not built in: the error names the ones that are and how
// to give any other (GPipe orders this function).
// NAME: builtin_schedule_errors.mlir:[[# @LINE + 1]]:1: error: schedule "ZeroBubbleH1" is not built into -mpmd-builtin-schedule (GPipe, 1F1B, GPipeBut1F1BForLastMesh, Circular, CircularWithReversedBackward, none): give the order of each mesh's units with -mpmd-pipeline-schedule=order="m0: F0 F1 B0 B1; ..."
func.func @not_built_in(%x: !m0) attributes {topology = #mpmd.topology<<"m0" : <["x"=2]>>>} {
  %0 = mpmd.fragment<mesh="m0", origin=["a"]> (%x) {call_counter = 0 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m0) -> !m0
  return
}

// -----

!m0 = !mpmd.mesh_tensor<"m0", tensor<4xf32>>

// The weight-gradient half of a split backward has no place in these
// schedules.
func.func @weight_gradient_unit(%x: !m0) attributes {topology = #mpmd.topology<<"m0" : <["x"=2]>>>} {
  // expected-error @+1 {{schedule "GPipe" has no place for weight-gradient units (split backward fragments): use a zero-bubble schedule through mpmd.jit, or give the order with -mpmd-pipeline-schedule}}
  %0 = mpmd.fragment<mesh="m0", origin=["a"(1)]> (%x) {call_counter = 0 : ui32, split_drop_transferred} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m0) -> !m0
  return
}
