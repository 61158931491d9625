// RUN: mpmd-opt %s -split-input-file -mpmd-recompute-operand-views="min-new-operand-bytes=0" | FileCheck %s
// RUN: mpmd-opt %s -split-input-file -mpmd-recompute-operand-views | FileCheck %s --check-prefix=SMALL

!w = !mpmd.mesh_tensor<"m0", tensor<4x8xf32>>
!wt = !mpmd.mesh_tensor<"m0", tensor<8x4xf32>>
!x = !mpmd.mesh_tensor<"m0", tensor<2x8xf32>>
!y = !mpmd.mesh_tensor<"m0", tensor<2x4xf32>>

// `x @ w.T`: the forward saves `w.T` for its backward. The backward takes `w`
// (a new last operand) and transposes it; the forward no longer returns the
// transposed copy.

// With the default `min-new-operand-bytes` (16 KiB), the 128-byte view stays
// a result: the backward would take the weight as a buffer of its own.
// SMALL-LABEL: func.func @transposed_weight
// SMALL: %[[F:.*]]:2 = mpmd.fragment<mesh="m0", origin=["f"]>
// SMALL: mpmd.fragment<mesh="m0", origin=["f"(1)]> (%[[F]]#1, %arg2)

// CHECK-LABEL: func.func @transposed_weight
func.func @transposed_weight(%w: !w, %x: !x, %dy: !y) -> (!y, !x)
    attributes {topology = #mpmd.topology<<"m0" : <["x"=1]>>>} {
  // CHECK: %[[F:.*]] = mpmd.fragment<mesh="m0", origin=["f"]> (%arg0, %arg1) (%[[A:.*]]: tensor<4x8xf32>, %[[B:.*]]: tensor<2x8xf32>) {
  // CHECK-NEXT: %[[T:.*]] = "stablehlo.transpose"(%[[A]])
  // CHECK-NEXT: %[[Y:.*]] = "stablehlo.dot"(%[[B]], %[[T]])
  // CHECK-NEXT: mpmd.return %[[Y]] : tensor<2x4xf32>
  // CHECK-NEXT: } : (!mpmd.mesh_tensor<"m0", tensor<4x8xf32>>, !mpmd.mesh_tensor<"m0", tensor<2x8xf32>>) -> !mpmd.mesh_tensor<"m0", tensor<2x4xf32>>
  %f:2 = mpmd.fragment<mesh="m0", origin=["f"]> (%w, %x) (%a: tensor<4x8xf32>, %b: tensor<2x8xf32>) {
    %t = "stablehlo.transpose"(%a) <{permutation = array<i64: 1, 0>}> : (tensor<4x8xf32>) -> tensor<8x4xf32>
    %y = "stablehlo.dot"(%b, %t) : (tensor<2x8xf32>, tensor<8x4xf32>) -> tensor<2x4xf32>
    mpmd.return %y, %t : tensor<2x4xf32>, tensor<8x4xf32>
  } : (!w, !x) -> (!y, !wt)
  // CHECK: mpmd.fragment<mesh="m0", origin=["f"(1)]> (%arg2, %arg0) (%[[D:.*]]: tensor<2x4xf32>, %[[W:.*]]: tensor<4x8xf32>) {
  // CHECK-NEXT: %[[T2:.*]] = "stablehlo.transpose"(%[[W]]) <{permutation = array<i64: 1, 0>}> : (tensor<4x8xf32>) -> tensor<8x4xf32>
  // CHECK-NEXT: "stablehlo.transpose"(%[[T2]]) <{permutation = array<i64: 1, 0>}> : (tensor<8x4xf32>) -> tensor<4x8xf32>
  %g = mpmd.fragment<mesh="m0", origin=["f"(1)]> (%f#1, %dy) (%t: tensor<8x4xf32>, %d: tensor<2x4xf32>) {
    %tt = "stablehlo.transpose"(%t) <{permutation = array<i64: 1, 0>}> : (tensor<8x4xf32>) -> tensor<4x8xf32>
    %dx = "stablehlo.dot"(%d, %tt) : (tensor<2x4xf32>, tensor<4x8xf32>) -> tensor<2x8xf32>
    mpmd.return %dx : tensor<2x8xf32>
  } : (!wt, !y) -> !x
  return %f#0, %g : !y, !x
}

// -----

!w = !mpmd.mesh_tensor<"m0", tensor<4x8xbf16>>
!w32 = !mpmd.mesh_tensor<"m0", tensor<4x8xf32>>
!v = !mpmd.mesh_tensor<"m0", tensor<32xf32>>
!s = !mpmd.mesh_tensor<"m0", tensor<f32>>

// A chain of views (reshape, then a widening convert) is recomputed whole,
// from the operand the consumer already has (no new operand). A narrowing
// convert holds fewer bytes than its operand: it stays a result, as does a
// value that is computed (negate), not a view.

