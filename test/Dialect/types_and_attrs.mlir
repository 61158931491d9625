// RUN: mpmd-opt %s | FileCheck %s
// RUN: mpmd-opt %s | mpmd-opt | FileCheck %s
// RUN: mpmd-opt %s --mlir-print-op-generic | mpmd-opt | FileCheck %s

//===----------------------------------------------------------------------===//
// !mpmd.mesh_tensor
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @mesh_tensor_plain
// CHECK-SAME: (%arg0: !mpmd.mesh_tensor<"m1", tensor<4x8xf32>>, %arg1: !mpmd.mesh_tensor<"m1", tensor<f32>>, %arg2: !mpmd.mesh_tensor<"other mesh", tensor<?x4xi8>>)
func.func @mesh_tensor_plain(%arg0: !mpmd.mesh_tensor<"m1", tensor<4x8xf32>>,
                             %arg1: !mpmd.mesh_tensor<"m1", tensor<f32>>,
                             %arg2: !mpmd.mesh_tensor<"other mesh", tensor<?x4xi8>>) {
  return
}

// CHECK-LABEL: func.func @mesh_tensor_sharding
// CHECK-SAME: %arg0: !mpmd.mesh_tensor<"m1", tensor<4x8xf32>, sharding=<@mesh, [{"x":(1)2, ?}p1, {"y"}], replicated={"z"}, unreduced={"w"}>>
// CHECK-SAME: %arg1: !mpmd.mesh_tensor<"m1", tensor<4x8xf32>, sharding=<@mesh, [{?}, {}]>>
// CHECK-SAME: %arg2: !mpmd.mesh_tensor<"m1", tensor<4x8x2xf32>, sharding=<@mesh, [{"x", "y"}p0, {?}p2, {"z":(2)4}]>>
// CHECK-SAME: %arg3: !mpmd.mesh_tensor<"m1", tensor<f32>, sharding=<@mesh, []>>
// CHECK-SAME: %arg4: !mpmd.mesh_tensor<"m1", tensor<4xf32>, sharding=<@mesh, [{}], replicated={"x", "y":(1)2}>>
// CHECK-SAME: %arg5: !mpmd.mesh_tensor<"m1", tensor<4xf32>, sharding=<@other_mesh, [{"x"}], unreduced={"y", "z"}>>
func.func @mesh_tensor_sharding(
    %arg0: !mpmd.mesh_tensor<"m1", tensor<4x8xf32>, sharding=<@mesh, [{"x":(1)2, ?}p1, {"y"}], replicated={"z"}, unreduced={"w"}>>,
    %arg1: !mpmd.mesh_tensor<"m1", tensor<4x8xf32>, sharding=<@mesh, [{?}, {}]>>,
    %arg2: !mpmd.mesh_tensor<"m1", tensor<4x8x2xf32>, sharding=<@mesh, [{"x", "y"}p0, {?}p2, {"z":(2)4}]>>,
    %arg3: !mpmd.mesh_tensor<"m1", tensor<f32>, sharding=<@mesh, []>>,
    %arg4: !mpmd.mesh_tensor<"m1", tensor<4xf32>, sharding=<@mesh, [{}], replicated={"x", "y":(1)2}>>,
    %arg5: !mpmd.mesh_tensor<"m1", tensor<4xf32>, sharding=<@other_mesh, [{"x"}], unreduced={"y", "z"}>>) {
  return
}

// CHECK-LABEL: func.func @mesh_tensor_memory_kind
// CHECK-SAME: %arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>, memory_kind="device">
// CHECK-SAME: %arg1: !mpmd.mesh_tensor<"m1", tensor<4xf32>, memory_kind="pinned_host">
// CHECK-SAME: %arg2: !mpmd.mesh_tensor<"m1", tensor<4xf32>, memory_kind="unpinned_host">
// CHECK-SAME: %arg3: !mpmd.mesh_tensor<"m1", tensor<4xf32>, sharding=<@mesh, [{"x"}]>, memory_kind="pinned_host">
// CHECK-SAME: %arg4: !mpmd.mesh_tensor<"m1", tensor<4xf32>, sharding=<@mesh, [{?}]>, memory_kind="device">
func.func @mesh_tensor_memory_kind(
    %arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>, memory_kind="device">,
    %arg1: !mpmd.mesh_tensor<"m1", tensor<4xf32>, memory_kind="pinned_host">,
    %arg2: !mpmd.mesh_tensor<"m1", tensor<4xf32>, memory_kind="unpinned_host">,
    %arg3: !mpmd.mesh_tensor<"m1", tensor<4xf32>, sharding=<@mesh, [{"x"}]>, memory_kind="pinned_host">,
    // Parsed in either order; printed sharding first.
    %arg4: !mpmd.mesh_tensor<"m1", tensor<4xf32>, memory_kind="device", sharding=<@mesh, [{?}]>>) {
  return
}

// Type aliases are resolved on parse and not re-emitted.
!alias_t = !mpmd.mesh_tensor<"m2", tensor<2x3xbf16>, sharding=<@mesh, [{}, {"x"}]>>
// CHECK-LABEL: func.func @mesh_tensor_alias
// CHECK-SAME: (%arg0: !mpmd.mesh_tensor<"m2", tensor<2x3xbf16>, sharding=<@mesh, [{}, {"x"}]>>) -> !mpmd.mesh_tensor<"m2", tensor<2x3xbf16>, sharding=<@mesh, [{}, {"x"}]>>
func.func @mesh_tensor_alias(%arg0: !alias_t) -> !alias_t {
  return %arg0 : !alias_t
}

