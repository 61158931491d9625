// RUN: mpmd-opt %s -split-input-file -mpmd-introduce-transfers | FileCheck %s

!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>
!m2 = !mpmd.mesh_tensor<"m2", tensor<4xf32>>
!m3 = !mpmd.mesh_tensor<"m3", tensor<4xf32>>

// A value unassigned from m1 and assigned to m3 and m2 is sent once: one
// transfer per destination, chained in topology order (m1 -> m2 -> m3), where
// the first of the assigns was; assigns back to m1 fold away.

// CHECK-LABEL: func.func @assign_of_unassign
func.func @assign_of_unassign(%arg0: !m1) -> (!m1, !m2, !m2, !m3)
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>, <"m3" : <["x"=2]>>>} {
  // CHECK-NEXT: %[[F:.*]] = mpmd.fragment<mesh="m1", origin=["f"]> (%arg0)
  // CHECK:      %[[T2:.*]] = mpmd.transfer %[[F]] : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m2", tensor<4xf32>>
  // CHECK-NEXT: %[[T3:.*]] = mpmd.transfer %[[T2]] : (!mpmd.mesh_tensor<"m2", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m3", tensor<4xf32>>
  // CHECK-NOT:  mpmd.unassign
  // CHECK-NOT:  mpmd.assign
  // CHECK:      return %[[F]], %[[T2]], %[[T2]], %[[T3]]
  %0 = mpmd.fragment<mesh="m1", origin=["f"]> (%arg0) (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m1) -> !m1
  %1 = mpmd.unassign %0 : (!m1) -> tensor<4xf32>
  %2 = mpmd.assign %1 : (tensor<4xf32>) -> !m1
  %5 = mpmd.assign %1 : (tensor<4xf32>) -> !m3
  %3 = mpmd.assign %1 : (tensor<4xf32>) -> !m2
  %4 = mpmd.assign %1 : (tensor<4xf32>) -> !m2
  return %2, %3, %4, %5 : !m1, !m2, !m2, !m3
}

// -----

!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>
!m2 = !mpmd.mesh_tensor<"m2", tensor<4xf32>>
!m3 = !mpmd.mesh_tensor<"m3", tensor<4xf32>>

// The chain starts at the source's mesh and visits the others in topology
// order, whichever mesh the source is on.

// CHECK-LABEL: func.func @chain_from_middle_mesh
func.func @chain_from_middle_mesh(%arg0: !m2) -> (!m3, !m1)
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>, <"m3" : <["x"=2]>>>} {
  // CHECK-NEXT: %[[T1:.*]] = mpmd.transfer %arg0 : (!mpmd.mesh_tensor<"m2", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
  // CHECK-NEXT: %[[T3:.*]] = mpmd.transfer %[[T1]] : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m3", tensor<4xf32>>
  // CHECK-NEXT: return %[[T3]], %[[T1]]
  %0 = mpmd.unassign %arg0 : (!m2) -> tensor<4xf32>
  %1 = mpmd.assign %0 : (tensor<4xf32>) -> !m3
  %2 = mpmd.assign %0 : (tensor<4xf32>) -> !m1
  return %1, %2 : !m3, !m1
}

// -----

!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>
!m2 = !mpmd.mesh_tensor<"m2", tensor<4xf32>>

// An unassign still used by an unlabelled op is kept for mesh inference.

// CHECK-LABEL: func.func @unassign_used_elsewhere
func.func @unassign_used_elsewhere(%arg0: !m1) -> (!m2, tensor<4xf32>)
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  // CHECK-NEXT: %[[U:.*]] = mpmd.unassign %arg0
  // CHECK-NEXT: %[[T:.*]] = mpmd.transfer %arg0
  // CHECK-NEXT: %[[ADD:.*]] = "stablehlo.add"(%[[U]], %[[U]])
  // CHECK-NEXT: return %[[T]], %[[ADD]]
  %0 = mpmd.unassign %arg0 : (!m1) -> tensor<4xf32>
  %1 = mpmd.assign %0 : (tensor<4xf32>) -> !m2
  %2 = "stablehlo.add"(%0, %0) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %1, %2 : !m2, tensor<4xf32>
}

// -----

!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>
!m2 = !mpmd.mesh_tensor<"m2", tensor<4xf32>>

// A sum of values from m1 and m2 assigned to m2 runs on m2: one inferred
// fragment per addition, in program order, each operand from another mesh
// moved right before the fragment that reads it.

