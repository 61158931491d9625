// RUN: mpmd-opt %s -split-input-file -mpmd-split-bwd-fragments -verify-diagnostics

!m0 = !mpmd.mesh_tensor<"m0", tensor<4xf32>>
!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>

// W would need a token computed by B: only tensors cross fragment boundaries.
func.func @token_residual(%arg0: !m1) -> (!m0, !m1)
    attributes {topology = #mpmd.topology<<"m0" : <["x"=2]>>, <"m1" : <["x"=2]>>>} {
  // expected-error @+1 {{cannot split backward fragment ["s"(1)] (microbatch 2, stage 1) on mesh "m1": its weight-gradient part needs a value of type '!stablehlo.token' computed by its activation-gradient part, and only ranked tensors can be passed between fragments}}
  %0:2 = mpmd.fragment<mesh="m1", origin=["s"(1)], stage=1> (%arg0) {call_counter = 2 : ui32} (%a: tensor<4xf32>) {
    // expected-note @+1 {{the value is computed here}}
    %tok = "stablehlo.create_token"() : () -> !stablehlo.token
    %n = "stablehlo.custom_call"(%a, %tok) : (tensor<4xf32>, !stablehlo.token) -> tensor<4xf32>
    %m = "stablehlo.custom_call"(%a, %tok) : (tensor<4xf32>, !stablehlo.token) -> tensor<4xf32>
    mpmd.return %n, %m : tensor<4xf32>, tensor<4xf32>
  } : (!m1) -> (!m1, !m1)
  %1 = mpmd.transfer %0#0 : (!m1) -> !m0
  return %1, %0#1 : !m0, !m1
}

// -----

!m0 = !mpmd.mesh_tensor<"m0", tensor<4xf32>>
!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>

// Shardings are per operand/result: the split must come before they are set.
func.func @shardings(%arg0: !m1) -> !m0
    attributes {topology = #mpmd.topology<<"m0" : <["x"=2]>>, <"m1" : <["x"=2]>>>} {
  // expected-error @+1 {{cannot split backward fragment ["s"(1)] on mesh "m1": it has in_shardings/out_shardings; run -mpmd-split-bwd-fragments before shardings are assigned}}
  %0 = mpmd.fragment<mesh="m1", origin=["s"(1)], in_shardings=[<@mesh, [{"x"}]>]> (%arg0) (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m1) -> !m1
  %1 = mpmd.transfer %0 : (!m1) -> !m0
  return %1 : !m0
}
