// RUN: mpmd-opt %s -split-input-file -verify-diagnostics

//===----------------------------------------------------------------------===//
// Custom parser
//===----------------------------------------------------------------------===//

func.func @missing_mesh(%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // expected-error @+1 {{expected 'mesh'}}
  %0 = mpmd.fragment_call<origin=["f"]> @f(%arg0) : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
  return %0 : !mpmd.mesh_tensor<"m1", tensor<4xf32>>
}

// -----

func.func @stage_not_allowed(%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // expected-error @+1 {{expected '>'}}
  %0 = mpmd.fragment_call<mesh="m1", origin=["f"], stage=1> @f(%arg0) : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
  return %0 : !mpmd.mesh_tensor<"m1", tensor<4xf32>>
}

// -----

func.func @origin_empty_name(%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // expected-error @+1 {{user origin name must not be empty}}
  %0 = mpmd.fragment_call<mesh="m1", origin=[""(1)]> @f(%arg0) : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
  return %0 : !mpmd.mesh_tensor<"m1", tensor<4xf32>>
}

// -----

func.func @origin_negative_count(%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // expected-error @+1 {{transpose count of "g" must be >= 0, got -3}}
  %0 = mpmd.fragment_call<mesh="m1", origin=["f", "g"(-3)]> @f(%arg0) : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
  return %0 : !mpmd.mesh_tensor<"m1", tensor<4xf32>>
}

// -----

func.func @callee_not_a_symbol(%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // expected-error @+1 {{invalid kind of attribute specified}}
  %0 = mpmd.fragment_call<mesh="m1", origin=["f"]> "f"(%arg0) : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
  return %0 : !mpmd.mesh_tensor<"m1", tensor<4xf32>>
}

// -----

//===----------------------------------------------------------------------===//
// Mesh lookup and operand/result types
//===----------------------------------------------------------------------===//

