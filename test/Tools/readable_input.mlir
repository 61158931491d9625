// mpmd-opt reads StableHLO as JAX and Shardy print it (readable syntax): it
// hands such input to `python -m mpmd.opt`, which converts it with jaxlib, and
// prints the result readable too, unless --mlir-print-op-generic is given.
// Aliases ahead of several top-level ops stay outside the module the ops are
// wrapped in. Input from stdin and -o work as for generic input.

// RUN: mpmd-opt %s -mpmd-infer-mesh-assignment | FileCheck %s
// RUN: mpmd-opt -mpmd-infer-mesh-assignment < %s | FileCheck %s
// RUN: mpmd-opt %s -mpmd-infer-mesh-assignment -o %t.out && FileCheck %s < %t.out
// RUN: mpmd-opt %s -mpmd-infer-mesh-assignment --mlir-print-op-generic | FileCheck %s --check-prefix=GENERIC
// The binary never hands its input back when the front end runs it.
// RUN: env MPMD_OPT_NO_FRONT=1 not mpmd-opt %s 2>&1 | FileCheck %s --check-prefix=NOFRONT

!t = tensor<4xf32>
!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>

// CHECK-LABEL: func.func @first
// CHECK-SAME: (%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
// CHECK:        stablehlo.add %{{.*}}, %{{.*}} : tensor<4xf32>
// GENERIC-LABEL: "func.func"
// GENERIC:       "stablehlo.add"
func.func @first(%arg0: !t) -> !t
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  %0 = stablehlo.add %arg0, %arg0 : !t
  return %0 : !t
}

#unused = 1 : i32

// CHECK-LABEL: func.func @second
// CHECK:        stablehlo.negate %{{.*}} : tensor<4xf32>
// CHECK:        return %{{.*}} : !mpmd.mesh_tensor<"m1", tensor<4xf32>>
func.func @second(%arg0: !t) -> !m1
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  %0 = stablehlo.negate %arg0 : !t
  %1 = mpmd.assign %0 : (!t) -> !m1
  return %1 : !m1
}

// NOFRONT: readable_input.mlir:24:8: error: Dialect `stablehlo' not found for custom op 'stablehlo.add'
