// RUN: mpmd-opt %s -split-input-file -mpmd-batch-weight-gradients | FileCheck %s
// The batched program prints and parses back, and a second run changes
// nothing (a batched fragment is named by `mpmd.unit`, never a run again):
// RUN: mpmd-opt %s -split-input-file -mpmd-batch-weight-gradients \
// RUN:   | mpmd-opt -split-input-file -mpmd-batch-weight-gradients | FileCheck %s

!acc = !mpmd.mesh_tensor<"m0", tensor<4x3xf32>>
!bias = !mpmd.mesh_tensor<"m0", tensor<3xf32>>
!x = !mpmd.mesh_tensor<"m0", tensor<2x4xf32>>
!dy = !mpmd.mesh_tensor<"m0", tensor<2x3xf32>>

// Three W units, each adding its microbatch's x.T @ dy and column sums of dy
// to the accumulators the one before it returned, become one: the operands
// concatenated along the batch, one product and one sum over all 6 rows,
// added once to the accumulators the first unit was given.

// CHECK-LABEL: func.func @dense
func.func @dense(%acc: !acc, %bias: !bias, %x0: !x, %x1: !x, %x2: !x, %d0: !dy, %d1: !dy, %d2: !dy) -> (!acc, !bias)
    attributes {topology = #mpmd.topology<<"m0" : <["x"=1]>>>} {
  // CHECK-NEXT: %[[W:.*]]:2 = mpmd.fragment<mesh="m0", origin=["s"(1)], stage=0> (%arg0, %arg1, %arg2, %arg3, %arg4, %arg5, %arg6, %arg7) {call_counter = 2 : ui32, mpmd.unit = "W0+W1+W2", split_drop_transferred} (%[[A:.*]]: tensor<4x3xf32>, %[[B:.*]]: tensor<3xf32>, %[[X0:.*]]: tensor<2x4xf32>, %[[X1:.*]]: tensor<2x4xf32>, %[[X2:.*]]: tensor<2x4xf32>, %[[D0:.*]]: tensor<2x3xf32>, %[[D1:.*]]: tensor<2x3xf32>, %[[D2:.*]]: tensor<2x3xf32>) {
  // CHECK-NEXT:   %[[X:.*]] = "stablehlo.concatenate"(%[[X0]], %[[X1]], %[[X2]]) <{dimension = 0 : i64}> : (tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<6x4xf32>
  // CHECK-NEXT:   %[[D:.*]] = "stablehlo.concatenate"(%[[D0]], %[[D1]], %[[D2]]) <{dimension = 0 : i64}> : (tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<6x3xf32>
  // CHECK-NEXT:   %[[G:.*]] = "stablehlo.dot_general"(%[[X]], %[[D]]) {{.*}} : (tensor<6x4xf32>, tensor<6x3xf32>) -> tensor<4x3xf32>
  // CHECK-NEXT:   %[[Z:.*]] = "stablehlo.constant"
  // CHECK-NEXT:   %[[S:.*]] = "stablehlo.reduce"(%[[D]], %[[Z]])
  // CHECK:        }) : (tensor<6x3xf32>, tensor<f32>) -> tensor<3xf32>
  // CHECK-NEXT:   %[[A2:.*]] = "stablehlo.add"(%[[A]], %[[G]])
  // CHECK-NEXT:   %[[B2:.*]] = "stablehlo.add"(%[[B]], %[[S]])
  // CHECK-NEXT:   mpmd.return %[[A2]], %[[B2]]
  // CHECK-NEXT: }
  // CHECK-NEXT: return %[[W]]#0, %[[W]]#1
  %w0:2 = mpmd.fragment<mesh="m0", origin=["s"(1)], stage=0> (%acc, %bias, %x0, %d0) {call_counter = 0 : ui32, split_drop_transferred}
      (%a: tensor<4x3xf32>, %b: tensor<3xf32>, %x: tensor<2x4xf32>, %d: tensor<2x3xf32>) {
    %g = "stablehlo.dot_general"(%x, %d) <{dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [0], rhs_contracting_dimensions = [0]>}> : (tensor<2x4xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>
    %z = "stablehlo.constant"() <{value = dense<0.0> : tensor<f32>}> : () -> tensor<f32>
    %s = "stablehlo.reduce"(%d, %z) <{dimensions = array<i64: 0>}> ({
    ^bb0(%p: tensor<f32>, %q: tensor<f32>):
      %r = "stablehlo.add"(%p, %q) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%r) : (tensor<f32>) -> ()
    }) : (tensor<2x3xf32>, tensor<f32>) -> tensor<3xf32>
    %a2 = "stablehlo.add"(%a, %g) : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
    %b2 = "stablehlo.add"(%b, %s) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
    mpmd.return %a2, %b2 : tensor<4x3xf32>, tensor<3xf32>
  } : (!acc, !bias, !x, !dy) -> (!acc, !bias)
  %w1:2 = mpmd.fragment<mesh="m0", origin=["s"(1)], stage=0> (%w0#0, %w0#1, %x1, %d1) {call_counter = 1 : ui32, split_drop_transferred}
      (%a: tensor<4x3xf32>, %b: tensor<3xf32>, %x: tensor<2x4xf32>, %d: tensor<2x3xf32>) {
    %g = "stablehlo.dot_general"(%x, %d) <{dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [0], rhs_contracting_dimensions = [0]>}> : (tensor<2x4xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>
    %z = "stablehlo.constant"() <{value = dense<0.0> : tensor<f32>}> : () -> tensor<f32>
    %s = "stablehlo.reduce"(%d, %z) <{dimensions = array<i64: 0>}> ({
    ^bb0(%p: tensor<f32>, %q: tensor<f32>):
      %r = "stablehlo.add"(%p, %q) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%r) : (tensor<f32>) -> ()
    }) : (tensor<2x3xf32>, tensor<f32>) -> tensor<3xf32>
    %a2 = "stablehlo.add"(%a, %g) : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
    %b2 = "stablehlo.add"(%b, %s) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
    mpmd.return %a2, %b2 : tensor<4x3xf32>, tensor<3xf32>
  } : (!acc, !bias, !x, !dy) -> (!acc, !bias)
  %w2:2 = mpmd.fragment<mesh="m0", origin=["s"(1)], stage=0> (%w1#0, %w1#1, %x2, %d2) {call_counter = 2 : ui32, split_drop_transferred}
      (%a: tensor<4x3xf32>, %b: tensor<3xf32>, %x: tensor<2x4xf32>, %d: tensor<2x3xf32>) {
    %g = "stablehlo.dot_general"(%x, %d) <{dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [0], rhs_contracting_dimensions = [0]>}> : (tensor<2x4xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>
    %z = "stablehlo.constant"() <{value = dense<0.0> : tensor<f32>}> : () -> tensor<f32>
    %s = "stablehlo.reduce"(%d, %z) <{dimensions = array<i64: 0>}> ({
    ^bb0(%p: tensor<f32>, %q: tensor<f32>):
      %r = "stablehlo.add"(%p, %q) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%r) : (tensor<f32>) -> ()
    }) : (tensor<2x3xf32>, tensor<f32>) -> tensor<3xf32>
    %a2 = "stablehlo.add"(%a, %g) : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
    %b2 = "stablehlo.add"(%b, %s) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
    mpmd.return %a2, %b2 : tensor<4x3xf32>, tensor<3xf32>
  } : (!acc, !bias, !x, !dy) -> (!acc, !bias)
  return %w2#0, %w2#1 : !acc, !bias
}

// -----

!acc = !mpmd.mesh_tensor<"m0", tensor<4x3xf32>>
!bias = !mpmd.mesh_tensor<"m0", tensor<3xf32>>
!x = !mpmd.mesh_tensor<"m0", tensor<2x2x4xf32>>
!dy = !mpmd.mesh_tensor<"m0", tensor<2x2x3xf32>>

// An invariant operand of an op on the microbatches' values (%m, a mask the
// same for every microbatch) is repeated along the batch; reshapes that keep
// each microbatch a contiguous slab, a transpose, a sum over two dimensions
// and a negated sum are followed.

// CHECK-LABEL: func.func @mask_reshape_transpose
func.func @mask_reshape_transpose(%acc: !acc, %bias: !bias, %mask: !x, %x0: !x, %x1: !x, %d0: !dy, %d1: !dy) -> (!acc, !bias)
    attributes {topology = #mpmd.topology<<"m0" : <["x"=1]>>>} {
  // CHECK-NEXT: %[[W:.*]]:2 = mpmd.fragment<mesh="m0", origin=["s"(1)], stage=0> (%arg0, %arg1, %arg2, %arg3, %arg4, %arg5, %arg6) {call_counter = 1 : ui32, mpmd.unit = "W0+W1", split_drop_transferred} (%[[A:.*]]: tensor<4x3xf32>, %[[B:.*]]: tensor<3xf32>, %[[M:.*]]: tensor<2x2x4xf32>, %[[X0:.*]]: tensor<2x2x4xf32>, %[[X1:.*]]: tensor<2x2x4xf32>, %[[D0:.*]]: tensor<2x2x3xf32>, %[[D1:.*]]: tensor<2x2x3xf32>) {
  // CHECK-NEXT:   %[[X:.*]] = "stablehlo.concatenate"(%[[X0]], %[[X1]]) <{dimension = 0 : i64}> : (tensor<2x2x4xf32>, tensor<2x2x4xf32>) -> tensor<4x2x4xf32>
  // CHECK-NEXT:   %[[D:.*]] = "stablehlo.concatenate"(%[[D0]], %[[D1]]) <{dimension = 0 : i64}> : (tensor<2x2x3xf32>, tensor<2x2x3xf32>) -> tensor<4x2x3xf32>
  // CHECK-NEXT:   %[[MB:.*]] = "stablehlo.broadcast_in_dim"(%[[M]]) <{broadcast_dimensions = array<i64: 1, 2, 3>}> : (tensor<2x2x4xf32>) -> tensor<2x2x2x4xf32>
  // CHECK-NEXT:   %[[MT:.*]] = "stablehlo.reshape"(%[[MB]]) : (tensor<2x2x2x4xf32>) -> tensor<4x2x4xf32>
  // CHECK-NEXT:   %[[Y:.*]] = "stablehlo.multiply"(%[[X]], %[[MT]]) : (tensor<4x2x4xf32>, tensor<4x2x4xf32>) -> tensor<4x2x4xf32>
  // CHECK-NEXT:   %[[R:.*]] = "stablehlo.reshape"(%[[Y]]) : (tensor<4x2x4xf32>) -> tensor<8x4xf32>
  // CHECK-NEXT:   %[[E:.*]] = "stablehlo.reshape"(%[[D]]) : (tensor<4x2x3xf32>) -> tensor<8x3xf32>
  // CHECK-NEXT:   %[[G:.*]] = "stablehlo.dot_general"(%[[R]], %[[E]]) {{.*}} : (tensor<8x4xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
  // CHECK-NEXT:   %[[T:.*]] = "stablehlo.transpose"(%[[D]]) {{.*}} : (tensor<4x2x3xf32>) -> tensor<2x4x3xf32>
  // CHECK-NEXT:   %[[Z:.*]] = "stablehlo.constant"
  // CHECK-NEXT:   %[[S:.*]] = "stablehlo.reduce"(%[[T]], %[[Z]])
  // CHECK:        }) : (tensor<2x4x3xf32>, tensor<f32>) -> tensor<3xf32>
  // CHECK-NEXT:   %[[H:.*]] = "stablehlo.negate"(%[[S]])
  // CHECK-NEXT:   %[[A2:.*]] = "stablehlo.add"(%[[G]], %[[A]])
  // CHECK-NEXT:   %[[B2:.*]] = "stablehlo.add"(%[[B]], %[[H]])
  // CHECK-NEXT:   mpmd.return %[[A2]], %[[B2]]
  %w0:2 = mpmd.fragment<mesh="m0", origin=["s"(1)], stage=0> (%acc, %bias, %mask, %x0, %d0) {call_counter = 0 : ui32, split_drop_transferred}
      (%a: tensor<4x3xf32>, %b: tensor<3xf32>, %m: tensor<2x2x4xf32>, %x: tensor<2x2x4xf32>, %d: tensor<2x2x3xf32>) {
    %y = "stablehlo.multiply"(%x, %m) : (tensor<2x2x4xf32>, tensor<2x2x4xf32>) -> tensor<2x2x4xf32>
    %rs = "stablehlo.reshape"(%y) : (tensor<2x2x4xf32>) -> tensor<4x4xf32>
    %e = "stablehlo.reshape"(%d) : (tensor<2x2x3xf32>) -> tensor<4x3xf32>
    %g = "stablehlo.dot_general"(%rs, %e) <{dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [0], rhs_contracting_dimensions = [0]>}> : (tensor<4x4xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
    %t = "stablehlo.transpose"(%d) <{permutation = array<i64: 1, 0, 2>}> : (tensor<2x2x3xf32>) -> tensor<2x2x3xf32>
    %z = "stablehlo.constant"() <{value = dense<0.0> : tensor<f32>}> : () -> tensor<f32>
    %s = "stablehlo.reduce"(%t, %z) <{dimensions = array<i64: 0, 1>}> ({
    ^bb0(%p: tensor<f32>, %q: tensor<f32>):
      %r = "stablehlo.add"(%p, %q) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%r) : (tensor<f32>) -> ()
    }) : (tensor<2x2x3xf32>, tensor<f32>) -> tensor<3xf32>
    %h = "stablehlo.negate"(%s) : (tensor<3xf32>) -> tensor<3xf32>
    %a2 = "stablehlo.add"(%g, %a) : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
    %b2 = "stablehlo.add"(%b, %h) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
    mpmd.return %a2, %b2 : tensor<4x3xf32>, tensor<3xf32>
  } : (!acc, !bias, !x, !x, !dy) -> (!acc, !bias)
  %w1:2 = mpmd.fragment<mesh="m0", origin=["s"(1)], stage=0> (%w0#0, %w0#1, %mask, %x1, %d1) {call_counter = 1 : ui32, split_drop_transferred}
      (%a: tensor<4x3xf32>, %b: tensor<3xf32>, %m: tensor<2x2x4xf32>, %x: tensor<2x2x4xf32>, %d: tensor<2x2x3xf32>) {
    %y = "stablehlo.multiply"(%x, %m) : (tensor<2x2x4xf32>, tensor<2x2x4xf32>) -> tensor<2x2x4xf32>
    %rs = "stablehlo.reshape"(%y) : (tensor<2x2x4xf32>) -> tensor<4x4xf32>
    %e = "stablehlo.reshape"(%d) : (tensor<2x2x3xf32>) -> tensor<4x3xf32>
    %g = "stablehlo.dot_general"(%rs, %e) <{dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [0], rhs_contracting_dimensions = [0]>}> : (tensor<4x4xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
    %t = "stablehlo.transpose"(%d) <{permutation = array<i64: 1, 0, 2>}> : (tensor<2x2x3xf32>) -> tensor<2x2x3xf32>
    %z = "stablehlo.constant"() <{value = dense<0.0> : tensor<f32>}> : () -> tensor<f32>
    %s = "stablehlo.reduce"(%t, %z) <{dimensions = array<i64: 0, 1>}> ({
    ^bb0(%p: tensor<f32>, %q: tensor<f32>):
      %r = "stablehlo.add"(%p, %q) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%r) : (tensor<f32>) -> ()
    }) : (tensor<2x2x3xf32>, tensor<f32>) -> tensor<3xf32>
    %h = "stablehlo.negate"(%s) : (tensor<3xf32>) -> tensor<3xf32>
    %a2 = "stablehlo.add"(%g, %a) : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
    %b2 = "stablehlo.add"(%b, %h) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
    mpmd.return %a2, %b2 : tensor<4x3xf32>, tensor<3xf32>
  } : (!acc, !bias, !x, !x, !dy) -> (!acc, !bias)
  return %w1#0, %w1#1 : !acc, !bias
}

// -----

!table = !mpmd.mesh_tensor<"m0", tensor<8x4xf32>>
!idx = !mpmd.mesh_tensor<"m0", tensor<2x3x1xi32>>
!dy = !mpmd.mesh_tensor<"m0", tensor<2x3x4xf32>>

// An embedding: rows of an invariant table looked up by the microbatches'
// token ids, and a scatter-add into zeros of their gradients (a sum over the
// microbatches).

// CHECK-LABEL: func.func @embedding
func.func @embedding(%acc: !table, %table: !table, %i0: !idx, %i1: !idx, %d0: !dy, %d1: !dy) -> !table
    attributes {topology = #mpmd.topology<<"m0" : <["x"=1]>>>} {
  // CHECK-NEXT: %[[W:.*]] = mpmd.fragment<mesh="m0", origin=["s"(1)], stage=0> (%arg0, %arg1, %arg2, %arg3, %arg4, %arg5) {call_counter = 1 : ui32, mpmd.unit = "W0+W1", split_drop_transferred} (%[[A:.*]]: tensor<8x4xf32>, %[[T:.*]]: tensor<8x4xf32>, %[[I0:.*]]: tensor<2x3x1xi32>, %[[I1:.*]]: tensor<2x3x1xi32>, %[[D0:.*]]: tensor<2x3x4xf32>, %[[D1:.*]]: tensor<2x3x4xf32>) {
  // CHECK-NEXT:   %[[I:.*]] = "stablehlo.concatenate"(%[[I0]], %[[I1]]) <{dimension = 0 : i64}> : (tensor<2x3x1xi32>, tensor<2x3x1xi32>) -> tensor<4x3x1xi32>
  // CHECK-NEXT:   %[[D:.*]] = "stablehlo.concatenate"(%[[D0]], %[[D1]]) <{dimension = 0 : i64}> : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<4x3x4xf32>
  // CHECK-NEXT:   %[[E:.*]] = "stablehlo.gather"(%[[T]], %[[I]]) {{.*}} : (tensor<8x4xf32>, tensor<4x3x1xi32>) -> tensor<4x3x4xf32>
  // CHECK-NEXT:   %[[U:.*]] = "stablehlo.multiply"(%[[E]], %[[D]]) : (tensor<4x3x4xf32>, tensor<4x3x4xf32>) -> tensor<4x3x4xf32>
  // CHECK-NEXT:   %[[Z:.*]] = "stablehlo.constant"
  // CHECK-NEXT:   %[[S:.*]] = "stablehlo.scatter"(%[[Z]], %[[I]], %[[U]])
  // CHECK:        }) : (tensor<8x4xf32>, tensor<4x3x1xi32>, tensor<4x3x4xf32>) -> tensor<8x4xf32>
  // CHECK-NEXT:   %[[A2:.*]] = "stablehlo.add"(%[[A]], %[[S]])
  // CHECK-NEXT:   mpmd.return %[[A2]]
  %w0 = mpmd.fragment<mesh="m0", origin=["s"(1)], stage=0> (%acc, %table, %i0, %d0) {call_counter = 0 : ui32, split_drop_transferred}
      (%a: tensor<8x4xf32>, %t: tensor<8x4xf32>, %i: tensor<2x3x1xi32>, %d: tensor<2x3x4xf32>) {
    %e = "stablehlo.gather"(%t, %i) <{dimension_numbers = #stablehlo.gather<offset_dims = [2], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 2>, indices_are_sorted = false, slice_sizes = array<i64: 1, 4>}> : (tensor<8x4xf32>, tensor<2x3x1xi32>) -> tensor<2x3x4xf32>
    %u = "stablehlo.multiply"(%e, %d) : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
    %z = "stablehlo.constant"() <{value = dense<0.0> : tensor<8x4xf32>}> : () -> tensor<8x4xf32>
    %s = "stablehlo.scatter"(%z, %i, %u) <{indices_are_sorted = false, scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [2], inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 2>, unique_indices = false}> ({
    ^bb0(%p: tensor<f32>, %q: tensor<f32>):
      %r = "stablehlo.add"(%p, %q) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%r) : (tensor<f32>) -> ()
    }) : (tensor<8x4xf32>, tensor<2x3x1xi32>, tensor<2x3x4xf32>) -> tensor<8x4xf32>
    %a2 = "stablehlo.add"(%a, %s) : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
    mpmd.return %a2 : tensor<8x4xf32>
  } : (!table, !table, !idx, !dy) -> !table
  %w1 = mpmd.fragment<mesh="m0", origin=["s"(1)], stage=0> (%w0, %table, %i1, %d1) {call_counter = 1 : ui32, split_drop_transferred}
      (%a: tensor<8x4xf32>, %t: tensor<8x4xf32>, %i: tensor<2x3x1xi32>, %d: tensor<2x3x4xf32>) {
    %e = "stablehlo.gather"(%t, %i) <{dimension_numbers = #stablehlo.gather<offset_dims = [2], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 2>, indices_are_sorted = false, slice_sizes = array<i64: 1, 4>}> : (tensor<8x4xf32>, tensor<2x3x1xi32>) -> tensor<2x3x4xf32>
    %u = "stablehlo.multiply"(%e, %d) : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
    %z = "stablehlo.constant"() <{value = dense<0.0> : tensor<8x4xf32>}> : () -> tensor<8x4xf32>
    %s = "stablehlo.scatter"(%z, %i, %u) <{indices_are_sorted = false, scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [2], inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 2>, unique_indices = false}> ({
    ^bb0(%p: tensor<f32>, %q: tensor<f32>):
      %r = "stablehlo.add"(%p, %q) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%r) : (tensor<f32>) -> ()
    }) : (tensor<8x4xf32>, tensor<2x3x1xi32>, tensor<2x3x4xf32>) -> tensor<8x4xf32>
    %a2 = "stablehlo.add"(%a, %s) : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
    mpmd.return %a2 : tensor<8x4xf32>
  } : (!table, !table, !idx, !dy) -> !table
  return %w1 : !table
}

// -----

!acc = !mpmd.mesh_tensor<"m0", tensor<4x3xf32>>
!x = !mpmd.mesh_tensor<"m0", tensor<2x4xf32>>
!dy = !mpmd.mesh_tensor<"m0", tensor<2x3xf32>>

// As JAX writes a loop that starts from zeros: the first unit returns its
// gradient (nothing to add it to), the others add theirs. The first stays a
// unit of its own; the run after it is batched, and adds its sum to the
// first's gradient.

// CHECK-LABEL: func.func @first_unit_apart
func.func @first_unit_apart(%x0: !x, %x1: !x, %x2: !x, %d0: !dy, %d1: !dy, %d2: !dy) -> !acc
    attributes {topology = #mpmd.topology<<"m0" : <["x"=1]>>>} {
  // CHECK-NEXT: %[[W0:.*]] = mpmd.fragment<mesh="m0", origin=["s"(1)], stage=0> (%arg0, %arg3) {call_counter = 0 : ui32, split_drop_transferred}
  // CHECK:      %[[W:.*]] = mpmd.fragment<mesh="m0", origin=["s"(1)], stage=0> (%[[W0]], %arg1, %arg2, %arg4, %arg5) {call_counter = 2 : ui32, mpmd.unit = "W1+W2", split_drop_transferred}
  // CHECK-NEXT:   "stablehlo.concatenate"
  // CHECK-NEXT:   "stablehlo.concatenate"
  // CHECK-NEXT:   "stablehlo.dot_general"{{.*}} : (tensor<4x4xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
  // CHECK-NEXT:   "stablehlo.add"
  // CHECK-NEXT:   mpmd.return
  // CHECK-NEXT: }
  // CHECK-NEXT: return %[[W]]
  %w0 = mpmd.fragment<mesh="m0", origin=["s"(1)], stage=0> (%x0, %d0) {call_counter = 0 : ui32, split_drop_transferred}
      (%x: tensor<2x4xf32>, %d: tensor<2x3xf32>) {
    %g = "stablehlo.dot_general"(%x, %d) <{dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [0], rhs_contracting_dimensions = [0]>}> : (tensor<2x4xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>
    mpmd.return %g : tensor<4x3xf32>
  } : (!x, !dy) -> !acc
  %w1 = mpmd.fragment<mesh="m0", origin=["s"(1)], stage=0> (%w0, %x1, %d1) {call_counter = 1 : ui32, split_drop_transferred}
      (%a: tensor<4x3xf32>, %x: tensor<2x4xf32>, %d: tensor<2x3xf32>) {
    %g = "stablehlo.dot_general"(%x, %d) <{dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [0], rhs_contracting_dimensions = [0]>}> : (tensor<2x4xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>

    %a2 = "stablehlo.add"(%a, %g) : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
    mpmd.return %a2 : tensor<4x3xf32>
  } : (!acc, !x, !dy) -> !acc
  %w2 = mpmd.fragment<mesh="m0", origin=["s"(1)], stage=0> (%w1, %x2, %d2) {call_counter = 2 : ui32, split_drop_transferred}
      (%a: tensor<4x3xf32>, %x: tensor<2x4xf32>, %d: tensor<2x3xf32>) {
    %g = "stablehlo.dot_general"(%x, %d) <{dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [0], rhs_contracting_dimensions = [0]>}> : (tensor<2x4xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>

    %a2 = "stablehlo.add"(%a, %g) : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
    mpmd.return %a2 : tensor<4x3xf32>
  } : (!acc, !x, !dy) -> !acc
  return %w2 : !acc
}

// -----

!acc = !mpmd.mesh_tensor<"m0", tensor<4x3xf32>>
!x = !mpmd.mesh_tensor<"m0", tensor<2x4xf32>>
!dy = !mpmd.mesh_tensor<"m0", tensor<2x3xf32>>

// A mesh of two devices is left alone: concatenating a batch split over
// them would move it between them.

// CHECK-LABEL: func.func @two_devices
func.func @two_devices(%x0: !x, %x1: !x, %x2: !x, %d0: !dy, %d1: !dy, %d2: !dy) -> !acc
    attributes {topology = #mpmd.topology<<"m0" : <["x"=2]>>>} {
  // CHECK-NEXT: mpmd.fragment{{.*}}call_counter = 0
  // CHECK-NOT:  mpmd.unit
  // CHECK:      mpmd.fragment{{.*}}call_counter = 1
  // CHECK-NOT:  mpmd.unit
  // CHECK:      mpmd.fragment{{.*}}call_counter = 2
  // CHECK-NOT:  mpmd.unit
  // CHECK:      return
  %w0 = mpmd.fragment<mesh="m0", origin=["s"(1)], stage=0> (%x0, %d0) {call_counter = 0 : ui32, split_drop_transferred}
      (%x: tensor<2x4xf32>, %d: tensor<2x3xf32>) {
    %g = "stablehlo.dot_general"(%x, %d) <{dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [0], rhs_contracting_dimensions = [0]>}> : (tensor<2x4xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>
    mpmd.return %g : tensor<4x3xf32>
  } : (!x, !dy) -> !acc
  %w1 = mpmd.fragment<mesh="m0", origin=["s"(1)], stage=0> (%w0, %x1, %d1) {call_counter = 1 : ui32, split_drop_transferred}
      (%a: tensor<4x3xf32>, %x: tensor<2x4xf32>, %d: tensor<2x3xf32>) {
    %g = "stablehlo.dot_general"(%x, %d) <{dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [0], rhs_contracting_dimensions = [0]>}> : (tensor<2x4xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>

    %a2 = "stablehlo.add"(%a, %g) : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
    mpmd.return %a2 : tensor<4x3xf32>
  } : (!acc, !x, !dy) -> !acc
  %w2 = mpmd.fragment<mesh="m0", origin=["s"(1)], stage=0> (%w1, %x2, %d2) {call_counter = 2 : ui32, split_drop_transferred}
      (%a: tensor<4x3xf32>, %x: tensor<2x4xf32>, %d: tensor<2x3xf32>) {
    %g = "stablehlo.dot_general"(%x, %d) <{dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [0], rhs_contracting_dimensions = [0]>}> : (tensor<2x4xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>

    %a2 = "stablehlo.add"(%a, %g) : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
    mpmd.return %a2 : tensor<4x3xf32>
  } : (!acc, !x, !dy) -> !acc
  return %w2 : !acc
}

// -----

!acc = !mpmd.mesh_tensor<"m0", tensor<4x3xf32>>
!x = !mpmd.mesh_tensor<"m0", tensor<2x4xf32>>
!dy = !mpmd.mesh_tensor<"m0", tensor<2x3xf32>>

// A unit whose accumulators another fragment reads ends a run: the first
// unit's sum is read by the (user) fragment between them, so each stays.

// CHECK-LABEL: func.func @accumulator_read_in_between
func.func @accumulator_read_in_between(%acc: !acc, %x0: !x, %x1: !x, %d0: !dy, %d1: !dy) -> (!acc, !acc)
    attributes {topology = #mpmd.topology<<"m0" : <["x"=1]>>>} {
  // CHECK-NEXT: %[[W0:.*]] = mpmd.fragment<mesh="m0", origin=["s"(1)], stage=0> (%arg0, %arg1, %arg3) {call_counter = 0 : ui32, split_drop_transferred}
  // CHECK:      %[[N:.*]] = mpmd.fragment<mesh="m0", origin=["reader"]> (%[[W0]])
  // CHECK:      %[[W1:.*]] = mpmd.fragment<mesh="m0", origin=["s"(1)], stage=0> (%[[W0]], %arg2, %arg4) {call_counter = 1 : ui32, split_drop_transferred}
  // CHECK:      return %[[W1]], %[[N]]
  %w0 = mpmd.fragment<mesh="m0", origin=["s"(1)], stage=0> (%acc, %x0, %d0) {call_counter = 0 : ui32, split_drop_transferred}
      (%a: tensor<4x3xf32>, %x: tensor<2x4xf32>, %d: tensor<2x3xf32>) {
    %g = "stablehlo.dot_general"(%x, %d) <{dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [0], rhs_contracting_dimensions = [0]>}> : (tensor<2x4xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>

    %a2 = "stablehlo.add"(%a, %g) : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
    mpmd.return %a2 : tensor<4x3xf32>
  } : (!acc, !x, !dy) -> !acc
  %n = mpmd.fragment<mesh="m0", origin=["reader"]> (%w0) (%a: tensor<4x3xf32>) {
    %b = "stablehlo.negate"(%a) : (tensor<4x3xf32>) -> tensor<4x3xf32>
    mpmd.return %b : tensor<4x3xf32>
  } : (!acc) -> !acc
  %w1 = mpmd.fragment<mesh="m0", origin=["s"(1)], stage=0> (%w0, %x1, %d1) {call_counter = 1 : ui32, split_drop_transferred}
      (%a: tensor<4x3xf32>, %x: tensor<2x4xf32>, %d: tensor<2x3xf32>) {
    %g = "stablehlo.dot_general"(%x, %d) <{dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [0], rhs_contracting_dimensions = [0]>}> : (tensor<2x4xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>

    %a2 = "stablehlo.add"(%a, %g) : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
    mpmd.return %a2 : tensor<4x3xf32>
  } : (!acc, !x, !dy) -> !acc
  return %w1, %n : !acc, !acc
}

// -----

!acc = !mpmd.mesh_tensor<"m0", tensor<4x3xf32>>
!v = !mpmd.mesh_tensor<"m0", tensor<3xf32>>
!x = !mpmd.mesh_tensor<"m0", tensor<2x4xf32>>
!dy = !mpmd.mesh_tensor<"m0", tensor<2x3xf32>>

// As the import leaves a JAX loop `grads = jax.tree.map(jnp.add, grads, g)`
// that starts from zeros: each unit returns its microbatch's gradient, and
// an inferred fragment adds it to the previous sum. The units read the
// weight %k through an optimization barrier made for each microbatch (as
// `jax.checkpoint` does): one value. A fragment that only reads a unit's
// result and values made before the unit (a sum over the rows of %h, here
// into zeros) goes into the unit first. The batched unit's sums are added to
// the zeros the first addition started from, by the last addition; the
// other additions go.

// CHECK-LABEL: func.func @accumulated_outside
func.func @accumulated_outside(%kernel: !acc, %x0: !x, %x1: !x, %d0: !dy, %d1: !dy) -> (!acc, !v)
    attributes {topology = #mpmd.topology<<"m0" : <["x"=1]>>>} {
  // CHECK-NEXT: %[[Z:.*]] = mpmd.fragment<mesh="m0", origin=[]> ()
  // CHECK:      %[[Z3:.*]] = mpmd.fragment<mesh="m0", origin=[]> ()
  // CHECK:      mpmd.fragment<mesh="m0", origin=[]> (%arg0)
  // CHECK:      %[[K1:.*]] = mpmd.fragment<mesh="m0", origin=[]> (%arg0)
  // CHECK:      %[[W:.*]]:2 = mpmd.fragment<mesh="m0", origin=["s"(1)], stage=0> (%[[K1]], %arg1, %arg2, %arg3, %arg4, %[[Z3]]) {{.*}}mpmd.unit = "W0+W1"
  // CHECK:        %[[G:.*]] = "stablehlo.dot_general"{{.*}} : (tensor<4x4xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
  // CHECK-NEXT:   %[[K:.*]] = "stablehlo.optimization_barrier"
  // CHECK-NEXT:   %[[H:.*]] = "stablehlo.multiply"{{.*}} : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
  // CHECK-NEXT:   %[[GW:.*]] = "stablehlo.multiply"(%[[G]], %[[K]])
  // CHECK-NEXT:   "stablehlo.constant"
  // CHECK-NEXT:   %[[S:.*]] = "stablehlo.reduce"(%[[H]]
  // CHECK:        }) : (tensor<4x3xf32>, tensor<f32>) -> tensor<3xf32>
  // CHECK-NEXT:   %[[T:.*]] = "stablehlo.add"(%{{.*}}, %[[S]])
  // CHECK-NEXT:   mpmd.return %[[GW]], %[[T]]
  // CHECK:      %[[A:.*]] = mpmd.fragment<mesh="m0", origin=[]> (%[[Z]], %[[W]]#0)
  // CHECK:      %[[C:.*]] = mpmd.fragment<mesh="m0", origin=[]> (%[[Z3]], %[[W]]#1)
  // CHECK-NOT:  mpmd.fragment
  // CHECK:      return %[[A]], %[[C]]
  %z = mpmd.fragment<mesh="m0", origin=[]> () () {
    %cz = "stablehlo.constant"() <{value = dense<0.0> : tensor<4x3xf32>}> : () -> tensor<4x3xf32>
    mpmd.return %cz : tensor<4x3xf32>
  } : () -> !acc
  %z3 = mpmd.fragment<mesh="m0", origin=[]> () () {
    %cz = "stablehlo.constant"() <{value = dense<0.0> : tensor<3xf32>}> : () -> tensor<3xf32>
    mpmd.return %cz : tensor<3xf32>
  } : () -> !v
  %b0 = mpmd.fragment<mesh="m0", origin=[]> (%kernel) (%a: tensor<4x3xf32>) {
    %o = "stablehlo.optimization_barrier"(%a) : (tensor<4x3xf32>) -> tensor<4x3xf32>
    mpmd.return %o : tensor<4x3xf32>
  } : (!acc) -> !acc
  %w0:2 = mpmd.fragment<mesh="m0", origin=["s"(1)], stage=0> (%b0, %x0, %d0) {call_counter = 0 : ui32, split_drop_transferred}
      (%k: tensor<4x3xf32>, %x: tensor<2x4xf32>, %d: tensor<2x3xf32>) {
    %g = "stablehlo.dot_general"(%x, %d) <{dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [0], rhs_contracting_dimensions = [0]>}> : (tensor<2x4xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>
    %w = "stablehlo.optimization_barrier"(%k) : (tensor<4x3xf32>) -> tensor<4x3xf32>
    %h = "stablehlo.multiply"(%d, %d) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
    %gw = "stablehlo.multiply"(%g, %w) : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
    mpmd.return %gw, %h : tensor<4x3xf32>, tensor<2x3xf32>
  } : (!acc, !x, !dy) -> (!acc, !dy)
  %c0 = mpmd.fragment<mesh="m0", origin=[]> (%w0#1, %z3) (%rows: tensor<2x3xf32>, %zz: tensor<3xf32>) {
    %zc = "stablehlo.constant"() <{value = dense<0.0> : tensor<f32>}> : () -> tensor<f32>
    %cs = "stablehlo.reduce"(%rows, %zc) <{dimensions = array<i64: 0>}> ({
^bb0(%p: tensor<f32>, %q: tensor<f32>):
  %r = "stablehlo.add"(%p, %q) : (tensor<f32>, tensor<f32>) -> tensor<f32>
  "stablehlo.return"(%r) : (tensor<f32>) -> ()
}) : (tensor<2x3xf32>, tensor<f32>) -> tensor<3xf32>
    %ct = "stablehlo.add"(%zz, %cs) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
    mpmd.return %ct : tensor<3xf32>
  } : (!dy, !v) -> !v
  %a0 = mpmd.fragment<mesh="m0", origin=[]> (%z, %w0#0) (%p: tensor<4x3xf32>, %q: tensor<4x3xf32>) {
    %sum = "stablehlo.add"(%p, %q) : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
    mpmd.return %sum : tensor<4x3xf32>
  } : (!acc, !acc) -> !acc
  %s0 = mpmd.fragment<mesh="m0", origin=[]> (%z3, %c0) (%p: tensor<3xf32>, %q: tensor<3xf32>) {
    %sum = "stablehlo.add"(%p, %q) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
    mpmd.return %sum : tensor<3xf32>
  } : (!v, !v) -> !v
  %b1 = mpmd.fragment<mesh="m0", origin=[]> (%kernel) (%a: tensor<4x3xf32>) {
    %o = "stablehlo.optimization_barrier"(%a) : (tensor<4x3xf32>) -> tensor<4x3xf32>
    mpmd.return %o : tensor<4x3xf32>
  } : (!acc) -> !acc
  %w1:2 = mpmd.fragment<mesh="m0", origin=["s"(1)], stage=0> (%b1, %x1, %d1) {call_counter = 1 : ui32, split_drop_transferred}
      (%k: tensor<4x3xf32>, %x: tensor<2x4xf32>, %d: tensor<2x3xf32>) {
    %g = "stablehlo.dot_general"(%x, %d) <{dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [0], rhs_contracting_dimensions = [0]>}> : (tensor<2x4xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>
    %w = "stablehlo.optimization_barrier"(%k) : (tensor<4x3xf32>) -> tensor<4x3xf32>
    %h = "stablehlo.multiply"(%d, %d) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
    %gw = "stablehlo.multiply"(%g, %w) : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
    mpmd.return %gw, %h : tensor<4x3xf32>, tensor<2x3xf32>
  } : (!acc, !x, !dy) -> (!acc, !dy)
  %c1 = mpmd.fragment<mesh="m0", origin=[]> (%w1#1, %z3) (%rows: tensor<2x3xf32>, %zz: tensor<3xf32>) {
    %zc = "stablehlo.constant"() <{value = dense<0.0> : tensor<f32>}> : () -> tensor<f32>
    %cs = "stablehlo.reduce"(%rows, %zc) <{dimensions = array<i64: 0>}> ({
^bb0(%p: tensor<f32>, %q: tensor<f32>):
  %r = "stablehlo.add"(%p, %q) : (tensor<f32>, tensor<f32>) -> tensor<f32>
  "stablehlo.return"(%r) : (tensor<f32>) -> ()
}) : (tensor<2x3xf32>, tensor<f32>) -> tensor<3xf32>
    %ct = "stablehlo.add"(%zz, %cs) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
    mpmd.return %ct : tensor<3xf32>
  } : (!dy, !v) -> !v
  %a1 = mpmd.fragment<mesh="m0", origin=[]> (%a0, %w1#0) (%p: tensor<4x3xf32>, %q: tensor<4x3xf32>) {
    %sum = "stablehlo.add"(%p, %q) : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
    mpmd.return %sum : tensor<4x3xf32>
  } : (!acc, !acc) -> !acc
  %s1 = mpmd.fragment<mesh="m0", origin=[]> (%s0, %c1) (%p: tensor<3xf32>, %q: tensor<3xf32>) {
    %sum = "stablehlo.add"(%p, %q) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
    mpmd.return %sum : tensor<3xf32>
  } : (!v, !v) -> !v
  return %a1, %s1 : !acc, !v
}

// -----

!v = !mpmd.mesh_tensor<"m0", tensor<3xf32>>
!dy = !mpmd.mesh_tensor<"m0", tensor<1x4x3xf32>>

// A microbatch of one sequence: JAX sums a bias's gradient over the tokens
// and reshapes the batch dimension of size 1 away instead of summing over
// it. Concatenated, that is one value per microbatch, which the batched unit
// sums over the microbatches before it returns it.

// CHECK-LABEL: func.func @one_sequence_per_microbatch
func.func @one_sequence_per_microbatch(%acc: !v, %d0: !dy, %d1: !dy) -> !v
    attributes {topology = #mpmd.topology<<"m0" : <["x"=1]>>>} {
  // CHECK-NEXT: %[[W:.*]] = mpmd.fragment<mesh="m0", origin=["s"(1)], stage=0> (%arg1, %arg2) {{.*}}mpmd.unit = "W0+W1"
  // CHECK-NEXT:   %[[D:.*]] = "stablehlo.concatenate"{{.*}} : (tensor<1x4x3xf32>, tensor<1x4x3xf32>) -> tensor<2x4x3xf32>
  // CHECK-NEXT:   "stablehlo.constant"
  // CHECK-NEXT:   %[[S:.*]] = "stablehlo.reduce"(%[[D]]
  // CHECK:        }) : (tensor<2x4x3xf32>, tensor<f32>) -> tensor<2x3xf32>
  // CHECK-NEXT:   %[[B:.*]] = "stablehlo.reshape"(%[[S]]) : (tensor<2x3xf32>) -> tensor<6xf32>
  // CHECK-NEXT:   %[[SPLIT:.*]] = "stablehlo.reshape"(%[[B]]) : (tensor<6xf32>) -> tensor<2x3xf32>
  // CHECK-NEXT:   %[[Z:.*]] = "stablehlo.constant"() <{value = dense<0.000000e+00> : tensor<f32>}>
  // CHECK-NEXT:   %[[SUM:.*]] = "stablehlo.reduce"(%[[SPLIT]], %[[Z]]) <{dimensions = array<i64: 0>}>
  // CHECK:        }) : (tensor<2x3xf32>, tensor<f32>) -> tensor<3xf32>
  // CHECK-NEXT:   mpmd.return %[[SUM]] : tensor<3xf32>
  // CHECK:      %[[A:.*]] = mpmd.fragment<mesh="m0", origin=[]> (%arg0, %[[W]])
  // CHECK-NOT:  mpmd.fragment
  // CHECK:      return %[[A]]
  %w0 = mpmd.fragment<mesh="m0", origin=["s"(1)], stage=0> (%d0) {call_counter = 0 : ui32, split_drop_transferred}
      (%d: tensor<1x4x3xf32>) {
    %z = "stablehlo.constant"() <{value = dense<0.0> : tensor<f32>}> : () -> tensor<f32>
    %s = "stablehlo.reduce"(%d, %z) <{dimensions = array<i64: 1>}> ({
    ^bb0(%p: tensor<f32>, %q: tensor<f32>):
      %r = "stablehlo.add"(%p, %q) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%r) : (tensor<f32>) -> ()
    }) : (tensor<1x4x3xf32>, tensor<f32>) -> tensor<1x3xf32>
    %b = "stablehlo.reshape"(%s) : (tensor<1x3xf32>) -> tensor<3xf32>
    mpmd.return %b : tensor<3xf32>
  } : (!dy) -> !v
  %a0 = mpmd.fragment<mesh="m0", origin=[]> (%acc, %w0) (%p: tensor<3xf32>, %q: tensor<3xf32>) {
    %sum = "stablehlo.add"(%p, %q) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
    mpmd.return %sum : tensor<3xf32>
  } : (!v, !v) -> !v
  %w1 = mpmd.fragment<mesh="m0", origin=["s"(1)], stage=0> (%d1) {call_counter = 1 : ui32, split_drop_transferred}
      (%d: tensor<1x4x3xf32>) {
    %z = "stablehlo.constant"() <{value = dense<0.0> : tensor<f32>}> : () -> tensor<f32>
    %s = "stablehlo.reduce"(%d, %z) <{dimensions = array<i64: 1>}> ({
    ^bb0(%p: tensor<f32>, %q: tensor<f32>):
      %r = "stablehlo.add"(%p, %q) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%r) : (tensor<f32>) -> ()
    }) : (tensor<1x4x3xf32>, tensor<f32>) -> tensor<1x3xf32>
    %b = "stablehlo.reshape"(%s) : (tensor<1x3xf32>) -> tensor<3xf32>
    mpmd.return %b : tensor<3xf32>
  } : (!dy) -> !v
  %a1 = mpmd.fragment<mesh="m0", origin=[]> (%a0, %w1) (%p: tensor<3xf32>, %q: tensor<3xf32>) {
    %sum = "stablehlo.add"(%p, %q) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
    mpmd.return %sum : tensor<3xf32>
  } : (!v, !v) -> !v
  return %a1 : !v
}

// -----

!w = !mpmd.mesh_tensor<"m0", tensor<3x4xf32>>
!wt = !mpmd.mesh_tensor<"m0", tensor<4x3xf32>>
!s = !mpmd.mesh_tensor<"m0", tensor<f32>>
!v = !mpmd.mesh_tensor<"m0", tensor<3xf32>>
!x = !mpmd.mesh_tensor<"m0", tensor<2x4xf32>>

// Each forward returns the weight transposed and a constant it computes
// (`sqrt(8.0)`) for its microbatch's W unit: the same computation of the same
// operands, so one value for the run (the last forward's).

// CHECK-LABEL: func.func @same_values_made_per_microbatch
func.func @same_values_made_per_microbatch(%acc: !v, %w: !w, %x0: !x, %x1: !x) -> !v
    attributes {topology = #mpmd.topology<<"m0" : <["x"=1]>>>} {
  // CHECK:      %[[T1:.*]]:2 = mpmd.fragment<mesh="m0", origin=["s"], stage=0> (%arg1) {call_counter = 1 : ui32}
  // CHECK:      mpmd.fragment<mesh="m0", origin=["s"(1)], stage=0> (%arg0, %[[T1]]#0, %[[T1]]#1, %arg2, %arg3) {{.*}}mpmd.unit = "W0+W1"
  // CHECK-NEXT:   "stablehlo.concatenate"{{.*}} -> tensor<4x4xf32>
  // CHECK-NEXT:   "stablehlo.dot_general"{{.*}} : (tensor<4x4xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
  %t0:2 = mpmd.fragment<mesh="m0", origin=["s"], stage=0> (%w) {call_counter = 0 : ui32} (%a: tensor<3x4xf32>) {
    %c = "stablehlo.constant"() <{value = dense<8.0> : tensor<f32>}> : () -> tensor<f32>
    %r = "stablehlo.sqrt"(%c) : (tensor<f32>) -> tensor<f32>
    %tr = "stablehlo.transpose"(%a) <{permutation = array<i64: 1, 0>}> : (tensor<3x4xf32>) -> tensor<4x3xf32>
    mpmd.return %tr, %r : tensor<4x3xf32>, tensor<f32>
  } : (!w) -> (!wt, !s)
  %w0 = mpmd.fragment<mesh="m0", origin=["s"(1)], stage=0> (%acc, %t0#0, %t0#1, %x0) {call_counter = 0 : ui32, split_drop_transferred}
      (%acc2: tensor<3xf32>, %t: tensor<4x3xf32>, %s: tensor<f32>, %x: tensor<2x4xf32>) {
    %y = "stablehlo.dot_general"(%x, %t) <{dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [0]>}> : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
    %sb = "stablehlo.broadcast_in_dim"(%s) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<2x3xf32>
    %ys = "stablehlo.multiply"(%y, %sb) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
    %z = "stablehlo.constant"() <{value = dense<0.0> : tensor<f32>}> : () -> tensor<f32>
    %g = "stablehlo.reduce"(%ys, %z) <{dimensions = array<i64: 0>}> ({
    ^bb0(%p: tensor<f32>, %q: tensor<f32>):
      %r = "stablehlo.add"(%p, %q) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%r) : (tensor<f32>) -> ()
    }) : (tensor<2x3xf32>, tensor<f32>) -> tensor<3xf32>
    %a2 = "stablehlo.add"(%acc2, %g) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
    mpmd.return %a2 : tensor<3xf32>
  } : (!v, !wt, !s, !x) -> !v
  %t1:2 = mpmd.fragment<mesh="m0", origin=["s"], stage=0> (%w) {call_counter = 1 : ui32} (%a: tensor<3x4xf32>) {
    %c = "stablehlo.constant"() <{value = dense<8.0> : tensor<f32>}> : () -> tensor<f32>
    %r = "stablehlo.sqrt"(%c) : (tensor<f32>) -> tensor<f32>
    %tr = "stablehlo.transpose"(%a) <{permutation = array<i64: 1, 0>}> : (tensor<3x4xf32>) -> tensor<4x3xf32>
    mpmd.return %tr, %r : tensor<4x3xf32>, tensor<f32>
  } : (!w) -> (!wt, !s)
  %w1 = mpmd.fragment<mesh="m0", origin=["s"(1)], stage=0> (%w0, %t1#0, %t1#1, %x1) {call_counter = 1 : ui32, split_drop_transferred}
      (%acc2: tensor<3xf32>, %t: tensor<4x3xf32>, %s: tensor<f32>, %x: tensor<2x4xf32>) {
    %y = "stablehlo.dot_general"(%x, %t) <{dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [0]>}> : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
    %sb = "stablehlo.broadcast_in_dim"(%s) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<2x3xf32>
    %ys = "stablehlo.multiply"(%y, %sb) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
    %z = "stablehlo.constant"() <{value = dense<0.0> : tensor<f32>}> : () -> tensor<f32>
    %g = "stablehlo.reduce"(%ys, %z) <{dimensions = array<i64: 0>}> ({
    ^bb0(%p: tensor<f32>, %q: tensor<f32>):
      %r = "stablehlo.add"(%p, %q) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%r) : (tensor<f32>) -> ()
    }) : (tensor<2x3xf32>, tensor<f32>) -> tensor<3xf32>
    %a2 = "stablehlo.add"(%acc2, %g) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
    mpmd.return %a2 : tensor<3xf32>
  } : (!v, !wt, !s, !x) -> !v
  return %w1 : !v
}
