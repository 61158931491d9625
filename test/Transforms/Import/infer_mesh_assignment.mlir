// RUN: mpmd-opt %s -split-input-file -mpmd-infer-mesh-assignment | FileCheck %s

!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>
!m2 = !mpmd.mesh_tensor<"m2", tensor<4xf32>>

// An op between two labelled computations on different meshes runs where its
// input is; its result crosses to the consumer's mesh (implied by the label).
// Function inputs go to the mesh that uses them.

// CHECK-LABEL: func.func @between_labels
// CHECK-SAME: (%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m2", tensor<4xf32>>
func.func @between_labels(%arg0: tensor<4xf32>) -> tensor<4xf32>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  // CHECK-NEXT: %[[F:.*]] = mpmd.fragment<mesh="m1", origin=["f"]> (%arg0)
  // CHECK:      %[[I:.*]] = mpmd.fragment<mesh="m1", origin=[]> (%[[F]]) {mpmd.inferred_by = ["mpmd-infer-mesh-assignment"]} (%[[A:.*]]: tensor<4xf32>) {
  // CHECK-NEXT:   %[[N:.*]] = "stablehlo.negate"(%[[A]])
  // CHECK-NEXT:   mpmd.return %[[N]]
  // CHECK:      %[[T:.*]] = mpmd.transfer %[[I]] : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m2", tensor<4xf32>>
  // CHECK-NEXT: %[[G:.*]] = mpmd.fragment<mesh="m2", origin=["g"]> (%[[T]])
  // CHECK:      return %[[G]]
  %0 = mpmd.assign %arg0 : (tensor<4xf32>) -> !m1
  %1 = mpmd.fragment<mesh="m1", origin=["f"]> (%0) (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m1) -> !m1
  %2 = mpmd.unassign %1 : (!m1) -> tensor<4xf32>
  %3 = "stablehlo.negate"(%2) : (tensor<4xf32>) -> tensor<4xf32>
  %4 = mpmd.assign %3 : (tensor<4xf32>) -> !m2
  %5 = mpmd.fragment<mesh="m2", origin=["g"]> (%4) (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m2) -> !m2
  %6 = mpmd.unassign %5 : (!m2) -> tensor<4xf32>
  return %6 : tensor<4xf32>
}

// -----

!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>
!m2 = !mpmd.mesh_tensor<"m2", tensor<4xf32>>

// Ops that depend only on constants are cloned to every mesh that uses them:
// no transfer is needed.

// CHECK-LABEL: func.func @constant_cloned
func.func @constant_cloned(%arg0: tensor<4xf32>, %arg1: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  // CHECK-NOT: mpmd.transfer
  // CHECK:     mpmd.fragment<mesh="m1", origin=[]> () {{.*}} () {
  // CHECK-NEXT:  "stablehlo.constant"
  // CHECK:     mpmd.fragment<mesh="m2", origin=[]> () {{.*}} () {
  // CHECK-NEXT:  "stablehlo.constant"
  // CHECK-NOT: mpmd.transfer
  %c = "stablehlo.constant"() <{value = dense<1.0> : tensor<4xf32>}> : () -> tensor<4xf32>
  %0 = mpmd.assign %c : (tensor<4xf32>) -> !m1
  %1 = mpmd.assign %c : (tensor<4xf32>) -> !m2
  %2 = mpmd.assign %arg0 : (tensor<4xf32>) -> !m1
  %3 = mpmd.assign %arg1 : (tensor<4xf32>) -> !m2
  %4 = mpmd.fragment<mesh="m1", origin=["f"]> (%0, %2) (%a: tensor<4xf32>, %b: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m1, !m1) -> !m1
  %5 = mpmd.fragment<mesh="m2", origin=["g"]> (%1, %3) (%a: tensor<4xf32>, %b: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m2, !m2) -> !m2
  %6 = mpmd.unassign %4 : (!m1) -> tensor<4xf32>
  %7 = mpmd.unassign %5 : (!m2) -> tensor<4xf32>
  return %6, %7 : tensor<4xf32>, tensor<4xf32>
}

// -----

!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>
!m2 = !mpmd.mesh_tensor<"m2", tensor<4xf32>>

// An op whose operands all come from m1 but whose result is used on m1 and
// m2 runs on m1; its result is transferred to m2. An op whose result is only
// returned runs where its operands are (the SGD-update case).

