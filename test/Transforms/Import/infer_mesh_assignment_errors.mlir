// RUN: mpmd-opt %s -split-input-file -mpmd-infer-mesh-assignment -verify-diagnostics

!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>
!m2 = !mpmd.mesh_tensor<"m2", tensor<4xf32>>

// Operands from two meshes, result used on two meshes: no single placement.
func.func @operands_from_two_meshes(%arg0: !m1, %arg1: !m2) -> (!m1, !m2)
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  // expected-note @+1 {{operand #0 comes from mesh "m1"}}
  %0 = mpmd.unassign %arg0 : (!m1) -> tensor<4xf32>
  // expected-note @+1 {{operand #1 comes from mesh "m2"}}
  %1 = mpmd.unassign %arg1 : (!m2) -> tensor<4xf32>
  // expected-error @+1 {{cannot place 'stablehlo.add' on a mesh: its operands come from different meshes and its results are used on meshes "m1", "m2"}}
  %2 = "stablehlo.add"(%0, %1) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %3 = mpmd.assign %2 : (tensor<4xf32>) -> !m1
  %4 = mpmd.assign %2 : (tensor<4xf32>) -> !m2
  return %3, %4 : !m1, !m2
}

// -----

!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>
!m2 = !mpmd.mesh_tensor<"m2", tensor<4xf32>>

// Only returned, operands from two meshes.
func.func @returned_from_two_meshes(%arg0: !m1, %arg1: !m2) -> tensor<4xf32>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  // expected-note @+1 {{operand #0 comes from mesh "m1"}}
  %0 = mpmd.unassign %arg0 : (!m1) -> tensor<4xf32>
  // expected-note @+1 {{operand #1 comes from mesh "m2"}}
  %1 = mpmd.unassign %arg1 : (!m2) -> tensor<4xf32>
  // expected-error @+1 {{its operands come from different meshes and its results are used on no mesh}}
  %2 = "stablehlo.add"(%0, %1) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %2 : tensor<4xf32>
}

// -----

// A non-tensor input cannot be placed.
// expected-error @+1 {{input #0 of type 'i32' cannot be placed on a mesh: only ranked tensors can be}}
func.func @non_tensor_input(%arg0: i32) -> i32
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  return %arg0 : i32
}
