// RUN: mpmd-opt %s -split-input-file -mpmd-infer-mesh-assignment -verify-diagnostics

!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>
!m2 = !mpmd.mesh_tensor<"m2", tensor<4xf32>>

// An op placed with its first operand needs the second from another mesh, and
// no label implies that transfer (the sum is only returned).
func.func @inferred_transfer(%arg0: !m1, %arg1: !m2) -> tensor<4xf32>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  %0 = mpmd.unassign %arg0 : (!m1) -> tensor<4xf32>
  %1 = mpmd.unassign %arg1 : (!m2) -> tensor<4xf32>
  // expected-note @+1 {{the value is computed here, on mesh "m2"}}
  %2 = "stablehlo.exponential"(%1) : (tensor<4xf32>) -> tensor<4xf32>
  // expected-error @+1 {{'stablehlo.subtract' on mesh "m1" needs result #0 of 'stablehlo.exponential', which is on mesh "m2": no label implies this transfer; label the computation with a named computation, or set the partitioning option mpmd_infer_transfers}}
  %3 = "stablehlo.subtract"(%0, %2) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %3 : tensor<4xf32>
}

// -----

!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>
!m2 = !mpmd.mesh_tensor<"m2", tensor<4xf32>>

// A value produced by a named computation on m2, needed by an unlabelled op
// on m1: the error names the computation.
func.func @names_the_computation(%arg0: !m1, %arg1: !m2) -> tensor<4xf32>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  %f = mpmd.fragment<mesh="m2", origin=["head"(1)]> (%arg1) (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m2) -> !m2
  %0 = mpmd.unassign %arg0 : (!m1) -> tensor<4xf32>
  // expected-note @+1 {{the value is computed here, on mesh "m2"}}
  %1 = mpmd.unassign %f : (!m2) -> tensor<4xf32>
  // expected-error @+1 {{'stablehlo.add' on mesh "m1" needs result #0 of named computation "head"(1), which is on mesh "m2"}}
  %2 = "stablehlo.add"(%0, %1) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %2 : tensor<4xf32>
}

// -----

// A non-tensor input cannot be placed.
// expected-error @+1 {{input #0 of type 'i32' cannot be placed on a mesh: only ranked tensors can be}}
func.func @non_tensor_input(%arg0: i32) -> i32
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  return %arg0 : i32
}

// -----

!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>

// A call is not placed: its callee would get mesh types its call sites do
// not have. The calls must be inlined before mesh inference.
func.func @calls_a_function(%arg0: tensor<4xf32>) -> !m1
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // expected-error @+1 {{'mpmd.call' to @callee is not supported by mesh inference: inline the calls first (-mpmd-call-inline, as -mpmd-import-pipeline does before it)}}
  %0 = mpmd.call @callee(%arg0) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = mpmd.assign %0 : (tensor<4xf32>) -> !m1
  return %1 : !m1
}
func.func private @callee(%arg0: tensor<4xf32>) -> tensor<4xf32>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  return %arg0 : tensor<4xf32>
}

// -----

!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>
!m2 = !mpmd.mesh_tensor<"m2", tensor<4xf32>>

// The value already crosses to m2 for a named computation there: that
// transfer does not make the unlabelled op's need implied.
func.func @a_labelled_transfer_implies_nothing_for_other_readers(%arg0: !m1, %arg1: !m2) -> (!m2, !m2)
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  %t = mpmd.transfer %arg0 : (!m1) -> !m2
  %0 = mpmd.fragment<mesh="m2", origin=["g"]> (%t) (%a: tensor<4xf32>) {
    %n = "stablehlo.negate"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %n : tensor<4xf32>
  } : (!m2) -> !m2
  // expected-note @+1 {{the value is computed here, on mesh "m1"}}
  %1 = mpmd.unassign %arg0 : (!m1) -> tensor<4xf32>
  %2 = mpmd.unassign %arg1 : (!m2) -> tensor<4xf32>
  // expected-error @+1 {{'stablehlo.multiply' on mesh "m2" needs a value, which is on mesh "m1": no label implies this transfer}}
  %3 = "stablehlo.multiply"(%1, %2) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %4 = mpmd.assign %3 : (tensor<4xf32>) -> !m2
  %5 = mpmd.fragment<mesh="m2", origin=["h"]> (%4) (%a: tensor<4xf32>) {
    %e = "stablehlo.exponential"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %e : tensor<4xf32>
  } : (!m2) -> !m2
  return %0, %5 : !m2, !m2
}
