// RUN: mpmd-opt %s -canonicalize -split-input-file | FileCheck %s

// Canonicalization patterns of the mpmd ops (lib/Dialect/MpmdCanonicalize.cpp).

//===----------------------------------------------------------------------===//
// mpmd.transfer
//===----------------------------------------------------------------------===//

!m1 = !mpmd.mesh_tensor<"m1", tensor<4x8xf32>>
!m1_x = !mpmd.mesh_tensor<"m1", tensor<4x8xf32>, sharding=<@mesh, [{"x"}, {?}]>>
!m1_y = !mpmd.mesh_tensor<"m1", tensor<4x8xf32>, sharding=<@mesh, [{?}, {"x"}]>>
!m1_host = !mpmd.mesh_tensor<"m1", tensor<4x8xf32>, memory_kind="pinned_host">
!m2 = !mpmd.mesh_tensor<"m2", tensor<4x8xf32>>
!m2_y = !mpmd.mesh_tensor<"m2", tensor<4x8xf32>, sharding=<@mesh, [{"y"}, {?}]>>
#topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["y"=2]>>>

// A transfer to its own type is its operand.
// CHECK-LABEL: func.func @identity_transfer
// CHECK-SAME: (%[[ARG:.*]]: !mpmd.mesh_tensor<"m1", tensor<4x8xf32>>)
// CHECK-NEXT: return %[[ARG]], %[[ARG]]
func.func @identity_transfer(%arg0: !m1) -> (!m1, !m1) attributes {topology = #topology} {
  %0 = mpmd.transfer %arg0 : (!m1) -> !m1
  %1 = mpmd.transfer {some.attr} %0 : (!m1) -> !m1
  return %0, %1 : !m1, !m1
}

// -----

!m1 = !mpmd.mesh_tensor<"m1", tensor<4x8xf32>>
!m1_x = !mpmd.mesh_tensor<"m1", tensor<4x8xf32>, sharding=<@mesh, [{"x"}, {?}]>>
!m1_y = !mpmd.mesh_tensor<"m1", tensor<4x8xf32>, sharding=<@mesh, [{?}, {"x"}]>>
#topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["y"=2]>>>

// Two reshards on one mesh are one reshard from the source.
// CHECK-LABEL: func.func @intra_mesh_transfer_of_transfer
// CHECK-SAME: (%[[ARG:.*]]: !mpmd.mesh_tensor<"m1", tensor<4x8xf32>>)
// CHECK-NEXT: %[[T:.*]] = mpmd.transfer {keep.me} %[[ARG]] : (!mpmd.mesh_tensor<"m1", tensor<4x8xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4x8xf32>, sharding=<@mesh, [{?}, {"x"}]>>
// CHECK-NEXT: return %[[T]]
func.func @intra_mesh_transfer_of_transfer(%arg0: !m1) -> !m1_y attributes {topology = #topology} {
  %0 = mpmd.transfer %arg0 : (!m1) -> !m1_x
  %1 = mpmd.transfer {keep.me} %0 : (!m1_x) -> !m1_y
  return %1 : !m1_y
}

// -----

!m1 = !mpmd.mesh_tensor<"m1", tensor<4x8xf32>>
!m1_x = !mpmd.mesh_tensor<"m1", tensor<4x8xf32>, sharding=<@mesh, [{"x"}, {?}]>>
!m1_host = !mpmd.mesh_tensor<"m1", tensor<4x8xf32>, memory_kind="pinned_host">
#topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["y"=2]>>>

// A round trip on one mesh (through another sharding or memory kind) is the
// source itself.
// CHECK-LABEL: func.func @intra_mesh_round_trip
// CHECK-SAME: (%[[ARG:.*]]: !mpmd.mesh_tensor<"m1", tensor<4x8xf32>>)
// CHECK-NEXT: return %[[ARG]], %[[ARG]]
func.func @intra_mesh_round_trip(%arg0: !m1) -> (!m1, !m1) attributes {topology = #topology} {
  %0 = mpmd.transfer %arg0 : (!m1) -> !m1_x
  %1 = mpmd.transfer %0 : (!m1_x) -> !m1
  %2 = mpmd.transfer %arg0 : (!m1) -> !m1_host
  %3 = mpmd.transfer %2 : (!m1_host) -> !m1
  return %1, %3 : !m1, !m1
}

// -----

