// RUN: mpmd-opt %s -split-input-file -mpmd-remat-fragment | FileCheck %s
// Idempotent:
// RUN: mpmd-opt %s -split-input-file -mpmd-remat-fragment -mpmd-remat-fragment | FileCheck %s
// RUN: mpmd-opt %s -split-input-file -mpmd-remat-fragment='merge-remat-fragments=true' \
// RUN:   | FileCheck %s --check-prefix=MERGE

!m0 = !mpmd.mesh_tensor<"m0", tensor<4xf32>>

// GPipe-like order on m0: F0 F1 B1 B0. B0 does not run right after F0, so F0
// is recomputed right before it and only B0 uses the clone (F0's result is
// dead after the clone: its buffer can be freed early). B1 runs right after
// F1: nothing to save.

// CHECK-LABEL: func.func @remat
func.func @remat(%x0: !m0, %x1: !m0, %ct0: !m0, %ct1: !m0) -> (!m0, !m0)
    attributes {topology = #mpmd.topology<<"m0" : <["x"=2]>>>} {
  // CHECK-NEXT: %[[F0:.*]] = mpmd.fragment<mesh="m0", origin=["s"], stage=0> (%arg0) {call_counter = 0 : ui32} (
  // CHECK:      %[[F1:.*]] = mpmd.fragment<mesh="m0", origin=["s"], stage=0> (%arg1) {call_counter = 1 : ui32} (
  // CHECK:      %[[B1:.*]] = mpmd.fragment<mesh="m0", origin=["s"(1)], stage=0> (%[[F1]], %arg3) {call_counter = 1 : ui32} (
  // CHECK:      %[[R:.*]] = mpmd.fragment<mesh="m0", origin=["s"], stage=0> (%arg0) {call_counter = 0 : ui32, remat} (%[[A:.*]]: tensor<4xf32>) {
  // CHECK-NEXT:   %[[T:.*]] = "stablehlo.tanh"(%[[A]])
  // CHECK-NEXT:   mpmd.return %[[T]] : tensor<4xf32>
  // CHECK-NEXT: }
  // CHECK-NEXT: %[[B0:.*]] = mpmd.fragment<mesh="m0", origin=["s"(1)], stage=0> (%[[R]], %arg2) {call_counter = 0 : ui32} (
  // CHECK:      return %[[B0]], %[[B1]]

  // MERGE-LABEL: func.func @remat
  // MERGE:       %[[B1:.*]] = mpmd.fragment<mesh="m0", origin=["s"(1)], stage=0> (%{{.*}}, %arg3) {call_counter = 1 : ui32} (
  // MERGE:       %[[B0:.*]] = mpmd.fragment<mesh="m0", origin=["s", "s"(1)], stage=0> (%arg0, %arg2) {call_counter = 0 : ui32, remat} (%[[A:.*]]: tensor<4xf32>, %[[C:.*]]: tensor<4xf32>) {
  // MERGE-NEXT:    %[[T:.*]] = "stablehlo.tanh"(%[[A]])
  // MERGE-NEXT:    %[[G:.*]] = "stablehlo.multiply"(%[[T]], %[[C]])
  // MERGE-NEXT:    mpmd.return %[[G]] : tensor<4xf32>
  // MERGE-NEXT:  }
  // MERGE-NEXT:  return %[[B0]], %[[B1]]
  %f0 = mpmd.fragment<mesh="m0", origin=["s"], stage=0> (%x0) {call_counter = 0 : ui32} (%a: tensor<4xf32>) {
    %t = "stablehlo.tanh"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %t : tensor<4xf32>
  } : (!m0) -> !m0
  %f1 = mpmd.fragment<mesh="m0", origin=["s"], stage=0> (%x1) {call_counter = 1 : ui32} (%a: tensor<4xf32>) {
    %t = "stablehlo.tanh"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %t : tensor<4xf32>
  } : (!m0) -> !m0
  %b1 = mpmd.fragment<mesh="m0", origin=["s"(1)], stage=0> (%f1, %ct1) {call_counter = 1 : ui32} (%t: tensor<4xf32>, %c: tensor<4xf32>) {
    %g = "stablehlo.multiply"(%t, %c) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %g : tensor<4xf32>
  } : (!m0, !m0) -> !m0
  %b0 = mpmd.fragment<mesh="m0", origin=["s"(1)], stage=0> (%f0, %ct0) {call_counter = 0 : ui32} (%t: tensor<4xf32>, %c: tensor<4xf32>) {
    %g = "stablehlo.multiply"(%t, %c) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %g : tensor<4xf32>
  } : (!m0, !m0) -> !m0
  return %b0, %b1 : !m0, !m0
}

// -----

!m0 = !mpmd.mesh_tensor<"m0", tensor<4xf32>>
!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>

// Each backward user gets its own clone, which returns only what that user
// reads and keeps only the ops and operands that needs. F's other uses (the
// transfer to m1, the function result) keep using F.