func.func @no_topology(%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>> {
  // expected-error @+1 {{'mpmd.fragment_call' op uses mesh "m1" but the enclosing function @no_topology has no `topology` attribute}}
  %0 = mpmd.fragment_call<mesh="m1", origin=["f"]> @f(%arg0) : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
  return %0 : !mpmd.mesh_tensor<"m1", tensor<4xf32>>
}

func.func @f(%arg0: tensor<4xf32>) -> tensor<4xf32> attributes {mesh_shape = #sdy.mesh<["x"=2]>} {
  return %arg0 : tensor<4xf32>
}

// -----

func.func @mesh_not_in_topology(%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // expected-error @+1 {{'mpmd.fragment_call' op uses mesh "m2" which is not in the topology (meshes: "m1")}}
  %0 = mpmd.fragment_call<mesh="m2", origin=["f"]> @f(%arg0) : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
  return %0 : !mpmd.mesh_tensor<"m1", tensor<4xf32>>
}

func.func @f(%arg0: tensor<4xf32>) -> tensor<4xf32> attributes {mesh_shape = #sdy.mesh<["x"=2]>} {
  return %arg0 : tensor<4xf32>
}

// -----

func.func @operand_not_mesh_tensor(%arg0: tensor<4xf32>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // expected-error @+1 {{'mpmd.fragment_call' op passes mesh tensors only, got 'tensor<4xf32>'}}
  %0 = mpmd.fragment_call<mesh="m1", origin=["f"]> @f(%arg0) : (tensor<4xf32>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
  return %0 : !mpmd.mesh_tensor<"m1", tensor<4xf32>>
}

func.func @f(%arg0: tensor<4xf32>) -> tensor<4xf32> attributes {mesh_shape = #sdy.mesh<["x"=2]>} {
  return %arg0 : tensor<4xf32>
}

// -----

func.func @result_not_mesh_tensor(%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> tensor<4xf32>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // expected-error @+1 {{'mpmd.fragment_call' op passes mesh tensors only, got 'tensor<4xf32>'}}
  %0 = mpmd.fragment_call<mesh="m1", origin=["f"]> @f(%arg0) : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

func.func @f(%arg0: tensor<4xf32>) -> tensor<4xf32> attributes {mesh_shape = #sdy.mesh<["x"=2]>} {
  return %arg0 : tensor<4xf32>
}

// -----

func.func @operand_on_other_mesh(%arg0: !mpmd.mesh_tensor<"m2", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  // expected-error @+1 {{'mpmd.fragment_call' op operand #0 lives on mesh "m2" but the op runs on mesh "m1"}}
  %0 = mpmd.fragment_call<mesh="m1", origin=["f"]> @f(%arg0) : (!mpmd.mesh_tensor<"m2", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
  return %0 : !mpmd.mesh_tensor<"m1", tensor<4xf32>>
}

func.func @f(%arg0: tensor<4xf32>) -> tensor<4xf32> attributes {mesh_shape = #sdy.mesh<["x"=2]>} {
  return %arg0 : tensor<4xf32>
}

// -----

func.func @result_on_other_mesh(%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m2", tensor<4xf32>>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  // expected-error @+1 {{'mpmd.fragment_call' op result #0 lives on mesh "m2" but the op runs on mesh "m1"}}
  %0 = mpmd.fragment_call<mesh="m1", origin=["f"]> @f(%arg0) : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m2", tensor<4xf32>>
  return %0 : !mpmd.mesh_tensor<"m2", tensor<4xf32>>
}

func.func @f(%arg0: tensor<4xf32>) -> tensor<4xf32> attributes {mesh_shape = #sdy.mesh<["x"=2]>} {
  return %arg0 : tensor<4xf32>
}

// -----

func.func @sharding_axis_not_in_mesh(%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>, sharding=<@mesh, [{"y"}]>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // expected-error @+1 {{'mpmd.fragment_call' op unknown axis name: "y" in the sharding of '!mpmd.mesh_tensor<"m1", tensor<4xf32>, sharding=<@mesh, [{"y"}]>>': mesh "m1" has}}
  %0 = mpmd.fragment_call<mesh="m1", origin=["f"]> @f(%arg0) : (!mpmd.mesh_tensor<"m1", tensor<4xf32>, sharding=<@mesh, [{"y"}]>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
  return %0 : !mpmd.mesh_tensor<"m1", tensor<4xf32>>
}

func.func @f(%arg0: tensor<4xf32>) -> tensor<4xf32> attributes {mesh_shape = #sdy.mesh<["x"=2]>} {
  return %arg0 : tensor<4xf32>
}

// -----

//===----------------------------------------------------------------------===//
// Callee
//===----------------------------------------------------------------------===//

func.func @missing_callee(%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // expected-error @+1 {{'mpmd.fragment_call' op calls @missing which is not a func.func in the module}}
  %0 = mpmd.fragment_call<mesh="m1", origin=["f"]> @missing(%arg0) : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
  return %0 : !mpmd.mesh_tensor<"m1", tensor<4xf32>>
}

// -----

func.func @callee_without_mesh_shape(%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // expected-error @+1 {{'mpmd.fragment_call' op callee @f has no `mesh_shape` attribute}}
  %0 = mpmd.fragment_call<mesh="m1", origin=["f"]> @f(%arg0) : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
  return %0 : !mpmd.mesh_tensor<"m1", tensor<4xf32>>
}

func.func @f(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  return %arg0 : tensor<4xf32>
}

// -----

func.func @operand_count_mismatch(%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // expected-error @+1 {{'mpmd.fragment_call' op passes 1 operands and expects 1 results but callee @f has type '(tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>'}}
  %0 = mpmd.fragment_call<mesh="m1", origin=["f"]> @f(%arg0) : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
  return %0 : !mpmd.mesh_tensor<"m1", tensor<4xf32>>
}

func.func @f(%arg0: tensor<4xf32>, %arg1: tensor<4xf32>) -> tensor<4xf32> attributes {mesh_shape = #sdy.mesh<["x"=2]>} {
  return %arg0 : tensor<4xf32>
}

// -----

func.func @result_count_mismatch(%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>>)
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // expected-error @+1 {{'mpmd.fragment_call' op passes 1 operands and expects 0 results but callee @f has type '(tensor<4xf32>) -> tensor<4xf32>'}}
  mpmd.fragment_call<mesh="m1", origin=["f"]> @f(%arg0) : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> ()
  return
}

func.func @f(%arg0: tensor<4xf32>) -> tensor<4xf32> attributes {mesh_shape = #sdy.mesh<["x"=2]>} {
  return %arg0 : tensor<4xf32>
}

// -----

func.func @operand_type_mismatch(%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // expected-error @+1 {{'mpmd.fragment_call' op operand #0 has global type 'tensor<4xf32>' but callee @f takes 'tensor<4xbf16>'}}
  %0 = mpmd.fragment_call<mesh="m1", origin=["f"]> @f(%arg0) : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
  return %0 : !mpmd.mesh_tensor<"m1", tensor<4xf32>>
}

func.func @f(%arg0: tensor<4xbf16>) -> tensor<4xf32> attributes {mesh_shape = #sdy.mesh<["x"=2]>} {
  %0 = "stablehlo.convert"(%arg0) : (tensor<4xbf16>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @result_type_mismatch(%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> (!mpmd.mesh_tensor<"m1", tensor<4xf32>>, !mpmd.mesh_tensor<"m1", tensor<8xf32>>)
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // expected-error @+1 {{'mpmd.fragment_call' op result #1 has global type 'tensor<8xf32>' but callee @f returns 'tensor<4xf32>'}}
  %0:2 = mpmd.fragment_call<mesh="m1", origin=["f"]> @f(%arg0) : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> (!mpmd.mesh_tensor<"m1", tensor<4xf32>>, !mpmd.mesh_tensor<"m1", tensor<8xf32>>)
  return %0#0, %0#1 : !mpmd.mesh_tensor<"m1", tensor<4xf32>>, !mpmd.mesh_tensor<"m1", tensor<8xf32>>
}

func.func @f(%arg0: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) attributes {mesh_shape = #sdy.mesh<["x"=2]>} {
  return %arg0, %arg0 : tensor<4xf32>, tensor<4xf32>
}

// -----

// Tokens do not cross fragment boundaries.
func.func @token_type_mismatch(%arg0: !stablehlo.token) attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // expected-error @+1 {{'mpmd.fragment_call' op passes mesh tensors only, got '!stablehlo.token'}}
  mpmd.fragment_call<mesh="m1", origin=["f"]> @f(%arg0) : (!stablehlo.token) -> ()
  return
}

func.func @f(%arg0: tensor<f32>) attributes {mesh_shape = #sdy.mesh<["x"=2]>} {
  return
}
