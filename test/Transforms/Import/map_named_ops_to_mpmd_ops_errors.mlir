// RUN: mpmd-opt %s -split-input-file -mpmd-map-named-ops-to-mpmd-ops='assignment=f@m1 fail-on-unused-names=true' -verify-diagnostics

func.func @unassigned_name(%arg0: tensor<4xf32>) -> tensor<4xf32>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  %0 = mpmd.named_computation<"f"> (%arg0) (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (tensor<4xf32>) -> tensor<4xf32>
  // expected-error @+1 {{named computation "h" is not assigned to a mesh: add it to the name-to-mesh assignment}}
  %1 = mpmd.named_computation<"h"> (%0) (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}

// -----

// expected-error @+1 {{name "f" is assigned to mesh "m1" which is not in the topology (meshes: "m0")}}
func.func @unknown_mesh(%arg0: tensor<4xf32>) -> tensor<4xf32>
    attributes {topology = #mpmd.topology<<"m0" : <["x"=2]>>>} {
  return %arg0 : tensor<4xf32>
}

// -----

func.func @nested(%arg0: tensor<4xf32>) -> tensor<4xf32>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  %0 = mpmd.named_computation<"f"> (%arg0) (%a: tensor<4xf32>) {
    // expected-error @+1 {{named ops nested in other ops are not supported yet}}
    %1 = mpmd.named_tensor %a name="f" : tensor<4xf32>
    mpmd.return %1 : tensor<4xf32>
  } : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// A named tensor whose name is not assigned is erased; with
// fail-on-unused-names (as mpmd.jit runs the pass), an assigned name that
// nothing uses is an error.

// expected-error @+1 {{name "f" is assigned to mesh "m1" but no named computation or named tensor uses it (names used: "other")}}
func.func @unassigned_named_tensor(%arg0: tensor<4xf32>) -> tensor<4xf32>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  %0 = mpmd.named_tensor %arg0 name="other" : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// A `topology` that is not a #mpmd.topology (every pass checks it, in
// lib/Transforms/Common/PassBase.h).

// expected-error @+1 {{attribute `topology` of @string_topology must be a #mpmd.topology<...> listing the meshes, got "m0,m1"}}
func.func @string_topology(%arg0: tensor<4xf32>) -> tensor<4xf32>
    attributes {topology = "m0,m1"} {
  return %arg0 : tensor<4xf32>
}

// -----

// A name used only inside a nest is still used: the nest is the one error.

func.func @nested_only(%arg0: tensor<4xf32>) -> tensor<4xf32>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  %0 = "t.op"(%arg0) ({
  ^bb0(%a: tensor<4xf32>):
    // expected-error @+1 {{named ops nested in other ops are not supported yet}}
    %1 = mpmd.named_computation<"f"> (%a) (%b: tensor<4xf32>) {
      mpmd.return %b : tensor<4xf32>
    } : (tensor<4xf32>) -> tensor<4xf32>
    "t.yield"(%1) : (tensor<4xf32>) -> ()
  }) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// expected-error @+1 {{name "f" is assigned to mesh "m1" but no named computation or named tensor uses it (the function uses no names)}}
func.func @no_names(%arg0: tensor<4xf32>) -> tensor<4xf32>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  return %arg0 : tensor<4xf32>
}