!m1 = !mpmd.mesh_tensor<"m1", tensor<4x8xf32>>
!m1_x = !mpmd.mesh_tensor<"m1", tensor<4x8xf32>, sharding=<@mesh, [{"x"}, {?}]>>
!m1_y = !mpmd.mesh_tensor<"m1", tensor<4x8xf32>, sharding=<@mesh, [{?}, {"x"}]>>
#topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["y"=2]>>>

// The first transfer stays while something else uses it.
// CHECK-LABEL: func.func @intra_mesh_transfer_of_transfer_multi_use
// CHECK-SAME: (%[[ARG:.*]]: !mpmd.mesh_tensor<"m1", tensor<4x8xf32>>)
// CHECK-NEXT: %[[T0:.*]] = mpmd.transfer %[[ARG]] : (!mpmd.mesh_tensor<"m1", tensor<4x8xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4x8xf32>, sharding=<@mesh, [{"x"}, {?}]>>
// CHECK-NEXT: %[[T1:.*]] = mpmd.transfer %[[ARG]] : (!mpmd.mesh_tensor<"m1", tensor<4x8xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4x8xf32>, sharding=<@mesh, [{?}, {"x"}]>>
// CHECK-NEXT: return %[[T0]], %[[T1]]
func.func @intra_mesh_transfer_of_transfer_multi_use(%arg0: !m1) -> (!m1_x, !m1_y) attributes {topology = #topology} {
  %0 = mpmd.transfer %arg0 : (!m1) -> !m1_x
  %1 = mpmd.transfer %0 : (!m1_x) -> !m1_y
  return %0, %1 : !m1_x, !m1_y
}

// -----

!m1 = !mpmd.mesh_tensor<"m1", tensor<4x8xf32>>
!m1_x = !mpmd.mesh_tensor<"m1", tensor<4x8xf32>, sharding=<@mesh, [{"x"}, {?}]>>
!m2_y = !mpmd.mesh_tensor<"m2", tensor<4x8xf32>, sharding=<@mesh, [{"y"}, {?}]>>
#topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["y"=2]>>>

// Negative: a reshard followed by an inter-mesh transfer is kept.
// CHECK-LABEL: func.func @inter_mesh_transfer_of_transfer
// CHECK-SAME: (%[[ARG:.*]]: !mpmd.mesh_tensor<"m1", tensor<4x8xf32>>)
// CHECK-NEXT: %[[T0:.*]] = mpmd.transfer %[[ARG]] : (!mpmd.mesh_tensor<"m1", tensor<4x8xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4x8xf32>, sharding=<@mesh, [{"x"}, {?}]>>
// CHECK-NEXT: %[[T1:.*]] = mpmd.transfer %[[T0]] : (!mpmd.mesh_tensor<"m1", tensor<4x8xf32>, sharding=<@mesh, [{"x"}, {?}]>>) -> !mpmd.mesh_tensor<"m2", tensor<4x8xf32>, sharding=<@mesh, [{"y"}, {?}]>>
// CHECK-NEXT: return %[[T1]]
func.func @inter_mesh_transfer_of_transfer(%arg0: !m1) -> !m2_y attributes {topology = #topology} {
  %0 = mpmd.transfer %arg0 : (!m1) -> !m1_x
  %1 = mpmd.transfer %0 : (!m1_x) -> !m2_y
  return %1 : !m2_y
}

// -----

!m1 = !mpmd.mesh_tensor<"m1", tensor<4x8xf32>>
!m2 = !mpmd.mesh_tensor<"m2", tensor<4x8xf32>>
#topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["y"=2]>>>

// Negative: m1 -> m2 -> m1 holds the same value as the source, but the chain
// goes through another mesh; like Shardy, only intra-mesh chains fold (the
// two copies are explicit, e.g. a value staged through another mesh).
// CHECK-LABEL: func.func @inter_mesh_round_trip
// CHECK-SAME: (%[[ARG:.*]]: !mpmd.mesh_tensor<"m1", tensor<4x8xf32>>)
// CHECK-NEXT: %[[T0:.*]] = mpmd.transfer %[[ARG]] : (!mpmd.mesh_tensor<"m1", tensor<4x8xf32>>) -> !mpmd.mesh_tensor<"m2", tensor<4x8xf32>>
// CHECK-NEXT: %[[T1:.*]] = mpmd.transfer %[[T0]] : (!mpmd.mesh_tensor<"m2", tensor<4x8xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4x8xf32>>
// CHECK-NEXT: return %[[T1]]
func.func @inter_mesh_round_trip(%arg0: !m1) -> !m1 attributes {topology = #topology} {
  %0 = mpmd.transfer %arg0 : (!m1) -> !m2
  %1 = mpmd.transfer %0 : (!m2) -> !m1
  return %1 : !m1
}

