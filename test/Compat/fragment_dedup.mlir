// RUN: mpmd-opt %s -split-input-file -mpmd-fragment-dedup | FileCheck %s
// RUN: mpmd-opt %s -split-input-file -mpmd-fragment-dedup -mpmd-fragment-dce | FileCheck %s --check-prefix=DCE

!m = !mpmd.mesh_tensor<"m", tensor<4xf32>>
!mx = !mpmd.mesh_tensor<"m", tensor<4xf32>, sharding=<@mesh, [{"x"}]>>

// An operand passed twice is read through its first argument; a value
// returned twice is used through its first result. Results of different
// types (shardings) are kept apart. -mpmd-fragment-dce then drops the
// duplicates.

// CHECK-LABEL: func.func @duplicates
// CHECK-NEXT: %[[F:.*]]:4 = mpmd.fragment<mesh="m", origin=["f"]> (%arg0, %arg1, %arg0) (%[[A:.*]]: tensor<4xf32>, %[[B:.*]]: tensor<4xf32>, %[[C:.*]]: tensor<4xf32>) {
// CHECK-NEXT:   %[[S:.*]] = "stablehlo.subtract"(%[[A]], %[[B]])
// CHECK-NEXT:   %[[T:.*]] = "stablehlo.multiply"(%[[A]], %[[A]])
// CHECK-NEXT:   mpmd.return %[[S]], %[[T]], %[[S]], %[[S]]
// CHECK:      return %[[F]]#0, %[[F]]#1, %[[F]]#0, %[[F]]#3
// DCE-LABEL: func.func @duplicates
// DCE-NEXT: %[[F:.*]]:3 = mpmd.fragment<mesh="m", origin=["f"]> (%arg0, %arg1) (%[[A:.*]]: tensor<4xf32>, %[[B:.*]]: tensor<4xf32>) {
// DCE:        mpmd.return %{{.*}}, %{{.*}}, %{{.*}} : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
// DCE:      return %[[F]]#0, %[[F]]#1, %[[F]]#0, %[[F]]#2
func.func @duplicates(%arg0: !m, %arg1: !m) -> (!m, !m, !m, !mx)
    attributes {topology = #mpmd.topology<<"m" : <["x"=2]>>>} {
  %0:4 = mpmd.fragment<mesh="m", origin=["f"]> (%arg0, %arg1, %arg0) (%a: tensor<4xf32>, %b: tensor<4xf32>, %c: tensor<4xf32>) {
    %1 = "stablehlo.subtract"(%a, %b) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %2 = "stablehlo.multiply"(%c, %a) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %1, %2, %1, %1 : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
  } : (!m, !m, !m) -> (!m, !m, !m, !mx)
  return %0#0, %0#1, %0#2, %0#3 : !m, !m, !m, !mx
}