// CHECK-LABEL: func.func @produced_once_used_twice
// CHECK-SAME: -> (!mpmd.mesh_tensor<"m1", tensor<4xf32>>, !mpmd.mesh_tensor<"m2", tensor<4xf32>>, !mpmd.mesh_tensor<"m1", tensor<4xf32>>)
func.func @produced_once_used_twice(%arg0: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  // CHECK:      %[[F:.*]] = mpmd.fragment<mesh="m1", origin=["f"]>
  // CHECK:      %[[E:.*]] = mpmd.fragment<mesh="m1", origin=[]> (%[[F]])
  // CHECK-NEXT:   "stablehlo.exponential"
  // CHECK:      %[[T:.*]] = mpmd.transfer %[[E]] : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m2", tensor<4xf32>>
  // CHECK:      %[[S:.*]] = mpmd.fragment<mesh="m1", origin=[]> (%arg0, %[[F]])
  // CHECK-NEXT:   "stablehlo.subtract"
  // CHECK:      mpmd.fragment<mesh="m1", origin=["g"]> (%[[E]])
  // CHECK:      mpmd.fragment<mesh="m2", origin=["h"]> (%[[T]])
  // CHECK:      return %{{.*}}, %{{.*}}, %[[S]]
  %0 = mpmd.assign %arg0 : (tensor<4xf32>) -> !m1
  %1 = mpmd.fragment<mesh="m1", origin=["f"]> (%0) (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m1) -> !m1
  %2 = mpmd.unassign %1 : (!m1) -> tensor<4xf32>
  %3 = "stablehlo.exponential"(%2) : (tensor<4xf32>) -> tensor<4xf32>
  %upd = "stablehlo.subtract"(%arg0, %2) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %4 = mpmd.assign %3 : (tensor<4xf32>) -> !m1
  %5 = mpmd.assign %3 : (tensor<4xf32>) -> !m2
  %6 = mpmd.fragment<mesh="m1", origin=["g"]> (%4) (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m1) -> !m1
  %7 = mpmd.fragment<mesh="m2", origin=["h"]> (%5) (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m2) -> !m2
  %8 = mpmd.unassign %6 : (!m1) -> tensor<4xf32>
  %9 = mpmd.unassign %7 : (!m2) -> tensor<4xf32>
  return %8, %9, %upd : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
}

// -----

!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>
!m2 = !mpmd.mesh_tensor<"m2", tensor<4xf32>>

// A program whose only cross-mesh edge is a labelled boundary gets exactly
// one transfer, and inputs used by both meshes go to the first one in
// topology order.

// CHECK-LABEL: func.func @only_labelled_transfers
// CHECK-SAME: (%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>>)
func.func @only_labelled_transfers(%arg0: tensor<4xf32>) -> tensor<4xf32>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  // CHECK-COUNT-1: mpmd.transfer
  // CHECK-NOT:     mpmd.transfer
  %0 = mpmd.assign %arg0 : (tensor<4xf32>) -> !m1
  %1 = mpmd.fragment<mesh="m1", origin=["f"]> (%0) (%a: tensor<4xf32>) {
    %x = "stablehlo.negate"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %x : tensor<4xf32>
  } : (!m1) -> !m1
  %2 = mpmd.transfer %1 : (!m1) -> !m2
  %3 = mpmd.fragment<mesh="m2", origin=["g"]> (%2) (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m2) -> !m2
  %4 = mpmd.unassign %3 : (!m2) -> tensor<4xf32>
  %5 = "stablehlo.multiply"(%4, %4) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %5 : tensor<4xf32>
}


// -----

!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>
!m2 = !mpmd.mesh_tensor<"m2", tensor<4xf32>>

// A gradient summed from two meshes whose sum only feeds named computations
// (the backward of a value used on both meshes): the add runs on the first
// consuming mesh and its operand transfers are implied.

// CHECK-LABEL: func.func @fan_in_add
func.func @fan_in_add(%arg0: !m1, %arg1: !m2) -> (!m1, !m2)
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  // CHECK:      %[[T:.*]] = mpmd.transfer %arg1 : (!mpmd.mesh_tensor<"m2", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
  // CHECK:      %[[S:.*]] = mpmd.fragment<mesh="m1", origin=[]> (%arg0, %[[T]])
  // CHECK-NEXT:   "stablehlo.add"
  // CHECK:      %[[T2:.*]] = mpmd.transfer %[[S]] : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m2", tensor<4xf32>>
  // CHECK:      mpmd.fragment<mesh="m1", origin=["f"(1)]> (%[[S]])
  // CHECK:      mpmd.fragment<mesh="m2", origin=["g"(1)]> (%[[T2]])
  %0 = mpmd.unassign %arg0 : (!m1) -> tensor<4xf32>
  %1 = mpmd.unassign %arg1 : (!m2) -> tensor<4xf32>
  %2 = "stablehlo.add"(%0, %1) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %3 = mpmd.assign %2 : (tensor<4xf32>) -> !m1
  %4 = mpmd.assign %2 : (tensor<4xf32>) -> !m2
  %5 = mpmd.fragment<mesh="m1", origin=["f"(1)]> (%3) (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m1) -> !m1
  %6 = mpmd.fragment<mesh="m2", origin=["g"(1)]> (%4) (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m2) -> !m2
  return %5, %6 : !m1, !m2
}

