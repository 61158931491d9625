// RUN: mpmd-opt %s -split-input-file -verify-diagnostics -mpmd-merge-back-to-back-units="call-cost=-1"

!m0 = !mpmd.mesh_tensor<"m0", tensor<4xf32>>

// A negative cost is an error that names the figures.

// expected-error @+1 {{-mpmd-merge-back-to-back-units: call-cost (-1), kernel-cost (0) and gflops (0) must not be negative}}
func.func @negative_cost(%x: !m0) -> !m0
    attributes {topology = #mpmd.topology<<"m0" : <[]>>>} {
  %f = mpmd.fragment<mesh="m0", origin=["s"]> (%x) (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m0) -> !m0
  return %f : !m0
}