// CHECK-LABEL: func.func @clone_per_user
func.func @clone_per_user(%x: !m0, %y: !m0, %ct: !m0) -> (!m0, !m0, !m1)
    attributes {topology = #mpmd.topology<<"m0" : <["x"=2]>>, <"m1" : <["x"=2]>>>} {
  // CHECK-NEXT: %[[F:.*]]:2 = mpmd.fragment<mesh="m0", origin=["s"]> (%arg0, %arg1) {call_counter = 0 : ui32}
  // CHECK:      %[[T:.*]] = mpmd.transfer %[[F]]#0
  // CHECK-NEXT: %[[G:.*]] = mpmd.fragment<mesh="m1", origin=["t"]> (%[[T]])
  // CHECK:      %[[O:.*]] = mpmd.fragment<mesh="m0", origin=["u"]> (%arg2)
  // CHECK:      %[[R1:.*]] = mpmd.fragment<mesh="m0", origin=["s"]> (%arg0) {call_counter = 0 : ui32, remat} (%[[A:.*]]: tensor<4xf32>) {
  // CHECK-NEXT:   %[[E:.*]] = "stablehlo.exponential"(%[[A]])
  // CHECK-NEXT:   mpmd.return %[[E]] : tensor<4xf32>
  // CHECK-NEXT: } : (!mpmd.mesh_tensor<"m0", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m0", tensor<4xf32>>
  // CHECK-NEXT: %[[B1:.*]] = mpmd.fragment<mesh="m0", origin=["s"(1)]> (%[[R1]], %[[O]]) {call_counter = 0 : ui32}
  // CHECK:      %[[R2:.*]] = mpmd.fragment<mesh="m0", origin=["s"]> (%arg1) {call_counter = 0 : ui32, remat} (%[[B:.*]]: tensor<4xf32>) {
  // CHECK-NEXT:   %[[N:.*]] = "stablehlo.negate"(%[[B]])
  // CHECK-NEXT:   mpmd.return %[[N]] : tensor<4xf32>
  // CHECK-NEXT: } : (!mpmd.mesh_tensor<"m0", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m0", tensor<4xf32>>
  // CHECK-NEXT: %[[B2:.*]] = mpmd.fragment<mesh="m0", origin=["s"(2)]> (%[[B1]], %[[R2]]) {call_counter = 0 : ui32}
  // CHECK:      return %[[F]]#1, %[[B2]], %[[G]]

  // MERGE-LABEL: func.func @clone_per_user
  // MERGE:       %[[O:.*]] = mpmd.fragment<mesh="m0", origin=["u"]>
  // MERGE:       %[[B1:.*]] = mpmd.fragment<mesh="m0", origin=["s", "s"(1)]> (%arg0, %[[O]]) {call_counter = 0 : ui32, remat}
  // MERGE:       %[[B2:.*]] = mpmd.fragment<mesh="m0", origin=["s", "s"(2)]> (%[[B1]], %arg1) {call_counter = 0 : ui32, remat}
  %f:2 = mpmd.fragment<mesh="m0", origin=["s"]> (%x, %y) {call_counter = 0 : ui32} (%a: tensor<4xf32>, %b: tensor<4xf32>) {
    %e = "stablehlo.exponential"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    %n = "stablehlo.negate"(%b) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %e, %n : tensor<4xf32>, tensor<4xf32>
  } : (!m0, !m0) -> (!m0, !m0)
  %t = mpmd.transfer %f#0 : (!m0) -> !m1
  %g = mpmd.fragment<mesh="m1", origin=["t"]> (%t) {call_counter = 0 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m1) -> !m1
  %o = mpmd.fragment<mesh="m0", origin=["u"]> (%ct) (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m0) -> !m0
  %b1 = mpmd.fragment<mesh="m0", origin=["s"(1)]> (%f#0, %o) {call_counter = 0 : ui32} (%e: tensor<4xf32>, %c: tensor<4xf32>) {
    %m = "stablehlo.multiply"(%e, %c) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %m : tensor<4xf32>
  } : (!m0, !m0) -> !m0
  %b2 = mpmd.fragment<mesh="m0", origin=["s"(2)]> (%b1, %f#1) {call_counter = 0 : ui32} (%e: tensor<4xf32>, %c: tensor<4xf32>) {
    %m = "stablehlo.multiply"(%e, %c) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %m : tensor<4xf32>
  } : (!m0, !m0) -> !m0
  return %f#1, %b2, %g : !m0, !m0, !m1
}

// -----

!m0 = !mpmd.mesh_tensor<"m0", tensor<4xf32>>
!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>

// No remat: the backward of another microbatch, of another stage, on another
// mesh (through a transfer), a forward without call_counter (not a
// scheduling unit), and a backward running right after its forward on the
// mesh (fragments of other meshes and transfers in between do not count).

