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

// An origin is also read without angle brackets (jaxlib's body); it is
// printed with them, the only standalone form a parser can read back.
// CHECK-LABEL: func.func @origin_bodies
// CHECK-SAME: a = #mpmd.origin<"user_in">
func.func @origin_bodies() attributes {a = #mpmd.origin<"user_in">} {
  return
}

// Meshes with origins: same syntax as jaxlib's (mesh-inference use/src sets).
// CHECK-LABEL: func.func @meshes_with_origins
// CHECK-SAME: a = #mpmd.meshes_with_origins<"m1", "m2"["abc"]>
// CHECK-SAME: b = #mpmd.meshes_with_origins<"*">
// CHECK-SAME: c = #mpmd.meshes_with_origins<>
// CHECK-SAME: d = #mpmd.meshes_with_origins<"m1"["a", "b"], "m2"["c"]>
// CHECK-SAME: e = #mpmd.meshes_with_origins<"m3"["origin1", "origin2"]>
// CHECK-SAME: f = #mpmd.meshes_with_origins<"m 1"["a b", "c\22d"], "m1", "m1">
// CHECK-SAME: g = #mpmd.meshes_with_origins<"">
// CHECK-SAME: h = #mpmd.meshes_with_origins<"*"["x"]>
func.func @meshes_with_origins() attributes {
    a = #mpmd.meshes_with_origins<"m1", "m2"["abc"]>,
    b = #mpmd.meshes_with_origins<"*">,
    c = #mpmd.meshes_with_origins<>,
    d = #mpmd.meshes_with_origins<"m1"["a","b"],"m2"["c"]>,
    e = #mpmd.meshes_with_origins<"m3"["origin1","origin2"]>,
    f = #mpmd.meshes_with_origins<"m 1"["a b", "c\"d"], "m1", "m1">,
    g = #mpmd.meshes_with_origins<"">,
    h = #mpmd.meshes_with_origins< "*" [ "x" ] >} {
  return
}

// A single mesh with origins, standalone: `<...>` around the short form.
// CHECK-LABEL: func.func @mesh_with_origins
// CHECK-SAME: a = #mpmd.mesh_with_origins<"m1">
// CHECK-SAME: b = #mpmd.mesh_with_origins<"m2"["user_in", "transfer"]>
// CHECK-SAME: c = #mpmd.mesh_with_origins<"*">
func.func @mesh_with_origins() attributes {
    a = #mpmd.mesh_with_origins<"m1">,
    b = #mpmd.mesh_with_origins<"m2"["user_in", "transfer"]>,
    c = #mpmd.mesh_with_origins<"*">} {
  return
}

// Mesh-inference sets on StableHLO ops (unregistered, generic form).
// CHECK-LABEL: func.func @use_and_src_sets
// CHECK: "stablehlo.add"(%arg0, %arg0) {mpmd.src_set = #mpmd.meshes_with_origins<"m1"["user_in"]>, mpmd.use_set = #mpmd.meshes_with_origins<"m3">}
// CHECK: "stablehlo.abs"(%0) {mpmd.use_set = #mpmd.meshes_with_origins<>}
func.func @use_and_src_sets(%arg0: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = "stablehlo.add"(%arg0, %arg0) {mpmd.use_set = #mpmd.meshes_with_origins<"m3">, mpmd.src_set = #mpmd.meshes_with_origins<"m1"["user_in"]>} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = "stablehlo.abs"(%0) {mpmd.use_set = #mpmd.meshes_with_origins<>} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return %1 : tensor<4x8xf32>
}

// The pieces of meshes and shardings, standalone: `<...>` around the form
// they have inside a mesh or a sharding.
// CHECK-LABEL: func.func @standalone_mesh_and_sharding_pieces
// CHECK-SAME: a = #mpmd.mesh_axis<"x"=2>
// CHECK-SAME: b = #mpmd.axis_ref<"x">
// CHECK-SAME: c = #mpmd.axis_ref<"y":(2)4>
// CHECK-SAME: d = #mpmd.dim_sharding<{"x", ?}p1>
// CHECK-SAME: e = #mpmd.dim_sharding<{}>
// CHECK-SAME: f = #mpmd.dim_sharding<{?}>
func.func @standalone_mesh_and_sharding_pieces() attributes {
    a = #mpmd.mesh_axis<"x"=2>,
    b = #mpmd.axis_ref<"x">,
    c = #mpmd.axis_ref<"y":(2)4>,
    d = #mpmd.dim_sharding<{"x", ?}p1>,
    e = #mpmd.dim_sharding<{}>,
    f = #mpmd.dim_sharding<{?}>} {
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
