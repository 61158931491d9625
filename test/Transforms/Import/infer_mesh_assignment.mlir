// RUN: mpmd-opt %s -split-input-file -mpmd-infer-mesh-assignment | FileCheck %s

!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>
!m2 = !mpmd.mesh_tensor<"m2", tensor<4xf32>>

// An op used on one mesh runs there; its operand from the other mesh is
// transferred. Function inputs go to the mesh that uses them.

// CHECK-LABEL: func.func @used_on_one_mesh
// CHECK-SAME: (%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m2", tensor<4xf32>>
func.func @used_on_one_mesh(%arg0: tensor<4xf32>) -> tensor<4xf32>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  // CHECK-NEXT: %[[F:.*]] = mpmd.fragment<mesh="m1", origin=["f"]> (%arg0)
  // CHECK:      %[[T:.*]] = mpmd.transfer %[[F]] : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m2", tensor<4xf32>>
  // CHECK-NEXT: %[[I:.*]] = mpmd.fragment<mesh="m2", origin=[]> (%[[T]]) {mpmd.inferred_by = ["mpmd-infer-mesh-assignment"]} (%[[A:.*]]: tensor<4xf32>) {
  // CHECK-NEXT:   %[[N:.*]] = "stablehlo.negate"(%[[A]])
  // CHECK-NEXT:   mpmd.return %[[N]]
  // CHECK:      %[[G:.*]] = mpmd.fragment<mesh="m2", origin=["g"]> (%[[I]])
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

