// RUN: mpmd-opt %s -split-input-file -mpmd-pipeline-schedule='order="m0: F0 F1 B0 B1; m1: F0 B0 F1 B1"' | FileCheck %s

!m0 = !mpmd.mesh_tensor<"m0", tensor<4xf32>>
!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>

// Two stages, two microbatches, in GPipe order as JAX emits them; the
// schedule asks for 1F1B on the last mesh. Program order becomes the
// schedule; data dependencies still hold (transfers move with their users).

// CHECK-LABEL: func.func @one_f_one_b_on_last_mesh
func.func @one_f_one_b_on_last_mesh(%x0: !m0, %x1: !m0) -> (!m0, !m0)
    attributes {topology = #mpmd.topology<<"m0" : <["x"=2]>>, <"m1" : <["x"=2]>>>} {
  // CHECK:      %[[F00:.*]] = mpmd.fragment<mesh="m0", origin=["s0"]> (%arg0) {call_counter = 0 : ui32}
  // CHECK:      %[[F01:.*]] = mpmd.fragment<mesh="m0", origin=["s0"]> (%arg1) {call_counter = 1 : ui32}
  // CHECK:      %[[T0:.*]] = mpmd.transfer %[[F00]]
  // CHECK-NEXT: %[[T1:.*]] = mpmd.transfer %[[F01]]
  // CHECK-NEXT: %[[F10:.*]] = mpmd.fragment<mesh="m1", origin=["s1"]> (%[[T0]]) {call_counter = 0 : ui32}
  // CHECK:      %[[B10:.*]] = mpmd.fragment<mesh="m1", origin=["s1"(1)]> (%[[F10]]) {call_counter = 0 : ui32}
  // CHECK:      %[[F11:.*]] = mpmd.fragment<mesh="m1", origin=["s1"]> (%[[T1]]) {call_counter = 1 : ui32}
  // CHECK:      %[[B11:.*]] = mpmd.fragment<mesh="m1", origin=["s1"(1)]> (%[[F11]]) {call_counter = 1 : ui32}
  // CHECK:      mpmd.fragment<mesh="m0", origin=["s0"(1)]> ({{.*}}) {call_counter = 0 : ui32}
  // CHECK:      mpmd.fragment<mesh="m0", origin=["s0"(1)]> ({{.*}}) {call_counter = 1 : ui32}
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
