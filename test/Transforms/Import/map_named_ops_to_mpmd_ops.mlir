// RUN: mpmd-opt %s -split-input-file -mpmd-map-named-ops-to-mpmd-ops='assignment=f@m1,g@m2/3,t@m2,act@m1#pinned_host,w@m1#device,step@m1#pinned_host' -verify-diagnostics | FileCheck %s

// A named computation becomes a fragment on its mesh, bracketed by assign and
// unassign; the transpose count and stage id are kept.

// CHECK-LABEL: func.func @named_computation_to_fragment
func.func @named_computation_to_fragment(%arg0: tensor<4x8xf32>) -> tensor<4x8xf32>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  // CHECK-NEXT: %[[A:.*]] = mpmd.assign {origin = "f"} %arg0 : (tensor<4x8xf32>) -> !mpmd.mesh_tensor<"m1", tensor<4x8xf32>>
  // CHECK-NEXT: %[[F:.*]] = mpmd.fragment<mesh="m1", origin=["f"(1)]> (%[[A]]) (%[[B:.*]]: tensor<4x8xf32>) {
  // CHECK-NEXT:   %[[ADD:.*]] = "stablehlo.add"(%[[B]], %[[B]])
  // CHECK-NEXT:   mpmd.return %[[ADD]] : tensor<4x8xf32>
  // CHECK-NEXT: } : (!mpmd.mesh_tensor<"m1", tensor<4x8xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4x8xf32>>
  // CHECK-NEXT: %[[U:.*]] = mpmd.unassign {origin = "f"} %[[F]] : (!mpmd.mesh_tensor<"m1", tensor<4x8xf32>>) -> tensor<4x8xf32>
  // CHECK-NEXT: %[[G:.*]] = mpmd.assign {origin = "g"} %[[U]]
  // CHECK-NEXT: mpmd.fragment<mesh="m2", origin=["g"], stage=3> (%[[G]])
  %0 = mpmd.named_computation<"f"(1)> (%arg0) (%arg1: tensor<4x8xf32>) {
    %1 = "stablehlo.add"(%arg1, %arg1) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
    mpmd.return %1 : tensor<4x8xf32>
  } : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %2 = mpmd.named_computation<"g"> (%0) (%arg1: tensor<4x8xf32>) {
    %1 = "stablehlo.negate"(%arg1) : (tensor<4x8xf32>) -> tensor<4x8xf32>
    mpmd.return %1 : tensor<4x8xf32>
  } : (tensor<4x8xf32>) -> tensor<4x8xf32>
  // A named tensor whose name is assigned: assign + unassign.
  // CHECK: %[[T:.*]] = mpmd.assign {origin = "t"} %{{.*}} : (tensor<4x8xf32>) -> !mpmd.mesh_tensor<"m2", tensor<4x8xf32>>
  // CHECK-NEXT: %[[TU:.*]] = mpmd.unassign {origin = "t"} %[[T]]
  // CHECK-NEXT: return %[[TU]]
  %3 = mpmd.named_tensor %2 name="t" : tensor<4x8xf32>
  return %3 : tensor<4x8xf32>
}

// -----

// Functions without a topology are left alone.