// -----

!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>
!m2 = !mpmd.mesh_tensor<"m2", tensor<4xf32>>

// mpmd.broadcast: the value may be moved to every mesh that uses it.
// mpmd.reduce: computed once, on the mesh that uses it, from operands moved
// there. The fragment takes the operands already on its mesh first, then the
// transferred ones; it combines them in the reduce's order.

// CHECK-LABEL: func.func @broadcast_and_reduce
func.func @broadcast_and_reduce(%arg0: !m1, %arg1: !m2) -> !m2
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  // CHECK:      %[[E:.*]] = mpmd.fragment<mesh="m1", origin=[]> (%arg0)
  // CHECK-NEXT:   "stablehlo.exponential"
  // CHECK:      %[[TE:.*]] = mpmd.transfer %[[E]] : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m2", tensor<4xf32>>
  // CHECK:      %[[G:.*]] = mpmd.fragment<mesh="m2", origin=["g"]> (%[[TE]])
  // CHECK:      %[[F:.*]] = mpmd.fragment<mesh="m1", origin=["f"]> (%[[E]])
  // CHECK:      %[[TF:.*]] = mpmd.transfer %[[F]] : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m2", tensor<4xf32>>
  // CHECK:      %[[R:.*]] = mpmd.fragment<mesh="m2", origin=[]> (%[[G]], %arg1, %[[TF]])
  // CHECK-SAME:     (%arg2: tensor<4xf32>, %arg3: tensor<4xf32>, %arg4: tensor<4xf32>)
  // CHECK-NEXT:   %[[S1:.*]] = "stablehlo.maximum"(%arg4, %arg2)
  // CHECK-NEXT:   %[[S2:.*]] = "stablehlo.maximum"(%[[S1]], %arg3)
  // CHECK-NEXT:   mpmd.return %[[S2]]
  // CHECK:      return %[[R]]
  %0 = mpmd.unassign %arg0 : (!m1) -> tensor<4xf32>
  %e = "stablehlo.exponential"(%0) : (tensor<4xf32>) -> tensor<4xf32>
  %b = mpmd.broadcast %e : tensor<4xf32>
  %1 = mpmd.assign %b : (tensor<4xf32>) -> !m2
  %2 = mpmd.fragment<mesh="m2", origin=["g"]> (%1) (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m2) -> !m2
  %3 = mpmd.assign %b : (tensor<4xf32>) -> !m1
  %4 = mpmd.fragment<mesh="m1", origin=["f"]> (%3) (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m1) -> !m1
  %5 = mpmd.unassign %4 : (!m1) -> tensor<4xf32>
  %6 = mpmd.unassign %2 : (!m2) -> tensor<4xf32>
  %7 = mpmd.unassign %arg1 : (!m2) -> tensor<4xf32>
  %r = mpmd.reduce<max> %5, %6, %7 : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %8 = mpmd.assign %r : (tensor<4xf32>) -> !m2
  return %8 : !m2
}

// -----

// An input used on two meshes is copied to the second one (implied).

// CHECK-LABEL: func.func @input_on_two_meshes
// CHECK-SAME: (%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>>)
func.func @input_on_two_meshes(%arg0: tensor<4xf32>) -> (!mpmd.mesh_tensor<"m1", tensor<4xf32>>, !mpmd.mesh_tensor<"m2", tensor<4xf32>>)
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  // CHECK-NEXT: %[[T:.*]] = mpmd.transfer %arg0 : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m2", tensor<4xf32>>
  // CHECK-NEXT: return %arg0, %[[T]]
  %0 = mpmd.assign %arg0 : (tensor<4xf32>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
  %1 = mpmd.assign %arg0 : (tensor<4xf32>) -> !mpmd.mesh_tensor<"m2", tensor<4xf32>>
  return %0, %1 : !mpmd.mesh_tensor<"m1", tensor<4xf32>>, !mpmd.mesh_tensor<"m2", tensor<4xf32>>
}

