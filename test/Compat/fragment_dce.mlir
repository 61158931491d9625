// RUN: mpmd-opt %s -split-input-file -mpmd-fragment-dce | FileCheck %s

!m = !mpmd.mesh_tensor<"m", tensor<4xf32>>
!n = !mpmd.mesh_tensor<"n", tensor<4xf32>>

// A result nobody uses goes, with the op that computed it and the argument
// only that op read; the producer of that argument (and the transfer that
// brought it) then has no users and goes too.

// CHECK-LABEL: func.func @chain_of_unused_values
// CHECK-SAME: (%arg0: !mpmd.mesh_tensor<"m", tensor<4xf32>>, %arg1: !mpmd.mesh_tensor<"n", tensor<4xf32>>)
// CHECK-NEXT: %[[F:.*]] = mpmd.fragment<mesh="m", origin=["kept"]> (%arg0) (%[[A:.*]]: tensor<4xf32>) {
// CHECK-NEXT:   %[[N:.*]] = "stablehlo.negate"(%[[A]])
// CHECK-NEXT:   mpmd.return %[[N]] : tensor<4xf32>
// CHECK-NEXT: } : (!mpmd.mesh_tensor<"m", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m", tensor<4xf32>>
// CHECK-NEXT: return %[[F]]
func.func @chain_of_unused_values(%arg0: !m, %arg1: !n) -> !m
    attributes {topology = #mpmd.topology<<"m" : <["x"=2]>>, <"n" : <["x"=2]>>>} {
  %p = mpmd.fragment<mesh="n", origin=["producer"]> (%arg1) (%a: tensor<4xf32>) {
    %0 = "stablehlo.abs"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %0 : tensor<4xf32>
  } : (!n) -> !n
  %t = mpmd.transfer %p : (!n) -> !m
  %f:2 = mpmd.fragment<mesh="m", origin=["kept"]> (%arg0, %t) (%a: tensor<4xf32>, %b: tensor<4xf32>) {
    %0 = "stablehlo.negate"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    %1 = "stablehlo.exponential"(%b) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %0, %1 : tensor<4xf32>, tensor<4xf32>
  } : (!m, !m) -> (!m, !m)
  return %f#0 : !m
}

// -----

!m = !mpmd.mesh_tensor<"m", tensor<4xf32>>

// Ops with side effects stay, used or not, and so does a fragment whose body
// has one; an unused pure fragment goes. Functions without a topology are
// not touched.

// CHECK-LABEL: func.func @side_effects_stay
// CHECK-NEXT: mpmd.fragment<mesh="m", origin=["effect"]> (%arg0) (%[[A:.*]]: tensor<4xf32>) {
// CHECK-NEXT:   "stablehlo.custom_call"(%[[A]])
// CHECK-NEXT:   mpmd.return
// CHECK-NEXT: } : (!mpmd.mesh_tensor<"m", tensor<4xf32>>) -> ()
// CHECK-NEXT: return %arg0
func.func @side_effects_stay(%arg0: !m) -> !m
    attributes {topology = #mpmd.topology<<"m" : <["x"=2]>>>} {
  %0 = mpmd.fragment<mesh="m", origin=["effect"]> (%arg0) (%a: tensor<4xf32>) {
    %1 = "stablehlo.custom_call"(%a) {call_target_name = "print", has_side_effect = true} : (tensor<4xf32>) -> tensor<4xf32>
    %2 = "stablehlo.add"(%a, %a) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %2 : tensor<4xf32>
  } : (!m) -> !m
  %3 = mpmd.fragment<mesh="m", origin=["pure"]> (%arg0) (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m) -> !m
  return %arg0 : !m
}

// CHECK-LABEL: func.func @no_topology
// CHECK: "stablehlo.abs"
func.func @no_topology(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "stablehlo.abs"(%arg0) : (tensor<4xf32>) -> tensor<4xf32>
  return %arg0 : tensor<4xf32>
}
