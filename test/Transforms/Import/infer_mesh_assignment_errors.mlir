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
!m2 = !mpmd.mesh_tensor<"m2", tensor<4xf32>>

// Mesh inference through mpmd.call (each callee argument and result gets
// one mesh for all call sites). The call sites pass the argument from
// different meshes: every call runs one placement of the body.
func.func public @conflicting_call_sites(%arg0: !m1, %arg1: !m2) -> (tensor<4xf32>, tensor<4xf32>)
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  %0 = mpmd.unassign %arg0 : (!m1) -> tensor<4xf32>
  %1 = mpmd.call @f(%0) : (tensor<4xf32>) -> tensor<4xf32>
  %2 = mpmd.unassign %arg1 : (!m2) -> tensor<4xf32>
  %3 = mpmd.call @f(%2) : (tensor<4xf32>) -> tensor<4xf32>
  return %1, %3 : tensor<4xf32>, tensor<4xf32>
}
// expected-error @+1 {{Mesh assignment is not possible for arg0 of mpmd.call "f" as its caller operands are on conflicting meshes: every call of @f takes the argument on one mesh ("m1"), so some calls would need a transfer; add an explicit transfer before those calls, or set infer-transfers (the partitioning option mpmd_infer_transfers).}}
func.func private @f(%arg0: tensor<4xf32>) -> tensor<4xf32>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  %0 = stablehlo.abs %arg0 : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>
!m2 = !mpmd.mesh_tensor<"m2", tensor<4xf32>>

// A swap, chained: what one call passes to the next would cross meshes in
// every call.
func.func public @chained_swap(%arg0: !m1, %arg1: !m2) -> (!m1, !m2)
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  %0 = mpmd.unassign %arg0 : (!m1) -> tensor<4xf32>
  %1 = mpmd.unassign %arg1 : (!m2) -> tensor<4xf32>
  %2:2 = mpmd.call @swap(%0, %1) : (tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
  %3:2 = mpmd.call @swap(%2#0, %2#1) : (tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
  %4 = mpmd.assign %3#0 : (tensor<4xf32>) -> !m1
  %5 = mpmd.assign %3#1 : (tensor<4xf32>) -> !m2
  return %4, %5 : !m1, !m2
}
// expected-error @+1 {{Mesh assignment is not possible for mpmd.call "swap" as it passes result 0 to arg 0 but they are placed differently}}
func.func private @swap(%arg0: tensor<4xf32>, %arg1: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  %0 = mpmd.broadcast %arg1 : tensor<4xf32>
  %1 = mpmd.broadcast %arg0 : tensor<4xf32>
  return %0, %1 : tensor<4xf32>, tensor<4xf32>
}

// -----

func.func public @callee_without_topology(%arg0: tensor<4xf32>) -> tensor<4xf32>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // expected-note @+1 {{called here, from @callee_without_topology}}
  %0 = mpmd.call @plain(%arg0) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
// expected-error @+1 {{@plain is called by 'mpmd.call' but has no topology: give it its caller's (`topology = #mpmd.topology<<"m1" : <["x"=2]>>>`, or run -mpmd-copy-topology-from-main first) so that mesh inference places its body}}
func.func private @plain(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  return %arg0 : tensor<4xf32>
}

// -----

func.func public @other_meshes(%arg0: tensor<4xf32>) -> tensor<4xf32>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // expected-note @+1 {{called here}}
  %0 = mpmd.call @elsewhere(%arg0) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = mpmd.call @elsewhere(%0) : (tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}
// expected-error @+1 {{@elsewhere has topology #mpmd.topology<<"m9" : <["x"=2]>>> but its caller @other_meshes has #mpmd.topology<<"m1" : <["x"=2]>>>: a callee runs on its callers' meshes, so both name the same meshes in the same order}}
func.func private @elsewhere(%arg0: tensor<4xf32>) -> tensor<4xf32>
    attributes {topology = #mpmd.topology<<"m9" : <["x"=2]>>>} {
  return %arg0 : tensor<4xf32>
}

// -----

func.func public @calls_a_public_function(%arg0: tensor<4xf32>) -> tensor<4xf32>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // expected-note @+1 {{called here}}
  %0 = mpmd.call @entry(%arg0) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
// expected-error @+1 {{@entry is called by 'mpmd.call' and is public: mesh inference gives a callee's arguments and results mesh types, so it must be private (an entry point keeps the signature its users call)}}
func.func public @entry(%arg0: tensor<4xf32>) -> tensor<4xf32>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  return %arg0 : tensor<4xf32>
}