//===----------------------------------------------------------------------===//
// Attributes
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @topology
// CHECK-SAME: attributes {topology = #mpmd.topology<<"m1" : <["x"=2, "y"=4]>>, <"m2" : <["z"=3]>>, <"m3" : <[]>>>}
func.func @topology() attributes {topology = #mpmd.topology<<"m1": <["x"=2, "y"=4]>>, <"m2": <["z"=3]>>, <"m3" : <[]>>>} {
  return
}

// CHECK-LABEL: func.func @topology_with_device_ids
// CHECK-SAME: attributes {topology = #mpmd.topology<<"m1" : <["x"=2, "y"=2], device_ids=[3, 2, 1, 0]>>, <"m2" : <["x"=2], device_ids=[4, 5]>>>}
func.func @topology_with_device_ids() attributes {
    topology = #mpmd.topology<
      <"m1" : <["x"=2, "y"=2], device_ids=[3, 2, 1, 0]>>,
      <"m2" : <["x"=2], device_ids=[4, 5]>>
    >} {
  return
}

// CHECK-LABEL: func.func @meshes
// CHECK-SAME: a = #mpmd.mesh<["x"=2]>
// CHECK-SAME: b = #mpmd.mesh<[]>
// CHECK-SAME: c = #mpmd.mesh<[], device_ids=[7]>
// CHECK-SAME: d = #mpmd.named_mesh<"m" : <["x"=2, "y"=4], device_ids=[7, 6, 5, 4, 3, 2, 1, 0]>>
// CHECK-SAME: e = #mpmd.named_mesh<"n" : <["a"=1]>>
func.func @meshes() attributes {
    a = #mpmd.mesh<["x"=2]>,
    b = #mpmd.mesh<[]>,
    c = #mpmd.mesh<[], device_ids=[7]>,
    d = #mpmd.named_mesh<"m" : <["x"=2, "y"=4], device_ids=[7,6,5,4,3,2,1,0]>>,
    e = #mpmd.named_mesh<"n": <["a"=1]>>} {
  return
}

// CHECK-LABEL: func.func @user_origins
// CHECK-SAME: a = #mpmd.user_origin<"stage0">
// CHECK-SAME: b = #mpmd.user_origin<"stage0">
// CHECK-SAME: c = #mpmd.user_origin<"stage0"(1)>
// CHECK-SAME: d = #mpmd.user_origin<"stage 1"(12)>
// CHECK-SAME: e = [#mpmd.user_origin<"f"(1)>, #mpmd.user_origin<"g">]
func.func @user_origins() attributes {
    a = #mpmd.user_origin<"stage0">,
    b = #mpmd.user_origin<"stage0"(0)>,
    c = #mpmd.user_origin<"stage0"(1)>,
    d = #mpmd.user_origin<"stage 1"(12)>,
    e = [#mpmd.user_origin<"f"(1)>, #mpmd.user_origin<"g">]} {
  return
}

// CHECK-LABEL: func.func @origins
// CHECK-SAME: a = #mpmd.origin<"label">
// CHECK-SAME: b = #mpmd.origin<"">
// CHECK-SAME: c = #mpmd.origin<"with \22quotes\22">
func.func @origins() attributes {
    a = #mpmd.origin<"label">,
    b = #mpmd.origin<"">,
    c = #mpmd.origin<"with \"quotes\"">} {
  return
}

// CHECK-LABEL: func.func @reductions
// CHECK-SAME: a = #mpmd.reduction<none>
// CHECK-SAME: b = #mpmd.reduction<add>
// CHECK-SAME: c = #mpmd.reduction<max>
// CHECK-SAME: d = #mpmd.reduction<min>
// CHECK-SAME: e = #mpmd.reduction<mul>
// CHECK-SAME: f = #mpmd.reduction<or>
// CHECK-SAME: g = #mpmd.reduction<and>
func.func @reductions() attributes {
    a = #mpmd.reduction<none>, b = #mpmd.reduction<add>, c = #mpmd.reduction<max>,
    d = #mpmd.reduction<min>, e = #mpmd.reduction<mul>, f = #mpmd.reduction<or>,
    g = #mpmd.reduction<and>} {
  return
}

// CHECK-LABEL: func.func @standalone_sharding
// CHECK-SAME: a = #mpmd.sharding<@mesh, [{"x":(1)2, ?}p1, {"y"}], replicated={"z"}, unreduced={"w"}>
// CHECK-SAME: b = #mpmd.sharding<@mesh, []>
func.func @standalone_sharding() attributes {
    a = #mpmd.sharding<@mesh, [{"x":(1)2, ?}p1, {"y"}], replicated={"z"}, unreduced={"w"}>,
    b = #mpmd.sharding<@mesh, []>} {
  return
}

// Mesh tensors of a topology, as the arguments of an MPMD entry function.
// CHECK-LABEL: func.func @mpmd_main
// CHECK-SAME: (%arg0: !mpmd.mesh_tensor<"m1", tensor<8x16xf32>, sharding=<@mesh, [{"x"}, {}]>>, %arg1: !mpmd.mesh_tensor<"m2", tensor<8xf32>>)
// CHECK-SAME: attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>}
func.func @mpmd_main(%arg0: !mpmd.mesh_tensor<"m1", tensor<8x16xf32>, sharding=<@mesh, [{"x"}, {}]>>,
                     %arg1: !mpmd.mesh_tensor<"m2", tensor<8xf32>>)
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  return
}
