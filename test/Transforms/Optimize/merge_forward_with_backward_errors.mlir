// RUN: mpmd-opt %s -split-input-file -mpmd-merge-forward-with-backward -verify-diagnostics

!m0 = !mpmd.mesh_tensor<"m0", tensor<4xf32>>

// The microbatch index must be a ui32 (as on mpmd.call).
func.func @bad_call_counter(%x: !m0) -> !m0
    attributes {topology = #mpmd.topology<<"m0" : <["x"=2]>>>} {
  %f = mpmd.fragment<mesh="m0", origin=["s"], stage=0> (%x) {call_counter = 0 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m0) -> !m0
  // expected-error @+1 {{fragment ["s"(1)] (stage 0) on mesh "m0": attribute `call_counter` must be a ui32 integer, got "0"}}
  %b = mpmd.fragment<mesh="m0", origin=["s"(1)], stage=0> (%f) {call_counter = "0"} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m0) -> !m0
  return %b : !m0
}
