// RUN: mpmd-opt %s -inline -split-input-file | FileCheck %s

// MLIR's inliner (`-inline`) on programs with mpmd ops
// (MpmdInlinerInterface, lib/Dialect/MpmdDialect.cpp): a `func.call` is
// inlined when every mpmd op of the callee would verify in the caller;
// `mpmd.call` and `mpmd.fragment_call` are never inlined by it.

!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>
!m2 = !mpmd.mesh_tensor<"m2", tensor<4xf32>>

// CHECK-LABEL: func.func @same_topology
func.func @same_topology(%arg0: tensor<4xf32>) -> !m2
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  // CHECK-NEXT: %[[A:.*]] = mpmd.assign %arg0
  // CHECK-NEXT: %[[F:.*]] = mpmd.fragment<mesh="m1", origin=["f"]> (%[[A]])
  // CHECK:      %[[T:.*]] = mpmd.transfer %[[F]]
  // CHECK-NEXT: return %[[T]]
  %0 = call @helper(%arg0) : (tensor<4xf32>) -> !m2
  return %0 : !m2
}

// A fragment moves as a whole: the StableHLO in its body (unregistered in
// mpmd-opt, which the inliner cannot move on its own) goes with it.
func.func private @helper(%arg0: tensor<4xf32>) -> !m2
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  %0 = mpmd.assign %arg0 : (tensor<4xf32>) -> !m1
  %1 = mpmd.fragment<mesh="m1", origin=["f"]> (%0) (%a: tensor<4xf32>) {
    %2 = "stablehlo.negate"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %2 : tensor<4xf32>
  } : (!m1) -> !m1
  %3 = mpmd.transfer %1 : (!m1) -> !m2
  return %3 : !m2
}

// -----

!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>

// The callee's mpmd ops name meshes of another topology: the call stays.
// CHECK-LABEL: func.func @other_topology
func.func @other_topology(%arg0: tensor<4xf32>) -> !m1
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // CHECK-NEXT: %[[C:.*]] = call @helper(%arg0)
  // CHECK-NEXT: return %[[C]]
  %0 = call @helper(%arg0) : (tensor<4xf32>) -> !m1
  return %0 : !m1
}

func.func private @helper(%arg0: tensor<4xf32>) -> !m1
    attributes {topology = #mpmd.topology<<"m1" : <["x"=4]>>>} {
  %0 = mpmd.assign %arg0 : (tensor<4xf32>) -> !m1
  return %0 : !m1
}

// -----

// A function without a topology (a JAX program before import) inlines one
// without a topology: named computations move as a whole.
// CHECK-LABEL: func.func @no_topology
func.func @no_topology(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  // CHECK-NEXT: %[[N:.*]] = mpmd.named_computation<"stage1"> (%arg0)
  // CHECK:      return %[[N]]
  %0 = call @stage(%arg0) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

func.func private @stage(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = mpmd.named_computation<"stage1"> (%arg0) (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// An mpmd.call is not inlined; a func.call of a function that makes one is
// inlined into the entry point, where mpmd.calls may be made ...
// CHECK-LABEL: func.func @entry
func.func @entry(%arg0: tensor<4xf32>) -> tensor<4xf32>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // CHECK-NEXT: %[[C0:.*]] = mpmd.call @body(%arg0) {call_counter = 0 : ui32}
  // CHECK-NEXT: %[[C1:.*]] = mpmd.call @body(%[[C0]]) {call_counter = 1 : ui32}
  // CHECK-NEXT: return %[[C1]]
  %0 = call @two_microbatches(%arg0) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

func.func @two_microbatches(%arg0: tensor<4xf32>) -> tensor<4xf32>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  %0 = mpmd.call @body(%arg0) {call_counter = 0 : ui32} : (tensor<4xf32>) -> tensor<4xf32>
  %1 = mpmd.call @body(%0) {call_counter = 1 : ui32} : (tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}

func.func private @body(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  return %arg0 : tensor<4xf32>
}

// -----

// ... but not into a private function with a topology, where the mpmd.call
// verifier allows none. (@outer, of another topology, keeps @not_entry: its
// assign names a mesh of @not_entry's topology.)
// CHECK-LABEL: func.func @outer
// CHECK-NEXT:  call @not_entry(%arg0)
func.func @outer(%arg0: tensor<4xf32>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=4]>>>} {
  %0 = call @not_entry(%arg0) : (tensor<4xf32>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
  return %0 : !mpmd.mesh_tensor<"m1", tensor<4xf32>>
}

// CHECK-LABEL: func.func private @not_entry
func.func private @not_entry(%arg0: tensor<4xf32>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // CHECK-NEXT: %[[C:.*]] = call @one_microbatch(%arg0)
  // CHECK-NEXT: %[[A:.*]] = mpmd.assign %[[C]]
  // CHECK-NEXT: return %[[A]]
  %0 = call @one_microbatch(%arg0) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = mpmd.assign %0 : (tensor<4xf32>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
  return %1 : !mpmd.mesh_tensor<"m1", tensor<4xf32>>
}

func.func @one_microbatch(%arg0: tensor<4xf32>) -> tensor<4xf32>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  %0 = mpmd.call @body(%arg0) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

func.func private @body(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  return %arg0 : tensor<4xf32>
}

// -----

// StableHLO outside an mpmd op is unregistered in mpmd-opt and the inliner
// does not move it: `-mpmd-inline-func-calls` inlines such calls.
// CHECK-LABEL: func.func @unregistered_body
func.func @unregistered_body(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  // CHECK-NEXT: call @negate(%arg0)
  %0 = call @negate(%arg0) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

func.func private @negate(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "stablehlo.negate"(%arg0) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
