// RUN: mpmd-opt %s -split-input-file -mpmd-infer-mesh-assignment='infer-transfers=true' | FileCheck %s

!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>
!m2 = !mpmd.mesh_tensor<"m2", tensor<4xf32>>

// The tied-embedding update: the gradient is the sum of contributions from
// two meshes, then the parameter is updated. The sum becomes a cross-mesh
// reduction computed once on the mesh of the parameter's update.

// CHECK-LABEL: func.func @tied_gradient
func.func @tied_gradient(%w: tensor<4xf32>, %arg0: !m1, %arg1: !m2) -> tensor<4xf32>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  // CHECK:      %[[T:.*]] = mpmd.transfer %arg2 : (!mpmd.mesh_tensor<"m2", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
  // CHECK:      %[[S:.*]] = mpmd.fragment<mesh="m1", origin=[]> (%arg1, %[[T]])
  // CHECK-NEXT:   "stablehlo.add"
  // CHECK:      %[[U:.*]] = mpmd.fragment<mesh="m1", origin=[]> (%arg0, %[[S]])
  // CHECK-NEXT:   "stablehlo.subtract"
  // CHECK:      return %[[U]] : !mpmd.mesh_tensor<"m1", tensor<4xf32>>
  %0 = mpmd.unassign %arg0 : (!m1) -> tensor<4xf32>
  %1 = mpmd.unassign %arg1 : (!m2) -> tensor<4xf32>
  %g = "stablehlo.add"(%0, %1) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %u = "stablehlo.subtract"(%w, %g) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %u : tensor<4xf32>
}

// -----

!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>
!m2 = !mpmd.mesh_tensor<"m2", tensor<4xf32>>

// A computed value needed on another mesh by an unlabelled op is transferred.

// CHECK-LABEL: func.func @inferred_transfer
func.func @inferred_transfer(%arg0: !m1, %arg1: !m2) -> tensor<4xf32>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  // CHECK:      %[[E:.*]] = mpmd.fragment<mesh="m2", origin=[]> (%arg1)
  // CHECK-NEXT:   "stablehlo.exponential"
  // CHECK:      %[[T:.*]] = mpmd.transfer %[[E]] : (!mpmd.mesh_tensor<"m2", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
  // CHECK:      mpmd.fragment<mesh="m1", origin=[]> (%arg0, %[[T]])
  // CHECK-NEXT:   "stablehlo.subtract"
  %0 = mpmd.unassign %arg0 : (!m1) -> tensor<4xf32>
  %1 = mpmd.unassign %arg1 : (!m2) -> tensor<4xf32>
  %2 = "stablehlo.exponential"(%1) : (tensor<4xf32>) -> tensor<4xf32>
  %3 = "stablehlo.subtract"(%0, %2) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %3 : tensor<4xf32>
}

// -----

!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>
!m2 = !mpmd.mesh_tensor<"m2", tensor<4xf32>>

// An inferred fragment takes its operands already on its mesh first, then
// the ones transferred there (each group in the op's order); its body keeps
// the op as it is.

// CHECK-LABEL: func.func @transferred_operands_last
func.func @transferred_operands_last(%arg0: !m1, %arg1: !m2) -> !m2
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  // CHECK-NEXT: %[[T:.*]] = mpmd.transfer %arg0 : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m2", tensor<4xf32>>
  // CHECK-NEXT: %[[S:.*]] = mpmd.fragment<mesh="m2", origin=[]> (%arg1, %[[T]]) {{.*}} (%arg2: tensor<4xf32>, %arg3: tensor<4xf32>)
  // CHECK-NEXT:   "stablehlo.subtract"(%arg3, %arg2)
  // CHECK:      return %[[S]]
  %0 = mpmd.unassign %arg0 : (!m1) -> tensor<4xf32>
  %1 = mpmd.unassign %arg1 : (!m2) -> tensor<4xf32>
  %2 = "stablehlo.subtract"(%0, %1) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %3 = mpmd.assign %2 : (tensor<4xf32>) -> !m2
  return %3 : !m2
}

// -----

!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>
!m2 = !mpmd.mesh_tensor<"m2", tensor<4xf32>>

// A value the labels already sent to m2 (for a named computation there) is
// read from that transfer by an inferred op on m2: it crosses once.

// CHECK-LABEL: func.func @reads_the_labelled_transfer
func.func @reads_the_labelled_transfer(%arg0: !m1, %arg1: !m2) -> (!m2, !m2)
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  // CHECK-NEXT: %[[T:.*]] = mpmd.transfer %arg0
  // CHECK-NOT:  mpmd.transfer
  // CHECK:      mpmd.fragment<mesh="m2", origin=[]> (%arg1, %[[T]])
  // CHECK-NEXT:   "stablehlo.multiply"
  // CHECK-NOT:  mpmd.transfer
  %t = mpmd.transfer %arg0 : (!m1) -> !m2
  %0 = mpmd.fragment<mesh="m2", origin=["g"]> (%t) (%a: tensor<4xf32>) {
    %n = "stablehlo.negate"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %n : tensor<4xf32>
  } : (!m2) -> !m2
  %1 = mpmd.unassign %arg0 : (!m1) -> tensor<4xf32>
  %2 = mpmd.unassign %arg1 : (!m2) -> tensor<4xf32>
  %3 = "stablehlo.multiply"(%1, %2) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %4 = mpmd.assign %3 : (tensor<4xf32>) -> !m2
  %5 = mpmd.fragment<mesh="m2", origin=["h"]> (%4) (%a: tensor<4xf32>) {
    %e = "stablehlo.exponential"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %e : tensor<4xf32>
  } : (!m2) -> !m2
  return %0, %5 : !m2, !m2
}

// -----

!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>
!m2 = !mpmd.mesh_tensor<"m2", tensor<4xf32>>

// Call sites passing a callee argument from different meshes: the argument
// takes one mesh and the other calls get theirs by a transfer.
// CHECK-LABEL: func.func public @conflicting_call_sites(
// CHECK-NEXT:    %[[T:.*]] = mpmd.transfer %arg1 : (!mpmd.mesh_tensor<"m2", {{.*}}>) -> !mpmd.mesh_tensor<"m1", {{.*}}>
// CHECK-NEXT:    %[[C0:.*]] = mpmd.call @f(%arg0) : (!mpmd.mesh_tensor<"m1", {{.*}}>) -> !mpmd.mesh_tensor<"m1", {{.*}}>
// CHECK-NEXT:    %[[C1:.*]] = mpmd.call @f(%[[T]])
// CHECK-NEXT:    return %[[C0]], %[[C1]]
// CHECK-LABEL: func.func private @f(
// CHECK-SAME:    %arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
func.func public @conflicting_call_sites(%arg0: !m1, %arg1: !m2) -> (tensor<4xf32>, tensor<4xf32>)
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  %0 = mpmd.unassign %arg0 : (!m1) -> tensor<4xf32>
  %1 = mpmd.call @f(%0) : (tensor<4xf32>) -> tensor<4xf32>
  %2 = mpmd.unassign %arg1 : (!m2) -> tensor<4xf32>
  %3 = mpmd.call @f(%2) : (tensor<4xf32>) -> tensor<4xf32>
  return %1, %3 : tensor<4xf32>, tensor<4xf32>
}
func.func private @f(%arg0: tensor<4xf32>) -> tensor<4xf32>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  %0 = "stablehlo.abs"(%arg0) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
