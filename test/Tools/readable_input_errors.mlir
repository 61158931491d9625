// -verify-diagnostics on readable input checks the expected-* comments on
// their lines (the conversion to generic form drops comments; the front end
// carries them over), in every piece of a split input.

// RUN: mpmd-opt %s -split-input-file -mpmd-infer-mesh-assignment -verify-diagnostics
// A comment nobody meets fails, named at its line in this file.
// RUN: sed 's/EXPECT-NOTHING/expected-error {{never emitted}}/' %s > %t.mlir
// RUN: not mpmd-opt %t.mlir -split-input-file -mpmd-infer-mesh-assignment -verify-diagnostics 2>&1 | FileCheck %s
// CHECK: .mlir:26:{{[0-9]+}}: error: expected error "never emitted" was not produced

func.func @calls(%arg0: tensor<4xf32>) -> tensor<4xf32>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  %0 = stablehlo.add %arg0, %arg0 : tensor<4xf32>
  // expected-note @+1 {{called here, from @calls}}
  %1 = mpmd.call @callee(%0) : (tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}
// expected-error @+1 {{@callee is called by 'mpmd.call' but has no topology}}
func.func private @callee(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  return %arg0 : tensor<4xf32>
}

// -----

func.func @quiet(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.abs %arg0 : tensor<4xf32> // EXPECT-NOTHING
  return %0 : tensor<4xf32>
}
