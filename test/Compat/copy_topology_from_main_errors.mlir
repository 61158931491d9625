// RUN: mpmd-opt %s -split-input-file -mpmd-copy-topology-from-main -verify-diagnostics

func.func public @main(%arg0: tensor<4xf32>) -> tensor<4xf32>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // expected-note @+1 {{called here}}
  %0 = mpmd.call @f(%arg0) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
// expected-error @+1 {{@f has topology #mpmd.topology<<"m9" : <["x"=2]>>> but @main, which calls it, has #mpmd.topology<<"m1" : <["x"=2]>>>: a callee runs on the meshes of the entry points that call it}}
func.func private @f(%arg0: tensor<4xf32>) -> tensor<4xf32>
    attributes {topology = #mpmd.topology<<"m9" : <["x"=2]>>>} {
  return %arg0 : tensor<4xf32>
}

// -----

func.func public @a(%arg0: tensor<4xf32>) -> tensor<4xf32>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  %0 = mpmd.call @shared(%arg0) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
func.func public @b(%arg0: tensor<4xf32>) -> tensor<4xf32>
    attributes {topology = #mpmd.topology<<"m2" : <["x"=2]>>>} {
  // expected-note @+1 {{called here}}
  %0 = mpmd.call @shared(%arg0) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
// expected-error @+1 {{@shared is called from @a (topology #mpmd.topology<<"m1" : <["x"=2]>>>) and from @b (topology #mpmd.topology<<"m2" : <["x"=2]>>>): a callee runs on the meshes of the entry points that call it}}
func.func private @shared(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  return %arg0 : tensor<4xf32>
}
