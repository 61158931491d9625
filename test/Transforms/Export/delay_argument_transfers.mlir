// RUN: mpmd-opt %s -split-input-file -mpmd-delay-argument-transfers | FileCheck %s

!m0 = !mpmd.mesh_tensor<"m0", tensor<4xf32>>
!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>
!m2 = !mpmd.mesh_tensor<"m2", tensor<4xf32>>
!c0 = !mpmd.mesh_tensor<"m0", tensor<i32>>
!c1 = !mpmd.mesh_tensor<"m1", tensor<i32>>
!c2 = !mpmd.mesh_tensor<"m2", tensor<i32>>

// A step count the updates of m1 and m2 read: its transfers move from the
// top to right before their readers, so the first fragment comes first.
// Transfers of values the program computes stay where they are.

// CHECK-LABEL: func.func @main
func.func @main(%x: !m0, %count: !c0) -> (!m2, !c1)
    attributes {topology = #mpmd.topology<<"m0" : <["x"=1]>>, <"m1" : <["x"=1]>>, <"m2" : <["x"=1]>>>} {
  // CHECK-NEXT: %[[F:.*]] = mpmd.fragment<mesh="m0", origin=["f"]> (%arg0)
  // CHECK:      %[[T1:.*]] = mpmd.transfer %[[F]]
  // CHECK-NEXT: %[[C1:.*]] = mpmd.transfer %arg1 : (!mpmd.mesh_tensor<"m0", tensor<i32>>) -> !mpmd.mesh_tensor<"m1", tensor<i32>>
  // CHECK-NEXT: %[[G:.*]] = mpmd.fragment<mesh="m1", origin=["g"]> (%[[T1]], %[[C1]])
  // CHECK:      %[[T2:.*]] = mpmd.transfer %[[G]]
  // CHECK-NEXT: %[[C2:.*]] = mpmd.transfer %arg1 : (!mpmd.mesh_tensor<"m0", tensor<i32>>) -> !mpmd.mesh_tensor<"m2", tensor<i32>>
  // CHECK-NEXT: %[[H:.*]] = mpmd.fragment<mesh="m2", origin=["h"]> (%[[T2]], %[[C2]])
  // CHECK:      return %[[H]], %[[C1]]
  %c1 = mpmd.transfer %count : (!c0) -> !c1
  %c2 = mpmd.transfer %count : (!c0) -> !c2
  %0 = mpmd.fragment<mesh="m0", origin=["f"]> (%x) (%a: tensor<4xf32>) {
    %n = "stablehlo.negate"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %n : tensor<4xf32>
  } : (!m0) -> !m0
  %1 = mpmd.transfer %0 : (!m0) -> !m1
  %2 = mpmd.fragment<mesh="m1", origin=["g"]> (%1, %c1) (%a: tensor<4xf32>, %c: tensor<i32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m1, !c1) -> !m1
  %3 = mpmd.transfer %2 : (!m1) -> !m2
  %4 = mpmd.fragment<mesh="m2", origin=["h"]> (%3, %c2) (%a: tensor<4xf32>, %c: tensor<i32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m2, !c2) -> !m2
  return %4, %c1 : !m2, !c1
}

// -----

!m0 = !mpmd.mesh_tensor<"m0", tensor<4xf32>>
!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>

// Transfers read first by the same fragment keep their order (the one
// already right before it stays put); one only returned moves to the end.

// CHECK-LABEL: func.func @main
func.func @main(%a: !m0, %b: !m0, %c: !m0, %d: !m0) -> (!m1, !m1)
    attributes {topology = #mpmd.topology<<"m0" : <["x"=1]>>, <"m1" : <["x"=1]>>>} {
  // CHECK-NEXT: %[[F:.*]] = mpmd.fragment<mesh="m0", origin=["f"]> (%arg2)
  // CHECK:      %[[A:.*]] = mpmd.transfer %arg0
  // CHECK-NEXT: %[[B:.*]] = mpmd.transfer %arg1
  // CHECK-NEXT: %[[C:.*]] = mpmd.transfer %arg2
  // CHECK-NEXT: %[[G:.*]] = mpmd.fragment<mesh="m1", origin=["g"]> (%[[A]], %[[B]], %[[C]])
  // CHECK:      %[[D:.*]] = mpmd.transfer %arg3
  // CHECK-NEXT: return %[[G]], %[[D]]
  %0 = mpmd.transfer %a : (!m0) -> !m1
  %1 = mpmd.transfer %b : (!m0) -> !m1
  %2 = mpmd.transfer %d : (!m0) -> !m1
  %3 = mpmd.fragment<mesh="m0", origin=["f"]> (%c) (%x: tensor<4xf32>) {
    mpmd.return %x : tensor<4xf32>
  } : (!m0) -> !m0
  %4 = mpmd.transfer %c : (!m0) -> !m1
  %5 = mpmd.fragment<mesh="m1", origin=["g"]> (%0, %1, %4) (%x: tensor<4xf32>, %y: tensor<4xf32>, %z: tensor<4xf32>) {
    mpmd.return %x : tensor<4xf32>
  } : (!m1, !m1, !m1) -> !m1
  return %5, %2 : !m1, !m1
}
