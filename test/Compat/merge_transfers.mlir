// RUN: mpmd-opt %s -split-input-file -mpmd-merge-transfers | FileCheck %s
// RUN: mpmd-opt %s -split-input-file -mpmd-merge-transfers -mpmd-fragment-dce | FileCheck %s --check-prefix=DCE
// RUN: mpmd-opt %s -split-input-file -mpmd-merge-transfers=max-elements=4 | FileCheck %s --check-prefix=FOUR

!s1 = !mpmd.mesh_tensor<"m1", tensor<f32>>
!s2 = !mpmd.mesh_tensor<"m2", tensor<f32>>
!v1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>
!v2 = !mpmd.mesh_tensor<"m2", tensor<4xf32>>

// Two scalars (a loss and a norm, say) one stage sends to the next: one
// transfer of both, unpacked where they arrived. The vector of 4 elements
// goes on its own (more than max-elements, and of another type).
// CHECK-LABEL: func.func @two_scalars
// CHECK:         %[[P:.*]]:4 = mpmd.fragment<mesh="m1", origin=["f"]> (%arg0, %arg1)
// CHECK:           %[[R0:.*]] = "stablehlo.reshape"(%[[A:.*]]) : (tensor<f32>) -> tensor<1xf32>
// CHECK-NEXT:      %[[R1:.*]] = "stablehlo.reshape"(%[[B:.*]]) : (tensor<f32>) -> tensor<1xf32>
// CHECK-NEXT:      %[[CAT:.*]] = "stablehlo.concatenate"(%[[R0]], %[[R1]]) <{dimension = 0 : i64}> : (tensor<1xf32>, tensor<1xf32>) -> tensor<2xf32>
// CHECK-NEXT:      mpmd.return %[[A]], %[[B]], %{{.*}}, %[[CAT]]
// CHECK-NEXT:    } : ({{.*}}) -> ({{.*}}, !mpmd.mesh_tensor<"m1", tensor<2xf32>>)
// CHECK-NEXT:    %[[M:.*]] = mpmd.transfer {concat_transfer} %[[P]]#3 : (!mpmd.mesh_tensor<"m1", tensor<2xf32>>) -> !mpmd.mesh_tensor<"m2", tensor<2xf32>>
// CHECK:         mpmd.fragment<mesh="m2", origin=["g"]> (%{{.*}}, %{{.*}}, %{{.*}}, %[[M]]) (%{{.*}}: tensor<f32>, %{{.*}}: tensor<f32>, %[[V:.*]]: tensor<4xf32>, %[[W:.*]]: tensor<2xf32>)
// CHECK-NEXT:      %[[S0:.*]] = "stablehlo.slice"(%[[W]]) <{limit_indices = array<i64: 1>, start_indices = array<i64: 0>, strides = array<i64: 1>}>
// CHECK-NEXT:      %[[X:.*]] = "stablehlo.reshape"(%[[S0]]) : (tensor<1xf32>) -> tensor<f32>
// CHECK-NEXT:      %[[S1:.*]] = "stablehlo.slice"(%[[W]]) <{limit_indices = array<i64: 2>, start_indices = array<i64: 1>, strides = array<i64: 1>}>
// CHECK-NEXT:      %[[Y:.*]] = "stablehlo.reshape"(%[[S1]]) : (tensor<1xf32>) -> tensor<f32>
// CHECK-NEXT:      "stablehlo.add"(%[[X]], %[[Y]])
// DCE-LABEL:   func.func @two_scalars
// DCE:           mpmd.fragment<mesh="m1", origin=["f"]> (%arg0, %arg1)
// DCE:           } : ({{.*}}) -> (!mpmd.mesh_tensor<"m1", tensor<4xf32>>, !mpmd.mesh_tensor<"m1", tensor<2xf32>>)
// DCE-NEXT:      mpmd.transfer {concat_transfer}
// DCE-NEXT:      mpmd.transfer %{{.*}} : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m2", tensor<4xf32>>
// DCE-NEXT:      mpmd.fragment<mesh="m2", origin=["g"]> (%{{.*}}, %{{.*}}) (%{{.*}}: tensor<4xf32>, %{{.*}}: tensor<2xf32>)
func.func @two_scalars(%arg0: !s1, %arg1: !v1) -> (!s2, !v2)
    attributes {topology = #mpmd.topology<<"m1" : <["x"=1]>>, <"m2" : <["x"=1]>>>} {
  %0:3 = mpmd.fragment<mesh="m1", origin=["f"]> (%arg0, %arg1) (%a: tensor<f32>, %v: tensor<4xf32>) {
    %b = "stablehlo.multiply"(%a, %a) : (tensor<f32>, tensor<f32>) -> tensor<f32>
    mpmd.return %a, %b, %v : tensor<f32>, tensor<f32>, tensor<4xf32>
  } : (!s1, !v1) -> (!s1, !s1, !v1)
  %1 = mpmd.transfer %0#0 : (!s1) -> !s2
  %2 = mpmd.transfer %0#1 : (!s1) -> !s2
  %3 = mpmd.transfer %0#2 : (!v1) -> !v2
  %4:2 = mpmd.fragment<mesh="m2", origin=["g"]> (%1, %2, %3) (%x: tensor<f32>, %y: tensor<f32>, %w: tensor<4xf32>) {
    %s = "stablehlo.add"(%x, %y) : (tensor<f32>, tensor<f32>) -> tensor<f32>
    mpmd.return %s, %w : tensor<f32>, tensor<4xf32>
  } : (!s2, !s2, !v2) -> (!s2, !v2)
  return %4#0, %4#1 : !s2, !v2
}

