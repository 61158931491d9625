// RUN: mpmd-opt %s -split-input-file -mpmd-check-inlinable | FileCheck %s

// -mpmd-check-inlinable changes nothing; it accepts a module without an
// unregistered op of one region (ops without regions, or with two, MLIR's
// symbol-use analysis looks into).

!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>

// CHECK-LABEL: func.func @no_region_ops
// CHECK-NEXT:  %[[F:.*]] = mpmd.fragment<mesh="m1", origin=["f"]> (%arg0)
// CHECK-NEXT:    "stablehlo.negate"
// CHECK-NEXT:    mpmd.return
// CHECK-NEXT:  }
// CHECK-NEXT:  %[[W:.*]] = "stablehlo.while"(%[[F]])
func.func @no_region_ops(%arg0: !m1) -> !m1 attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  %0 = mpmd.fragment<mesh="m1", origin=["f"]> (%arg0) (%a: tensor<4xf32>) {
    %1 = "stablehlo.negate"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %1 : tensor<4xf32>
  } : (!m1) -> !m1
  %2 = "stablehlo.while"(%0) ({
  ^bb0(%x: !m1):
    %c = "stablehlo.constant"() {value = dense<true> : tensor<i1>} : () -> tensor<i1>
    "stablehlo.return"(%c) : (tensor<i1>) -> ()
  }, {
  ^bb0(%x: !m1):
    "stablehlo.return"(%x) : (!m1) -> ()
  }) : (!m1) -> !m1
  return %2 : !m1
}
