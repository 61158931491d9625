// RUN: mpmd-opt %s -split-input-file -mpmd-copy-constants | FileCheck %s
// With -mpmd-fragment-dce after it, what only carried the constant goes:
// RUN: mpmd-opt %s -split-input-file -mpmd-copy-constants -mpmd-fragment-dce | FileCheck %s --check-prefix=DCE

!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>
!m2 = !mpmd.mesh_tensor<"m2", tensor<4xf32>>

// A constant a stage hands to the next mesh: the reader computes it itself.
// CHECK-LABEL: func.func @across_meshes
// CHECK:         %[[P:.*]] = mpmd.fragment<mesh="m1", origin=["zeros"]> ()
// CHECK-NEXT:      "stablehlo.constant"() <{value = dense<0.000000e+00> : tensor<4xf32>}>
// CHECK:         %[[T:.*]] = mpmd.transfer %[[P]]
// CHECK-NEXT:    mpmd.fragment<mesh="m2", origin=["use"]> (%[[T]], %arg0) (%[[UNREAD:.*]]: tensor<4xf32>, %[[X:.*]]: tensor<4xf32>) {
// CHECK-NEXT:      %[[C:.*]] = "stablehlo.constant"() <{value = dense<0.000000e+00> : tensor<4xf32>}>
// CHECK-NEXT:      "stablehlo.add"(%[[C]], %[[X]])
// DCE-LABEL:     func.func @across_meshes
// DCE-NOT:         mpmd.transfer
// DCE:             mpmd.fragment<mesh="m2", origin=["use"]> (%arg0) (%{{.*}}: tensor<4xf32>) {
// DCE-NEXT:          "stablehlo.constant"
func.func @across_meshes(%arg0: !m2) -> !m2
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  %0 = mpmd.fragment<mesh="m1", origin=["zeros"]> () () {
    %c = "stablehlo.constant"() <{value = dense<0.0> : tensor<4xf32>}> : () -> tensor<4xf32>
    mpmd.return %c : tensor<4xf32>
  } : () -> !m1
  %1 = mpmd.transfer %0 : (!m1) -> !m2
  %2 = mpmd.fragment<mesh="m2", origin=["use"]> (%1, %arg0) (%a: tensor<4xf32>, %x: tensor<4xf32>) {
    %s = "stablehlo.add"(%a, %x) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %s : tensor<4xf32>
  } : (!m2, !m2) -> !m2
  return %2 : !m2
}

// -----

!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>

// Only a returned constant is copied: a value computed from one is not, and
// the producer keeps its results (here also returned by the function).
// CHECK-LABEL: func.func @computed_and_returned
// CHECK:         %[[P:.*]]:2 = mpmd.fragment<mesh="m1", origin=["f"]> ()
// CHECK:         mpmd.fragment<mesh="m1", origin=["g"]> (%[[P]]#0, %[[P]]#1) (%[[A:.*]]: tensor<4xf32>, %[[B:.*]]: tensor<4xf32>) {
// CHECK-NEXT:      %[[C:.*]] = "stablehlo.constant"() <{value = dense<1.000000e+00> : tensor<4xf32>}>
// CHECK-NEXT:      "stablehlo.multiply"(%[[C]], %[[B]])
// CHECK:         return %[[P]]#0
func.func @computed_and_returned() -> (!m1, !m1)
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  %0:2 = mpmd.fragment<mesh="m1", origin=["f"]> () () {
    %c = "stablehlo.constant"() <{value = dense<1.0> : tensor<4xf32>}> : () -> tensor<4xf32>
    %e = "stablehlo.exponential"(%c) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %c, %e : tensor<4xf32>, tensor<4xf32>
  } : () -> (!m1, !m1)
  %1 = mpmd.fragment<mesh="m1", origin=["g"]> (%0#0, %0#1) (%a: tensor<4xf32>, %b: tensor<4xf32>) {
    %m = "stablehlo.multiply"(%a, %b) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %m : tensor<4xf32>
  } : (!m1, !m1) -> !m1
  return %0#0, %1 : !m1, !m1
}