// The consumer already takes the operand: recomputed whatever the size.
// SMALL-LABEL: func.func @chains
// SMALL: %[[F:.*]]:2 = mpmd.fragment<mesh="m0", origin=["f"]> (%arg0, %arg1)
// SMALL: mpmd.fragment<mesh="m0", origin=["f"(1)]> (%arg0, %[[F]]#1)

// CHECK-LABEL: func.func @chains
func.func @chains(%w: !w, %w32: !w32) -> (!s, !s)
    attributes {topology = #mpmd.topology<<"m0" : <["x"=1]>>>} {
  // CHECK: %[[F:.*]]:2 = mpmd.fragment<mesh="m0", origin=["f"]> (%arg0, %arg1)
  // CHECK: mpmd.return %{{.*}}, %{{.*}} : tensor<4x8xbf16>, tensor<4x8xbf16>
  %f:3 = mpmd.fragment<mesh="m0", origin=["f"]> (%w, %w32) (%a: tensor<4x8xbf16>, %b: tensor<4x8xf32>) {
    %r = "stablehlo.reshape"(%a) : (tensor<4x8xbf16>) -> tensor<32xbf16>
    %c = "stablehlo.convert"(%r) : (tensor<32xbf16>) -> tensor<32xf32>
    %k = "stablehlo.convert"(%b) : (tensor<4x8xf32>) -> tensor<4x8xbf16>
    %n = "stablehlo.negate"(%a) : (tensor<4x8xbf16>) -> tensor<4x8xbf16>
    mpmd.return %c, %k, %n : tensor<32xf32>, tensor<4x8xbf16>, tensor<4x8xbf16>
  } : (!w, !w32) -> (!v, !w, !w)
  // CHECK: mpmd.fragment<mesh="m0", origin=["f"(1)]> (%arg0, %[[F]]#1) (%[[A:.*]]: tensor<4x8xbf16>, %{{.*}}: tensor<4x8xbf16>) {
  // CHECK-NEXT: %[[R:.*]] = "stablehlo.reshape"(%[[A]]) : (tensor<4x8xbf16>) -> tensor<32xbf16>
  // CHECK-NEXT: %[[C:.*]] = "stablehlo.convert"(%[[R]]) : (tensor<32xbf16>) -> tensor<32xf32>
  // CHECK-NEXT: "stablehlo.constant"
  // CHECK-NEXT: "stablehlo.reduce"(%[[C]]
  %g = mpmd.fragment<mesh="m0", origin=["f"(1)]> (%w, %f#0, %f#2) (%a: tensor<4x8xbf16>, %c: tensor<32xf32>, %n: tensor<4x8xbf16>) {
    %z = "stablehlo.constant"() <{value = dense<0.0> : tensor<f32>}> : () -> tensor<f32>
    %sum = "stablehlo.reduce"(%c, %z) <{dimensions = array<i64: 0>}> ({
    ^bb0(%p: tensor<f32>, %q: tensor<f32>):
      %t = "stablehlo.add"(%p, %q) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%t) : (tensor<f32>) -> ()
    }) : (tensor<32xf32>, tensor<f32>) -> tensor<f32>
    %m = "stablehlo.negate"(%n) : (tensor<4x8xbf16>) -> tensor<4x8xbf16>
    mpmd.return %sum : tensor<f32>
  } : (!w, !v, !w) -> !s
  // CHECK: mpmd.fragment<mesh="m0", origin=["f"(2)]> (%[[F]]#0)
  %h = mpmd.fragment<mesh="m0", origin=["f"(2)]> (%f#1) (%k: tensor<4x8xbf16>) {
    %z = "stablehlo.constant"() <{value = dense<0.0> : tensor<f32>}> : () -> tensor<f32>
    mpmd.return %z : tensor<f32>
  } : (!w) -> !s
  return %g, %h : !s, !s
}

// -----

!w = !mpmd.mesh_tensor<"m0", tensor<4x8xf32>>
!wt = !mpmd.mesh_tensor<"m0", tensor<8x4xf32>>
!wt1 = !mpmd.mesh_tensor<"m1", tensor<8x4xf32>>
!n = !mpmd.mesh_tensor<"m0", tensor<4x8xf32>, memory_kind="pinned_host">
!nt = !mpmd.mesh_tensor<"m0", tensor<8x4xf32>, memory_kind="pinned_host">
!s = !mpmd.mesh_tensor<"m0", tensor<f32>>

// Left alone: a view sent to another mesh (the transfer reads the result), a
// view the function returns (the result stays; the fragment of the mesh that
// reads it still recomputes it), a consumer with per-operand shardings, and a
// view of a value in host memory.