// CHECK-LABEL: func.func @sum_assigned_to_a_mesh
func.func @sum_assigned_to_a_mesh(%arg0: !m1, %arg1: !m2, %arg2: !m1) -> !m2
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  // CHECK-NEXT: %[[T0:.*]] = mpmd.transfer %arg0 : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m2", tensor<4xf32>>
  // CHECK-NEXT: %[[S0:.*]] = mpmd.fragment<mesh="m2", origin=[]> (%[[T0]], %arg1) {mpmd.inferred_by = ["mpmd-introduce-transfers"]} (%arg3: tensor<4xf32>, %arg4: tensor<4xf32>) {
  // CHECK-NEXT:   %[[A0:.*]] = "stablehlo.add"(%arg3, %arg4)
  // CHECK-NEXT:   mpmd.return %[[A0]]
  // CHECK-NEXT: }
  // CHECK-NEXT: %[[T2:.*]] = mpmd.transfer %arg2
  // CHECK-NEXT: %[[S1:.*]] = mpmd.fragment<mesh="m2", origin=[]> (%[[S0]], %[[T2]])
  // CHECK-NEXT:   %[[A1:.*]] = "stablehlo.add"(%arg3, %arg4)
  // CHECK-NEXT:   mpmd.return %[[A1]]
  // CHECK-NEXT: }
  // CHECK-NEXT: return %[[S1]]
  %0 = mpmd.unassign %arg0 : (!m1) -> tensor<4xf32>
  %1 = mpmd.unassign %arg1 : (!m2) -> tensor<4xf32>
  %2 = mpmd.unassign %arg2 : (!m1) -> tensor<4xf32>
  %3 = "stablehlo.add"(%0, %1) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %4 = "stablehlo.add"(%3, %2) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %5 = mpmd.assign %4 : (tensor<4xf32>) -> !m2
  return %5 : !m2
}

// -----

!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>
!m2 = !mpmd.mesh_tensor<"m2", tensor<4xf32>>

// A sum with another op in it, or an addition used twice, is left to mesh
// inference.

// CHECK-LABEL: func.func @sum_left_to_mesh_inference
func.func @sum_left_to_mesh_inference(%arg0: !m1, %arg1: !m2) -> (!m2, !m2, tensor<4xf32>)
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  // CHECK-NOT:  mpmd.fragment
  // CHECK:      %[[NEG:.*]] = "stablehlo.negate"
  // CHECK-NEXT: %[[ADD:.*]] = "stablehlo.add"(%[[NEG]],
  // CHECK-NEXT: mpmd.assign %[[ADD]]
  // CHECK-NEXT: %[[TWICE:.*]] = "stablehlo.add"
  // CHECK-NEXT: mpmd.assign %[[TWICE]]
  // CHECK-NEXT: return
  %0 = mpmd.unassign %arg0 : (!m1) -> tensor<4xf32>
  %1 = mpmd.unassign %arg1 : (!m2) -> tensor<4xf32>
  %2 = "stablehlo.negate"(%0) : (tensor<4xf32>) -> tensor<4xf32>
  %3 = "stablehlo.add"(%2, %1) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %4 = mpmd.assign %3 : (tensor<4xf32>) -> !m2
  %5 = "stablehlo.add"(%0, %1) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %6 = mpmd.assign %5 : (tensor<4xf32>) -> !m2
  return %4, %6, %5 : !m2, !m2, tensor<4xf32>
}

// -----

!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>
!m2 = !mpmd.mesh_tensor<"m2", tensor<4xf32>>

// Every call passes its first operand unassigned from m1, and the callee
// assigns it to m2: the callee takes it as from m1 (an assign at its entry),
// so the move to m2 is a transfer from m1. The second operand comes from m1
// at one call and from m2 at the other: it is left alone.

// CHECK-LABEL: func.func @caller
func.func @caller(%arg0: !m1, %arg1: !m1, %arg2: !m2) -> (!m2, !m2)
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  // CHECK-NEXT: %[[U0:.*]] = mpmd.unassign %arg0
  // CHECK-NEXT: %[[U1:.*]] = mpmd.unassign %arg1
  // CHECK-NEXT: %[[U2:.*]] = mpmd.unassign %arg2
  // CHECK-NEXT: mpmd.call @callee(%[[U0]], %[[U1]])
  // CHECK-NEXT: mpmd.call @callee(%[[U1]], %[[U2]])
  %0 = mpmd.unassign %arg0 : (!m1) -> tensor<4xf32>
  %1 = mpmd.unassign %arg1 : (!m1) -> tensor<4xf32>
  %2 = mpmd.unassign %arg2 : (!m2) -> tensor<4xf32>
  %3 = mpmd.call @callee(%0, %1) : (tensor<4xf32>, tensor<4xf32>) -> !m2
  %4 = mpmd.call @callee(%1, %2) : (tensor<4xf32>, tensor<4xf32>) -> !m2
  return %3, %4 : !m2, !m2
}

