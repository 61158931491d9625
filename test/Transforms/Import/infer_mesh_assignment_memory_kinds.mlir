// RUN: mpmd-opt %s -split-input-file -mpmd-introduce-transfers -mpmd-infer-mesh-assignment | FileCheck %s

!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>
!host = !mpmd.mesh_tensor<"m1", tensor<4xf32>, memory_kind="pinned_host">

// A named tensor in host memory (what -mpmd-map-named-ops-to-mpmd-ops makes
// of `act@m1#pinned_host`) between two fragments: the value goes to host
// memory after its producer and back to device memory for its reader.

// CHECK-LABEL: func.func @offloaded_named_tensor
// CHECK-NEXT: %[[F:.*]] = mpmd.fragment<mesh="m1", origin=["f"]> (%arg0)
// CHECK:      %[[H:.*]] = mpmd.transfer %[[F]] : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>, memory_kind="pinned_host">
// CHECK-NEXT: %[[D:.*]] = mpmd.transfer %[[H]] : (!mpmd.mesh_tensor<"m1", tensor<4xf32>, memory_kind="pinned_host">) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
// CHECK-NEXT: %[[G:.*]] = mpmd.fragment<mesh="m1", origin=["g"]> (%[[D]])
// CHECK:      return %[[G]]
func.func @offloaded_named_tensor(%arg0: !m1) -> tensor<4xf32>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  %0 = mpmd.fragment<mesh="m1", origin=["f"]> (%arg0) (%a: tensor<4xf32>) {
    %1 = "stablehlo.negate"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %1 : tensor<4xf32>
  } : (!m1) -> !m1
  %2 = mpmd.unassign {origin = "f"} %0 : (!m1) -> tensor<4xf32>
  %3 = mpmd.assign {origin = "act"} %2 : (tensor<4xf32>) -> !host
  %4 = mpmd.unassign {origin = "act"} %3 : (!host) -> tensor<4xf32>
  %5 = mpmd.assign {origin = "g"} %4 : (tensor<4xf32>) -> !m1
  %6 = mpmd.fragment<mesh="m1", origin=["g"]> (%5) (%a: tensor<4xf32>) {
    %7 = "stablehlo.exponential"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %7 : tensor<4xf32>
  } : (!m1) -> !m1
  %8 = mpmd.unassign {origin = "g"} %6 : (!m1) -> tensor<4xf32>
  return %8 : tensor<4xf32>
}

// -----

!host = !mpmd.mesh_tensor<"m1", tensor<4xf32>, memory_kind="pinned_host">

// A function input assigned to host memory by a named tensor, read by
// unlabelled code: moved to host memory where the named tensor assigns it,
// and back to device memory for the inferred fragment that reads it.

// CHECK-LABEL: func.func @named_input_in_host_memory
// CHECK-SAME: (%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>>)
// CHECK-NEXT: %[[H:.*]] = mpmd.transfer %arg0 : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>, memory_kind="pinned_host">
// CHECK-NEXT: %[[D:.*]] = mpmd.transfer %[[H]] : (!mpmd.mesh_tensor<"m1", tensor<4xf32>, memory_kind="pinned_host">) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
// CHECK-NEXT: %[[N:.*]] = mpmd.fragment<mesh="m1", origin=[]> (%[[D]])
// CHECK:      return %[[N]]
func.func @named_input_in_host_memory(%arg0: tensor<4xf32>) -> tensor<4xf32>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  %0 = mpmd.assign {origin = "act"} %arg0 : (tensor<4xf32>) -> !host
  %1 = mpmd.unassign {origin = "act"} %0 : (!host) -> tensor<4xf32>
  %2 = "stablehlo.negate"(%1) : (tensor<4xf32>) -> tensor<4xf32>
  return %2 : tensor<4xf32>
}

// -----

!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>
!dev = !mpmd.mesh_tensor<"m1", tensor<4xf32>, memory_kind="device">

// A named tensor in device memory (`w@m1#device`) is where it was: the
// transfer between the kind-less type and "device" is dropped.

// CHECK-LABEL: func.func @named_tensor_in_device_memory
// CHECK-NOT:   mpmd.transfer
// CHECK:       %[[G:.*]] = mpmd.fragment<mesh="m1", origin=["g"]> (%arg0)
// CHECK-NOT:   mpmd.transfer
// CHECK:       return %[[G]]
func.func @named_tensor_in_device_memory(%arg0: !m1) -> tensor<4xf32>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  %0 = mpmd.unassign %arg0 : (!m1) -> tensor<4xf32>
  %1 = mpmd.assign {origin = "w"} %0 : (tensor<4xf32>) -> !dev
  %2 = mpmd.unassign {origin = "w"} %1 : (!dev) -> tensor<4xf32>
  %3 = mpmd.assign {origin = "g"} %2 : (tensor<4xf32>) -> !m1
  %4 = mpmd.fragment<mesh="m1", origin=["g"]> (%3) (%a: tensor<4xf32>) {
    %5 = "stablehlo.exponential"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %5 : tensor<4xf32>
  } : (!m1) -> !m1
  %6 = mpmd.unassign {origin = "g"} %4 : (!m1) -> tensor<4xf32>
  return %6 : tensor<4xf32>
}

// -----

!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>
!host = !mpmd.mesh_tensor<"m1", tensor<4xf32>, memory_kind="pinned_host">

// An output the body returns through an assign (as -mpmd-map-input-output-to-mesh
// writes `0@m1#pinned_host`) stays in the memory it is assigned to: the
// signature keeps host memory, with no copy back to device memory.

// CHECK-LABEL: func.func @returned_assign_keeps_memory_kind
// CHECK-SAME:    -> !mpmd.mesh_tensor<"m1", tensor<4xf32>, memory_kind="pinned_host">
// CHECK-NEXT:  %[[F:.*]] = mpmd.fragment<mesh="m1", origin=[]> (%arg0)
// CHECK:       %[[H:.*]] = mpmd.transfer %[[F]] : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>, memory_kind="pinned_host">
// CHECK-NEXT:  return %[[H]] : !mpmd.mesh_tensor<"m1", tensor<4xf32>, memory_kind="pinned_host">
func.func @returned_assign_keeps_memory_kind(%arg0: !m1) -> !host
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  %0 = mpmd.unassign %arg0 : (!m1) -> tensor<4xf32>
  %1 = "stablehlo.negate"(%0) : (tensor<4xf32>) -> tensor<4xf32>
  %2 = mpmd.assign {origin = "user_out"} %1 : (tensor<4xf32>) -> !host
  return %2 : !host
}
