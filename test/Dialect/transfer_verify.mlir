// RUN: mpmd-opt %s -split-input-file -verify-diagnostics

func.func @operand_not_mesh_tensor(%arg0: tensor<4xf32>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // expected-error @+1 {{'mpmd.transfer' op transfers a !mpmd.mesh_tensor to a !mpmd.mesh_tensor, got 'tensor<4xf32>' -> '!mpmd.mesh_tensor<"m1", tensor<4xf32>>'}}
  %0 = mpmd.transfer %arg0 : (tensor<4xf32>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
  return %0 : !mpmd.mesh_tensor<"m1", tensor<4xf32>>
}

// -----

func.func @result_not_mesh_tensor(%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> tensor<4xf32>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // expected-error @+1 {{'mpmd.transfer' op transfers a !mpmd.mesh_tensor to a !mpmd.mesh_tensor, got '!mpmd.mesh_tensor<"m1", tensor<4xf32>>' -> 'tensor<4xf32>'}}
  %0 = mpmd.transfer %arg0 : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @global_shape_changes(%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m2", tensor<8xf32>>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  // expected-error @+1 {{'mpmd.transfer' op must keep the global type, got 'tensor<4xf32>' -> 'tensor<8xf32>'}}
  %0 = mpmd.transfer %arg0 : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m2", tensor<8xf32>>
  return %0 : !mpmd.mesh_tensor<"m2", tensor<8xf32>>
}

// -----

func.func @global_element_type_changes(%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xbf16>>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // expected-error @+1 {{'mpmd.transfer' op must keep the global type, got 'tensor<4xf32>' -> 'tensor<4xbf16>'}}
  %0 = mpmd.transfer %arg0 : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xbf16>>
  return %0 : !mpmd.mesh_tensor<"m1", tensor<4xbf16>>
}

// -----

func.func @no_topology(%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m2", tensor<4xf32>> {
  // expected-error @+1 {{'mpmd.transfer' op uses mesh "m1" but the enclosing function @no_topology has no `topology` attribute}}
  %0 = mpmd.transfer %arg0 : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m2", tensor<4xf32>>
  return %0 : !mpmd.mesh_tensor<"m2", tensor<4xf32>>
}

// -----

func.func @source_mesh_not_in_topology(%arg0: !mpmd.mesh_tensor<"m0", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m2", tensor<4xf32>>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  // expected-error @+1 {{'mpmd.transfer' op uses mesh "m0" which is not in the topology (meshes: "m1" "m2")}}
  %0 = mpmd.transfer %arg0 : (!mpmd.mesh_tensor<"m0", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m2", tensor<4xf32>>
  return %0 : !mpmd.mesh_tensor<"m2", tensor<4xf32>>
}

// -----

func.func @target_mesh_not_in_topology(%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m3", tensor<4xf32>>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  // expected-error @+1 {{'mpmd.transfer' op uses mesh "m3" which is not in the topology (meshes: "m1" "m2")}}
  %0 = mpmd.transfer %arg0 : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m3", tensor<4xf32>>
  return %0 : !mpmd.mesh_tensor<"m3", tensor<4xf32>>
}

// -----

func.func @source_sharding_axis_not_in_mesh(%arg0: !mpmd.mesh_tensor<"m1", tensor<4x8xf32>, sharding=<@mesh, [{}, {"y"}]>>) -> !mpmd.mesh_tensor<"m2", tensor<4x8xf32>>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["y"=2]>>>} {
  // expected-error @+1 {{'mpmd.transfer' op unknown axis name: "y" in the sharding of '!mpmd.mesh_tensor<"m1", tensor<4x8xf32>, sharding=<@mesh, [{}, {"y"}]>>': mesh "m1" has}}
  %0 = mpmd.transfer %arg0 : (!mpmd.mesh_tensor<"m1", tensor<4x8xf32>, sharding=<@mesh, [{}, {"y"}]>>) -> !mpmd.mesh_tensor<"m2", tensor<4x8xf32>>
  return %0 : !mpmd.mesh_tensor<"m2", tensor<4x8xf32>>
}

// -----

// The axes are checked against the target mesh, not the source mesh.
func.func @target_sharding_axis_not_in_mesh(%arg0: !mpmd.mesh_tensor<"m1", tensor<4x8xf32>>) -> !mpmd.mesh_tensor<"m2", tensor<4x8xf32>, sharding=<@mesh, [{"x"}, {}]>>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["y"=2]>>>} {
  // expected-error @+1 {{'mpmd.transfer' op unknown axis name: "x" in the sharding of '!mpmd.mesh_tensor<"m2", tensor<4x8xf32>, sharding=<@mesh, [{"x"}, {}]>>': mesh "m2" has}}
  %0 = mpmd.transfer %arg0 : (!mpmd.mesh_tensor<"m1", tensor<4x8xf32>>) -> !mpmd.mesh_tensor<"m2", tensor<4x8xf32>, sharding=<@mesh, [{"x"}, {}]>>
  return %0 : !mpmd.mesh_tensor<"m2", tensor<4x8xf32>, sharding=<@mesh, [{"x"}, {}]>>
}

// -----

func.func @sub_axis_of_unknown_axis(%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>, sharding=<@mesh, [{"z":(1)2}]>>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=4]>>>} {
  // expected-error @+1 {{'mpmd.transfer' op unknown axis name: "z" in the sharding of '!mpmd.mesh_tensor<"m1", tensor<4xf32>, sharding=<@mesh, [{"z":(1)2}]>>': mesh "m1" has}}
  %0 = mpmd.transfer %arg0 : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>, sharding=<@mesh, [{"z":(1)2}]>>
  return %0 : !mpmd.mesh_tensor<"m1", tensor<4xf32>, sharding=<@mesh, [{"z":(1)2}]>>
}

