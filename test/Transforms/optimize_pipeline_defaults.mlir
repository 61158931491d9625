// RUN: mpmd-opt %s -mpmd-optimize-pipeline | FileCheck %s
// RUN: mpmd-opt %s -mpmd-optimize-pipeline=merge-forward-with-backward=false | FileCheck %s --check-prefix=APART

// The optimize pipeline's flags default as the partitioning options do (one
// table, MPMD_PARTITION_FLAGS): merge-forward-with-backward is on, as
// mpmd_merge_forward_with_backward is for mpmd.jit; false keeps the two.

!m0 = !mpmd.mesh_tensor<"m0", tensor<4xf32>>

// CHECK-LABEL: func.func @forward_then_its_backward
// CHECK:       mpmd.fragment<mesh="m0", origin=["s0", "s0"(1)]> (%arg0) {call_counter = 0 : ui32, mpmd.unit = "F0+B0"}
// CHECK-NOT:   mpmd.fragment
// APART-LABEL: func.func @forward_then_its_backward
// APART:       mpmd.fragment<mesh="m0", origin=["s0"]> (%arg0) {call_counter = 0 : ui32}
// APART:       mpmd.fragment<mesh="m0", origin=["s0"(1)]> (%0) {call_counter = 0 : ui32}
func.func @forward_then_its_backward(%x: !m0) -> !m0
    attributes {topology = #mpmd.topology<<"m0" : <["x"=2]>>>} {
  %f = mpmd.fragment<mesh="m0", origin=["s0"]> (%x) {call_counter = 0 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m0) -> !m0
  %b = mpmd.fragment<mesh="m0", origin=["s0"(1)]> (%f) {call_counter = 0 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m0) -> !m0
  return %b : !m0
}