// -----

func.func public @main(%arg0: tensor<4xf32>) -> tensor<4xf32>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  %0 = mpmd.call @shared(%arg0) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
func.func @helper(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{calls @shared from @helper, which has no topology: mesh inference gives @shared mesh types for the calls of functions with a topology; call a copy of it here, or inline the calls first (-mpmd-call-inline)}}
  %0 = mpmd.call @shared(%arg0) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
func.func private @shared(%arg0: tensor<4xf32>) -> tensor<4xf32>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  return %arg0 : tensor<4xf32>
}

// -----

// A signature on a mesh the topology does not list (nothing but the passes
// check a signature's types).
// expected-error @+1 {{input #0 of @unknown_mesh is on mesh "m9", which is not in its topology (meshes: "m1")}}
func.func public @unknown_mesh(%arg0: !mpmd.mesh_tensor<"m9", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m9", tensor<4xf32>>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  return %arg0 : !mpmd.mesh_tensor<"m9", tensor<4xf32>>
}

// -----

// A malformed or invalid mesh tensor type in a signature, which no op
// verifier sees when the function only returns its argument: every pass
// checks the signature's types for the function's mesh.
// expected-error @+1 {{input #0 of @bad_sharding_rank: sharding doesn't match tensor rank: 2 != 1}}
func.func public @bad_sharding_rank(%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>, sharding=<@mesh, [{"x"}, {}]>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>, sharding=<@mesh, [{"x"}, {}]>>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  return %arg0 : !mpmd.mesh_tensor<"m1", tensor<4xf32>, sharding=<@mesh, [{"x"}, {}]>>
}

// -----

// expected-error @+1 {{input #0 of @unknown_axis: unknown axis name: "y" in the sharding of}}
func.func public @unknown_axis(%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>, sharding=<@mesh, [{"y"}]>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>, sharding=<@mesh, [{"y"}]>>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  return %arg0 : !mpmd.mesh_tensor<"m1", tensor<4xf32>, sharding=<@mesh, [{"y"}]>>
}

// -----

// A function without a topology: its mesh tensor types are checked on their
// own (no mesh to check them against).
// expected-error @+1 {{output #0 of @no_topology: memory kind must be either 'device', 'pinned_host' or 'unpinned_host'. Found 'hbm'}}
func.func private @no_topology(%arg0: tensor<4xf32>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>, memory_kind="hbm">

// -----

func.func public @passes_unranked(%arg0: tensor<*xf32>) -> tensor<*xf32>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  %0 = mpmd.call @scalar(%arg0) : (tensor<*xf32>) -> tensor<*xf32>
  return %0 : tensor<*xf32>
}
// expected-error @+2 {{argument #0 of @scalar has type 'tensor<*xf32>', which cannot be placed on a mesh: 'mpmd.call' passes ranked tensors only}}
// expected-error @+1 {{result #0 of @scalar has type 'tensor<*xf32>', which cannot be placed on a mesh: 'mpmd.call' returns ranked tensors only}}
func.func private @scalar(%arg0: tensor<*xf32>) -> tensor<*xf32>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  return %arg0 : tensor<*xf32>
}

// -----

func.func public @call_in_loop(%arg0: tensor<4xf32>) -> tensor<4xf32>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  %0 = mpmd.for (%arg0) {iterations = 2 : ui32} (%x: tensor<4xf32>, %i: tensor<ui32>) {
    // expected-error @+1 {{mesh inference places an 'mpmd.call' made directly in a function body; this one is inside 'mpmd.for': unroll the loop first (-mpmd-unroll-for-loops) or inline the calls (-mpmd-call-inline)}}
    %1 = mpmd.call @step(%x) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %1 : tensor<4xf32>
  } : tensor<4xf32>
  return %0 : tensor<4xf32>
}
func.func private @step(%arg0: tensor<4xf32>) -> tensor<4xf32>
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
