// RUN: mpmd-opt %s -split-input-file -verify-diagnostics

// Errors of the attribute and type parsers and verifiers
// (lib/Dialect/MpmdAttrs.cpp, lib/Dialect/MpmdTypes.cpp).

//===----------------------------------------------------------------------===//
// Mesh axes and meshes
//===----------------------------------------------------------------------===//

// expected-error @+1 {{mesh axis name must not be empty}}
func.func @axis_empty_name() attributes {mesh = #mpmd.mesh<[""=2]>} { return }

// -----

// expected-error @+1 {{mesh axis "x" must have a positive size, got 0}}
func.func @axis_zero_size() attributes {mesh = #mpmd.mesh<["x"=0]>} { return }

// -----

// expected-error @+1 {{mesh axis "y" must have a positive size, got -2}}
func.func @axis_negative_size() attributes {mesh = #mpmd.mesh<["x"=2, "y"=-2]>} { return }

// -----

// expected-error @+1 {{mesh has duplicate axis "x"}}
func.func @duplicate_axis() attributes {mesh = #mpmd.mesh<["x"=2, "y"=2, "x"=4]>} { return }

// -----

// expected-error @+1 {{mesh axes hold more than 2147483648 devices (axis "z" of size 4294967296 after 1024 devices)}}
func.func @too_many_devices() attributes {mesh = #mpmd.mesh<["x"=1024, "z"=4294967296]>} { return }

// -----

// expected-error @+1 {{mesh device id -1 is negative}}
func.func @negative_device_id() attributes {mesh = #mpmd.mesh<["x"=2], device_ids=[0, -1]>} { return }

// -----

// The largest device id is an id like any other (not a hash table's empty key).
func.func @largest_device_id() attributes {mesh = #mpmd.mesh<["x"=2], device_ids=[0, 9223372036854775807]>, topology = #mpmd.topology<<"m0" : <["x"=1], device_ids=[9223372036854775807]>>, <"m1" : <["x"=1], device_ids=[0]>>>} { return }

// -----

// expected-error @+1 {{mesh lists device id 3 twice}}
func.func @duplicate_device_id() attributes {mesh = #mpmd.mesh<["x"=2], device_ids=[3, 3]>} { return }

// -----

// expected-error @+1 {{device id 1 is in both mesh "a" and mesh "b": meshes of a topology use disjoint devices}}
func.func @overlapping_meshes() attributes {topology = #mpmd.topology<<"a" : <["x"=2], device_ids=[0, 1]>>, <"b" : <["x"=2], device_ids=[1, 2]>>>} { return }

// -----

// expected-error @+1 {{mesh has 3 device ids but its axes hold 4 devices}}
func.func @device_ids_count() attributes {mesh = #mpmd.mesh<["x"=2, "y"=2], device_ids=[0, 1, 2]>} { return }

// -----

// A mesh without axes holds one device.
// expected-error @+1 {{mesh has 2 device ids but its axes hold 1 devices}}
func.func @device_ids_count_no_axes() attributes {mesh = #mpmd.mesh<[], device_ids=[0, 1]>} { return }

// -----

// expected-error @+1 {{expected 'device_ids'}}
func.func @device_ids_keyword() attributes {mesh = #mpmd.mesh<["x"=2], devices=[0, 1]>} { return }

// -----

// Mesh axis errors are reported inside topologies too.
// expected-error @+3 {{mesh axis "x" must have a positive size, got 0}}
// expected-error @+2 {{failed to parse Mpmd_NamedMeshAttr parameter 'mesh' which is to be a `MeshAttr`}}
// expected-error @+1 {{failed to parse Mpmd_TopologyAttr parameter 'meshes' which is to be a `::llvm::ArrayRef<NamedMeshAttr>`}}
func.func @topology_axis_size() attributes {topology = #mpmd.topology<<"m1" : <["x"=0]>>>} { return }

// -----

//===----------------------------------------------------------------------===//
// Topology
//===----------------------------------------------------------------------===//

// An empty topology cannot even be written: the mesh list needs one entry.
// expected-error @+2 {{expected '<'}}
// expected-error @+1 {{failed to parse Mpmd_TopologyAttr parameter 'meshes' which is to be a `::llvm::ArrayRef<NamedMeshAttr>`}}
func.func @empty_topology() attributes {topology = #mpmd.topology<>} { return }

// -----

// expected-error @+1 {{topology mesh names must not be empty}}
func.func @topology_empty_mesh_name() attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"" : <["x"=2]>>>} { return }

// -----

// expected-error @+1 {{topology has duplicate mesh "m1"}}
func.func @topology_duplicate_mesh() attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>, <"m1" : <["y"=4]>>>} { return }

// -----

//===----------------------------------------------------------------------===//
// Origins and reductions
//===----------------------------------------------------------------------===//

// expected-error @+1 {{user origin name must not be empty}}
func.func @user_origin_empty_name() attributes {o = #mpmd.user_origin<"">} { return }

// -----

// expected-error @+1 {{transpose count of "f" must be >= 0, got -1}}
func.func @user_origin_negative_count() attributes {o = #mpmd.user_origin<"f"(-1)>} { return }

// -----

// expected-error @+1 {{expected integer value}}
func.func @user_origin_bad_count() attributes {o = #mpmd.user_origin<"f"(x)>} { return }

// -----

// expected-error @+1 {{expected string}}
func.func @origin_without_label() attributes {o = #mpmd.origin<>} { return }

// -----

// jaxlib's own standalone form of an origin cannot be read back by any MLIR
// parser: only a `<...>` body may follow a dialect attribute name.
// expected-error @+1 {{expected '}' in attribute dictionary}}
func.func @origin_jaxlib_standalone_form() attributes {o = #mpmd.origin"lbl"} { return }

// -----

// expected-error @+1 {{expected '>'}}
func.func @origin_unterminated() attributes {o = #mpmd.origin<"lbl" x>} { return }

// -----

//===----------------------------------------------------------------------===//
// Meshes with origins
//===----------------------------------------------------------------------===//

// As in jaxlib, an empty origin list is not written: `"m1"`, not `"m1"[]`.
// expected-error @+1 {{expected string}}
func.func @meshes_with_origins_empty_origin_list() attributes {s = #mpmd.meshes_with_origins<"m1"[]>} { return }

// -----

// expected-error @+1 {{expected string}}
func.func @meshes_with_origins_unquoted_mesh() attributes {s = #mpmd.meshes_with_origins<m1>} { return }

// -----

// expected-error @+1 {{expected string}}
func.func @meshes_with_origins_origin_attr_inside() attributes {s = #mpmd.meshes_with_origins<"m1"[#mpmd.origin<"a">]>} { return }

// -----

// expected-error @+1 {{expected string}}
func.func @meshes_with_origins_trailing_comma() attributes {s = #mpmd.meshes_with_origins<"m1", >} { return }

// -----

// expected-error @+1 {{expected ']'}}
func.func @meshes_with_origins_unclosed_origins() attributes {s = #mpmd.meshes_with_origins<"m1"["a" "b"]>} { return }

// -----

// expected-error @+1 {{expected '>'}}
func.func @meshes_with_origins_missing_comma() attributes {s = #mpmd.meshes_with_origins<"m1" "m2">} { return }

// -----

// expected-error @+1 {{expected '<'}}
func.func @meshes_with_origins_no_body() attributes {s = #mpmd.meshes_with_origins} { return }

// -----

// expected-error @+1 {{expected string}}
func.func @mesh_with_origins_empty() attributes {s = #mpmd.mesh_with_origins<>} { return }

// -----

// expected-error @+1 {{expected '>'}}
func.func @mesh_with_origins_two_meshes() attributes {s = #mpmd.mesh_with_origins<"m1", "m2">} { return }

// -----

// jaxlib's own standalone form (`"m1"` right after the name) cannot be read
// back by any MLIR parser.
// expected-error @+1 {{expected '}' in attribute dictionary}}
func.func @mesh_with_origins_jaxlib_standalone_form() attributes {s = #mpmd.mesh_with_origins"m1"["a"]} { return }

// -----

// expected-error @+2 {{expected ::mlir::mpmd::ReductionType to be one of: none, add, max, min, mul, or, and}}
// expected-error @+1 {{failed to parse Mpmd_ReductionAttr parameter 'reduction_type' which is to be a `::mlir::mpmd::ReductionType`}}
func.func @unknown_reduction() attributes {r = #mpmd.reduction<sum>} { return }

// -----

//===----------------------------------------------------------------------===//
// Shardings
//===----------------------------------------------------------------------===//

// expected-error @+1 {{sub-axis of "x" must have positive pre-size and size}}
func.func @sub_axis_zero_pre_size(%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>, sharding=<@mesh, [{"x":(0)2}]>>) { return }

// -----

// expected-error @+1 {{sub-axis of "y" must have positive pre-size and size}}
func.func @sub_axis_zero_size() attributes {s = #mpmd.sharding<@mesh, [{}], replicated={"y":(2)0}>} { return }

// -----

// expected-error @+1 {{expected a dimension priority of the form `p<N>`}}
func.func @bad_priority_keyword(%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>, sharding=<@mesh, [{"x"}q1]>>) { return }

// -----

// expected-error @+1 {{expected a dimension priority of the form `p<N>`}}
func.func @priority_without_number(%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>, sharding=<@mesh, [{"x"}p]>>) { return }

// -----

// `?` must be the last entry of a dimension.
// expected-error @+1 {{expected '}'}}
func.func @open_marker_not_last(%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>, sharding=<@mesh, [{?, "x"}]>>) { return }

// -----

// expected-error @+1 {{expected `replicated` or `unreduced`, got `reduced`}}
func.func @bad_sharding_keyword(%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>, sharding=<@mesh, [{"x"}], reduced={"y"}>>) { return }

// -----

// expected-error @+1 {{expected valid '@'-identifier for symbol name}}
func.func @sharding_without_mesh_symbol() attributes {s = #mpmd.sharding<"mesh", [{"x"}]>} { return }

// -----

//===----------------------------------------------------------------------===//
// Mesh tensor type
//===----------------------------------------------------------------------===//

// expected-error @+1 {{mesh tensor must name a mesh}}
func.func @mesh_tensor_empty_mesh_name(%arg0: !mpmd.mesh_tensor<"", tensor<4xf32>>) { return }

// -----

// expected-error @+1 {{expected string}}
func.func @mesh_tensor_unquoted_mesh_name(%arg0: !mpmd.mesh_tensor<m1, tensor<4xf32>>) { return }

// -----

// expected-error @+1 {{invalid kind of type specified: expected builtin.tensor, but found 'tensor<*xf32>'}}
func.func @mesh_tensor_unranked(%arg0: !mpmd.mesh_tensor<"m1", tensor<*xf32>>) { return }

// -----

// A mesh tensor type is checked where it is used (as in Shardy): a malformed
// sharding or memory kind is reported by the op that carries the type, not
// where the type is written.

// expected-error @+2 {{'mpmd.assign' op sharding doesn't match tensor rank: 1 != 2 (the sharding of '!mpmd.mesh_tensor<"m1", tensor<4x8xf32>, sharding=<@mesh, [{"x"}]>>' has 1 dimensions, its tensor has rank 2)}}
func.func @sharding_rank_too_small(%arg0: tensor<4x8xf32>) attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  %0 = mpmd.assign %arg0 : (tensor<4x8xf32>) -> !mpmd.mesh_tensor<"m1", tensor<4x8xf32>, sharding=<@mesh, [{"x"}]>>
  return
}

// -----

!too_large = !mpmd.mesh_tensor<"m1", tensor<f32>, sharding=<@mesh, [{}, {}]>>
func.func @sharding_rank_too_large(%arg0: !too_large) attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // expected-error @+1 {{'mpmd.unassign' op sharding doesn't match tensor rank: 2 != 0}}
  %0 = mpmd.unassign %arg0 : (!too_large) -> tensor<f32>
  return
}

// -----

!hbm = !mpmd.mesh_tensor<"m1", tensor<4xf32>, memory_kind="hbm">
func.func @bad_memory_kind(%arg0: !hbm) attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // expected-error @+1 {{'mpmd.fragment' op memory kind must be either 'device', 'pinned_host' or 'unpinned_host'. Found 'hbm' in '!mpmd.mesh_tensor<"m1", tensor<4xf32>, memory_kind="hbm">'}}
  %0 = mpmd.fragment<mesh="m1", origin=[]> (%arg0) (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!hbm) -> !hbm
  return
}

// -----

// Written but used by no op, a malformed type is not reported by the
// verifier (passes report it in a signature: see
// test/Transforms/Import/infer_mesh_assignment_errors.mlir).
!unused = !mpmd.mesh_tensor<"m1", tensor<4xf32>, sharding=<@mesh, [{}, {}]>>
func.func private @declared(!unused)

// -----

// expected-error @+1 {{expected string}}
func.func @unquoted_memory_kind(%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>, memory_kind=device>) { return }

// -----

// expected-error @+1 {{expected 'sharding' or 'memory_kind', got 'shard'}}
func.func @bad_mesh_tensor_keyword(%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>, shard=<@mesh, [{"x"}]>>) { return }

// -----

// expected-error @+1 {{expected '>'}}
func.func @mesh_tensor_missing_comma(%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>, sharding=<@mesh, [{"x"}]> memory_kind="device">) { return }

// -----

// The sharding and the memory kind come at most once each.

// expected-error @+1 {{expected '>' after the sharding and the memory kind}}
func.func @comma_after_both(%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>, memory_kind="device", sharding=<@mesh, [{"x"}]>,>) { return }

// -----

// expected-error @+1 {{expected '>' or 'sharding' after the memory kind}}
func.func @comma_after_memory_kind(%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>, memory_kind="device",>) { return }

// -----

// expected-error @+1 {{expected 'memory_kind' after the sharding}}
func.func @comma_after_sharding(%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>, sharding=<@mesh, [{"x"}]>, >) { return }

// -----

// expected-error @+1 {{expected 'memory_kind' after the sharding, got 'sharding'}}
func.func @sharding_twice(%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>, sharding=<@mesh, [{"x"}]>, sharding=<@mesh, [{"x"}]>>) { return }