// CHECK-LABEL: func.func private @callee(%arg0: tensor<4xf32>, %arg1: tensor<4xf32>)
// CHECK-NEXT: %[[A:.*]] = mpmd.assign %arg0 : (tensor<4xf32>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
// CHECK-NEXT: %[[T:.*]] = mpmd.transfer %[[A]] : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m2", tensor<4xf32>>
// CHECK-NEXT: %[[B:.*]] = mpmd.assign %arg1 : (tensor<4xf32>) -> !mpmd.mesh_tensor<"m2", tensor<4xf32>>
// CHECK-NEXT: %[[F:.*]] = mpmd.fragment<mesh="m2", origin=["g"]> (%[[T]], %[[B]])
func.func private @callee(%arg0: tensor<4xf32>, %arg1: tensor<4xf32>) -> !m2
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  %0 = mpmd.assign %arg0 : (tensor<4xf32>) -> !m2
  %1 = mpmd.assign %arg1 : (tensor<4xf32>) -> !m2
  %2 = mpmd.fragment<mesh="m2", origin=["g"]> (%0, %1) (%a: tensor<4xf32>, %b: tensor<4xf32>) {
    %3 = "stablehlo.add"(%a, %b) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %3 : tensor<4xf32>
  } : (!m2, !m2) -> !m2
  return %2 : !m2
}

// -----

!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>

// A callee argument that one call passes as a plain value, or that the callee
// does not assign, stays as it is.

// CHECK-LABEL: func.func @caller_of_unchanged
func.func @caller_of_unchanged(%arg0: !m1) -> (tensor<4xf32>, !m1, tensor<4xf32>)
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  %0 = mpmd.unassign %arg0 : (!m1) -> tensor<4xf32>
  %1 = "stablehlo.negate"(%0) : (tensor<4xf32>) -> tensor<4xf32>
  %2 = mpmd.call @not_assigned(%0) : (tensor<4xf32>) -> tensor<4xf32>
  %3 = mpmd.call @plain_at_one_call(%0) : (tensor<4xf32>) -> !m1
  %4 = mpmd.call @plain_at_one_call(%1) : (tensor<4xf32>) -> !m1
  return %2, %3, %1 : tensor<4xf32>, !m1, tensor<4xf32>
}

// CHECK-LABEL: func.func private @not_assigned
// CHECK-NEXT: return %arg0
func.func private @not_assigned(%arg0: tensor<4xf32>) -> tensor<4xf32>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  return %arg0 : tensor<4xf32>
}

// CHECK-LABEL: func.func private @plain_at_one_call
// CHECK-NEXT: %[[A:.*]] = mpmd.assign %arg0 : (tensor<4xf32>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
// CHECK-NEXT: return %[[A]]
func.func private @plain_at_one_call(%arg0: tensor<4xf32>) -> !m1
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  %0 = mpmd.assign %arg0 : (tensor<4xf32>) -> !m1
  return %0 : !m1
}

// -----

!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>
!m2 = !mpmd.mesh_tensor<"m2", tensor<4xf32>>

// A call result counts as unassigned from the mesh its callee returns it
// unassigned from: the second call passes @step's first result (from m1)
// where the first call passes a value from m1, so @step's second argument
// is assigned to m1 at its entry; its first argument comes from m1 at one
// call and from m2 (@step's second result) at the other.

// CHECK-LABEL: func.func @chained_calls
func.func @chained_calls(%arg0: !m1, %arg1: !m1) -> (tensor<4xf32>, tensor<4xf32>)
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  %0 = mpmd.unassign %arg0 : (!m1) -> tensor<4xf32>
  %1 = mpmd.unassign %arg1 : (!m1) -> tensor<4xf32>
  %2:2 = mpmd.call @step(%0, %1) : (tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
  %3:2 = mpmd.call @step(%2#1, %2#0) : (tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
  return %3#0, %3#1 : tensor<4xf32>, tensor<4xf32>
}

// CHECK-LABEL: func.func private @step
// CHECK-NEXT: %[[A1:.*]] = mpmd.assign %arg1 : (tensor<4xf32>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
// CHECK-NEXT: %[[A0:.*]] = mpmd.assign %arg0 : (tensor<4xf32>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
// CHECK-NEXT: %[[U0:.*]] = mpmd.unassign %[[A0]]
// CHECK-NEXT: %[[T:.*]] = mpmd.transfer %[[A1]] : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m2", tensor<4xf32>>
// CHECK-NEXT: %[[U1:.*]] = mpmd.unassign %[[T]]
// CHECK-NEXT: return %[[U0]], %[[U1]]
func.func private @step(%arg0: tensor<4xf32>, %arg1: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  %0 = mpmd.assign %arg0 : (tensor<4xf32>) -> !m1
  %1 = mpmd.unassign %0 : (!m1) -> tensor<4xf32>
  %2 = mpmd.assign %arg1 : (tensor<4xf32>) -> !m2
  %3 = mpmd.unassign %2 : (!m2) -> tensor<4xf32>
  return %1, %3 : tensor<4xf32>, tensor<4xf32>
}
