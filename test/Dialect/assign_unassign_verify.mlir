// RUN: mpmd-opt %s -split-input-file -verify-diagnostics

//===----------------------------------------------------------------------===//
// mpmd.assign
//===----------------------------------------------------------------------===//

func.func @assign_result_not_mesh_tensor(%arg0: tensor<4xf32>) -> tensor<4xf32>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // expected-error @+1 {{'mpmd.assign' op result must be a !mpmd.mesh_tensor, got 'tensor<4xf32>'}}
  %0 = mpmd.assign %arg0 : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @assign_type_mismatch(%arg0: tensor<4xf32>) -> !mpmd.mesh_tensor<"m1", tensor<8xf32>>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // expected-error @+1 {{'mpmd.assign' op assigns 'tensor<4xf32>' to a mesh tensor of 'tensor<8xf32>'}}
  %0 = mpmd.assign %arg0 : (tensor<4xf32>) -> !mpmd.mesh_tensor<"m1", tensor<8xf32>>
  return %0 : !mpmd.mesh_tensor<"m1", tensor<8xf32>>
}

// -----

func.func @assign_from_mesh_tensor(%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m2", tensor<4xf32>>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  // expected-error @+1 {{'mpmd.assign' op assigns '!mpmd.mesh_tensor<"m1", tensor<4xf32>>' to a mesh tensor of 'tensor<4xf32>'}}
  %0 = mpmd.assign %arg0 : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m2", tensor<4xf32>>
  return %0 : !mpmd.mesh_tensor<"m2", tensor<4xf32>>
}

// -----

func.func @assign_no_topology(%arg0: tensor<4xf32>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>> {
  // expected-error @+1 {{'mpmd.assign' op uses mesh "m1" but the enclosing function @assign_no_topology has no `topology` attribute}}
  %0 = mpmd.assign %arg0 : (tensor<4xf32>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
  return %0 : !mpmd.mesh_tensor<"m1", tensor<4xf32>>
}

// -----

func.func @assign_mesh_not_in_topology(%arg0: tensor<4xf32>) -> !mpmd.mesh_tensor<"m2", tensor<4xf32>>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // expected-error @+1 {{'mpmd.assign' op uses mesh "m2" which is not in the topology (meshes: "m1")}}
  %0 = mpmd.assign %arg0 : (tensor<4xf32>) -> !mpmd.mesh_tensor<"m2", tensor<4xf32>>
  return %0 : !mpmd.mesh_tensor<"m2", tensor<4xf32>>
}

// -----

func.func @assign_sharding_axis_not_in_mesh(%arg0: tensor<4xf32>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>, sharding=<@mesh, [{"y"}]>>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // expected-error @+1 {{'mpmd.assign' op unknown axis name: "y" in the sharding of '!mpmd.mesh_tensor<"m1", tensor<4xf32>, sharding=<@mesh, [{"y"}]>>': mesh "m1" has}}
  %0 = mpmd.assign %arg0 : (tensor<4xf32>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>, sharding=<@mesh, [{"y"}]>>
  return %0 : !mpmd.mesh_tensor<"m1", tensor<4xf32>, sharding=<@mesh, [{"y"}]>>
}

// -----

func.func @assign_origin_not_string(%arg0: tensor<4xf32>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // expected-error @+1 {{'mpmd.assign' op attribute 'origin' failed to satisfy constraint: string attribute}}
  %0 = mpmd.assign {origin = 1 : i64} %arg0 : (tensor<4xf32>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
  return %0 : !mpmd.mesh_tensor<"m1", tensor<4xf32>>
}

// -----

//===----------------------------------------------------------------------===//
// mpmd.unassign
//===----------------------------------------------------------------------===//

func.func @unassign_operand_not_mesh_tensor(%arg0: tensor<4xf32>) -> tensor<4xf32>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // expected-error @+1 {{'mpmd.unassign' op operand must be a !mpmd.mesh_tensor, got 'tensor<4xf32>'}}
  %0 = mpmd.unassign %arg0 : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @unassign_type_mismatch(%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> tensor<4xi32>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // expected-error @+1 {{'mpmd.unassign' op unassigns a mesh tensor of 'tensor<4xf32>' to 'tensor<4xi32>'}}
  %0 = mpmd.unassign %arg0 : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> tensor<4xi32>
  return %0 : tensor<4xi32>
}

// -----

func.func @unassign_to_mesh_tensor(%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // expected-error @+1 {{'mpmd.unassign' op unassigns a mesh tensor of 'tensor<4xf32>' to '!mpmd.mesh_tensor<"m1", tensor<4xf32>>'}}
  %0 = mpmd.unassign %arg0 : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
  return %0 : !mpmd.mesh_tensor<"m1", tensor<4xf32>>
}

// -----

func.func @unassign_no_topology(%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> tensor<4xf32> {
  // expected-error @+1 {{'mpmd.unassign' op uses mesh "m1" but the enclosing function @unassign_no_topology has no `topology` attribute}}
  %0 = mpmd.unassign %arg0 : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @unassign_mesh_not_in_topology(%arg0: !mpmd.mesh_tensor<"m9", tensor<4xf32>>) -> tensor<4xf32>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  // expected-error @+1 {{'mpmd.unassign' op uses mesh "m9" which is not in the topology (meshes: "m1" "m2")}}
  %0 = mpmd.unassign %arg0 : (!mpmd.mesh_tensor<"m9", tensor<4xf32>>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @unassign_sharding_axis_not_in_mesh(%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>, sharding=<@mesh, [{}], unreduced={"u"}>>) -> tensor<4xf32>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // expected-error @+1 {{'mpmd.unassign' op unknown axis name: "u" in the sharding of '!mpmd.mesh_tensor<"m1", tensor<4xf32>, sharding=<@mesh, [{}], unreduced={"u"}>>': mesh "m1" has}}
  %0 = mpmd.unassign %arg0 : (!mpmd.mesh_tensor<"m1", tensor<4xf32>, sharding=<@mesh, [{}], unreduced={"u"}>>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
