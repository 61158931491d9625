// RUN: mpmd-opt %s -mpmd-optimize-pipeline='schedule="m0: F0 F1 B0 B1; m1: F0 B0 F1 B1" merge-rules="m1: F0 B0; m1: F1 B1"' | FileCheck %s
// RUN: mpmd-opt %s -mpmd-optimize-pipeline | FileCheck %s --check-prefix=NONE

// The optimize pipeline as `mpmd-opt` runs it to replay a scheduled compile:
// the schedule orders the units (1F1B on the last mesh), then the merge rules
// fuse the last stage's forward and backward of each microbatch.

!m0 = !mpmd.mesh_tensor<"m0", tensor<4xf32>>
!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>

// CHECK-LABEL: func.func @one_f_one_b_then_merge
// CHECK:      mpmd.fragment<mesh="m0", origin=["s0"]> (%arg0) {call_counter = 0 : ui32}
// CHECK:      mpmd.fragment<mesh="m0", origin=["s0"]> (%arg1) {call_counter = 1 : ui32}
// CHECK:      mpmd.fragment<mesh="m1", origin=["s1", "s1"(1)]> ({{.*}}) {call_counter = 0 : ui32}
// CHECK:      mpmd.fragment<mesh="m1", origin=["s1", "s1"(1)]> ({{.*}}) {call_counter = 1 : ui32}
// CHECK:      mpmd.fragment<mesh="m0", origin=["s0"(1)]> ({{.*}}) {call_counter = 0 : ui32}
// CHECK:      mpmd.fragment<mesh="m0", origin=["s0"(1)]> ({{.*}}) {call_counter = 1 : ui32}
// Without options the pipeline changes nothing.
// NONE-LABEL: func.func @one_f_one_b_then_merge
// NONE:       mpmd.fragment<mesh="m1", origin=["s1"]> ({{.*}}) {call_counter = 0 : ui32}
// NONE:       mpmd.fragment<mesh="m1", origin=["s1"]> ({{.*}}) {call_counter = 1 : ui32}
// NONE:       mpmd.fragment<mesh="m1", origin=["s1"(1)]> ({{.*}}) {call_counter = 0 : ui32}
func.func @one_f_one_b_then_merge(%x0: !m0, %x1: !m0) -> (!m0, !m0)
    attributes {topology = #mpmd.topology<<"m0" : <["x"=2]>>, <"m1" : <["x"=2]>>>} {
  %f00 = mpmd.fragment<mesh="m0", origin=["s0"]> (%x0) {call_counter = 0 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m0) -> !m0
  %f01 = mpmd.fragment<mesh="m0", origin=["s0"]> (%x1) {call_counter = 1 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m0) -> !m0
  %t0 = mpmd.transfer %f00 : (!m0) -> !m1
  %t1 = mpmd.transfer %f01 : (!m0) -> !m1
  %f10 = mpmd.fragment<mesh="m1", origin=["s1"]> (%t0) {call_counter = 0 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m1) -> !m1
  %f11 = mpmd.fragment<mesh="m1", origin=["s1"]> (%t1) {call_counter = 1 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m1) -> !m1
  %b10 = mpmd.fragment<mesh="m1", origin=["s1"(1)]> (%f10) {call_counter = 0 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m1) -> !m1
  %b11 = mpmd.fragment<mesh="m1", origin=["s1"(1)]> (%f11) {call_counter = 1 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m1) -> !m1
  %u0 = mpmd.transfer %b10 : (!m1) -> !m0
  %u1 = mpmd.transfer %b11 : (!m1) -> !m0
  %b00 = mpmd.fragment<mesh="m0", origin=["s0"(1)]> (%u0) {call_counter = 0 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m0) -> !m0
  %b01 = mpmd.fragment<mesh="m0", origin=["s0"(1)]> (%u1) {call_counter = 1 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m0) -> !m0
  return %b00, %b01 : !m0, !m0
}
