// RUN: mpmd-opt %s -split-input-file -mpmd-map-input-output-to-mesh='input-assignment=0@m1 output-assignment=0@m1#pinned_host' -verify-diagnostics

// A mesh the function's topology does not have.
// expected-error @+1 {{input 0 is assigned to mesh "m1" which is not in the topology}}
func.func @no_such_mesh(%arg0: tensor<4xf32>) -> tensor<4xf32>
    attributes {topology = #mpmd.topology<<"m2" : <["x"=2]>>>} {
  return %arg0 : tensor<4xf32>
}

// -----

// An index past the end of the signature.
// expected-error @+1 {{input assignment names index 0 but @no_inputs has only 0 inputs}}
func.func @no_inputs() -> tensor<4xf32>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  %0 = "stablehlo.constant"() <{value = dense<1.0> : tensor<4xf32>}> : () -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// An input already on a mesh cannot be put on another.
// expected-error @+1 {{input 0 of @already_placed has type '!mpmd.mesh_tensor<"m1", tensor<4xf32>>': only a ranked tensor not yet on a mesh can be assigned to mesh "m1"}}
func.func @already_placed(%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> tensor<4xf32>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  %0 = mpmd.unassign %arg0 : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// The output's own memory kind contradicts the assignment's.
// expected-error @+1 {{output 0 of @memory_kind_contradiction is assigned to memory kind "pinned_host" but is marked mhlo.memory_kind = "device": make the two agree}}
func.func @memory_kind_contradiction(%arg0: tensor<4xf32>) -> (tensor<4xf32> {mhlo.memory_kind = "device"})
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  return %arg0 : tensor<4xf32>
}