// -----

!m1 = !mpmd.mesh_tensor<"m1", tensor<4x8xf32>>
!m1_x = !mpmd.mesh_tensor<"m1", tensor<4x8xf32>, sharding=<@mesh, [{"x"}, {?}]>>
!m2 = !mpmd.mesh_tensor<"m2", tensor<4x8xf32>>
#topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["y"=2]>>>

// Negative: an inter-mesh transfer followed by a reshard on the destination.
// CHECK-LABEL: func.func @inter_then_intra_mesh
// CHECK-NEXT: mpmd.transfer %arg0 : (!mpmd.mesh_tensor<"m2", tensor<4x8xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4x8xf32>>
// CHECK-NEXT: mpmd.transfer
// CHECK-NEXT: return
func.func @inter_then_intra_mesh(%arg0: !m2) -> !m1_x attributes {topology = #topology} {
  %0 = mpmd.transfer %arg0 : (!m2) -> !m1
  %1 = mpmd.transfer %0 : (!m1) -> !m1_x
  return %1 : !m1_x
}

// -----

!m1 = !mpmd.mesh_tensor<"m1", tensor<4x8xf32>>
!m1_x = !mpmd.mesh_tensor<"m1", tensor<4x8xf32>, sharding=<@mesh, [{"x"}, {?}]>>
!m1_y = !mpmd.mesh_tensor<"m1", tensor<4x8xf32>, sharding=<@mesh, [{?}, {"x"}]>>
#topology = #mpmd.topology<<"m1" : <["x"=2]>>>

// A longer intra-mesh chain folds completely.
// CHECK-LABEL: func.func @intra_mesh_chain
// CHECK-SAME: (%[[ARG:.*]]: !mpmd.mesh_tensor<"m1", tensor<4x8xf32>>)
// CHECK-NEXT: %[[T:.*]] = mpmd.transfer %[[ARG]] : (!mpmd.mesh_tensor<"m1", tensor<4x8xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4x8xf32>, sharding=<@mesh, [{"x"}, {?}]>>
// CHECK-NEXT: return %[[T]]
func.func @intra_mesh_chain(%arg0: !m1) -> !m1_x attributes {topology = #topology} {
  %0 = mpmd.transfer %arg0 : (!m1) -> !m1_x
  %1 = mpmd.transfer %0 : (!m1_x) -> !m1_y
  %2 = mpmd.transfer %1 : (!m1_y) -> !m1
  %3 = mpmd.transfer %2 : (!m1) -> !m1_x
  return %3 : !m1_x
}

// -----

//===----------------------------------------------------------------------===//
// mpmd.broadcast
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @broadcast_of_broadcast
// CHECK-SAME: (%[[ARG:.*]]: tensor<4x8xf32>)
// CHECK-NEXT: %[[B:.*]] = mpmd.broadcast {outer} %[[ARG]] : tensor<4x8xf32>
// CHECK-NEXT: return %[[B]]
func.func @broadcast_of_broadcast(%arg0: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = mpmd.broadcast %arg0 : tensor<4x8xf32>
  %1 = mpmd.broadcast %0 : tensor<4x8xf32>
  %2 = mpmd.broadcast {outer} %1 : tensor<4x8xf32>
  return %2 : tensor<4x8xf32>
}

// -----

// The inner broadcast stays while it has other uses.
// CHECK-LABEL: func.func @broadcast_of_broadcast_multi_use
// CHECK-SAME: (%[[ARG:.*]]: tensor<4x8xf32>)
// CHECK-NEXT: %[[B0:.*]] = mpmd.broadcast %[[ARG]] : tensor<4x8xf32>
// CHECK-NEXT: %[[B1:.*]] = mpmd.broadcast %[[ARG]] : tensor<4x8xf32>
// CHECK-NEXT: return %[[B0]], %[[B1]]
func.func @broadcast_of_broadcast_multi_use(%arg0: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %0 = mpmd.broadcast %arg0 : tensor<4x8xf32>
  %1 = mpmd.broadcast %0 : tensor<4x8xf32>
  return %0, %1 : tensor<4x8xf32>, tensor<4x8xf32>
}

// -----

