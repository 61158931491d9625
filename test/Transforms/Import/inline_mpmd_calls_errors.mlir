// RUN: mpmd-opt %s -mpmd-call-inline -verify-diagnostics

// Inline bombs through mpmd.call: a chain of functions each calling the next
// twice doubles at every level; inlining is refused before anything is
// inlined.

func.func private @f0(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "stablehlo.negate"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
func.func private @f1(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = mpmd.call @f0(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = mpmd.call @f0(%0) : (tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}
func.func private @f2(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = mpmd.call @f1(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = mpmd.call @f1(%0) : (tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}
func.func private @f3(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = mpmd.call @f2(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = mpmd.call @f2(%0) : (tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}
func.func private @f4(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = mpmd.call @f3(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = mpmd.call @f3(%0) : (tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}
func.func private @f5(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = mpmd.call @f4(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = mpmd.call @f4(%0) : (tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}
func.func private @f6(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = mpmd.call @f5(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = mpmd.call @f5(%0) : (tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}
func.func private @f7(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = mpmd.call @f6(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = mpmd.call @f6(%0) : (tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}
func.func private @f8(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = mpmd.call @f7(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = mpmd.call @f7(%0) : (tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}
func.func private @f9(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = mpmd.call @f8(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = mpmd.call @f8(%0) : (tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}
func.func private @f10(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = mpmd.call @f9(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = mpmd.call @f9(%0) : (tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}
func.func private @f11(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = mpmd.call @f10(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = mpmd.call @f10(%0) : (tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}
func.func private @f12(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = mpmd.call @f11(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = mpmd.call @f11(%0) : (tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}
func.func private @f13(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = mpmd.call @f12(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = mpmd.call @f12(%0) : (tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}
func.func private @f14(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = mpmd.call @f13(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = mpmd.call @f13(%0) : (tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}
func.func private @f15(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = mpmd.call @f14(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = mpmd.call @f14(%0) : (tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}
func.func private @f16(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = mpmd.call @f15(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = mpmd.call @f15(%0) : (tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}
func.func private @f17(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = mpmd.call @f16(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = mpmd.call @f16(%0) : (tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}
func.func private @f18(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = mpmd.call @f17(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = mpmd.call @f17(%0) : (tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}
func.func private @f19(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{inlining the mpmd.call calls of @f19 would make it 1572863 ops, over the limit of 1000000 (option max-inlined-ops of -mpmd-call-inline)}}
  %0 = mpmd.call @f18(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = mpmd.call @f18(%0) : (tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}
func.func private @f20(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = mpmd.call @f19(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = mpmd.call @f19(%0) : (tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}
func.func private @f21(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = mpmd.call @f20(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = mpmd.call @f20(%0) : (tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}
