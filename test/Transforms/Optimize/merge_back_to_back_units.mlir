// RUN: mpmd-opt %s -split-input-file -mpmd-merge-back-to-back-units="call-cost=30 kernel-cost=5 gflops=1000" | FileCheck %s
// RUN: mpmd-opt %s -split-input-file -mpmd-merge-back-to-back-units | FileCheck %s --check-prefix=OFF

!m0 = !mpmd.mesh_tensor<"m0", tensor<4xf32>>
!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>

// A GPipe forward run on m0: F0 and F1 run back to back with nothing
// arriving on m0 in between (the transfer of F0's result leaves m0). F1 is
// estimated at one kernel (5 us <= 30 us): one program, named `F0+F1`; F0's
// result leaves once it has run. With no cost given nothing merges.

// CHECK-LABEL: func.func @gpipe_forward_run
// OFF-LABEL:   func.func @gpipe_forward_run
func.func @gpipe_forward_run(%x0: !m0, %x1: !m0) -> (!m1, !m1)
    attributes {topology = #mpmd.topology<<"m0" : <["x"=2]>>, <"m1" : <["x"=2]>>>} {
  // CHECK-NEXT: %[[F:.*]]:2 = mpmd.fragment<mesh="m0", origin=["s"], stage=0> (%arg0, %arg1) {call_counter = 1 : ui32, mpmd.unit = "F0+F1"}
  // CHECK:      mpmd.transfer %[[F]]#0
  // CHECK-NEXT: mpmd.transfer %[[F]]#1
  // CHECK-NOT:  mpmd.fragment
  // OFF-COUNT-2: mpmd.fragment<mesh="m0"
  // OFF-NOT:     mpmd.unit
  %f0 = mpmd.fragment<mesh="m0", origin=["s"], stage=0> (%x0) {call_counter = 0 : ui32} (%a: tensor<4xf32>) {
    %t = "stablehlo.tanh"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %t : tensor<4xf32>
  } : (!m0) -> !m0
  %t0 = mpmd.transfer %f0 : (!m0) -> !m1
  %f1 = mpmd.fragment<mesh="m0", origin=["s"], stage=0> (%x1) {call_counter = 1 : ui32} (%a: tensor<4xf32>) {
    %t = "stablehlo.tanh"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %t : tensor<4xf32>
  } : (!m0) -> !m0
  %t1 = mpmd.transfer %f1 : (!m0) -> !m1
  return %t0, %t1 : !m1, !m1
}

// -----

!m0 = !mpmd.mesh_tensor<"m0", tensor<4xf32>>
!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>

// Something arrives on m1 between its two fragments: they stay apart.

// CHECK-LABEL: func.func @transfer_arrives_between
func.func @transfer_arrives_between(%x: !m1, %y: !m0) -> (!m1, !m1)
    attributes {topology = #mpmd.topology<<"m0" : <["x"=2]>>, <"m1" : <["x"=2]>>>} {
  // CHECK-COUNT-2: mpmd.fragment<mesh="m1"
  // CHECK-NOT:     mpmd.unit
  %f0 = mpmd.fragment<mesh="m1", origin=["s"], stage=1> (%x) {call_counter = 0 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m1) -> !m1
  %t = mpmd.transfer %y : (!m0) -> !m1
  %f1 = mpmd.fragment<mesh="m1", origin=["s"], stage=1> (%t) {call_counter = 1 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m1) -> !m1
  return %f0, %f1 : !m1, !m1
}

// -----

!m0 = !mpmd.mesh_tensor<"m0", tensor<64x64xf32>>

// Three units in a row merge into one: F1 is one kernel (5 us), B1 four dot
// products (4 x 5 us, and 4 x 2 x 64^3 flops: 2.1 us at 1000 GFLOP/s; 22.1
// us <= 30). B0 has a loop: its run time is not known, it stays apart.

