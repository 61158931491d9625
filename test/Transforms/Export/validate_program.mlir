// RUN: mpmd-opt %s -split-input-file -mpmd-validate-program -verify-diagnostics | FileCheck %s

!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>

// A program of fragment calls and transfers passes.

// CHECK-LABEL: func.func @main
func.func @main(%arg0: !m1) -> !m1
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // CHECK: mpmd.fragment_call
  %0 = mpmd.fragment_call<mesh="m1", origin=["f"]> @f(%arg0) : (!m1) -> !m1
  return %0 : !m1
}
func.func @f(%arg0: tensor<4xf32>) -> tensor<4xf32> attributes {mesh_shape = #sdy.mesh<["x"=2]>} {
  return %arg0 : tensor<4xf32>
}

// -----

!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>

// A fragment that was not outlined is left over.

func.func @main(%arg0: !m1) -> !m1
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // expected-error @+1 {{'mpmd.fragment' was left outside of any fragment}}
  %0 = mpmd.fragment<mesh="m1", origin=["f"]> (%arg0) (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m1) -> !m1
  return %0 : !m1
}

// -----

!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>

// An op without a mesh, and a value without a mesh type.

func.func @main(%arg0: !m1, %arg1: tensor<4xf32>) -> (!m1, tensor<4xf32>)
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // expected-error @+1 {{'stablehlo.negate' was left outside of any fragment}}
  %0 = "stablehlo.negate"(%arg1) : (tensor<4xf32>) -> tensor<4xf32>
  // expected-error @+1 {{operand #1 has type 'tensor<4xf32>', which is not on any mesh}}
  return %arg0, %0 : !m1, tensor<4xf32>
}
