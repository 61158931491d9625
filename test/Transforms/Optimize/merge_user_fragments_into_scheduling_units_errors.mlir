// RUN: mpmd-opt %s -split-input-file -mpmd-merge-user-fragments-into-scheduling-units -verify-diagnostics

!m0 = !mpmd.mesh_tensor<"m0", tensor<4xf32>>

// The microbatch index must be a ui32 (as on mpmd.call): units are told
// apart by it.
func.func @bad_call_counter(%x: !m0) -> !m0
    attributes {topology = #mpmd.topology<<"m0" : <["x"=1]>>>} {
  %f = mpmd.fragment<mesh="m0", origin=["b0"]> (%x) {call_counter = 0 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m0) -> !m0
  // expected-error @+1 {{fragment ["b1"] on mesh "m0": attribute `call_counter` must be a ui32 integer, got -1 : i64}}
  %g = mpmd.fragment<mesh="m0", origin=["b1"]> (%f) {call_counter = -1} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m0) -> !m0
  return %g : !m0
}
