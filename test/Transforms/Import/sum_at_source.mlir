// RUN: mpmd-opt %s -split-input-file -mpmd-sum-at-source | FileCheck %s

!a = !mpmd.mesh_tensor<"m0", tensor<4xf32>>
!b = !mpmd.mesh_tensor<"m1", tensor<4xf32>>

// A tied weight's gradient accumulated over two microbatches on m0, each
// microbatch adding a term computed on m1: the m1 terms are summed on m1
// (from zeros, so that every term has the same add after it) and cross once,
// after the accumulation; m0 accumulates its own terms.

// CHECK-LABEL: func.func @tied_gradient_accumulation
func.func @tied_gradient_accumulation(%acc: !a, %x1: !a, %x2: !a, %y1: !b, %y2: !b) -> !a
    attributes {topology = #mpmd.topology<<"m0" : <["x"=1]>>, <"m1" : <["x"=1]>>>} {
  // CHECK-NEXT: %[[Z:.*]] = mpmd.fragment<mesh="m1", origin=[]> () () {
  // CHECK-NEXT:   "stablehlo.constant"() <{value = dense<0.000000e+00> : tensor<4xf32>}>
  // CHECK-NEXT:   mpmd.return
  // CHECK-NEXT: } : () -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
  // CHECK-NEXT: %[[R1:.*]] = mpmd.fragment<mesh="m1", origin=[]> (%[[Z]], %arg3)
  // CHECK:      %[[A1:.*]] = mpmd.fragment<mesh="m0", origin=[]> (%arg0, %arg1)
  // CHECK:      %[[R2:.*]] = mpmd.fragment<mesh="m1", origin=[]> (%[[R1]], %arg4)
  // CHECK-NEXT:   "stablehlo.add"
  // CHECK-NEXT:   mpmd.return
  // CHECK-NEXT: } : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>, !mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
  // CHECK-NEXT: %[[A2:.*]] = mpmd.fragment<mesh="m0", origin=[]> (%[[A1]], %arg2)
  // CHECK:      %[[T:.*]] = mpmd.transfer %[[R2]] : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m0", tensor<4xf32>>
  // CHECK-NEXT: %[[F:.*]] = mpmd.fragment<mesh="m0", origin=[]> (%[[A2]], %[[T]])
  // CHECK:      return %[[F]]
  // CHECK-NOT:  mpmd.transfer
  %t1 = mpmd.transfer %y1 : (!b) -> !a
  %s1 = mpmd.fragment<mesh="m0", origin=[]> (%t1, %x1) (%p: tensor<4xf32>, %q: tensor<4xf32>) {
    %r = "stablehlo.add"(%p, %q) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %r : tensor<4xf32>
  } : (!a, !a) -> !a
  %a1 = mpmd.fragment<mesh="m0", origin=[]> (%acc, %s1) (%p: tensor<4xf32>, %q: tensor<4xf32>) {
    %r = "stablehlo.add"(%p, %q) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %r : tensor<4xf32>
  } : (!a, !a) -> !a
  %t2 = mpmd.transfer %y2 : (!b) -> !a
  %s2 = mpmd.fragment<mesh="m0", origin=[]> (%x2, %t2) (%p: tensor<4xf32>, %q: tensor<4xf32>) {
    %r = "stablehlo.add"(%p, %q) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %r : tensor<4xf32>
  } : (!a, !a) -> !a
  %a2 = mpmd.fragment<mesh="m0", origin=[]> (%a1, %s2) (%p: tensor<4xf32>, %q: tensor<4xf32>) {
    %r = "stablehlo.add"(%p, %q) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %r : tensor<4xf32>
  } : (!a, !a) -> !a
  return %a2 : !a
}

// -----

!a = !mpmd.mesh_tensor<"m0", tensor<4xf32>>
!b = !mpmd.mesh_tensor<"m1", tensor<4xf32>>

// One transferred term: nothing to gain, nothing changes.

// CHECK-LABEL: func.func @one_term_is_left_alone
func.func @one_term_is_left_alone(%acc: !a, %y1: !b) -> !a
    attributes {topology = #mpmd.topology<<"m0" : <["x"=1]>>, <"m1" : <["x"=1]>>>} {
  // CHECK-NEXT: %[[T:.*]] = mpmd.transfer %arg1
  // CHECK-NEXT: %[[S:.*]] = mpmd.fragment<mesh="m0", origin=[]> (%[[T]], %arg0)
  %t1 = mpmd.transfer %y1 : (!b) -> !a
  %s1 = mpmd.fragment<mesh="m0", origin=[]> (%t1, %acc) (%p: tensor<4xf32>, %q: tensor<4xf32>) {
    %r = "stablehlo.add"(%p, %q) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %r : tensor<4xf32>
  } : (!a, !a) -> !a
  return %s1 : !a
}

// -----

!a = !mpmd.mesh_tensor<"m0", tensor<4xf32>>
!b = !mpmd.mesh_tensor<"m1", tensor<4xf32>>

// A transferred value used twice, or an add that is not a plain sum of its
// operands (a multiply, a user fragment), is not part of a tree.

// CHECK-LABEL: func.func @not_a_sum_tree
func.func @not_a_sum_tree(%acc: !a, %y1: !b, %y2: !b) -> (!a, !a)
    attributes {topology = #mpmd.topology<<"m0" : <["x"=1]>>, <"m1" : <["x"=1]>>>} {
  // CHECK-COUNT-2: mpmd.transfer
  // CHECK-NOT: mpmd.transfer
  %t1 = mpmd.transfer %y1 : (!b) -> !a
  %s1 = mpmd.fragment<mesh="m0", origin=[]> (%t1, %acc) (%p: tensor<4xf32>, %q: tensor<4xf32>) {
    %r = "stablehlo.add"(%p, %q) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %r : tensor<4xf32>
  } : (!a, !a) -> !a
  %t2 = mpmd.transfer %y2 : (!b) -> !a
  %s2 = mpmd.fragment<mesh="m0", origin=["user"]> (%s1, %t2) (%p: tensor<4xf32>, %q: tensor<4xf32>) {
    %r = "stablehlo.add"(%p, %q) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %r : tensor<4xf32>
  } : (!a, !a) -> !a
  return %s2, %t1 : !a, !a
}