// -----

!f1 = !mpmd.mesh_tensor<"m1", tensor<f32>>
!f2 = !mpmd.mesh_tensor<"m2", tensor<f32>>
!i1 = !mpmd.mesh_tensor<"m1", tensor<i32>>
!i2 = !mpmd.mesh_tensor<"m2", tensor<i32>>
!h1 = !mpmd.mesh_tensor<"m1", tensor<f32>, memory_kind = "pinned_host">
!h2 = !mpmd.mesh_tensor<"m2", tensor<f32>, memory_kind = "pinned_host">

// Values of different types, or in host memory, are not merged.
// CHECK-LABEL: func.func @not_merged
// CHECK-NOT:     concat_transfer
// CHECK:         return
func.func @not_merged(%arg0: !f1, %arg1: !i1, %arg2: !h1) -> (!f2, !i2, !h2)
    attributes {topology = #mpmd.topology<<"m1" : <["x"=1]>>, <"m2" : <["x"=1]>>>} {
  %0:3 = mpmd.fragment<mesh="m1", origin=["f"]> (%arg0, %arg1, %arg2) (%a: tensor<f32>, %b: tensor<i32>, %c: tensor<f32>) {
    mpmd.return %a, %b, %c : tensor<f32>, tensor<i32>, tensor<f32>
  } : (!f1, !i1, !h1) -> (!f1, !i1, !h1)
  %1 = mpmd.transfer %0#0 : (!f1) -> !f2
  %2 = mpmd.transfer %0#1 : (!i1) -> !i2
  %3 = mpmd.transfer %0#2 : (!h1) -> !h2
  %4:3 = mpmd.fragment<mesh="m2", origin=["g"]> (%1, %2, %3) (%x: tensor<f32>, %y: tensor<i32>, %z: tensor<f32>) {
    mpmd.return %x, %y, %z : tensor<f32>, tensor<i32>, tensor<f32>
  } : (!f2, !i2, !h2) -> (!f2, !i2, !h2)
  return %4#0, %4#1, %4#2 : !f2, !i2, !h2
}

// -----

!p1 = !mpmd.mesh_tensor<"m1", tensor<2xf32>>
!p2 = !mpmd.mesh_tensor<"m2", tensor<2xf32>>

// Two values of 2 elements: merged only when max-elements allows it.
// CHECK-LABEL: func.func @pairs
// CHECK-NOT:     concat_transfer
// CHECK:         return
// FOUR-LABEL:  func.func @pairs
// FOUR:          %[[P:.*]]:3 = mpmd.fragment<mesh="m1", origin=["f"]>
// FOUR:            "stablehlo.concatenate"({{.*}}) <{dimension = 0 : i64}> : (tensor<2xf32>, tensor<2xf32>) -> tensor<4xf32>
// FOUR:          %[[M:.*]] = mpmd.transfer {concat_transfer} %[[P]]#2 : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m2", tensor<4xf32>>
// FOUR:          mpmd.fragment<mesh="m2", origin=["g"]> (%{{.*}}, %{{.*}}, %[[M]])
// FOUR-NEXT:       "stablehlo.slice"({{.*}}) <{limit_indices = array<i64: 2>, start_indices = array<i64: 0>, strides = array<i64: 1>}>
// FOUR-NEXT:       "stablehlo.slice"({{.*}}) <{limit_indices = array<i64: 4>, start_indices = array<i64: 2>, strides = array<i64: 1>}>
func.func @pairs(%arg0: !p1) -> !p2
    attributes {topology = #mpmd.topology<<"m1" : <["x"=1]>>, <"m2" : <["x"=1]>>>} {
  %0:2 = mpmd.fragment<mesh="m1", origin=["f"]> (%arg0) (%a: tensor<2xf32>) {
    %b = "stablehlo.negate"(%a) : (tensor<2xf32>) -> tensor<2xf32>
    mpmd.return %a, %b : tensor<2xf32>, tensor<2xf32>
  } : (!p1) -> (!p1, !p1)
  %1 = mpmd.transfer %0#0 : (!p1) -> !p2
  %2 = mpmd.transfer %0#1 : (!p1) -> !p2
  %3 = mpmd.fragment<mesh="m2", origin=["g"]> (%1, %2) (%x: tensor<2xf32>, %y: tensor<2xf32>) {
    %s = "stablehlo.add"(%x, %y) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
    mpmd.return %s : tensor<2xf32>
  } : (!p2, !p2) -> !p2
  return %3 : !p2
}