// -----

!m1 = !mpmd.mesh_tensor<"m1", tensor<1x4xf32>>
!m2 = !mpmd.mesh_tensor<"m2", tensor<1x4xf32>>

// A stacked input whose rows are used on different meshes lives on the first
// of them; the slice another mesh uses runs there too (with the offset it
// takes), so only the slice crosses, not the whole input.

// CHECK-LABEL: func.func @slice_where_the_input_lives
// CHECK-SAME: (%arg0: !mpmd.mesh_tensor<"m1", tensor<2x4xf32>>)
// CHECK-NOT:  mpmd.transfer %arg0
// CHECK-NOT:  mpmd.fragment<mesh="m2", origin=[]>
// CHECK:      %[[S:.*]] = mpmd.fragment<mesh="m1", origin=[]> (%arg0, %{{.*}}, %{{.*}})
// CHECK-NEXT:   "stablehlo.dynamic_slice"
// CHECK:      %[[T:.*]] = mpmd.transfer %[[S]] : (!mpmd.mesh_tensor<"m1", tensor<1x4xf32>>) -> !mpmd.mesh_tensor<"m2", tensor<1x4xf32>>
// CHECK:      mpmd.fragment<mesh="m2", origin=["g"]> (%[[T]])
func.func @slice_where_the_input_lives(%arg0: tensor<2x4xf32>) -> (tensor<1x4xf32>, tensor<1x4xf32>)
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  %0 = "stablehlo.slice"(%arg0) <{start_indices = array<i64: 0, 0>, limit_indices = array<i64: 1, 4>, strides = array<i64: 1, 1>}> : (tensor<2x4xf32>) -> tensor<1x4xf32>
  %1 = mpmd.assign %0 : (tensor<1x4xf32>) -> !m1
  %2 = mpmd.fragment<mesh="m1", origin=["f"]> (%1) (%a: tensor<1x4xf32>) {
    mpmd.return %a : tensor<1x4xf32>
  } : (!m1) -> !m1
  %3 = mpmd.unassign %2 : (!m1) -> tensor<1x4xf32>
  %i = "stablehlo.constant"() <{value = dense<1> : tensor<i32>}> : () -> tensor<i32>
  %z = "stablehlo.constant"() <{value = dense<0> : tensor<i32>}> : () -> tensor<i32>
  %4 = "stablehlo.dynamic_slice"(%arg0, %i, %z) <{slice_sizes = array<i64: 1, 4>}> : (tensor<2x4xf32>, tensor<i32>, tensor<i32>) -> tensor<1x4xf32>
  %5 = mpmd.assign %4 : (tensor<1x4xf32>) -> !m2
  %6 = mpmd.fragment<mesh="m2", origin=["g"]> (%5) (%a: tensor<1x4xf32>) {
    mpmd.return %a : tensor<1x4xf32>
  } : (!m2) -> !m2
  %7 = mpmd.unassign %6 : (!m2) -> tensor<1x4xf32>
  return %3, %7 : tensor<1x4xf32>, tensor<1x4xf32>
}

// -----

!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>
!m2 = !mpmd.mesh_tensor<"m2", tensor<4xf32>>

// Two MPMD functions in one module are placed independently: nothing the pass
// learned about the first (its values moved to meshes, its placements) is
// looked up in the second, which uses only its own values.

// CHECK-LABEL: func.func @earlier
// CHECK-SAME: (%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
// CHECK:      %[[E:.*]] = mpmd.fragment<mesh="m1", origin=[]> (%arg0)
// CHECK:      return %[[E]]
func.func @earlier(%arg0: tensor<4xf32>) -> tensor<4xf32>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  %0 = "stablehlo.abs"(%arg0) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// CHECK-LABEL: func.func @later
// CHECK-SAME: () -> (!mpmd.mesh_tensor<"m1", tensor<4xf32>>, !mpmd.mesh_tensor<"m2", tensor<4xf32>>)
// CHECK-DAG:  %[[C1:.*]] = mpmd.fragment<mesh="m1", origin=[]> ()
// CHECK-DAG:  %[[C2:.*]] = mpmd.fragment<mesh="m2", origin=[]> ()
// CHECK:      %[[S:.*]] = mpmd.fragment<mesh="m1", origin=[]> (%[[C1]])
// CHECK:      return %[[S]], %[[C2]] : !mpmd.mesh_tensor<"m1", tensor<4xf32>>, !mpmd.mesh_tensor<"m2", tensor<4xf32>>
func.func @later() -> (!m1, !m2)
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  %0 = "stablehlo.constant"() <{value = dense<2.0> : tensor<4xf32>}> : () -> tensor<4xf32>
  %1 = "stablehlo.multiply"(%0, %0) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %2 = mpmd.assign %1 : (tensor<4xf32>) -> !m1
  %3 = mpmd.assign %0 : (tensor<4xf32>) -> !m2
  return %2, %3 : !m1, !m2
}

