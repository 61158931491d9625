// RUN: mpmd-opt %s -split-input-file -mpmd-remove-transfer-cycles | FileCheck %s

!a = !mpmd.mesh_tensor<"a", tensor<4xf32>>
!b = !mpmd.mesh_tensor<"b", tensor<4xf32>>
!c = !mpmd.mesh_tensor<"c", tensor<4xf32>>

// a -> b -> c -> a -> b: the value back on "a" is the input, the value back
// on "b" is the first transfer's; both closing transfers go.

// CHECK-LABEL: func.func @round_trips
// CHECK-NEXT: %[[B:.*]] = mpmd.transfer %arg0 : (!mpmd.mesh_tensor<"a", tensor<4xf32>>) -> !mpmd.mesh_tensor<"b", tensor<4xf32>>
// CHECK-NEXT: %[[C:.*]] = mpmd.transfer %[[B]] : (!mpmd.mesh_tensor<"b", tensor<4xf32>>) -> !mpmd.mesh_tensor<"c", tensor<4xf32>>
// CHECK-NEXT: return %arg0, %[[B]], %[[C]]
func.func @round_trips(%arg0: !a) -> (!a, !b, !c)
    attributes {topology = #mpmd.topology<<"a" : <["x"=2]>>, <"b" : <["x"=2]>>, <"c" : <["x"=2]>>>} {
  %0 = mpmd.transfer %arg0 : (!a) -> !b
  %1 = mpmd.transfer %0 : (!b) -> !c
  %2 = mpmd.transfer %1 : (!c) -> !a
  %3 = mpmd.transfer %2 : (!a) -> !b
  return %2, %3, %1 : !a, !b, !c
}

// -----

!a = !mpmd.mesh_tensor<"a", tensor<4xf32>>
!ah = !mpmd.mesh_tensor<"a", tensor<4xf32>, memory_kind="pinned_host">
!b = !mpmd.mesh_tensor<"b", tensor<4xf32>>

// Through host memory the round trip is an offload: kept. Back with another
// type (here: in host memory) it is not the same value: kept.

// CHECK-LABEL: func.func @offload_is_kept
// CHECK-NEXT: %[[H:.*]] = mpmd.transfer %arg0
// CHECK-NEXT: %[[D:.*]] = mpmd.transfer %[[H]]
// CHECK-NEXT: return %[[D]]
func.func @offload_is_kept(%arg0: !a) -> !a
    attributes {topology = #mpmd.topology<<"a" : <["x"=2]>>, <"b" : <["x"=2]>>>} {
  %0 = mpmd.transfer %arg0 : (!a) -> !ah
  %1 = mpmd.transfer %0 : (!ah) -> !a
  return %1 : !a
}

// CHECK-LABEL: func.func @other_type_is_kept
// CHECK-NEXT: %[[B:.*]] = mpmd.transfer %arg0
// CHECK-NEXT: %[[H:.*]] = mpmd.transfer %[[B]]
// CHECK-NEXT: return %[[H]]
func.func @other_type_is_kept(%arg0: !a) -> !ah
    attributes {topology = #mpmd.topology<<"a" : <["x"=2]>>, <"b" : <["x"=2]>>>} {
  %0 = mpmd.transfer %arg0 : (!a) -> !b
  %1 = mpmd.transfer %0 : (!b) -> !ah
  return %1 : !ah
}