// CHECK-LABEL: func.func @runs_and_loops
func.func @runs_and_loops(%x0: !m0, %x1: !m0) -> (!m0, !m0)
    attributes {topology = #mpmd.topology<<"m0" : <[]>>>} {
  // CHECK-NEXT: %[[A:.*]]:2 = mpmd.fragment<mesh="m0", origin=["s", "s"(1)], stage=0> (%arg0, %arg1) {call_counter = 1 : ui32, mpmd.unit = "F0+F1+B1"}
  // CHECK:      %[[L:.*]] = mpmd.fragment<mesh="m0", origin=["s"(1)], stage=0> (%[[A]]#0) {call_counter = 0 : ui32}
  // CHECK-NOT:  mpmd.unit
  // CHECK:      return
  %f0 = mpmd.fragment<mesh="m0", origin=["s"], stage=0> (%x0) {call_counter = 0 : ui32} (%a: tensor<64x64xf32>) {
    mpmd.return %a : tensor<64x64xf32>
  } : (!m0) -> !m0
  %f1 = mpmd.fragment<mesh="m0", origin=["s"], stage=0> (%x1) {call_counter = 1 : ui32} (%a: tensor<64x64xf32>) {
    %t = "stablehlo.tanh"(%a) : (tensor<64x64xf32>) -> tensor<64x64xf32>
    mpmd.return %t : tensor<64x64xf32>
  } : (!m0) -> !m0
  %b1 = mpmd.fragment<mesh="m0", origin=["s"(1)], stage=0> (%f1) {call_counter = 1 : ui32} (%a: tensor<64x64xf32>) {
    %d = "stablehlo.dot_general"(%a, %a) {dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [0]>} : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
    %e = "stablehlo.dot_general"(%d, %a) {dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [0]>} : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
    %f = "stablehlo.dot_general"(%e, %a) {dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [0]>} : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
    %g = "stablehlo.dot_general"(%f, %a) {dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [0]>} : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
    mpmd.return %g : tensor<64x64xf32>
  } : (!m0) -> !m0
  %b0 = mpmd.fragment<mesh="m0", origin=["s"(1)], stage=0> (%f0) {call_counter = 0 : ui32} (%a: tensor<64x64xf32>) {
    %w = "stablehlo.while"(%a) ({
    ^bb0(%c: tensor<64x64xf32>):
      %p = "stablehlo.constant"() {value = dense<true> : tensor<i1>} : () -> tensor<i1>
      "stablehlo.return"(%p) : (tensor<i1>) -> ()
    }, {
    ^bb0(%c: tensor<64x64xf32>):
      "stablehlo.return"(%c) : (tensor<64x64xf32>) -> ()
    }) : (tensor<64x64xf32>) -> tensor<64x64xf32>
    mpmd.return %w : tensor<64x64xf32>
  } : (!m0) -> !m0
  return %b1, %b0 : !m0, !m0
}

// -----

!m0 = !mpmd.mesh_tensor<"m0", tensor<512x512xf32>>

// A unit whose arithmetic alone takes longer than a call (2 * 512^3 flops:
// 268 us at 1000 GFLOP/s) stays a program of its own.

// CHECK-LABEL: func.func @large_unit_stays
func.func @large_unit_stays(%x0: !m0, %x1: !m0) -> (!m0, !m0)
    attributes {topology = #mpmd.topology<<"m0" : <[]>>>} {
  // CHECK-COUNT-2: mpmd.fragment<mesh="m0"
  // CHECK-NOT:     mpmd.unit
  %f0 = mpmd.fragment<mesh="m0", origin=["s"], stage=0> (%x0) {call_counter = 0 : ui32} (%a: tensor<512x512xf32>) {
    mpmd.return %a : tensor<512x512xf32>
  } : (!m0) -> !m0
  %f1 = mpmd.fragment<mesh="m0", origin=["s"], stage=0> (%x1) {call_counter = 1 : ui32} (%a: tensor<512x512xf32>) {
    %d = "stablehlo.dot_general"(%a, %a) {dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [0]>} : (tensor<512x512xf32>, tensor<512x512xf32>) -> tensor<512x512xf32>
    mpmd.return %d : tensor<512x512xf32>
  } : (!m0) -> !m0
  return %f0, %f1 : !m0, !m0
}