// -----

!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>
!m2 = !mpmd.mesh_tensor<"m2", tensor<4xf32>>

// jax.checkpoint around a labelled stage puts an optimization barrier over the
// stage's residuals (mesh m1) and the cotangent from the next mesh (m2): it is
// split into one barrier per mesh, so nothing crosses for it.

// CHECK-LABEL: func.func @barrier_over_two_meshes
func.func @barrier_over_two_meshes(%arg0: !m1, %arg1: !m2) -> (tensor<4xf32>, tensor<4xf32>)
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  // CHECK-NOT:  mpmd.transfer
  // CHECK:      mpmd.fragment<mesh="m2", origin=[]>
  // CHECK-NEXT:   "stablehlo.exponential"
  // CHECK:      mpmd.fragment<mesh="m1", origin=[]> (%arg0)
  // CHECK-NEXT:   "stablehlo.optimization_barrier"(%{{.*}}) : (tensor<4xf32>) -> tensor<4xf32>
  // CHECK:      mpmd.fragment<mesh="m2", origin=[]>
  // CHECK-NEXT:   "stablehlo.optimization_barrier"(%{{.*}}) : (tensor<4xf32>) -> tensor<4xf32>
  // CHECK-NOT:  mpmd.transfer
  %0 = mpmd.unassign %arg0 : (!m1) -> tensor<4xf32>
  %1 = mpmd.unassign %arg1 : (!m2) -> tensor<4xf32>
  %2 = "stablehlo.exponential"(%1) : (tensor<4xf32>) -> tensor<4xf32>
  %3:2 = "stablehlo.optimization_barrier"(%0, %2) : (tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
  %4 = mpmd.assign %3#0 : (tensor<4xf32>) -> !m1
  %5 = mpmd.assign %3#1 : (tensor<4xf32>) -> !m2
  %6 = mpmd.unassign %4 : (!m1) -> tensor<4xf32>
  %7 = mpmd.unassign %5 : (!m2) -> tensor<4xf32>
  return %6, %7 : tensor<4xf32>, tensor<4xf32>
}

// -----

!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>
!m2 = !mpmd.mesh_tensor<"m2", tensor<4xf32>>
!m3 = !mpmd.mesh_tensor<"m3", tensor<4xf32>>

// A value that m2 and then m3 need goes down one chain of transfers
// (m1 -> m2 -> m3), each link right after the previous one: m1 sends it once.
// A broadcast's operand is chained the same way.

// CHECK-LABEL: func.func @chained_transfers
func.func @chained_transfers(%arg0: !m1) -> (!m2, !m3, !m2, !m3)
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>, <"m3" : <["x"=2]>>>} {
  // CHECK-NEXT: %[[T2:.*]] = mpmd.transfer %arg0 : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m2", tensor<4xf32>>
  // CHECK-NEXT: %[[T3:.*]] = mpmd.transfer %[[T2]] : (!mpmd.mesh_tensor<"m2", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m3", tensor<4xf32>>
  // CHECK-NEXT: %[[E:.*]] = mpmd.fragment<mesh="m1", origin=[]> (%arg0)
  // CHECK:      %[[B2:.*]] = mpmd.transfer %[[E]] : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m2", tensor<4xf32>>
  // CHECK-NEXT: %[[B3:.*]] = mpmd.transfer %[[B2]] : (!mpmd.mesh_tensor<"m2", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m3", tensor<4xf32>>
  // CHECK-NEXT: return %[[T2]], %[[T3]], %[[B2]], %[[B3]]
  %0 = mpmd.unassign %arg0 : (!m1) -> tensor<4xf32>
  %1 = mpmd.assign %0 : (tensor<4xf32>) -> !m2
  %2 = mpmd.assign %0 : (tensor<4xf32>) -> !m3
  %3 = "stablehlo.exponential"(%0) : (tensor<4xf32>) -> tensor<4xf32>
  %4 = mpmd.broadcast %3 : tensor<4xf32>
  %5 = mpmd.assign %4 : (tensor<4xf32>) -> !m2
  %6 = mpmd.assign %4 : (tensor<4xf32>) -> !m3
  return %1, %2, %5, %6 : !m2, !m3, !m2, !m3
}

