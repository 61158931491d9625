// RUN: mpmd-opt %s | FileCheck %s
// RUN: mpmd-opt %s | mpmd-opt | FileCheck %s
// RUN: mpmd-opt %s --mlir-print-op-generic | mpmd-opt | FileCheck %s

!m1_t = !mpmd.mesh_tensor<"m1", tensor<4x8xf32>>
!m2_t = !mpmd.mesh_tensor<"m2", tensor<4x8xf32>>

// CHECK-LABEL: func.func @transfer_between_meshes
// CHECK-SAME: (%arg0: !mpmd.mesh_tensor<"m1", tensor<4x8xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4x8xf32>>
func.func @transfer_between_meshes(%arg0: !m1_t) -> !m1_t
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  // CHECK-NEXT: %[[T0:.*]] = mpmd.transfer %arg0 : (!mpmd.mesh_tensor<"m1", tensor<4x8xf32>>) -> !mpmd.mesh_tensor<"m2", tensor<4x8xf32>>
  // CHECK-NEXT: %[[T1:.*]] = mpmd.transfer %[[T0]] : (!mpmd.mesh_tensor<"m2", tensor<4x8xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4x8xf32>>
  // CHECK-NEXT: return %[[T1]] : !mpmd.mesh_tensor<"m1", tensor<4x8xf32>>
  %0 = mpmd.transfer %arg0 : (!m1_t) -> !m2_t
  %1 = mpmd.transfer %0 : (!m2_t) -> !m1_t
  return %1 : !m1_t
}

// A transfer on the same mesh may change the sharding and the memory kind.
// CHECK-LABEL: func.func @reshard_and_memory_kind
func.func @reshard_and_memory_kind(%arg0: !mpmd.mesh_tensor<"m1", tensor<4x8xf32>, sharding=<@mesh, [{"x"}, {?}]>>)
    -> !mpmd.mesh_tensor<"m1", tensor<4x8xf32>, memory_kind="pinned_host">
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2, "y"=2]>>>} {
  // CHECK-NEXT: %[[T0:.*]] = mpmd.transfer %arg0 : (!mpmd.mesh_tensor<"m1", tensor<4x8xf32>, sharding=<@mesh, [{"x"}, {?}]>>) -> !mpmd.mesh_tensor<"m1", tensor<4x8xf32>, sharding=<@mesh, [{}, {"x", "y"}]>>
  // CHECK-NEXT: %[[T1:.*]] = mpmd.transfer {foo} %[[T0]] : (!mpmd.mesh_tensor<"m1", tensor<4x8xf32>, sharding=<@mesh, [{}, {"x", "y"}]>>) -> !mpmd.mesh_tensor<"m1", tensor<4x8xf32>, memory_kind="pinned_host">
  // CHECK-NEXT: return %[[T1]]
  %0 = mpmd.transfer %arg0 : (!mpmd.mesh_tensor<"m1", tensor<4x8xf32>, sharding=<@mesh, [{"x"}, {?}]>>) -> !mpmd.mesh_tensor<"m1", tensor<4x8xf32>, sharding=<@mesh, [{}, {"x", "y"}]>>
  %1 = mpmd.transfer {foo} %0 : (!mpmd.mesh_tensor<"m1", tensor<4x8xf32>, sharding=<@mesh, [{}, {"x", "y"}]>>) -> !mpmd.mesh_tensor<"m1", tensor<4x8xf32>, memory_kind="pinned_host">
  return %1 : !mpmd.mesh_tensor<"m1", tensor<4x8xf32>, memory_kind="pinned_host">
}

// A sharded dimension that its axes divide evenly (a sub-axis counts by its
// size: 4 over "x":(1)4), with a memory kind after the sharding.
// CHECK-LABEL: func.func @evenly_sharded_sub_axis
func.func @evenly_sharded_sub_axis(%arg0: !mpmd.mesh_tensor<"m1", tensor<4x8xf32>, sharding=<@mesh, [{"x":(1)4}, {}]>>)
    -> !mpmd.mesh_tensor<"m2", tensor<4x8xf32>, sharding=<@mesh, [{}, {"x"}]>, memory_kind="device">
    attributes {topology = #mpmd.topology<<"m1" : <["x"=16]>>, <"m2" : <["x"=8]>>>} {
  // CHECK-NEXT: %[[T:.*]] = mpmd.transfer %arg0 : (!mpmd.mesh_tensor<"m1", tensor<4x8xf32>, sharding=<@mesh, [{"x":(1)4}, {}]>>) -> !mpmd.mesh_tensor<"m2", tensor<4x8xf32>, sharding=<@mesh, [{}, {"x"}]>, memory_kind="device">
  // CHECK-NEXT: return %[[T]]
  %0 = mpmd.transfer %arg0 : (!mpmd.mesh_tensor<"m1", tensor<4x8xf32>, sharding=<@mesh, [{"x":(1)4}, {}]>>) -> !mpmd.mesh_tensor<"m2", tensor<4x8xf32>, sharding=<@mesh, [{}, {"x"}]>, memory_kind="device">
  return %0 : !mpmd.mesh_tensor<"m2", tensor<4x8xf32>, sharding=<@mesh, [{}, {"x"}]>, memory_kind="device">
}

// A function argument marked as device memory by attribute is read as it is.
// CHECK-LABEL: func.func @argument_marked_device
func.func @argument_marked_device(%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>> {mhlo.memory_kind = "device"}) -> !mpmd.mesh_tensor<"m2", tensor<4xf32>>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  // CHECK-NEXT: %[[T:.*]] = mpmd.transfer %arg0
  // CHECK-NEXT: return %[[T]]
  %0 = mpmd.transfer %arg0 : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m2", tensor<4xf32>>
  return %0 : !mpmd.mesh_tensor<"m2", tensor<4xf32>>
}