// CHECK-LABEL: func.func @left_alone
func.func @left_alone(%w: !w, %host: !n) -> (!wt1, !wt, !s, !s, !s)
    attributes {topology = #mpmd.topology<<"m0" : <["x"=1]>>, <"m1" : <["x"=1]>>>} {
  // CHECK: %[[F:.*]]:2 = mpmd.fragment<mesh="m0", origin=["f"]> (%arg0, %arg1)
  %f:2 = mpmd.fragment<mesh="m0", origin=["f"]> (%w, %host) (%a: tensor<4x8xf32>, %b: tensor<4x8xf32>) {
    %t = "stablehlo.transpose"(%a) <{permutation = array<i64: 1, 0>}> : (tensor<4x8xf32>) -> tensor<8x4xf32>
    %u = "stablehlo.transpose"(%b) <{permutation = array<i64: 1, 0>}> : (tensor<4x8xf32>) -> tensor<8x4xf32>
    mpmd.return %t, %u : tensor<8x4xf32>, tensor<8x4xf32>
  } : (!w, !n) -> (!wt, !nt)
  // CHECK: mpmd.transfer %[[F]]#0
  %x = mpmd.transfer %f#0 : (!wt) -> !wt1
  // CHECK: mpmd.fragment<mesh="m0", origin=["g"]> (%arg0) (%[[A:.*]]: tensor<4x8xf32>) {
  // CHECK-NEXT: "stablehlo.transpose"(%[[A]])
  %g = mpmd.fragment<mesh="m0", origin=["g"]> (%f#0) (%t: tensor<8x4xf32>) {
    %z = "stablehlo.constant"() <{value = dense<0.0> : tensor<f32>}> : () -> tensor<f32>
    %n = "stablehlo.negate"(%t) : (tensor<8x4xf32>) -> tensor<8x4xf32>
    mpmd.return %z : tensor<f32>
  } : (!wt) -> !s
  // CHECK: mpmd.fragment<mesh="m0", origin=["h"], in_shardings=[<@mesh, [{}, {}]>, <@mesh, [{}, {}]>]> (%[[F]]#0, %[[F]]#1)
  %h = mpmd.fragment<mesh="m0", origin=["h"], in_shardings=[<@mesh, [{}, {}]>, <@mesh, [{}, {}]>]> (%f#0, %f#1) (%t: tensor<8x4xf32>, %u: tensor<8x4xf32>) {
    %z = "stablehlo.constant"() <{value = dense<0.0> : tensor<f32>}> : () -> tensor<f32>
    mpmd.return %z : tensor<f32>
  } : (!wt, !nt) -> !s
  // CHECK: mpmd.fragment<mesh="m0", origin=["k"]> (%[[F]]#1)
  %k = mpmd.fragment<mesh="m0", origin=["k"]> (%f#1) (%u: tensor<8x4xf32>) {
    %z = "stablehlo.constant"() <{value = dense<0.0> : tensor<f32>}> : () -> tensor<f32>
    mpmd.return %z : tensor<f32>
  } : (!nt) -> !s
  return %x, %f#0, %g, %h, %k : !wt1, !wt, !s, !s, !s
}

// -----

!w = !mpmd.mesh_tensor<"m0", tensor<64x64xf32>>
!s = !mpmd.mesh_tensor<"m0", tensor<f32>>

// A view of 16 KiB is recomputed by default, the weight a new operand; the
// producer, which only made the view, no longer takes the weight.

// SMALL-LABEL: func.func @large_view
// SMALL: mpmd.fragment<mesh="m0", origin=["f"]> () () {
// SMALL-NEXT: "stablehlo.constant"
// SMALL-NEXT: mpmd.return %{{.*}} : tensor<f32>
// SMALL: mpmd.fragment<mesh="m0", origin=["f"(1)]> (%arg0) (%[[W:.*]]: tensor<64x64xf32>) {
// SMALL-NEXT: "stablehlo.transpose"(%[[W]])
func.func @large_view(%w: !w) -> (!s, !s)
    attributes {topology = #mpmd.topology<<"m0" : <["x"=1]>>>} {
  %f:2 = mpmd.fragment<mesh="m0", origin=["f"]> (%w) (%a: tensor<64x64xf32>) {
    %t = "stablehlo.transpose"(%a) <{permutation = array<i64: 1, 0>}> : (tensor<64x64xf32>) -> tensor<64x64xf32>
    %z = "stablehlo.constant"() <{value = dense<0.0> : tensor<f32>}> : () -> tensor<f32>
    mpmd.return %z, %t : tensor<f32>, tensor<64x64xf32>
  } : (!w) -> (!s, !w)
  %g = mpmd.fragment<mesh="m0", origin=["f"(1)]> (%f#1) (%t: tensor<64x64xf32>) {
    %z = "stablehlo.constant"() <{value = dense<0.0> : tensor<f32>}> : () -> tensor<f32>
    %n = "stablehlo.negate"(%t) : (tensor<64x64xf32>) -> tensor<64x64xf32>
    mpmd.return %z : tensor<f32>
  } : (!w) -> !s
  return %f#0, %g : !s, !s
}
