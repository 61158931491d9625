// RUN: mpmd-opt %s -split-input-file -mpmd-set-topology='topology=m0:data=4;m1:data=4' | FileCheck %s
// RUN: mpmd-opt %s -split-input-file -mpmd-import-pipeline='topology=m0:data=4;m1:data=4 assignment=f@m0' | FileCheck %s --check-prefix=IMPORT

// The option gives @main its meshes (the text JAX prints has no topology).

// CHECK-LABEL: func.func @main
// CHECK-SAME: attributes {topology = #mpmd.topology<<"m0" : <["data"=4]>>, <"m1" : <["data"=4]>>>}
// IMPORT-LABEL: func.func @main
// IMPORT: mpmd.fragment<mesh="m0", origin=["f"]>
func.func @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = mpmd.named_computation<"f"> (%arg0) (%a: tensor<4xf32>) {
    %1 = "stablehlo.negate"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %1 : tensor<4xf32>
  } : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
