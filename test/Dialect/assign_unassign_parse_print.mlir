// RUN: mpmd-opt %s | FileCheck %s
// RUN: mpmd-opt %s | mpmd-opt | FileCheck %s
// RUN: mpmd-opt %s --mlir-print-op-generic | mpmd-opt | FileCheck %s

// `mpmd.assign` / `mpmd.unassign` move between local tensors and mesh tensors
// of the same global type; the optional `origin` string is printed in the
// attribute dictionary before the operand.

// CHECK-LABEL: func.func @assign_unassign
func.func @assign_unassign(%arg0: tensor<4x8xf32>) -> tensor<4x8xf32>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["y"=4]>>>} {
  // CHECK-NEXT: %[[A0:.*]] = mpmd.assign {origin = "f1"} %arg0 : (tensor<4x8xf32>) -> !mpmd.mesh_tensor<"m1", tensor<4x8xf32>>
  // CHECK-NEXT: %[[A1:.*]] = mpmd.assign %arg0 : (tensor<4x8xf32>) -> !mpmd.mesh_tensor<"m2", tensor<4x8xf32>>
  // CHECK-NEXT: %[[U0:.*]] = mpmd.unassign {origin = "f1"} %[[A0]] : (!mpmd.mesh_tensor<"m1", tensor<4x8xf32>>) -> tensor<4x8xf32>
  // CHECK-NEXT: %[[U1:.*]] = mpmd.unassign %[[A1]] : (!mpmd.mesh_tensor<"m2", tensor<4x8xf32>>) -> tensor<4x8xf32>
  // CHECK-NEXT: return %[[U0]] : tensor<4x8xf32>
  %0 = mpmd.assign {origin = "f1"} %arg0 : (tensor<4x8xf32>) -> !mpmd.mesh_tensor<"m1", tensor<4x8xf32>>
  %1 = mpmd.assign %arg0 : (tensor<4x8xf32>) -> !mpmd.mesh_tensor<"m2", tensor<4x8xf32>>
  %2 = mpmd.unassign {origin = "f1"} %0 : (!mpmd.mesh_tensor<"m1", tensor<4x8xf32>>) -> tensor<4x8xf32>
  %3 = mpmd.unassign %1 : (!mpmd.mesh_tensor<"m2", tensor<4x8xf32>>) -> tensor<4x8xf32>
  return %2 : tensor<4x8xf32>
}

// Inherent `origin` and discardable attributes share the dictionary.
// CHECK-LABEL: func.func @assign_unassign_memory_kind
func.func @assign_unassign_memory_kind(%arg0: tensor<4x8xf32>) -> tensor<4x8xf32>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // CHECK-NEXT: %[[A:.*]] = mpmd.assign {foo, origin = "user"} %arg0 : (tensor<4x8xf32>) -> !mpmd.mesh_tensor<"m1", tensor<4x8xf32>, memory_kind="device">
  // CHECK-NEXT: %[[U:.*]] = mpmd.unassign {bar = 1 : i64} %[[A]] : (!mpmd.mesh_tensor<"m1", tensor<4x8xf32>, memory_kind="device">) -> tensor<4x8xf32>
  %0 = mpmd.assign {origin = "user", foo} %arg0 : (tensor<4x8xf32>) -> !mpmd.mesh_tensor<"m1", tensor<4x8xf32>, memory_kind="device">
  %1 = mpmd.unassign {bar = 1} %0 : (!mpmd.mesh_tensor<"m1", tensor<4x8xf32>, memory_kind="device">) -> tensor<4x8xf32>
  return %1 : tensor<4x8xf32>
}
