// RUN: mpmd-opt %s -split-input-file -mpmd-introduce-transfers | FileCheck %s

!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>
!m2 = !mpmd.mesh_tensor<"m2", tensor<4xf32>>
!m3 = !mpmd.mesh_tensor<"m3", tensor<4xf32>>

// A value unassigned from m1 and assigned to m2 and m3 gets one transfer per
// destination, right after its producer; assigns back to m1 fold away.

// CHECK-LABEL: func.func @assign_of_unassign
func.func @assign_of_unassign(%arg0: !m1) -> (!m1, !m2, !m2, !m3)
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>, <"m3" : <["x"=2]>>>} {
  // CHECK-NEXT: %[[F:.*]] = mpmd.fragment<mesh="m1", origin=["f"]> (%arg0)
  // CHECK:      %[[T3:.*]] = mpmd.transfer %[[F]] : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m3", tensor<4xf32>>
  // CHECK-NEXT: %[[T2:.*]] = mpmd.transfer %[[F]] : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m2", tensor<4xf32>>
  // CHECK-NOT:  mpmd.unassign
  // CHECK-NOT:  mpmd.assign
  // CHECK:      return %[[F]], %[[T2]], %[[T2]], %[[T3]]
  %0 = mpmd.fragment<mesh="m1", origin=["f"]> (%arg0) (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m1) -> !m1
  %1 = mpmd.unassign %0 : (!m1) -> tensor<4xf32>
  %2 = mpmd.assign %1 : (tensor<4xf32>) -> !m1
  %3 = mpmd.assign %1 : (tensor<4xf32>) -> !m2
  %4 = mpmd.assign %1 : (tensor<4xf32>) -> !m2
  %5 = mpmd.assign %1 : (tensor<4xf32>) -> !m3
  return %2, %3, %4, %5 : !m1, !m2, !m2, !m3
}

// -----

!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>
!m2 = !mpmd.mesh_tensor<"m2", tensor<4xf32>>

// An unassign still used by an unlabelled op is kept for mesh inference.

// CHECK-LABEL: func.func @unassign_used_elsewhere
func.func @unassign_used_elsewhere(%arg0: !m1) -> (!m2, tensor<4xf32>)
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  // CHECK-NEXT: %[[T:.*]] = mpmd.transfer %arg0
  // CHECK-NEXT: %[[U:.*]] = mpmd.unassign %arg0
  // CHECK-NEXT: %[[ADD:.*]] = "stablehlo.add"(%[[U]], %[[U]])
  // CHECK-NEXT: return %[[T]], %[[ADD]]
  %0 = mpmd.unassign %arg0 : (!m1) -> tensor<4xf32>
  %1 = mpmd.assign %0 : (tensor<4xf32>) -> !m2
  %2 = "stablehlo.add"(%0, %0) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %1, %2 : !m2, tensor<4xf32>
}
