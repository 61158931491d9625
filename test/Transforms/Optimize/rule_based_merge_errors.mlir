// RUN: not mpmd-opt %s -mpmd-rule-based-merge='rules="m1: F0 B7"' 2>&1 | FileCheck %s --check-prefix=MISSING
// RUN: not mpmd-opt %s -mpmd-rule-based-merge='rules="m1: F0"' 2>&1 | FileCheck %s --check-prefix=ONE
// RUN: not mpmd-opt %s -mpmd-rule-based-merge='rules="m9: F0 B0"' 2>&1 | FileCheck %s --check-prefix=MESH
// RUN: not mpmd-opt %s -mpmd-rule-based-merge='rules="m1: F0 B0"' 2>&1 | FileCheck %s --check-prefix=ILLEGAL
// RUN: not mpmd-opt %s -mpmd-rule-based-merge='rules="m1: F0 B0; m1:"' 2>&1 | FileCheck %s --check-prefix=EMPTY
// RUN: not mpmd-opt %s -mpmd-rule-based-merge='rules="F0 B0"' 2>&1 | FileCheck %s --check-prefix=LINE
// RUN: not mpmd-opt %s -mpmd-rule-based-merge='rules="m1: F0 Q0"' 2>&1 | FileCheck %s --check-prefix=TOKEN

// MISSING: error: merge rule 'm1: F0 B7': the program has no unit B7 on mesh "m1"
// ONE: error: merge rule 'm1: F0' must name at least two units
// MESH: error: merge rule 'm9: F0 B0': expected 'MESH: UNIT UNIT ...' with a mesh of the topology
// ILLEGAL: error: merge rule 'm1: F0 B0': cannot merge {{.*}} without reordering other work
// EMPTY: error: merge rule 'm1:' names no unit
// LINE: error: malformed merge rule line 'F0 B0': expected {{.*}} (e.g. 'm0: F0 F1 B0 B1')
// TOKEN: error: malformed unit 'Q0' in the merge rule of mesh "m1": expected F<mb>, B<mb> or W<mb>

!m0 = !mpmd.mesh_tensor<"m0", tensor<4xf32>>
!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>

// F0's result goes to m0 and comes back to B0: merging would need F0's
// result before F0 finished.
func.func @main(%x0: !m1) -> !m1
    attributes {topology = #mpmd.topology<<"m0" : <["x"=2]>>, <"m1" : <["x"=2]>>>} {
  %f0 = mpmd.fragment<mesh="m1", origin=["s1"]> (%x0) {call_counter = 0 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m1) -> !m1
  %t = mpmd.transfer %f0 : (!m1) -> !m0
  %g = mpmd.fragment<mesh="m0", origin=["s0"]> (%t) {call_counter = 0 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m0) -> !m0
  %u = mpmd.transfer %g : (!m0) -> !m1
  %b0 = mpmd.fragment<mesh="m1", origin=["s1"(1)]> (%u) {call_counter = 0 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m1) -> !m1
  return %b0 : !m1
}
