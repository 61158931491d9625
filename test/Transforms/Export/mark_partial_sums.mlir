// RUN: mpmd-opt %s -split-input-file -mpmd-mark-partial-sums | FileCheck %s

!m = !mpmd.mesh_tensor<"m0", tensor<4xf32>>

// A chain from an accumulator's zeros (a donated constant) is held unreduced
// up to the call that reads it whole (the update): the zeros are marked, and
// each backward call's result adds a term to its operand 0.

// CHECK-LABEL: func.func @from_zeros
// CHECK-SAME: %arg0: !mpmd.mesh_tensor<"m0", tensor<4xf32>> {jax.buffer_donor = true, mpmd.constant = dense<0.000000e+00> : tensor<4xf32>, mpmd.partial_sum}
func.func @from_zeros(%z: !m {mpmd.constant = dense<0.0> : tensor<4xf32>, jax.buffer_donor = true},
                      %x0: !m, %x1: !m, %x2: !m, %w: !m) -> !m
    attributes {topology = #mpmd.topology<<"m0" : <["x"=2]>>>} {
  // CHECK-NEXT: %[[A:.*]] = mpmd.fragment_call<mesh="m0", origin=["b"(1)]> @bwd(%arg0, %arg1) {mpmd.partial_results = array<i64: 0>, mpmd.partial_sources = array<i64: 0>}
  // CHECK-NEXT: %[[B:.*]] = mpmd.fragment_call<mesh="m0", origin=["b"(1)]> @bwd(%[[A]], %arg2) {mpmd.partial_results = array<i64: 0>, mpmd.partial_sources = array<i64: 0>}
  // CHECK-NEXT: %[[C:.*]] = mpmd.fragment_call<mesh="m0", origin=["b"(1)]> @bwd(%[[B]], %arg3) {mpmd.partial_results = array<i64: 0>, mpmd.partial_sources = array<i64: 0>}
  // CHECK-NEXT: mpmd.fragment_call<mesh="m0", origin=["u"]> @update(%[[C]], %arg4) :
  %0 = mpmd.fragment_call<mesh="m0", origin=["b"(1)]> @bwd(%z, %x0) : (!m, !m) -> !m
  %1 = mpmd.fragment_call<mesh="m0", origin=["b"(1)]> @bwd(%0, %x1) : (!m, !m) -> !m
  %2 = mpmd.fragment_call<mesh="m0", origin=["b"(1)]> @bwd(%1, %x2) : (!m, !m) -> !m
  %3 = mpmd.fragment_call<mesh="m0", origin=["u"]> @update(%2, %w) : (!m, !m) -> !m
  return %3 : !m
}
func.func @bwd(%acc: tensor<4xf32>, %x: tensor<4xf32>) -> tensor<4xf32>
    attributes {mesh_shape = #sdy.mesh<["x"=2]>} {
  %0 = stablehlo.multiply %x, %x : tensor<4xf32>
  %1 = stablehlo.add %acc, %0 : tensor<4xf32>
  return %1 : tensor<4xf32>
}
func.func @update(%g: tensor<4xf32>, %w: tensor<4xf32>) -> tensor<4xf32>
    attributes {mesh_shape = #sdy.mesh<["x"=2]>} {
  %0 = stablehlo.subtract %w, %g : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

!m = !mpmd.mesh_tensor<"m0", tensor<4xf32>>

// A chain from a gradient an earlier call of the same mesh made (the first
// microbatch's): that call starts it (source -1).

// CHECK-LABEL: func.func @from_a_made_gradient
func.func @from_a_made_gradient(%x0: !m, %x1: !m, %x2: !m) -> !m
    attributes {topology = #mpmd.topology<<"m0" : <["x"=2]>>>} {
  // CHECK-NEXT: %[[G:.*]] = mpmd.fragment_call<mesh="m0", origin=["b"(1)]> @make(%arg0) {mpmd.partial_results = array<i64: 0>, mpmd.partial_sources = array<i64: -1>}
  // CHECK-NEXT: %[[A:.*]] = mpmd.fragment_call<mesh="m0", origin=["b"(1)]> @bwd(%[[G]], %arg1) {mpmd.partial_results = array<i64: 0>, mpmd.partial_sources = array<i64: 0>}
  // CHECK-NEXT: %[[B:.*]] = mpmd.fragment_call<mesh="m0", origin=["b"(1)]> @bwd(%[[A]], %arg2) {mpmd.partial_results = array<i64: 0>, mpmd.partial_sources = array<i64: 0>}
  // CHECK-NEXT: mpmd.fragment_call<mesh="m0", origin=["u"]> @update(%[[B]]) :
  %g = mpmd.fragment_call<mesh="m0", origin=["b"(1)]> @make(%x0) : (!m) -> !m
  %0 = mpmd.fragment_call<mesh="m0", origin=["b"(1)]> @bwd(%g, %x1) : (!m, !m) -> !m
  %1 = mpmd.fragment_call<mesh="m0", origin=["b"(1)]> @bwd(%0, %x2) : (!m, !m) -> !m
  %2 = mpmd.fragment_call<mesh="m0", origin=["u"]> @update(%1) : (!m) -> !m
  return %2 : !m
}
func.func @make(%x: tensor<4xf32>) -> tensor<4xf32> attributes {mesh_shape = #sdy.mesh<["x"=2]>} {
  %0 = stablehlo.multiply %x, %x : tensor<4xf32>
  return %0 : tensor<4xf32>
}
func.func @bwd(%acc: tensor<4xf32>, %x: tensor<4xf32>) -> tensor<4xf32>
    attributes {mesh_shape = #sdy.mesh<["x"=2]>} {
  %0 = stablehlo.multiply %x, %x : tensor<4xf32>
  %1 = stablehlo.add %0, %acc : tensor<4xf32>
  return %1 : tensor<4xf32>
}
func.func @update(%g: tensor<4xf32>) -> tensor<4xf32> attributes {mesh_shape = #sdy.mesh<["x"=2]>} {
  %0 = stablehlo.negate %g : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

!m = !mpmd.mesh_tensor<"m0", tensor<4xf32>>
!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>

// The last of a chain read elsewhere (here: transferred) is reduced by the
// call that makes it; the values before it stay unreduced.

// CHECK-LABEL: func.func @last_read_elsewhere
func.func @last_read_elsewhere(%z: !m {mpmd.constant = dense<0.0> : tensor<4xf32>, jax.buffer_donor = true},
                               %x0: !m, %x1: !m, %x2: !m) -> !m1
    attributes {topology = #mpmd.topology<<"m0" : <["x"=2]>>, <"m1" : <["x"=2]>>>} {
  // CHECK-NEXT: %[[A:.*]] = mpmd.fragment_call<mesh="m0", origin=["b"(1)]> @bwd(%arg0, %arg1) {mpmd.partial_results = array<i64: 0>, mpmd.partial_sources = array<i64: 0>}
  // CHECK-NEXT: %[[B:.*]] = mpmd.fragment_call<mesh="m0", origin=["b"(1)]> @bwd(%[[A]], %arg2) {mpmd.partial_results = array<i64: 0>, mpmd.partial_sources = array<i64: 0>}
  // CHECK-NEXT: %[[C:.*]] = mpmd.fragment_call<mesh="m0", origin=["b"(1)]> @bwd(%[[B]], %arg3) :
  %0 = mpmd.fragment_call<mesh="m0", origin=["b"(1)]> @bwd(%z, %x0) : (!m, !m) -> !m
  %1 = mpmd.fragment_call<mesh="m0", origin=["b"(1)]> @bwd(%0, %x1) : (!m, !m) -> !m
  %2 = mpmd.fragment_call<mesh="m0", origin=["b"(1)]> @bwd(%1, %x2) : (!m, !m) -> !m
  %3 = mpmd.transfer %2 : (!m) -> !m1
  return %3 : !m1
}

// The same when the last is a result of the function.

// CHECK-LABEL: func.func @last_returned
func.func @last_returned(%z: !m {mpmd.constant = dense<0.0> : tensor<4xf32>, jax.buffer_donor = true},
                         %x0: !m, %x1: !m) -> !m
    attributes {topology = #mpmd.topology<<"m0" : <["x"=2]>>>} {
  // CHECK-NEXT: mpmd.fragment_call<mesh="m0", origin=["b"(1)]> @bwd(%arg0, %arg1) {mpmd.partial_results = array<i64: 0>, mpmd.partial_sources = array<i64: 0>}
  // CHECK-NEXT: mpmd.fragment_call<mesh="m0", origin=["b"(1)]> @bwd(%{{.*}}, %arg2) :
  %0 = mpmd.fragment_call<mesh="m0", origin=["b"(1)]> @bwd(%z, %x0) : (!m, !m) -> !m
  %1 = mpmd.fragment_call<mesh="m0", origin=["b"(1)]> @bwd(%0, %x1) : (!m, !m) -> !m
  return %1 : !m
}
func.func @bwd(%acc: tensor<4xf32>, %x: tensor<4xf32>) -> tensor<4xf32>
    attributes {mesh_shape = #sdy.mesh<["x"=2]>} {
  %0 = stablehlo.add %acc, %x : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

!m = !mpmd.mesh_tensor<"m0", tensor<4xf32>>
!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>

// A chain read elsewhere midway (here: transferred) is held reduced
// throughout: nothing is marked.

// CHECK-LABEL: func.func @transferred_midway
// CHECK-NOT: mpmd.partial
func.func @transferred_midway(%z: !m {mpmd.constant = dense<0.0> : tensor<4xf32>, jax.buffer_donor = true},
                              %x0: !m, %x1: !m) -> (!m, !m1)
    attributes {topology = #mpmd.topology<<"m0" : <["x"=2]>>, <"m1" : <["x"=2]>>>} {
  %0 = mpmd.fragment_call<mesh="m0", origin=["b"(1)]> @bwd(%z, %x0) : (!m, !m) -> !m
  %1 = mpmd.transfer %0 : (!m) -> !m1
  %2 = mpmd.fragment_call<mesh="m0", origin=["b"(1)]> @bwd(%0, %x1) : (!m, !m) -> !m
  %3 = mpmd.fragment_call<mesh="m0", origin=["u"]> @update(%2) : (!m) -> !m
  return %3, %1 : !m, !m1
}

func.func @bwd(%acc: tensor<4xf32>, %x: tensor<4xf32>) -> tensor<4xf32>
    attributes {mesh_shape = #sdy.mesh<["x"=2]>} {
  %0 = stablehlo.add %acc, %x : tensor<4xf32>
  return %0 : tensor<4xf32>
}
func.func @update(%g: tensor<4xf32>) -> tensor<4xf32> attributes {mesh_shape = #sdy.mesh<["x"=2]>} {
  %0 = stablehlo.negate %g : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

!m = !mpmd.mesh_tensor<"m0", tensor<4xf32>>

// On a mesh of one device there is nothing to reduce: nothing is marked; nor
// is a chain from a constant no call consumes (not donated), nor a scalar
// (a summed loss is not an accumulator).

// CHECK-LABEL: func.func @one_device
// CHECK-NOT: mpmd.partial
func.func @one_device(%z: !m {mpmd.constant = dense<0.0> : tensor<4xf32>, jax.buffer_donor = true},
                      %x0: !m, %x1: !m) -> !m
    attributes {topology = #mpmd.topology<<"m0" : <["x"=1]>>>} {
  %0 = mpmd.fragment_call<mesh="m0", origin=["b"(1)]> @bwd(%z, %x0) : (!m, !m) -> !m
  %1 = mpmd.fragment_call<mesh="m0", origin=["b"(1)]> @bwd(%0, %x1) : (!m, !m) -> !m
  %2 = mpmd.fragment_call<mesh="m0", origin=["u"]> @update(%1) : (!m) -> !m
  return %2 : !m
}
func.func @bwd(%acc: tensor<4xf32>, %x: tensor<4xf32>) -> tensor<4xf32>
    attributes {mesh_shape = #sdy.mesh<["x"=1]>} {
  %0 = stablehlo.add %acc, %x : tensor<4xf32>
  return %0 : tensor<4xf32>
}
func.func @update(%g: tensor<4xf32>) -> tensor<4xf32> attributes {mesh_shape = #sdy.mesh<["x"=1]>} {
  %0 = stablehlo.negate %g : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

!m = !mpmd.mesh_tensor<"m0", tensor<4xf32>>
!s = !mpmd.mesh_tensor<"m0", tensor<f32>>

// CHECK-LABEL: func.func @not_donated_and_scalar
// CHECK-NOT: mpmd.partial
func.func @not_donated_and_scalar(%z: !m {mpmd.constant = dense<0.0> : tensor<4xf32>},
                                  %l: !s {mpmd.constant = dense<0.0> : tensor<f32>, jax.buffer_donor = true},
                                  %x0: !m) -> (!m, !s)
    attributes {topology = #mpmd.topology<<"m0" : <["x"=2]>>>} {
  %1 = mpmd.fragment_call<mesh="m0", origin=["b"(1)]> @bwd(%z, %x0) : (!m, !m) -> !m
  %2 = mpmd.fragment_call<mesh="m0", origin=["l"(1)]> @loss(%l) : (!s) -> !s
  %3 = mpmd.fragment_call<mesh="m0", origin=["u"]> @update(%1) : (!m) -> !m
  return %3, %2 : !m, !s
}
func.func @bwd(%acc: tensor<4xf32>, %x: tensor<4xf32>) -> tensor<4xf32>
    attributes {mesh_shape = #sdy.mesh<["x"=2]>} {
  %0 = stablehlo.add %acc, %x : tensor<4xf32>
  return %0 : tensor<4xf32>
}
func.func @loss(%l: tensor<f32>) -> tensor<f32> attributes {mesh_shape = #sdy.mesh<["x"=2]>} {
  %0 = stablehlo.add %l, %l : tensor<f32>
  return %0 : tensor<f32>
}
func.func @update(%g: tensor<4xf32>) -> tensor<4xf32> attributes {mesh_shape = #sdy.mesh<["x"=2]>} {
  %0 = stablehlo.negate %g : tensor<4xf32>
  return %0 : tensor<4xf32>
}