// -----

!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>
!m2 = !mpmd.mesh_tensor<"m2", tensor<4xf32>>

// jax.checkpoint's barrier over what a recomputation on m2 reads (a value of
// m1, which m2's forward reads too, and an input) runs on m2, where only
// labelled computations read it: the value crosses once and the barrier
// copies nothing on m1.

// CHECK-LABEL: func.func @barrier_runs_where_read
func.func @barrier_runs_where_read(%arg0: !m1, %arg1: tensor<4xf32>) -> (!m2, !m2)
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  // CHECK-NEXT: %[[T:.*]] = mpmd.transfer %arg0 : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m2", tensor<4xf32>>
  // CHECK-NOT:  mpmd.transfer
  // CHECK-NEXT: %[[G:.*]] = mpmd.fragment<mesh="m2", origin=["g"]> (%[[T]])
  // CHECK:      %[[B:.*]]:2 = mpmd.fragment<mesh="m2", origin=[]> (%arg1, %[[T]])
  // CHECK-NEXT:   "stablehlo.optimization_barrier"
  // CHECK:      %[[H:.*]] = mpmd.fragment<mesh="m2", origin=["h"]> (%[[B]]#0, %[[B]]#1)
  // CHECK-NOT:  mpmd.transfer
  // CHECK:      return %[[G]], %[[H]]
  %0 = mpmd.unassign %arg0 : (!m1) -> tensor<4xf32>
  %1 = mpmd.assign %0 : (tensor<4xf32>) -> !m2
  %2 = mpmd.fragment<mesh="m2", origin=["g"]> (%1) (%a: tensor<4xf32>) {
    %n = "stablehlo.negate"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %n : tensor<4xf32>
  } : (!m2) -> !m2
  %3:2 = "stablehlo.optimization_barrier"(%0, %arg1) : (tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
  %4 = mpmd.assign %3#0 : (tensor<4xf32>) -> !m2
  %5 = mpmd.assign %3#1 : (tensor<4xf32>) -> !m2
  %6 = mpmd.fragment<mesh="m2", origin=["h"]> (%4, %5) (%a: tensor<4xf32>, %b: tensor<4xf32>) {
    %s = "stablehlo.add"(%a, %b) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %s : tensor<4xf32>
  } : (!m2, !m2) -> !m2
  return %2, %6 : !m2, !m2
}

// -----

!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>
!m2 = !mpmd.mesh_tensor<"m2", tensor<4xf32>>

// The same with the forward's transfer already made for its label
// (-mpmd-introduce-transfers): the barrier reads that transfer.

// CHECK-LABEL: func.func @barrier_reads_the_labelled_transfer
func.func @barrier_reads_the_labelled_transfer(%arg0: !m1) -> (!m2, !m2)
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  // CHECK-NEXT: %[[T:.*]] = mpmd.transfer %arg0
  // CHECK-NEXT: %[[G:.*]] = mpmd.fragment<mesh="m2", origin=["g"]> (%[[T]])
  // CHECK-NOT:  mpmd.transfer
  // CHECK:      %[[B:.*]] = mpmd.fragment<mesh="m2", origin=[]> (%[[T]])
  // CHECK-NEXT:   "stablehlo.optimization_barrier"
  // CHECK:      %[[H:.*]] = mpmd.fragment<mesh="m2", origin=["h"]> (%[[B]])
  // CHECK-NOT:  mpmd.transfer
  %t = mpmd.transfer %arg0 : (!m1) -> !m2
  %0 = mpmd.fragment<mesh="m2", origin=["g"]> (%t) (%a: tensor<4xf32>) {
    %n = "stablehlo.negate"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %n : tensor<4xf32>
  } : (!m2) -> !m2
  %1 = mpmd.unassign %arg0 : (!m1) -> tensor<4xf32>
  %2 = "stablehlo.optimization_barrier"(%1) : (tensor<4xf32>) -> tensor<4xf32>
  %3 = mpmd.assign %2 : (tensor<4xf32>) -> !m2
  %4 = mpmd.fragment<mesh="m2", origin=["h"]> (%3) (%a: tensor<4xf32>) {
    %e = "stablehlo.exponential"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %e : tensor<4xf32>
  } : (!m2) -> !m2
  return %0, %4 : !m2, !m2
}