// CHECK-LABEL: func.func @no_remat
func.func @no_remat(%x: !m0, %ct: !m0) -> (!m0, !m0, !m1, !m0, !m0)
    attributes {topology = #mpmd.topology<<"m0" : <["x"=2]>>, <"m1" : <["x"=2]>>>} {
  // CHECK-NOT: remat
  %f = mpmd.fragment<mesh="m0", origin=["s"], stage=0> (%x) {call_counter = 0 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m0) -> !m0
  %nocc = mpmd.fragment<mesh="m0", origin=["s"], stage=0> (%x) (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m0) -> !m0
  %t = mpmd.transfer %f : (!m0) -> !m1
  %other = mpmd.fragment<mesh="m1", origin=["s"(1)], stage=0> (%t) {call_counter = 0 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m1) -> !m1
  %mb = mpmd.fragment<mesh="m0", origin=["s"(1)], stage=0> (%f, %ct) {call_counter = 1 : ui32} (%a: tensor<4xf32>, %c: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m0, !m0) -> !m0
  %st = mpmd.fragment<mesh="m0", origin=["s"(1)], stage=1> (%f, %ct) {call_counter = 0 : ui32} (%a: tensor<4xf32>, %c: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m0, !m0) -> !m0
  %bn = mpmd.fragment<mesh="m0", origin=["s"(1)], stage=0> (%nocc, %ct) {call_counter = 0 : ui32} (%a: tensor<4xf32>, %c: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m0, !m0) -> !m0
  return %mb, %st, %other, %bn, %f : !m0, !m0, !m1, !m0, !m0
}

// -----

!m0 = !mpmd.mesh_tensor<"m0", tensor<4xf32>>
!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>

// The backward is the next fragment of m0 after the forward: no remat, even
// though fragments of m1 and a transfer run in between.

// CHECK-LABEL: func.func @next_on_mesh
func.func @next_on_mesh(%x: !m0, %y: !m1) -> (!m0, !m1)
    attributes {topology = #mpmd.topology<<"m0" : <["x"=2]>>, <"m1" : <["x"=2]>>>} {
  // CHECK-NOT: remat
  %f = mpmd.fragment<mesh="m0", origin=["s"]> (%x) {call_counter = 0 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m0) -> !m0
  %g = mpmd.fragment<mesh="m1", origin=["t"]> (%y) {call_counter = 0 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m1) -> !m1
  %t = mpmd.transfer %g : (!m1) -> !m0
  %b = mpmd.fragment<mesh="m0", origin=["s"(1)]> (%f, %t) {call_counter = 0 : ui32} (%a: tensor<4xf32>, %c: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m0, !m0) -> !m0
  return %b, %g : !m0, !m1
}

// -----

!m0 = !mpmd.mesh_tensor<"m0", tensor<4xf32>>

// A backward using two forwards of its microbatch gets a clone of each, in
// program order; merged, both end up in it.

// CHECK-LABEL: func.func @two_forwards
func.func @two_forwards(%x: !m0, %y: !m0) -> (!m0, !m0)
    attributes {topology = #mpmd.topology<<"m0" : <["x"=2]>>>} {
  // CHECK:      %[[RA:.*]] = mpmd.fragment<mesh="m0", origin=["a"]> (%arg0) {call_counter = 0 : ui32, remat}
  // CHECK:      %[[RB:.*]] = mpmd.fragment<mesh="m0", origin=["b"]> (%arg1) {call_counter = 0 : ui32, remat}
  // CHECK:      mpmd.fragment<mesh="m0", origin=["a"(1), "b"(1)]> (%[[RA]], %[[RB]]) {call_counter = 0 : ui32}

  // MERGE-LABEL: func.func @two_forwards
  // MERGE:       %[[FB:.*]] = mpmd.fragment<mesh="m0", origin=["b", "a", "a"(1), "b"(1)]> (%arg0, %arg1) {call_counter = 0 : ui32, remat} (%[[X:.*]]: tensor<4xf32>, %[[Y:.*]]: tensor<4xf32>) {
  // MERGE-NEXT:    %[[NB:.*]] = "stablehlo.negate"(%[[Y]])
  // MERGE-NEXT:    %[[NA:.*]] = "stablehlo.sine"(%[[X]])
  // MERGE-NEXT:    %[[M:.*]] = "stablehlo.multiply"(%[[NA]], %[[NB]])
  // MERGE-NEXT:    mpmd.return %[[M]]
  // MERGE-NEXT:  }
  %a = mpmd.fragment<mesh="m0", origin=["a"]> (%x) {call_counter = 0 : ui32} (%v: tensor<4xf32>) {
    %n = "stablehlo.sine"(%v) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %n : tensor<4xf32>
  } : (!m0) -> !m0
  %b = mpmd.fragment<mesh="m0", origin=["b"]> (%y) {call_counter = 0 : ui32} (%v: tensor<4xf32>) {
    %n = "stablehlo.negate"(%v) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %n : tensor<4xf32>
  } : (!m0) -> !m0
  %c = mpmd.fragment<mesh="m0", origin=["c"]> (%y) {call_counter = 0 : ui32} (%v: tensor<4xf32>) {
    mpmd.return %v : tensor<4xf32>
  } : (!m0) -> !m0
  %g = mpmd.fragment<mesh="m0", origin=["a"(1), "b"(1)]> (%a, %b) {call_counter = 0 : ui32} (%p: tensor<4xf32>, %q: tensor<4xf32>) {
    %m = "stablehlo.multiply"(%p, %q) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %m : tensor<4xf32>
  } : (!m0, !m0) -> !m0
  return %g, %c : !m0, !m0
}
