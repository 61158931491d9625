// RUN: mpmd-opt %s -split-input-file -mpmd-validate-no-backward-deps -verify-diagnostics | FileCheck %s
// RUN: not mpmd-opt %s -split-input-file -mpmd-validate-no-backward-deps='fail-on-backward-deps=true' 2>&1 | FileCheck %s --check-prefix=FAIL

!m0 = !mpmd.mesh_tensor<"m0", tensor<4xf32>>
!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>

// Forward-only, flowing from m0 to m1: nothing to report.

// CHECK-LABEL: func.func @main
func.func @main(%arg0: !m0) -> !m1
    attributes {topology = #mpmd.topology<<"m0" : <["x"=2]>>, <"m1" : <["x"=2]>>>} {
  %0 = mpmd.fragment_call<mesh="m0", origin=["a"]> @f(%arg0) : (!m0) -> !m0
  %1 = mpmd.transfer %0 : (!m0) -> !m1
  %2 = mpmd.fragment_call<mesh="m1", origin=["b"]> @f(%1) : (!m1) -> !m1
  return %2 : !m1
}
func.func @f(%arg0: tensor<4xf32>) -> tensor<4xf32> attributes {mesh_shape = #sdy.mesh<["x"=2]>} {
  return %arg0 : tensor<4xf32>
}

// -----

!m0 = !mpmd.mesh_tensor<"m0", tensor<4xf32>>
!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>

// Forward-only, m1 feeds m0 (through a transfer): reported.

// CHECK-LABEL: func.func @main
// FAIL: error: forward-only program flows backward: the call of @f on mesh "m0"
// FAIL: note: the value is computed here
func.func @main(%arg0: !m1) -> !m0
    attributes {topology = #mpmd.topology<<"m0" : <["x"=2]>>, <"m1" : <["x"=2]>>>} {
  // expected-note @+1 {{the value is computed here}}
  %0 = mpmd.fragment_call<mesh="m1", origin=["a"]> @f(%arg0) : (!m1) -> !m1
  %1 = mpmd.transfer %0 : (!m1) -> !m0
  // expected-warning @+1 {{forward-only program flows backward: the call of @f on mesh "m0" reads a value computed by the call of @f on mesh "m1", a later mesh of the topology}}
  %2 = mpmd.fragment_call<mesh="m0", origin=["b"]> @f(%1) : (!m0) -> !m0
  return %2 : !m0
}
func.func @f(%arg0: tensor<4xf32>) -> tensor<4xf32> attributes {mesh_shape = #sdy.mesh<["x"=2]>} {
  return %arg0 : tensor<4xf32>
}

// -----

!m0 = !mpmd.mesh_tensor<"m0", tensor<4xf32>>
!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>

// A program with backward fragments is not checked, unless
// fail-on-backward-deps says it must be forward-only: then it is an error at
// the function, naming the first backward call.

// CHECK-LABEL: func.func @main
// FAIL: error: @main is not a forward-only program, which fail-on-backward-deps (mpmd_fail_on_backward_deps) expects: the call of @f on mesh "m1" is a backward fragment; drop the option for a training step
// FAIL: note: the backward fragment is called here
func.func @main(%arg0: !m1) -> !m0
    attributes {topology = #mpmd.topology<<"m0" : <["x"=2]>>, <"m1" : <["x"=2]>>>} {
  %0 = mpmd.fragment_call<mesh="m1", origin=["a"(1)]> @f(%arg0) : (!m1) -> !m1
  %1 = mpmd.transfer %0 : (!m1) -> !m0
  %2 = mpmd.fragment_call<mesh="m0", origin=["b"(1)]> @f(%1) : (!m0) -> !m0
  return %2 : !m0
}
func.func @f(%arg0: tensor<4xf32>) -> tensor<4xf32> attributes {mesh_shape = #sdy.mesh<["x"=2]>} {
  return %arg0 : tensor<4xf32>
}

// -----

!m0 = !mpmd.mesh_tensor<"m0", tensor<4xf32>>
!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>

// Fragments without origins (inferred ones) count as forward: a program made
// only of them is checked.

// CHECK-LABEL: func.func @main
func.func @main(%arg0: !m1) -> !m0
    attributes {topology = #mpmd.topology<<"m0" : <["x"=2]>>, <"m1" : <["x"=2]>>>} {
  // expected-note @+1 {{the value is computed here}}
  %0 = mpmd.fragment_call<mesh="m1", origin=[]> @f(%arg0) : (!m1) -> !m1
  %1 = mpmd.transfer %0 : (!m1) -> !m0
  // expected-warning @+1 {{forward-only program flows backward: the call of @f on mesh "m0" reads a value computed by the call of @f on mesh "m1"}}
  %2 = mpmd.fragment_call<mesh="m0", origin=[]> @f(%1) : (!m0) -> !m0
  return %2 : !m0
}
func.func @f(%arg0: tensor<4xf32>) -> tensor<4xf32> attributes {mesh_shape = #sdy.mesh<["x"=2]>} {
  return %arg0 : tensor<4xf32>
}
