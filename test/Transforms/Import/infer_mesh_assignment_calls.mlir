// RUN: mpmd-opt %s -split-input-file -mpmd-infer-mesh-assignment | FileCheck %s
// annotate-only changes no signature, so it does not place calls:
// RUN: not mpmd-opt %s -split-input-file -mpmd-infer-mesh-assignment=annotate-only 2>&1 | FileCheck %s --check-prefix=ANNOTATE
// ANNOTATE: error: 'mpmd.call' to @stages passes tensors that are not on a mesh: annotate-only does not place calls

// Mesh inference through mpmd.call: each argument and result of a callee
// gets one mesh, shared by all its call sites; the calls then take and
// return mesh tensors, and each function is placed on its own.

!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>
!m2 = !mpmd.mesh_tensor<"m2", tensor<4xf32>>

// The callee's labels place its arguments and results; every call site
// passes and receives them on those meshes.
// CHECK-LABEL: func.func public @labelled_callee(
// CHECK-SAME:    %arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>>, %arg1: !mpmd.mesh_tensor<"m2", tensor<4xf32>>)
// CHECK-NEXT:    %[[C0:.*]] = mpmd.call @stages(%arg0, %arg1) : (!mpmd.mesh_tensor<"m1", {{.*}}>, !mpmd.mesh_tensor<"m2", {{.*}}>) -> !mpmd.mesh_tensor<"m2", {{.*}}>
// CHECK-NEXT:    %[[C1:.*]] = mpmd.call @stages(%arg0, %[[C0]])
// CHECK-NEXT:    return %[[C0]], %[[C1]]
// CHECK-LABEL: func.func private @stages(
// CHECK-SAME:    %arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>>, %arg1: !mpmd.mesh_tensor<"m2", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m2", tensor<4xf32>>
// CHECK-NEXT:    %[[F1:.*]] = mpmd.fragment<mesh="m1", origin=["stage1"]> (%arg0)
// CHECK:         %[[T:.*]] = mpmd.transfer %[[F1]]
// CHECK-NEXT:    %[[F2:.*]] = mpmd.fragment<mesh="m2", origin=["stage2"]> (%[[T]], %arg1)
// CHECK:         return %[[F2]]
func.func public @labelled_callee(%arg0: tensor<4xf32>, %arg1: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  %0 = mpmd.call @stages(%arg0, %arg1) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %1 = mpmd.call @stages(%arg0, %0) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %0, %1 : tensor<4xf32>, tensor<4xf32>
}
func.func private @stages(%arg0: tensor<4xf32>, %arg1: tensor<4xf32>) -> tensor<4xf32>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  %0 = mpmd.assign %arg0 : (tensor<4xf32>) -> !m1
  %1 = mpmd.fragment<mesh="m1", origin=["stage1"]> (%0) (%a: tensor<4xf32>) {
    %2 = stablehlo.abs %a : tensor<4xf32>
    mpmd.return %2 : tensor<4xf32>
  } : (!m1) -> !m1
  %3 = mpmd.transfer %1 : (!m1) -> !m2
  %4 = mpmd.assign %arg1 : (tensor<4xf32>) -> !m2
  %5 = mpmd.fragment<mesh="m2", origin=["stage2"]> (%3, %4) (%a: tensor<4xf32>, %b: tensor<4xf32>) {
    %6 = stablehlo.add %a, %b : tensor<4xf32>
    mpmd.return %6 : tensor<4xf32>
  } : (!m2, !m2) -> !m2
  %7 = mpmd.unassign %5 : (!m2) -> tensor<4xf32>
  return %7 : tensor<4xf32>
}

// -----

!m2 = !mpmd.mesh_tensor<"m2", tensor<4xf32>>

// Where the call sites have the operands places an unlabelled callee.
// CHECK-LABEL: func.func public @unlabelled_callee(
// CHECK-SAME:    -> !mpmd.mesh_tensor<"m2", tensor<4xf32>>
// CHECK-NEXT:    %[[C0:.*]] = mpmd.call @body(%arg0) : (!mpmd.mesh_tensor<"m2", {{.*}}>) -> !mpmd.mesh_tensor<"m2", {{.*}}>
// CHECK-NEXT:    %[[C1:.*]] = mpmd.call @body(%[[C0]])
// CHECK-NEXT:    return %[[C1]]
// CHECK-LABEL: func.func private @body(
// CHECK-SAME:    %arg0: !mpmd.mesh_tensor<"m2", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m2", tensor<4xf32>>
// CHECK-NEXT:    %[[F:.*]] = mpmd.fragment<mesh="m2", origin=[]> (%arg0)
// CHECK-NEXT:      stablehlo.multiply
// CHECK:         return %[[F]]
func.func public @unlabelled_callee(%arg0: !m2) -> tensor<4xf32>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  %0 = mpmd.unassign %arg0 : (!m2) -> tensor<4xf32>
  %1 = mpmd.call @body(%0) : (tensor<4xf32>) -> tensor<4xf32>
  %2 = mpmd.call @body(%1) : (tensor<4xf32>) -> tensor<4xf32>
  return %2 : tensor<4xf32>
}
func.func private @body(%arg0: tensor<4xf32>) -> tensor<4xf32>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  %0 = stablehlo.multiply %arg0, %arg0 : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>
!m2 = !mpmd.mesh_tensor<"m2", tensor<4xf32>>

// A result of one callee feeding another takes that callee's argument mesh
// (decided in an earlier round from where it is used).
// CHECK-LABEL: func.func public @sideways(
// CHECK-SAME:    %arg0: !mpmd.mesh_tensor<"m2", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m2", tensor<4xf32>>
// CHECK-NEXT:    %[[C0:.*]] = mpmd.call @first(%arg0) : (!mpmd.mesh_tensor<"m2", {{.*}}>) -> !mpmd.mesh_tensor<"m2", {{.*}}>
// CHECK-NEXT:    %[[C1:.*]] = mpmd.call @second(%[[C0]]) : (!mpmd.mesh_tensor<"m2", {{.*}}>) -> !mpmd.mesh_tensor<"m2", {{.*}}>
// CHECK-NEXT:    return %[[C1]]
// CHECK-LABEL: func.func private @first(
// CHECK-SAME:    %arg0: !mpmd.mesh_tensor<"m2", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m2", tensor<4xf32>>
// CHECK-LABEL: func.func private @second(
// CHECK-SAME:    %arg0: !mpmd.mesh_tensor<"m2", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m2", tensor<4xf32>>
func.func public @sideways(%arg0: tensor<4xf32>) -> !m2
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  %0 = mpmd.call @first(%arg0) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = mpmd.call @second(%0) : (tensor<4xf32>) -> tensor<4xf32>
  %2 = mpmd.assign %1 : (tensor<4xf32>) -> !m2
  return %2 : !m2
}
func.func private @first(%arg0: tensor<4xf32>) -> tensor<4xf32>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  %0 = stablehlo.negate %arg0 : tensor<4xf32>
  return %0 : tensor<4xf32>
}
func.func private @second(%arg0: tensor<4xf32>) -> tensor<4xf32>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  %0 = stablehlo.abs %arg0 : tensor<4xf32>
  return %0 : tensor<4xf32>
}
