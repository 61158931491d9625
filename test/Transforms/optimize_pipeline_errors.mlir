// RUN: not mpmd-opt %s -mpmd-optimize-pipeline='merge-remat-fragments=true' 2>&1 | FileCheck %s --check-prefix=REMAT
// RUN: not mpmd-opt %s -mpmd-optimize-pipeline='schedule="m0: F0 X1"' 2>&1 | FileCheck %s --check-prefix=TOKEN
// RUN: not mpmd-opt %s -mpmd-optimize-pipeline='merge-rules="m9: F0 B0"' 2>&1 | FileCheck %s --check-prefix=RULE
// RUN: not mpmd-opt %s -mpmd-optimize-pipeline='schedul="m0: F0"' 2>&1 | FileCheck %s --check-prefix=OPTION

// REMAT: mpmd-optimize-pipeline: merge-remat-fragments=true needs fragment-remat=true
// TOKEN: error: malformed unit 'X1' in the schedule of mesh "m0"
// RULE: error: merge rule 'm9: F0 B0': expected 'MESH: UNIT UNIT ...' with a mesh of the topology
// OPTION: no such option schedul

!m0 = !mpmd.mesh_tensor<"m0", tensor<4xf32>>

// CHECK-LABEL: func.func @f
func.func @f(%x: !m0) -> !m0
    attributes {topology = #mpmd.topology<<"m0" : <["x"=2]>>>} {
  %f = mpmd.fragment<mesh="m0", origin=["s0"]> (%x) {call_counter = 0 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m0) -> !m0
  return %f : !m0
}
