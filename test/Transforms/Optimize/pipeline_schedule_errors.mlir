// RUN: not mpmd-opt %s -mpmd-pipeline-schedule='order="m0: B0 F0 F1 B1; m1: F0 B0 F1 B1"' 2>&1 | FileCheck %s --check-prefix=DEADLOCK
// RUN: not mpmd-opt %s -mpmd-pipeline-schedule='order="m0: F0 F1 B0 B1; m1: F0 B0 B1"' 2>&1 | FileCheck %s --check-prefix=MISSING
// RUN: not mpmd-opt %s -mpmd-pipeline-schedule='order="m0: F0 F1 B0 B1; m1: F0 B0 F1 B1 F2 B2"' 2>&1 | FileCheck %s --check-prefix=EXTRA
// RUN: not mpmd-opt %s -mpmd-pipeline-schedule='order="m0: F0 X1; m1: F0"' 2>&1 | FileCheck %s --check-prefix=TOKEN
// RUN: not mpmd-opt %s -mpmd-pipeline-schedule='order="m0: F0; m0: F1"' 2>&1 | FileCheck %s --check-prefix=TWICE
// RUN: not mpmd-opt %s -mpmd-pipeline-schedule='order="m0: F0 F0 F1 B0 B1; m1: F0 B0 F1 B1"' 2>&1 | FileCheck %s --check-prefix=REPEAT
// RUN: not mpmd-opt %s -mpmd-pipeline-schedule='order="m7: F0"' 2>&1 | FileCheck %s --check-prefix=MESH

// DEADLOCK: error: the pipeline schedule deadlocks: it runs B0 on mesh "m0" before F0 on mesh "m0", but B0 on mesh "m0" needs a result that only exists after F0 on mesh "m0"
// DEADLOCK: note: then F0 on mesh "m1"
// DEADLOCK: note: then B0 on mesh "m1"
// MISSING: error: forward fragment of microbatch 1 (unit F1) on mesh "m1" is not in the schedule
// EXTRA: error: the schedule runs F2 on mesh "m1" but the program has no forward fragment of microbatch 2 for stage 1 on that mesh
// TOKEN: error: malformed unit 'X1' in the schedule of mesh "m0": expected F<mb>, B<mb> or W<mb>, optionally followed by .s<stage>
// TWICE: error: the schedule has two lines for mesh "m0"
// REPEAT: error: the schedule of mesh "m0" runs F0 twice
// MESH: error: schedule line for mesh "m7" names a mesh that is not in the topology

!m0 = !mpmd.mesh_tensor<"m0", tensor<4xf32>>
!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>

// Two stages, two microbatches; each RUN line gives a bad order.
func.func @main(%x0: !m0, %x1: !m0) -> (!m0, !m0)
    attributes {topology = #mpmd.topology<<"m0" : <["x"=2]>>, <"m1" : <["x"=2]>>>} {
  %f00 = mpmd.fragment<mesh="m0", origin=["s0"]> (%x0) {call_counter = 0 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m0) -> !m0
  %f01 = mpmd.fragment<mesh="m0", origin=["s0"]> (%x1) {call_counter = 1 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m0) -> !m0
  %t0 = mpmd.transfer %f00 : (!m0) -> !m1
  %t1 = mpmd.transfer %f01 : (!m0) -> !m1
  %f10 = mpmd.fragment<mesh="m1", origin=["s1"]> (%t0) {call_counter = 0 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m1) -> !m1
  %f11 = mpmd.fragment<mesh="m1", origin=["s1"]> (%t1) {call_counter = 1 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m1) -> !m1
  %b10 = mpmd.fragment<mesh="m1", origin=["s1"(1)]> (%f10) {call_counter = 0 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m1) -> !m1
  %b11 = mpmd.fragment<mesh="m1", origin=["s1"(1)]> (%f11) {call_counter = 1 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m1) -> !m1
  %u0 = mpmd.transfer %b10 : (!m1) -> !m0
  %u1 = mpmd.transfer %b11 : (!m1) -> !m0
  %b00 = mpmd.fragment<mesh="m0", origin=["s0"(1)]> (%u0) {call_counter = 0 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m0) -> !m0
  %b01 = mpmd.fragment<mesh="m0", origin=["s0"(1)]> (%u1) {call_counter = 1 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m0) -> !m0
  return %b00, %b01 : !m0, !m0
}
