// RUN: mpmd-opt %s | FileCheck %s
// RUN: mpmd-opt %s | mpmd-opt | FileCheck %s
// RUN: mpmd-opt %s --mlir-print-op-generic | mpmd-opt | FileCheck %s

!m1_t = !mpmd.mesh_tensor<"m1", tensor<4x8xf32>>
!m2_t = !mpmd.mesh_tensor<"m2", tensor<4x8xf32>>

// CHECK-LABEL: func.func @main
func.func @main(%arg0: !m1_t) -> !m2_t
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2, "y"=4]>>, <"m2" : <["z"=3]>>>} {
  // CHECK-NEXT: %[[C0:.*]] = mpmd.fragment_call<mesh="m1", origin=["f"(1), "g"]> @fragment1(%arg0) : (!mpmd.mesh_tensor<"m1", tensor<4x8xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4x8xf32>>
  // CHECK-NEXT: %[[C1:.*]] = mpmd.fragment_call<mesh="m1", origin=[]> @fragment1(%[[C0]]) : (!mpmd.mesh_tensor<"m1", tensor<4x8xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4x8xf32>>
  // CHECK-NEXT: %[[T:.*]] = mpmd.transfer %[[C1]] : (!mpmd.mesh_tensor<"m1", tensor<4x8xf32>>) -> !mpmd.mesh_tensor<"m2", tensor<4x8xf32>>
  // CHECK-NEXT: %[[C2:.*]] = mpmd.fragment_call<mesh="m2", origin=["h"(2)]> @fragment2(%[[T]]) {call_counter = 3 : ui32} : (!mpmd.mesh_tensor<"m2", tensor<4x8xf32>>) -> !mpmd.mesh_tensor<"m2", tensor<4x8xf32>>
  // CHECK-NEXT: return %[[C2]] : !mpmd.mesh_tensor<"m2", tensor<4x8xf32>>
  %0 = mpmd.fragment_call<mesh="m1", origin=["f"(1), "g"]> @fragment1(%arg0) : (!m1_t) -> !m1_t
  %1 = mpmd.fragment_call<mesh="m1", origin=[]> @fragment1(%0) : (!m1_t) -> !m1_t
  %2 = mpmd.transfer %1 : (!m1_t) -> !m2_t
  %3 = mpmd.fragment_call<mesh="m2", origin=["h"(2)]> @fragment2(%2) {call_counter = 3 : ui32} : (!m2_t) -> !m2_t
  return %3 : !m2_t
}

// CHECK-LABEL: func.func @fragment1
// CHECK-SAME: (%arg0: tensor<4x8xf32>) -> tensor<4x8xf32> attributes {mesh_shape = #sdy.mesh<["x"=2, "y"=4]>}
func.func @fragment1(%arg0: tensor<4x8xf32>) -> tensor<4x8xf32> attributes {mesh_shape = #sdy.mesh<["x"=2, "y"=4]>} {
  %0 = "stablehlo.add"(%arg0, %arg0) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// CHECK-LABEL: func.func @fragment2
// CHECK-SAME: attributes {mesh_shape = #sdy.mesh<["z"=3]>}
func.func @fragment2(%arg0: tensor<4x8xf32>) -> tensor<4x8xf32> attributes {mesh_shape = #sdy.mesh<["z"=3]>} {
  %0 = "stablehlo.multiply"(%arg0, %arg0) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// Several operands and results (incl. non-tensor values), and a call
// without operands or results.
// CHECK-LABEL: func.func @multi
func.func @multi(%arg0: !m1_t, %arg1: !mpmd.mesh_tensor<"m1", tensor<2xi32>, memory_kind="pinned_host">)
    -> (!mpmd.mesh_tensor<"m1", tensor<2xi32>, memory_kind="pinned_host">, !m1_t)
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2, "y"=4]>>>} {
  // CHECK-NEXT: %[[C:.*]]:2 = mpmd.fragment_call<mesh="m1", origin=["f"]> @swap(%arg0, %arg1) : (!mpmd.mesh_tensor<"m1", tensor<4x8xf32>>, !mpmd.mesh_tensor<"m1", tensor<2xi32>, memory_kind="pinned_host">) -> (!mpmd.mesh_tensor<"m1", tensor<2xi32>, memory_kind="pinned_host">, !mpmd.mesh_tensor<"m1", tensor<4x8xf32>>)
  // CHECK-NEXT: mpmd.fragment_call<mesh="m1", origin=["e"]> @empty() {a.attr, call_counter = 0 : ui32} : () -> ()
  // CHECK-NEXT: return %[[C]]#0, %[[C]]#1
  %0:2 = mpmd.fragment_call<mesh="m1", origin=["f"]> @swap(%arg0, %arg1)
      : (!m1_t, !mpmd.mesh_tensor<"m1", tensor<2xi32>, memory_kind="pinned_host">)
      -> (!mpmd.mesh_tensor<"m1", tensor<2xi32>, memory_kind="pinned_host">, !m1_t)
  mpmd.fragment_call<mesh="m1", origin=["e"]> @empty() {call_counter = 0 : ui32, a.attr} : () -> ()
  return %0#0, %0#1 : !mpmd.mesh_tensor<"m1", tensor<2xi32>, memory_kind="pinned_host">, !m1_t
}

func.func private @swap(%arg0: tensor<4x8xf32>, %arg1: tensor<2xi32>) -> (tensor<2xi32>, tensor<4x8xf32>)
    attributes {mesh_shape = #sdy.mesh<["x"=2, "y"=4]>} {
  return %arg1, %arg0 : tensor<2xi32>, tensor<4x8xf32>
}

func.func private @empty() attributes {mesh_shape = #sdy.mesh<["x"=2, "y"=4]>} {
  return
}