// Negative: a single broadcast is kept (it is not an identity for mesh
// inference).
// CHECK-LABEL: func.func @single_broadcast
// CHECK-NEXT: %[[B:.*]] = mpmd.broadcast %arg0 : tensor<4x8xf32>
// CHECK-NEXT: return %[[B]]
func.func @single_broadcast(%arg0: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = mpmd.broadcast %arg0 : tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

//===----------------------------------------------------------------------===//
// mpmd.reduce
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @flatten_reduce_of_reduce
// CHECK-SAME: (%[[A:.*]]: tensor<4x8xf32>, %[[B:.*]]: tensor<4x8xf32>, %[[C:.*]]: tensor<4x8xf32>)
// CHECK-NEXT: %[[R:.*]] = mpmd.reduce<add> %[[A]], %[[B]], %[[C]] : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: return %[[R]]
func.func @flatten_reduce_of_reduce(%a: tensor<4x8xf32>, %b: tensor<4x8xf32>, %c: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = mpmd.reduce<add> %a, %b : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = mpmd.reduce<add> %0, %c : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %1 : tensor<4x8xf32>
}

// -----

// Inner reduces in any position, and nested chains, flatten in order.
// CHECK-LABEL: func.func @flatten_reduce_tree
// CHECK-SAME: (%[[A:.*]]: tensor<4xi1>, %[[B:.*]]: tensor<4xi1>, %[[C:.*]]: tensor<4xi1>, %[[D:.*]]: tensor<4xi1>)
// CHECK-NEXT: %[[R:.*]] = mpmd.reduce<or> %[[A]], %[[B]], %[[C]], %[[D]], %[[A]] : (tensor<4xi1>, tensor<4xi1>, tensor<4xi1>, tensor<4xi1>, tensor<4xi1>) -> tensor<4xi1>
// CHECK-NEXT: return %[[R]]
func.func @flatten_reduce_tree(%a: tensor<4xi1>, %b: tensor<4xi1>, %c: tensor<4xi1>, %d: tensor<4xi1>) -> tensor<4xi1> {
  %0 = mpmd.reduce<or> %b, %c : (tensor<4xi1>, tensor<4xi1>) -> tensor<4xi1>
  %1 = mpmd.reduce<or> %a, %0 : (tensor<4xi1>, tensor<4xi1>) -> tensor<4xi1>
  %2 = mpmd.reduce<or> %d, %a : (tensor<4xi1>, tensor<4xi1>) -> tensor<4xi1>
  %3 = mpmd.reduce<or> %1, %2 : (tensor<4xi1>, tensor<4xi1>) -> tensor<4xi1>
  return %3 : tensor<4xi1>
}

// -----

// A reduce of one reduce of the same kind is that reduce.
// CHECK-LABEL: func.func @reduce_of_single_reduce
// CHECK-NEXT: %[[R:.*]] = mpmd.reduce<max> %arg0, %arg1 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: return %[[R]]
func.func @reduce_of_single_reduce(%arg0: tensor<4x8xf32>, %arg1: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = mpmd.reduce<max> %arg0, %arg1 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = mpmd.reduce<max> %0 : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return %1 : tensor<4x8xf32>
}

// -----

// reduce<none> of a reduce is that reduce (`none` is the default reduction).
// CHECK-LABEL: func.func @none_reduce_of_reduce
// CHECK-NEXT: %[[R:.*]] = mpmd.reduce<add> %arg0, %arg1 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: return %[[R]], %[[R]]
func.func @none_reduce_of_reduce(%arg0: tensor<4x8xf32>, %arg1: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %0 = mpmd.reduce<add> %arg0, %arg1 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = mpmd.reduce<none> %0 : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %2 = "mpmd.reduce"(%0) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return %1, %2 : tensor<4x8xf32>, tensor<4x8xf32>
}

// -----

// A chain of reduce<none> is one reduce<none>.
// CHECK-LABEL: func.func @none_reduce_chain
// CHECK-NEXT: %[[R:.*]] = mpmd.reduce<none> %arg0 : (tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: return %[[R]]
func.func @none_reduce_chain(%arg0: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = mpmd.reduce<none> %arg0 : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = mpmd.reduce<none> %0 : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %2 = mpmd.reduce<none> %1 : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return %2 : tensor<4x8xf32>
}

// -----

// Negative: the inner reduce has another use; flattening would compute it
// twice.
// CHECK-LABEL: func.func @inner_reduce_with_two_uses
// CHECK-NEXT: %[[R0:.*]] = mpmd.reduce<add> %arg0, %arg1 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[R1:.*]] = mpmd.reduce<add> %[[R0]], %arg2 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: return %[[R0]], %[[R1]]
func.func @inner_reduce_with_two_uses(%arg0: tensor<4x8xf32>, %arg1: tensor<4x8xf32>, %arg2: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %0 = mpmd.reduce<add> %arg0, %arg1 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = mpmd.reduce<add> %0, %arg2 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %0, %1 : tensor<4x8xf32>, tensor<4x8xf32>
}

// -----

// Negative: the same inner reduce twice is two uses.
// CHECK-LABEL: func.func @inner_reduce_used_twice_by_outer
// CHECK-NEXT: %[[R0:.*]] = mpmd.reduce<max> %arg0, %arg1
// CHECK-NEXT: %[[R1:.*]] = mpmd.reduce<max> %[[R0]], %[[R0]]
// CHECK-NEXT: return %[[R1]]
func.func @inner_reduce_used_twice_by_outer(%arg0: tensor<4x8xf32>, %arg1: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = mpmd.reduce<max> %arg0, %arg1 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = mpmd.reduce<max> %0, %0 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %1 : tensor<4x8xf32>
}

// -----

// Negative: different reductions do not flatten.
// CHECK-LABEL: func.func @different_reductions
// CHECK-NEXT: %[[R0:.*]] = mpmd.reduce<mul> %arg0, %arg0 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[R1:.*]] = mpmd.reduce<add> %[[R0]] : (tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: return %[[R1]]
func.func @different_reductions(%arg0: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = mpmd.reduce<mul> %arg0, %arg0 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = mpmd.reduce<add> %0 : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return %1 : tensor<4x8xf32>
}

// -----

// Negative: a reduce<none> of a non-reduce value, and a reduce<add> of a
// reduce<none>, are kept.
// CHECK-LABEL: func.func @none_reduce_kept
// CHECK-NEXT: %[[R0:.*]] = mpmd.reduce<none> %arg0
// CHECK-NEXT: %[[R1:.*]] = mpmd.reduce<add> %[[R0]], %arg0
// CHECK-NEXT: return %[[R1]]
func.func @none_reduce_kept(%arg0: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = mpmd.reduce<none> %arg0 : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = mpmd.reduce<add> %0, %arg0 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %1 : tensor<4x8xf32>
}

// -----

//===----------------------------------------------------------------------===//
// mpmd.fragment
//===----------------------------------------------------------------------===//

!m1 = !mpmd.mesh_tensor<"m1", tensor<4x8xf32>>
#topology = #mpmd.topology<<"m1" : <["x"=2, "y"=2]>>>

// Uses of results that return a block argument take the corresponding
// operands; the fragment keeps every result (-mpmd-fragment-dce drops them).
// CHECK-LABEL: func.func @fragment_pass_through_results
// CHECK-SAME: (%[[ARG0:.*]]: !mpmd.mesh_tensor<"m1", tensor<4x8xf32>>, %[[ARG1:.*]]: !mpmd.mesh_tensor<"m1", tensor<4x8xf32>>)
// CHECK-NEXT: %[[F:.*]]:3 = mpmd.fragment<mesh="m1", origin=["f"], stage=2> (%[[ARG0]], %[[ARG1]]) {call_counter = 1 : ui32} (%[[A:.*]]: tensor<4x8xf32>, %[[B:.*]]: tensor<4x8xf32>) {
// CHECK-NEXT:   %[[ADD:.*]] = "stablehlo.add"(%[[A]], %[[B]])
// CHECK-NEXT:   mpmd.return %[[ADD]], %[[A]], %[[B]] : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
// CHECK-NEXT: } : (!mpmd.mesh_tensor<"m1", tensor<4x8xf32>>, !mpmd.mesh_tensor<"m1", tensor<4x8xf32>>) -> (!mpmd.mesh_tensor<"m1", tensor<4x8xf32>>, !mpmd.mesh_tensor<"m1", tensor<4x8xf32>>, !mpmd.mesh_tensor<"m1", tensor<4x8xf32>>)
// CHECK-NEXT: return %[[F]]#0, %[[ARG0]], %[[ARG1]]
func.func @fragment_pass_through_results(%arg0: !m1, %arg1: !m1) -> (!m1, !m1, !m1) attributes {topology = #topology} {
  %0:3 = mpmd.fragment<mesh="m1", origin=["f"], stage=2> (%arg0, %arg1) {call_counter = 1 : ui32} (%a: tensor<4x8xf32>, %b: tensor<4x8xf32>) {
    %1 = "stablehlo.add"(%a, %b) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
    mpmd.return %1, %a, %b : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
  } : (!m1, !m1) -> (!m1, !m1, !m1)
  return %0#0, %0#1, %0#2 : !m1, !m1, !m1
}

// -----

!m1 = !mpmd.mesh_tensor<"m1", tensor<4x8xf32>>
#topology = #mpmd.topology<<"m1" : <["x"=2, "y"=2]>>>

// Every result passes through; a result nobody uses and one whose uses
// were forwarded both stay.
// CHECK-LABEL: func.func @fragment_only_pass_through
// CHECK-SAME: (%[[ARG0:.*]]: !mpmd.mesh_tensor<"m1", tensor<4x8xf32>>)
// CHECK-NEXT: %{{.*}}:2 = mpmd.fragment<mesh="m1", origin=[]> (%[[ARG0]]) (%[[A:.*]]: tensor<4x8xf32>) {
// CHECK-NEXT:   "some.effect"(%[[A]])
// CHECK-NEXT:   mpmd.return %[[A]], %[[A]]
// CHECK-NEXT: } : (!mpmd.mesh_tensor<"m1", tensor<4x8xf32>>) -> (!mpmd.mesh_tensor<"m1", tensor<4x8xf32>>, !mpmd.mesh_tensor<"m1", tensor<4x8xf32>>)
// CHECK-NEXT: return %[[ARG0]]
func.func @fragment_only_pass_through(%arg0: !m1) -> !m1 attributes {topology = #topology} {
  %0:2 = mpmd.fragment<mesh="m1", origin=[]> (%arg0) (%a: tensor<4x8xf32>) {
    "some.effect"(%a) : (tensor<4x8xf32>) -> ()
    mpmd.return %a, %a : tensor<4x8xf32>, tensor<4x8xf32>
  } : (!m1) -> (!m1, !m1)
  return %0#0 : !m1
}

// -----

!m1 = !mpmd.mesh_tensor<"m1", tensor<4x8xf32>>
#topology = #mpmd.topology<<"m1" : <["x"=2, "y"=2]>>>

// out_shardings and res_attrs stay as they are (one entry per result).
// CHECK-LABEL: func.func @fragment_pass_through_with_out_shardings
// CHECK-NEXT: %[[F:.*]]:3 = mpmd.fragment<mesh="m1", origin=["f"], out_shardings=[<@mesh, [{"x"}, {?}]>, <@mesh, [{}, {}]>, <@mesh, [{?}, {"y"}]>]> (%arg0, %arg1) {res_attrs = [{a}, {b}, {c}]}
// CHECK:        mpmd.return %{{.*}}, %{{.*}}, %{{.*}} : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
// CHECK:      return %[[F]]#0, %arg1, %[[F]]#2
func.func @fragment_pass_through_with_out_shardings(%arg0: !m1, %arg1: !m1) -> (!m1, !m1, !m1) attributes {topology = #topology} {
  %0:3 = mpmd.fragment<mesh="m1", origin=["f"], out_shardings=[<@mesh, [{"x"}, {?}]>, <@mesh, [{}, {}]>, <@mesh, [{?}, {"y"}]>]> (%arg0, %arg1) {res_attrs = [{a}, {b}, {c}]} (%a: tensor<4x8xf32>, %b: tensor<4x8xf32>) {
    %1 = "stablehlo.add"(%a, %b) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
    %2 = "stablehlo.subtract"(%a, %b) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
    mpmd.return %1, %b, %2 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
  } : (!m1, !m1) -> (!m1, !m1, !m1)
  return %0#0, %0#1, %0#2 : !m1, !m1, !m1
}

// -----

!m1 = !mpmd.mesh_tensor<"m1", tensor<4x8xf32>>
!m1_x = !mpmd.mesh_tensor<"m1", tensor<4x8xf32>, sharding=<@mesh, [{"x"}, {?}]>>
#topology = #mpmd.topology<<"m1" : <["x"=2, "y"=2]>>>

// Negative: the result has another type (sharding) than the operand.
// CHECK-LABEL: func.func @fragment_pass_through_different_type
// CHECK-NEXT: %[[F:.*]] = mpmd.fragment<mesh="m1", origin=["f"]> (%arg0) (%[[A:.*]]: tensor<4x8xf32>) {
// CHECK-NEXT:   mpmd.return %[[A]] : tensor<4x8xf32>
// CHECK-NEXT: } : (!mpmd.mesh_tensor<"m1", tensor<4x8xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4x8xf32>, sharding=<@mesh, [{"x"}, {?}]>>
// CHECK-NEXT: return %[[F]]
func.func @fragment_pass_through_different_type(%arg0: !m1) -> !m1_x attributes {topology = #topology} {
  %0 = mpmd.fragment<mesh="m1", origin=["f"]> (%arg0) (%a: tensor<4x8xf32>) {
    mpmd.return %a : tensor<4x8xf32>
  } : (!m1) -> !m1_x
  return %0 : !m1_x
}

// -----

!m1 = !mpmd.mesh_tensor<"m1", tensor<4x8xf32>>
#topology = #mpmd.topology<<"m1" : <["x"=2, "y"=2]>>>

// Negative: no result returns a block argument.
// CHECK-LABEL: func.func @fragment_no_pass_through
// CHECK-NEXT: %[[F:.*]] = mpmd.fragment<mesh="m1", origin=["f"]> (%arg0, %arg1)
// CHECK-NEXT:   "stablehlo.add"
// CHECK-NEXT:   mpmd.return
// CHECK-NEXT: } : (!mpmd.mesh_tensor<"m1", tensor<4x8xf32>>, !mpmd.mesh_tensor<"m1", tensor<4x8xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4x8xf32>>
// CHECK-NEXT: return %[[F]]
func.func @fragment_no_pass_through(%arg0: !m1, %arg1: !m1) -> !m1 attributes {topology = #topology} {
  %0 = mpmd.fragment<mesh="m1", origin=["f"]> (%arg0, %arg1) (%a: tensor<4x8xf32>, %b: tensor<4x8xf32>) {
    %1 = "stablehlo.add"(%a, %b) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
    mpmd.return %1 : tensor<4x8xf32>
  } : (!m1, !m1) -> !m1
  return %0 : !m1
}

// -----

!m1 = !mpmd.mesh_tensor<"m1", tensor<4x8xf32>>
#topology = #mpmd.topology<<"m1" : <["x"=2]>>>

// Tokens pass through like tensors.
// CHECK-LABEL: func.func @fragment_pass_through_token
// CHECK-SAME: (%[[ARG0:.*]]: !mpmd.mesh_tensor<"m1", tensor<4x8xf32>>, %[[TOK:.*]]: !stablehlo.token)
// CHECK-NEXT: %[[F:.*]]:2 = mpmd.fragment<mesh="m1", origin=["f"]> (%[[ARG0]], %[[TOK]])
// CHECK:      } : (!mpmd.mesh_tensor<"m1", tensor<4x8xf32>>, !stablehlo.token) -> (!mpmd.mesh_tensor<"m1", tensor<4x8xf32>>, !stablehlo.token)
// CHECK-NEXT: return %[[F]]#0, %[[TOK]]
func.func @fragment_pass_through_token(%arg0: !m1, %arg1: !stablehlo.token) -> (!m1, !stablehlo.token) attributes {topology = #topology} {
  %0:2 = mpmd.fragment<mesh="m1", origin=["f"]> (%arg0, %arg1) (%a: tensor<4x8xf32>, %t: !stablehlo.token) {
    %1 = "stablehlo.negate"(%a) : (tensor<4x8xf32>) -> tensor<4x8xf32>
    mpmd.return %1, %t : tensor<4x8xf32>, !stablehlo.token
  } : (!m1, !stablehlo.token) -> (!m1, !stablehlo.token)
  return %0#0, %0#1 : !m1, !stablehlo.token
}

// -----

!m1 = !mpmd.mesh_tensor<"m1", tensor<4x8xf32>>
#topology = #mpmd.topology<<"m1" : <["x"=2, "y"=2]>>>

// Canonicalization runs inside loops too (fragment inside an mpmd.for).
// CHECK-LABEL: func.func @fragment_in_for
// CHECK:      mpmd.for (%arg0)
// CHECK-NEXT:   mpmd.fragment<mesh="m1", origin=["f"]> (%[[X:.*]]) (%{{.*}}: tensor<4x8xf32>) {
// CHECK:        } : (!mpmd.mesh_tensor<"m1", tensor<4x8xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4x8xf32>>
// CHECK-NEXT:   mpmd.return %[[X]]
func.func @fragment_in_for(%arg0: !m1) -> !m1 attributes {topology = #topology} {
  %0 = mpmd.for (%arg0) {iterations = 2 : ui32, unroll_factor = 2 : ui32} (%x: !m1, %index: tensor<ui32>) {
    %1 = mpmd.fragment<mesh="m1", origin=["f"]> (%x) (%a: tensor<4x8xf32>) {
      "some.effect"(%a) : (tensor<4x8xf32>) -> ()
      mpmd.return %a : tensor<4x8xf32>
    } : (!m1) -> !m1
    mpmd.return %1 : !m1
  } : !m1
  return %0 : !m1
}

// -----

//===----------------------------------------------------------------------===//
// Graph regions
//===----------------------------------------------------------------------===//

!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>
!m1_x = !mpmd.mesh_tensor<"m1", tensor<4xf32>, sharding=<@mesh, [{"x"}]>>

// Regression (fuzzer): values may be used before their definition in graph
// regions (the module body, regions of unregistered ops), so chains can be
// cycles. Canonicalization looped forever on broadcast cycles, and replaced
// self-using transfers/reduces/fragments by themselves (use after free).
// Cycles are left alone.
// CHECK-LABEL: func.func @graph_region_cycles
// CHECK-NEXT:  "foo.graph"() ({
// CHECK-NEXT:    %[[B0:.*]] = mpmd.broadcast %[[B0]] : tensor<4xf32>
// CHECK-NEXT:    %[[B1:.*]] = mpmd.broadcast %[[B2:.*]] : tensor<4xf32>
// CHECK-NEXT:    %[[B2]] = mpmd.broadcast %[[B1]] : tensor<4xf32>
// CHECK-NEXT:    %[[R0:.*]] = mpmd.reduce<none> %[[R0]]
// CHECK-NEXT:    %[[R1:.*]] = mpmd.reduce<add> %[[R1]], %[[R1]]
// CHECK-NEXT:    %[[T0:.*]] = mpmd.transfer %[[T0]] : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
// CHECK-NEXT:    %[[T1:.*]] = mpmd.transfer %[[T2:.*]] : (!mpmd.mesh_tensor<"m1", tensor<4xf32>, sharding=<@mesh, [{"x"}]>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
// CHECK-NEXT:    %[[T2]] = mpmd.transfer %[[T1]] : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>, sharding=<@mesh, [{"x"}]>>
// CHECK-NEXT:    %[[F:.*]] = mpmd.fragment<mesh="m1", origin=[]> (%[[F]])
// CHECK:         "foo.use"(%[[B0]], %[[B1]], %[[B2]], %[[R0]], %[[R1]], %[[T0]], %[[T1]], %[[T2]], %[[F]])
func.func @graph_region_cycles() attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  "foo.graph"() ({
    %b0 = mpmd.broadcast %b0 : tensor<4xf32>
    %b1 = mpmd.broadcast %b2 : tensor<4xf32>
    %b2 = mpmd.broadcast %b1 : tensor<4xf32>
    %r0 = mpmd.reduce<none> %r0 : (tensor<4xf32>) -> tensor<4xf32>
    %r1 = mpmd.reduce<add> %r1, %r1 : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %t0 = mpmd.transfer %t0 : (!m1) -> !m1
    %t1 = mpmd.transfer %t2 : (!m1_x) -> !m1
    %t2 = mpmd.transfer %t1 : (!m1) -> !m1_x
    %f = mpmd.fragment<mesh="m1", origin=[]> (%f) (%a: tensor<4xf32>) {
      mpmd.return %a : tensor<4xf32>
    } : (!m1) -> !m1
    "foo.use"(%b0, %b1, %b2, %r0, %r1, %t0, %t1, %t2, %f) : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, !m1, !m1, !m1_x, !m1) -> ()
  }) : () -> ()
  return
}

// -----

// A chain that only reaches a cycle still folds up to it.
// CHECK-LABEL: func.func @graph_region_chain_into_cycle
// CHECK:         %[[B0:.*]] = mpmd.broadcast %[[B0]] : tensor<4xf32>
// CHECK-NEXT:    %[[B1:.*]] = mpmd.broadcast %[[B0]] : tensor<4xf32>
// CHECK-NEXT:    "foo.use"(%[[B1]])
func.func @graph_region_chain_into_cycle() {
  "foo.graph"() ({
    %b0 = mpmd.broadcast %b0 : tensor<4xf32>
    %b1 = mpmd.broadcast %b0 : tensor<4xf32>
    %b2 = mpmd.broadcast %b1 : tensor<4xf32>
    "foo.use"(%b2) : (tensor<4xf32>) -> ()
  }) : () -> ()
  return
}
