// RUN: mpmd-opt %s -split-input-file -mpmd-map-input-output-to-mesh='input-assignment=0@m1#pinned_host,1@m2 output-assignment=0@m2,2@m1#device' | FileCheck %s
// RUN: mpmd-opt %s -split-input-file -mpmd-map-input-output-to-mesh='input-assignment=0@m1#pinned_host,1@m2 output-assignment=0@m2,2@m1#device' -mpmd-infer-mesh-assignment=infer-transfers | FileCheck %s --check-prefix=INFER

// Only the boundary changes: assigned inputs get their mesh types and are
// read through unassigns at the top (in input order), assigned outputs are
// returned through assigns; the body stays unplaced, and an output nobody
// assigned (#1) stays a plain tensor.

// CHECK-LABEL: func.func @boundary_only
// CHECK-SAME:    (%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>, memory_kind="pinned_host">, %arg1: !mpmd.mesh_tensor<"m2", tensor<4xf32>>)
// CHECK-SAME:    -> (!mpmd.mesh_tensor<"m2", tensor<4xf32>>, tensor<4xf32>, !mpmd.mesh_tensor<"m1", tensor<4xf32>, memory_kind="device">)
// CHECK-NEXT:    %[[U0:.*]] = mpmd.unassign {origin = "user_in"} %arg0 : (!mpmd.mesh_tensor<"m1", tensor<4xf32>, memory_kind="pinned_host">) -> tensor<4xf32>
// CHECK-NEXT:    %[[U1:.*]] = mpmd.unassign {origin = "user_in"} %arg1 : (!mpmd.mesh_tensor<"m2", tensor<4xf32>>) -> tensor<4xf32>
// CHECK-NEXT:    %[[ADD:.*]] = "stablehlo.add"(%[[U1]], %[[U0]])
// CHECK-NEXT:    %[[NEG:.*]] = "stablehlo.negate"(%[[U1]])
// CHECK-NEXT:    %[[A0:.*]] = mpmd.assign {origin = "user_out"} %[[ADD]] : (tensor<4xf32>) -> !mpmd.mesh_tensor<"m2", tensor<4xf32>>
// CHECK-NEXT:    %[[A2:.*]] = mpmd.assign {origin = "user_out"} %[[U0]] : (tensor<4xf32>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>, memory_kind="device">
// CHECK-NEXT:    return %[[A0]], %[[NEG]], %[[A2]]

// Run before mesh inference, which places the rest: the input in host memory
// is copied to device memory for its readers, the assigned outputs keep the
// meshes and memory kinds the signature now has.

// INFER-LABEL: func.func @boundary_only
// INFER-SAME:    -> (!mpmd.mesh_tensor<"m2", tensor<4xf32>>, !mpmd.mesh_tensor<"m2", tensor<4xf32>>, !mpmd.mesh_tensor<"m1", tensor<4xf32>, memory_kind="device">)
// INFER:         %[[DEV:.*]] = mpmd.transfer %arg0 : (!mpmd.mesh_tensor<"m1", tensor<4xf32>, memory_kind="pinned_host">) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
// INFER:         %[[ON_M2:.*]] = mpmd.transfer %[[DEV]] : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m2", tensor<4xf32>>
// INFER:         %[[ADD:.*]] = mpmd.fragment<mesh="m2", origin=[]> ({{.*}}%[[ON_M2]]{{.*}})
// INFER-NEXT:      "stablehlo.add"
// INFER:         %[[NEG:.*]] = mpmd.fragment<mesh="m2", origin=[]> (%arg1)
// INFER-NEXT:      "stablehlo.negate"
// INFER:         %[[OUT2:.*]] = mpmd.transfer %[[DEV]] : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>, memory_kind="device">
// INFER-NEXT:    return %[[ADD]], %[[NEG]], %[[OUT2]]
func.func @boundary_only(%arg0: tensor<4xf32> {mhlo.memory_kind = "pinned_host"}, %arg1: tensor<4xf32>)
    -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32> {mhlo.memory_kind = "device"})
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  %0 = "stablehlo.add"(%arg1, %arg0) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %1 = "stablehlo.negate"(%arg1) : (tensor<4xf32>) -> tensor<4xf32>
  return %0, %1, %arg0 : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
}

// -----

// A private function is not an entry point: left alone.

// CHECK-LABEL: func.func private @not_an_entry
// CHECK-SAME:    (%arg0: tensor<4xf32>, %arg1: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
// CHECK-NOT:     mesh_tensor
// CHECK-NOT:     assign
// CHECK:         return %arg0, %arg1, %arg0
func.func private @not_an_entry(%arg0: tensor<4xf32>, %arg1: tensor<4xf32>)
    -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  return %arg0, %arg1, %arg0 : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
}
