// RUN: mpmd-opt %s -split-input-file -mpmd-lower-to-fragment-calls=verbose-logging -o /dev/null 2>&1 | FileCheck %s
// RUN: mpmd-opt %s -split-input-file -mpmd-lower-to-fragment-calls -o /dev/null 2>&1 | FileCheck %s --check-prefix=QUIET --allow-empty

// With verbose-logging, each mesh's calls in program order, with the origins
// they run; forward and backward are said only in a program that has a
// backward pass. Without it, nothing is printed.

// QUIET-NOT: will execute

!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>
!m2 = !mpmd.mesh_tensor<"m2", tensor<4xf32>>

// CHECK-LABEL: Module main on mesh m1 will execute 2 fragment call(s) of @forward_only:
// CHECK-NEXT:    @p0_a.main from program with origins [a]
// CHECK-NEXT:    @p0_a.main from program with origins [c]
// CHECK-NEXT:  Module main on mesh m2 will execute 1 fragment call(s) of @forward_only:
// CHECK-NEXT:    @p1_b_c.main from program with origins [b, c]
func.func @forward_only(%arg0: !m1, %arg1: !m2) -> (!m1, !m1, !m2)
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=4]>>>} {
  %0 = mpmd.fragment<mesh="m1", origin=["a"]> (%arg0) (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m1) -> !m1
  %1 = mpmd.fragment<mesh="m2", origin=["b", "c"]> (%arg1) (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m2) -> !m2
  %2 = mpmd.fragment<mesh="m1", origin=["c"]> (%arg0) (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m1) -> !m1
  return %0, %2, %1 : !m1, !m1, !m2
}

// -----

!m = !mpmd.mesh_tensor<"m", tensor<4xf32>>

// CHECK-LABEL: Module train on mesh m will execute 2 fragment call(s) of @main:
// CHECK-NEXT:    @p0_s_fwd.train from program with origins [s(fwd)]
// CHECK-NEXT:    @p1_s_bwd.train from program with origins [s(bwd)]
module @jit_train {
func.func @main(%arg0: !m) -> !m
    attributes {topology = #mpmd.topology<<"m" : <["x"=2]>>>} {
  %0 = mpmd.fragment<mesh="m", origin=["s"]> (%arg0) (%a: tensor<4xf32>) {
    %n = "stablehlo.negate"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %n : tensor<4xf32>
  } : (!m) -> !m
  %1 = mpmd.fragment<mesh="m", origin=["s"(1)]> (%0) (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m) -> !m
  return %1 : !m
}
}
