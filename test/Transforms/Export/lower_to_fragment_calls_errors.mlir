// RUN: mpmd-opt %s -split-input-file -mpmd-lower-to-fragment-calls -verify-diagnostics

!m = !mpmd.mesh_tensor<"m", tensor<4xf32>>

func.func @main(%arg0: !m) -> !m
    attributes {topology = #mpmd.topology<<"m" : <["x"=2]>>>} {
  // expected-error @+1 {{has `arg_attrs` that is not an array of 1 dictionaries (one per operand); fix or remove it}}
  %0 = mpmd.fragment<mesh="m", origin=["f"]> (%arg0) {arg_attrs = [{}, {}]} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m) -> !m
  return %0 : !m
}

// -----

!m = !mpmd.mesh_tensor<"m", tensor<4xf32>>

func.func @main(%arg0: !m) -> !m
    attributes {topology = #mpmd.topology<<"m" : <["x"=2]>>>} {
  // expected-error @+1 {{has `res_attrs` that is not an array of 1 dictionaries (one per result); fix or remove it}}
  %0 = mpmd.fragment<mesh="m", origin=["f"]> (%arg0) {res_attrs = 3 : i64} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m) -> !m
  return %0 : !m
}

// -----

// A malformed mesh tensor type in a signature, which no op verifier sees
// here, is reported before anything is lowered.
// expected-error @+1 {{output #0 of @bad_signature: sharding doesn't match tensor rank: 2 != 1}}
func.func @bad_signature(%arg0: !mpmd.mesh_tensor<"m", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m", tensor<4xf32>, sharding=<@mesh, [{"x"}, {}]>>
    attributes {topology = #mpmd.topology<<"m" : <["x"=2]>>>} {
  %0 = mpmd.call @keep(%arg0) : (!mpmd.mesh_tensor<"m", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m", tensor<4xf32>, sharding=<@mesh, [{"x"}, {}]>>
  return %0 : !mpmd.mesh_tensor<"m", tensor<4xf32>, sharding=<@mesh, [{"x"}, {}]>>
}
func.func private @keep(%arg0: !mpmd.mesh_tensor<"m", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m", tensor<4xf32>, sharding=<@mesh, [{"x"}, {}]>>