// -----

// An invalid memory kind is rejected by the op whose type has it.
func.func @bad_memory_kind(%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>>)
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // expected-error @+1 {{'mpmd.transfer' op memory kind must be either 'device', 'pinned_host' or 'unpinned_host'. Found 'host'}}
  %0 = mpmd.transfer %arg0 : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>, memory_kind="host">
  return
}

// -----

// A type may name Shardy's unpinned_host (its files read), but no transfer
// moves a value into it: the kinds a program places values in are the
// assignable ones (include/mpmd/Dialect/MemoryKinds.h).
func.func @transfer_into_unpinned_host(%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>>)
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // expected-error @+1 {{'mpmd.transfer' op transfers into and out of memory kinds "device" or "pinned_host" only, got "unpinned_host"}}
  %0 = mpmd.transfer %arg0 : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>, memory_kind="unpinned_host">
  return
}

// -----

// A sharded dimension must divide evenly over its axes (JAX shards evenly
// only).
func.func @dim_not_divisible(%arg0: !mpmd.mesh_tensor<"m1", tensor<1x8xf32>, sharding=<@mesh, [{"x"}, {}]>>) -> !mpmd.mesh_tensor<"m2", tensor<1x8xf32>>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=4]>>, <"m2" : <["x"=4]>>>} {
  // expected-error @+1 {{'mpmd.transfer' op dim 0 with size 1 is not divisible by its sharded size 4 (the product of the sizes of its axes "x" in mesh "m1"), in '!mpmd.mesh_tensor<"m1", tensor<1x8xf32>, sharding=<@mesh, [{"x"}, {}]>>': JAX shards a dimension evenly only; shard it over fewer axes or pad it}}
  %0 = mpmd.transfer %arg0 : (!mpmd.mesh_tensor<"m1", tensor<1x8xf32>, sharding=<@mesh, [{"x"}, {}]>>) -> !mpmd.mesh_tensor<"m2", tensor<1x8xf32>>
  return %0 : !mpmd.mesh_tensor<"m2", tensor<1x8xf32>>
}

// -----

// The sharded size is the product of all the dimension's axes (sub-axes by
// their size): 4 x 2 does not divide 12.
func.func @dim_not_divisible_by_product(%arg0: !mpmd.mesh_tensor<"m1", tensor<4x8xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4x12xf32>, sharding=<@mesh, [{}, {"x":(1)4, "y"}]>>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=16, "y"=2]>>>} {
  %c = "t.op"() : () -> !mpmd.mesh_tensor<"m1", tensor<4x12xf32>>
  // expected-error @+1 {{'mpmd.transfer' op dim 1 with size 12 is not divisible by its sharded size 8 (the product of the sizes of its axes "x":(1)4 "y" in mesh "m1")}}
  %0 = mpmd.transfer %c : (!mpmd.mesh_tensor<"m1", tensor<4x12xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4x12xf32>, sharding=<@mesh, [{}, {"x":(1)4, "y"}]>>
  return %0 : !mpmd.mesh_tensor<"m1", tensor<4x12xf32>, sharding=<@mesh, [{}, {"x":(1)4, "y"}]>>
}

// -----

// Memory kinds of transfers are read from their types only: one given by
// attribute would be ignored.
func.func @memory_kind_attribute_on_transfer(%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m2", tensor<4xf32>>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  // expected-error @+1 {{'mpmd.transfer' op has mhlo.memory_kind = "pinned_host", which transfers do not read (transfers to host with attributes are not supported): give the memory kind in the result type, !mpmd.mesh_tensor<..., memory_kind="pinned_host">}}
  %0 = mpmd.transfer {mhlo.memory_kind = "pinned_host"} %arg0 : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m2", tensor<4xf32>>
  return %0 : !mpmd.mesh_tensor<"m2", tensor<4xf32>>
}

// -----

func.func @argument_marked_on_host(%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>> {mhlo.memory_kind = "pinned_host"}) -> !mpmd.mesh_tensor<"m2", tensor<4xf32>>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  // expected-error @+1 {{'mpmd.transfer' op reads argument #0 of the function, which is marked mhlo.memory_kind = "pinned_host", but transfers from host with attributes are not supported: the transfer would read it as device memory; give the memory kind in its type, !mpmd.mesh_tensor<..., memory_kind="pinned_host">}}
  %0 = mpmd.transfer %arg0 : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m2", tensor<4xf32>>
  return %0 : !mpmd.mesh_tensor<"m2", tensor<4xf32>>
}

// -----

func.func @fragment_result_marked_on_host(%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m2", tensor<4xf32>>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  %f:2 = mpmd.fragment<mesh="m1", origin=[]> (%arg0) {res_attrs = [{mhlo.memory_kind = "device"}, {mhlo.memory_kind = "pinned_host"}]} (%a: tensor<4xf32>) {
    mpmd.return %a, %a : tensor<4xf32>, tensor<4xf32>
  } : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> (!mpmd.mesh_tensor<"m1", tensor<4xf32>>, !mpmd.mesh_tensor<"m1", tensor<4xf32>>)
  // A result marked "device" is read as it is.
  %0 = mpmd.transfer %f#0 : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m2", tensor<4xf32>>
  // expected-error @+1 {{'mpmd.transfer' op reads result #1 of a fragment, which is marked mhlo.memory_kind = "pinned_host"}}
  %1 = mpmd.transfer %f#1 : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m2", tensor<4xf32>>
  return %1 : !mpmd.mesh_tensor<"m2", tensor<4xf32>>
}
