// RUN: mpmd-opt %s -split-input-file -mpmd-infer-mesh-assignment='input-assignment=0@m1#pinned_host,1@m1#device output-assignment=0@m1#pinned_host,1@m1#device' | FileCheck %s

// Inputs and outputs assigned to a memory kind (`0@m1#pinned_host`) carry it
// in their types. An input in host memory is copied to device memory once, at
// the entry, for its readers; an output goes to host memory by a transfer
// before the return. `#device` is the default memory, written in the type.

// CHECK-LABEL: func.func @io_memory_kinds
// CHECK-SAME: (%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>, memory_kind="pinned_host">, %arg1: !mpmd.mesh_tensor<"m1", tensor<4xf32>, memory_kind="device">)
// CHECK-SAME: -> (!mpmd.mesh_tensor<"m1", tensor<4xf32>, memory_kind="pinned_host">, !mpmd.mesh_tensor<"m1", tensor<4xf32>, memory_kind="device">)
// CHECK-NEXT: %[[D:.*]] = mpmd.transfer %arg0 : (!mpmd.mesh_tensor<"m1", tensor<4xf32>, memory_kind="pinned_host">) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
// CHECK-NEXT: %[[ADD:.*]] = mpmd.fragment<mesh="m1", origin=[]> (%[[D]], %arg1)
// CHECK:      %[[NEG:.*]] = mpmd.fragment<mesh="m1", origin=[]> (%[[ADD]])
// CHECK:      } : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>, memory_kind="device">
// CHECK-NEXT: %[[H:.*]] = mpmd.transfer %[[ADD]] : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>, memory_kind="pinned_host">
// CHECK-NEXT: return %[[H]], %[[NEG]]
func.func @io_memory_kinds(%arg0: tensor<4xf32>, %arg1: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  %0 = "stablehlo.add"(%arg0, %arg1) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %1 = "stablehlo.negate"(%0) : (tensor<4xf32>) -> tensor<4xf32>
  return %0, %1 : tensor<4xf32>, tensor<4xf32>
}

// -----

// An `mhlo.memory_kind` that agrees with the assignment is dropped: the type
// carries the memory kind from now on.

// CHECK-LABEL: func.func @agreeing_attribute
// CHECK-SAME: (%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>, memory_kind="pinned_host">, %arg1: !mpmd.mesh_tensor<"m1", tensor<4xf32>, memory_kind="device">)
// CHECK-SAME: -> (!mpmd.mesh_tensor<"m1", tensor<4xf32>, memory_kind="pinned_host">, !mpmd.mesh_tensor<"m1", tensor<4xf32>, memory_kind="device">)
// CHECK-NOT:  mhlo.memory_kind
func.func @agreeing_attribute(%arg0: tensor<4xf32> {mhlo.memory_kind = "pinned_host"}, %arg1: tensor<4xf32>)
    -> (tensor<4xf32> {mhlo.memory_kind = "pinned_host"}, tensor<4xf32> {mhlo.memory_kind = "device"})
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  %0 = "stablehlo.add"(%arg0, %arg1) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %1 = "stablehlo.negate"(%0) : (tensor<4xf32>) -> tensor<4xf32>
  return %0, %1 : tensor<4xf32>, tensor<4xf32>
}