// CHECK-LABEL: func.func @not_mpmd
func.func @not_mpmd(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  // CHECK-NEXT: mpmd.named_tensor
  %0 = mpmd.named_tensor %arg0 name="t" : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// Without fail-on-unused-names, assigned names the function does not use
// (here g and t) are ignored: one assignment may serve several functions.

// CHECK-LABEL: func.func @some_names_unused
func.func @some_names_unused(%arg0: tensor<4xf32>) -> tensor<4xf32>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  // CHECK-NEXT: %[[A:.*]] = mpmd.assign {origin = "f"} %arg0
  // CHECK-NEXT: %[[F:.*]] = mpmd.fragment<mesh="m1", origin=["f"]> (%[[A]])
  // CHECK:      %[[U:.*]] = mpmd.unassign {origin = "f"} %[[F]]
  // CHECK-NEXT: return %[[U]]
  %0 = mpmd.named_computation<"f"> (%arg0) (%a: tensor<4xf32>) {
    %1 = "stablehlo.negate"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %1 : tensor<4xf32>
  } : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// Nor is the mesh of an unused name checked against the topology (g and t
// are assigned to m2, which this function's topology does not have).

// CHECK-LABEL: func.func @unused_names_on_other_meshes
func.func @unused_names_on_other_meshes(%arg0: tensor<4xf32>) -> tensor<4xf32>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // CHECK-NEXT: %[[A:.*]] = mpmd.assign {origin = "f"} %arg0
  // CHECK-NEXT: mpmd.fragment<mesh="m1", origin=["f"]> (%[[A]])
  %0 = mpmd.named_computation<"f"> (%arg0) (%a: tensor<4xf32>) {
    %1 = "stablehlo.negate"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %1 : tensor<4xf32>
  } : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// A named computation is simplified as it becomes a fragment: a result that
// returns an argument unchanged is the operand itself (%arg1 need not go to
// m1 to reach g on m2), a result that repeats an earlier one is that result,
// and an operand passed twice, or no longer used, is passed once or not at
// all.

// CHECK-LABEL: func.func @simplified
func.func @simplified(%arg0: tensor<4xf32>, %arg1: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  // CHECK-NEXT: %[[A:.*]] = mpmd.assign {origin = "f"} %arg0
  // CHECK-NEXT: %[[F:.*]] = mpmd.fragment<mesh="m1", origin=["f"]> (%[[A]]) (%[[X:.*]]: tensor<4xf32>) {
  // CHECK-NEXT:   %[[ADD:.*]] = "stablehlo.add"(%[[X]], %[[X]])
  // CHECK-NEXT:   mpmd.return %[[ADD]] : tensor<4xf32>
  // CHECK-NEXT: } : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
  // CHECK-NEXT: %[[U:.*]] = mpmd.unassign {origin = "f"} %[[F]]
  // CHECK-NEXT: %[[G0:.*]] = mpmd.assign {origin = "g"} %[[U]]
  // CHECK-NEXT: %[[G1:.*]] = mpmd.assign {origin = "g"} %arg1
  // CHECK-NEXT: %[[G:.*]] = mpmd.fragment<mesh="m2", origin=["g"], stage=3> (%[[G0]], %[[G1]])
  // CHECK:      %[[UG:.*]] = mpmd.unassign {origin = "g"} %[[G]]
  // CHECK-NEXT: return %[[U]], %[[UG]]
  %0:3 = mpmd.named_computation<"f"> (%arg0, %arg0, %arg1) (%a: tensor<4xf32>, %b: tensor<4xf32>, %c: tensor<4xf32>) {
    %1 = "stablehlo.add"(%a, %b) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %1, %1, %c : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
  } : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  %2 = mpmd.named_computation<"g"> (%0#1, %0#2) (%a: tensor<4xf32>, %b: tensor<4xf32>) {
    %3 = "stablehlo.add"(%a, %b) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %3 : tensor<4xf32>
  } : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %0#0, %2 : tensor<4xf32>, tensor<4xf32>
}

// -----

// Memory kinds: a named tensor assigned to `m1#pinned_host` is assigned to
// the mesh in host memory (its type says so); `#device` is written in the
// type too. Moving between memory kinds is left to -mpmd-introduce-transfers.

// CHECK-LABEL: func.func @named_tensor_memory_kinds
func.func @named_tensor_memory_kinds(%arg0: tensor<4xf32>) -> tensor<4xf32>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // CHECK-NEXT: %[[A:.*]] = mpmd.assign {origin = "act"} %arg0 : (tensor<4xf32>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>, memory_kind="pinned_host">
  // CHECK-NEXT: %[[U:.*]] = mpmd.unassign {origin = "act"} %[[A]] : (!mpmd.mesh_tensor<"m1", tensor<4xf32>, memory_kind="pinned_host">) -> tensor<4xf32>
  // CHECK-NEXT: %[[W:.*]] = mpmd.assign {origin = "w"} %[[U]] : (tensor<4xf32>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>, memory_kind="device">
  // CHECK-NEXT: %[[UW:.*]] = mpmd.unassign {origin = "w"} %[[W]]
  // CHECK-NEXT: return %[[UW]]
  %0 = mpmd.named_tensor %arg0 name="act" : tensor<4xf32>
  %1 = mpmd.named_tensor %0 name="w" : tensor<4xf32>
  return %1 : tensor<4xf32>
}

// -----

// A named computation runs in device memory: `mpmd-opt` warns that the
// memory kind of `step@m1#pinned_host` is ignored (as Shardy does) and maps
// it as `step@m1` (mpmd.jit makes it an error).

// CHECK-LABEL: func.func @named_computation_memory_kind
func.func @named_computation_memory_kind(%arg0: tensor<4xf32>) -> tensor<4xf32>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // CHECK-NEXT: %[[A:.*]] = mpmd.assign {origin = "step"} %arg0 : (tensor<4xf32>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
  // CHECK-NEXT: mpmd.fragment<mesh="m1", origin=["step"]> (%[[A]])
  // CHECK:      } : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
  // expected-warning @+1 {{named computation "step" is assigned to memory kind "pinned_host" of mesh "m1", which is ignored: a computation runs in device memory; to keep a value in host memory, label it with a named tensor and assign that name to "m1#pinned_host"}}
  %0 = mpmd.named_computation<"step"> (%arg0) (%a: tensor<4xf32>) {
    %1 = "stablehlo.add"(%a, %a) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %1 : tensor<4xf32>
  } : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
