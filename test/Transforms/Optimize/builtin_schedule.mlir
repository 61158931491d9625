// RUN: mpmd-opt %s -split-input-file -mpmd-builtin-schedule=schedule=GPipe | FileCheck %s --check-prefix=GPIPE
// RUN: mpmd-opt %s -split-input-file -mpmd-builtin-schedule=schedule=1f1b | FileCheck %s --check-prefix=ONE
// RUN: mpmd-opt %s -split-input-file -mpmd-builtin-schedule=schedule=GPipeBut1F1BForLastMesh | FileCheck %s --check-prefix=LAST
// RUN: mpmd-opt %s -split-input-file -mpmd-builtin-schedule=schedule=Circular | FileCheck %s --check-prefix=CIRC
// RUN: mpmd-opt %s -split-input-file -mpmd-builtin-schedule=schedule=CircularWithReversedBackward | FileCheck %s --check-prefix=REV
// RUN: mpmd-opt %s -split-input-file -mpmd-builtin-schedule=schedule=none | FileCheck %s --check-prefix=NONE

// Units without data dependencies between them, in no particular order: the
// schedule alone orders them. Each body only passes its operand through (the
// fragments are nothing but their units). With two meshes (N = 2), 1F1B on
// mesh 0 runs two forwards before the first backward, on mesh 1 one.

!m0 = !mpmd.mesh_tensor<"m0", tensor<4xf32>>
!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>

// GPIPE-LABEL: func.func @first_mesh
// ONE-LABEL: func.func @first_mesh
// LAST-LABEL: func.func @first_mesh
// NONE-LABEL: func.func @first_mesh
// GPIPE: mpmd.fragment<mesh="m0", origin=["a"]> (%arg0) {call_counter = 0 : ui32}
// GPIPE: mpmd.fragment<mesh="m0", origin=["a"]> (%arg0) {call_counter = 1 : ui32}
// GPIPE: mpmd.fragment<mesh="m0", origin=["a"]> (%arg0) {call_counter = 2 : ui32}
// GPIPE: mpmd.fragment<mesh="m0", origin=["a"(1)]> (%arg0) {call_counter = 0 : ui32}
// GPIPE: mpmd.fragment<mesh="m0", origin=["a"(1)]> (%arg0) {call_counter = 1 : ui32}
// GPIPE: mpmd.fragment<mesh="m0", origin=["a"(1)]> (%arg0) {call_counter = 2 : ui32}
// ONE: mpmd.fragment<mesh="m0", origin=["a"]> (%arg0) {call_counter = 0 : ui32}
// ONE: mpmd.fragment<mesh="m0", origin=["a"]> (%arg0) {call_counter = 1 : ui32}
// ONE: mpmd.fragment<mesh="m0", origin=["a"(1)]> (%arg0) {call_counter = 0 : ui32}
// ONE: mpmd.fragment<mesh="m0", origin=["a"]> (%arg0) {call_counter = 2 : ui32}
// ONE: mpmd.fragment<mesh="m0", origin=["a"(1)]> (%arg0) {call_counter = 1 : ui32}
// ONE: mpmd.fragment<mesh="m0", origin=["a"(1)]> (%arg0) {call_counter = 2 : ui32}
// LAST: mpmd.fragment<mesh="m0", origin=["a"]> (%arg0) {call_counter = 0 : ui32}
// LAST: mpmd.fragment<mesh="m0", origin=["a"]> (%arg0) {call_counter = 1 : ui32}
// LAST: mpmd.fragment<mesh="m0", origin=["a"]> (%arg0) {call_counter = 2 : ui32}
// LAST: mpmd.fragment<mesh="m0", origin=["a"(1)]> (%arg0) {call_counter = 0 : ui32}
// LAST: mpmd.fragment<mesh="m0", origin=["a"(1)]> (%arg0) {call_counter = 1 : ui32}
// LAST: mpmd.fragment<mesh="m0", origin=["a"(1)]> (%arg0) {call_counter = 2 : ui32}
// NONE: mpmd.fragment<mesh="m0", origin=["a"(1)]> (%arg0) {call_counter = 2 : ui32}
// NONE: mpmd.fragment<mesh="m0", origin=["a"]> (%arg0) {call_counter = 1 : ui32}
// NONE: mpmd.fragment<mesh="m0", origin=["a"(1)]> (%arg0) {call_counter = 0 : ui32}
// NONE: mpmd.fragment<mesh="m0", origin=["a"]> (%arg0) {call_counter = 0 : ui32}
// NONE: mpmd.fragment<mesh="m0", origin=["a"(1)]> (%arg0) {call_counter = 1 : ui32}
// NONE: mpmd.fragment<mesh="m0", origin=["a"]> (%arg0) {call_counter = 2 : ui32}
func.func @first_mesh(%x: !m0) attributes {topology = #mpmd.topology<<"m0" : <["x"=2]>>, <"m1" : <["x"=2]>>>} {
  %B2 = mpmd.fragment<mesh="m0", origin=["a"(1)]> (%x) {call_counter = 2 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m0) -> !m0
  %F1 = mpmd.fragment<mesh="m0", origin=["a"]> (%x) {call_counter = 1 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m0) -> !m0
  %B0 = mpmd.fragment<mesh="m0", origin=["a"(1)]> (%x) {call_counter = 0 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m0) -> !m0
  %F0 = mpmd.fragment<mesh="m0", origin=["a"]> (%x) {call_counter = 0 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m0) -> !m0
  %B1 = mpmd.fragment<mesh="m0", origin=["a"(1)]> (%x) {call_counter = 1 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m0) -> !m0
  %F2 = mpmd.fragment<mesh="m0", origin=["a"]> (%x) {call_counter = 2 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m0) -> !m0
  return
}

// -----

!m0 = !mpmd.mesh_tensor<"m0", tensor<4xf32>>
!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>

// GPIPE-LABEL: func.func @last_mesh
// ONE-LABEL: func.func @last_mesh
// LAST-LABEL: func.func @last_mesh
// GPIPE: mpmd.fragment<mesh="m1", origin=["a"]> (%arg0) {call_counter = 0 : ui32}
// GPIPE: mpmd.fragment<mesh="m1", origin=["a"]> (%arg0) {call_counter = 1 : ui32}
// GPIPE: mpmd.fragment<mesh="m1", origin=["a"]> (%arg0) {call_counter = 2 : ui32}
// GPIPE: mpmd.fragment<mesh="m1", origin=["a"(1)]> (%arg0) {call_counter = 0 : ui32}
// GPIPE: mpmd.fragment<mesh="m1", origin=["a"(1)]> (%arg0) {call_counter = 1 : ui32}
// GPIPE: mpmd.fragment<mesh="m1", origin=["a"(1)]> (%arg0) {call_counter = 2 : ui32}
// ONE: mpmd.fragment<mesh="m1", origin=["a"]> (%arg0) {call_counter = 0 : ui32}
// ONE: mpmd.fragment<mesh="m1", origin=["a"(1)]> (%arg0) {call_counter = 0 : ui32}
// ONE: mpmd.fragment<mesh="m1", origin=["a"]> (%arg0) {call_counter = 1 : ui32}
// ONE: mpmd.fragment<mesh="m1", origin=["a"(1)]> (%arg0) {call_counter = 1 : ui32}
// ONE: mpmd.fragment<mesh="m1", origin=["a"]> (%arg0) {call_counter = 2 : ui32}
// ONE: mpmd.fragment<mesh="m1", origin=["a"(1)]> (%arg0) {call_counter = 2 : ui32}
// LAST: mpmd.fragment<mesh="m1", origin=["a"]> (%arg0) {call_counter = 0 : ui32}
// LAST: mpmd.fragment<mesh="m1", origin=["a"(1)]> (%arg0) {call_counter = 0 : ui32}
// LAST: mpmd.fragment<mesh="m1", origin=["a"]> (%arg0) {call_counter = 1 : ui32}
// LAST: mpmd.fragment<mesh="m1", origin=["a"(1)]> (%arg0) {call_counter = 1 : ui32}
// LAST: mpmd.fragment<mesh="m1", origin=["a"]> (%arg0) {call_counter = 2 : ui32}
// LAST: mpmd.fragment<mesh="m1", origin=["a"(1)]> (%arg0) {call_counter = 2 : ui32}
func.func @last_mesh(%x: !m1) attributes {topology = #mpmd.topology<<"m0" : <["x"=2]>>, <"m1" : <["x"=2]>>>} {
  %B2 = mpmd.fragment<mesh="m1", origin=["a"(1)]> (%x) {call_counter = 2 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m1) -> !m1
  %F1 = mpmd.fragment<mesh="m1", origin=["a"]> (%x) {call_counter = 1 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m1) -> !m1
  %B0 = mpmd.fragment<mesh="m1", origin=["a"(1)]> (%x) {call_counter = 0 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m1) -> !m1
  %F0 = mpmd.fragment<mesh="m1", origin=["a"]> (%x) {call_counter = 0 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m1) -> !m1
  %B1 = mpmd.fragment<mesh="m1", origin=["a"(1)]> (%x) {call_counter = 1 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m1) -> !m1
  %F2 = mpmd.fragment<mesh="m1", origin=["a"]> (%x) {call_counter = 2 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m1) -> !m1
  return
}

// -----

!m0 = !mpmd.mesh_tensor<"m0", tensor<4xf32>>
!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>

// Mesh m0 holds stages 0 and 2 of four microbatches: Circular runs the
// microbatches in rounds of N = 2 through both stages; backwards go through
// the stages in reverse, per round (CircularWithReversedBackward: the whole
// backward order reversed).

// CIRC-LABEL: func.func @two_stages_on_one_mesh
// REV-LABEL: func.func @two_stages_on_one_mesh
// CIRC: mpmd.fragment<mesh="m0", origin=["a"], stage=0> (%arg0) {call_counter = 0 : ui32}
// CIRC: mpmd.fragment<mesh="m0", origin=["a"], stage=0> (%arg0) {call_counter = 1 : ui32}
// CIRC: mpmd.fragment<mesh="m0", origin=["a"], stage=2> (%arg0) {call_counter = 0 : ui32}
// CIRC: mpmd.fragment<mesh="m0", origin=["a"], stage=2> (%arg0) {call_counter = 1 : ui32}
// CIRC: mpmd.fragment<mesh="m0", origin=["a"], stage=0> (%arg0) {call_counter = 2 : ui32}
// CIRC: mpmd.fragment<mesh="m0", origin=["a"], stage=0> (%arg0) {call_counter = 3 : ui32}
// CIRC: mpmd.fragment<mesh="m0", origin=["a"], stage=2> (%arg0) {call_counter = 2 : ui32}
// CIRC: mpmd.fragment<mesh="m0", origin=["a"], stage=2> (%arg0) {call_counter = 3 : ui32}
// CIRC: mpmd.fragment<mesh="m0", origin=["a"(1)], stage=2> (%arg0) {call_counter = 0 : ui32}
// CIRC: mpmd.fragment<mesh="m0", origin=["a"(1)], stage=2> (%arg0) {call_counter = 1 : ui32}
// CIRC: mpmd.fragment<mesh="m0", origin=["a"(1)], stage=0> (%arg0) {call_counter = 0 : ui32}
// CIRC: mpmd.fragment<mesh="m0", origin=["a"(1)], stage=0> (%arg0) {call_counter = 1 : ui32}
// CIRC: mpmd.fragment<mesh="m0", origin=["a"(1)], stage=2> (%arg0) {call_counter = 2 : ui32}
// CIRC: mpmd.fragment<mesh="m0", origin=["a"(1)], stage=2> (%arg0) {call_counter = 3 : ui32}
// CIRC: mpmd.fragment<mesh="m0", origin=["a"(1)], stage=0> (%arg0) {call_counter = 2 : ui32}
// CIRC: mpmd.fragment<mesh="m0", origin=["a"(1)], stage=0> (%arg0) {call_counter = 3 : ui32}
// REV: mpmd.fragment<mesh="m0", origin=["a"], stage=0> (%arg0) {call_counter = 0 : ui32}
// REV: mpmd.fragment<mesh="m0", origin=["a"], stage=0> (%arg0) {call_counter = 1 : ui32}
// REV: mpmd.fragment<mesh="m0", origin=["a"], stage=2> (%arg0) {call_counter = 0 : ui32}
// REV: mpmd.fragment<mesh="m0", origin=["a"], stage=2> (%arg0) {call_counter = 1 : ui32}
// REV: mpmd.fragment<mesh="m0", origin=["a"], stage=0> (%arg0) {call_counter = 2 : ui32}
// REV: mpmd.fragment<mesh="m0", origin=["a"], stage=0> (%arg0) {call_counter = 3 : ui32}
// REV: mpmd.fragment<mesh="m0", origin=["a"], stage=2> (%arg0) {call_counter = 2 : ui32}
// REV: mpmd.fragment<mesh="m0", origin=["a"], stage=2> (%arg0) {call_counter = 3 : ui32}
// REV: mpmd.fragment<mesh="m0", origin=["a"(1)], stage=2> (%arg0) {call_counter = 3 : ui32}
// REV: mpmd.fragment<mesh="m0", origin=["a"(1)], stage=2> (%arg0) {call_counter = 2 : ui32}
// REV: mpmd.fragment<mesh="m0", origin=["a"(1)], stage=0> (%arg0) {call_counter = 3 : ui32}
// REV: mpmd.fragment<mesh="m0", origin=["a"(1)], stage=0> (%arg0) {call_counter = 2 : ui32}
// REV: mpmd.fragment<mesh="m0", origin=["a"(1)], stage=2> (%arg0) {call_counter = 1 : ui32}
// REV: mpmd.fragment<mesh="m0", origin=["a"(1)], stage=2> (%arg0) {call_counter = 0 : ui32}
// REV: mpmd.fragment<mesh="m0", origin=["a"(1)], stage=0> (%arg0) {call_counter = 1 : ui32}
// REV: mpmd.fragment<mesh="m0", origin=["a"(1)], stage=0> (%arg0) {call_counter = 0 : ui32}
func.func @two_stages_on_one_mesh(%x: !m0) attributes {topology = #mpmd.topology<<"m0" : <["x"=2]>>, <"m1" : <["x"=2]>>>} {
  %F3s2 = mpmd.fragment<mesh="m0", origin=["a"], stage=2> (%x) {call_counter = 3 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m0) -> !m0
  %B3s2 = mpmd.fragment<mesh="m0", origin=["a"(1)], stage=2> (%x) {call_counter = 3 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m0) -> !m0
  %F3s0 = mpmd.fragment<mesh="m0", origin=["a"], stage=0> (%x) {call_counter = 3 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m0) -> !m0
  %B3s0 = mpmd.fragment<mesh="m0", origin=["a"(1)], stage=0> (%x) {call_counter = 3 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m0) -> !m0
  %F1s2 = mpmd.fragment<mesh="m0", origin=["a"], stage=2> (%x) {call_counter = 1 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m0) -> !m0
  %B1s2 = mpmd.fragment<mesh="m0", origin=["a"(1)], stage=2> (%x) {call_counter = 1 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m0) -> !m0
  %F1s0 = mpmd.fragment<mesh="m0", origin=["a"], stage=0> (%x) {call_counter = 1 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m0) -> !m0
  %B1s0 = mpmd.fragment<mesh="m0", origin=["a"(1)], stage=0> (%x) {call_counter = 1 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m0) -> !m0
  %F0s2 = mpmd.fragment<mesh="m0", origin=["a"], stage=2> (%x) {call_counter = 0 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m0) -> !m0
  %B0s2 = mpmd.fragment<mesh="m0", origin=["a"(1)], stage=2> (%x) {call_counter = 0 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m0) -> !m0
  %F0s0 = mpmd.fragment<mesh="m0", origin=["a"], stage=0> (%x) {call_counter = 0 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m0) -> !m0
  %B0s0 = mpmd.fragment<mesh="m0", origin=["a"(1)], stage=0> (%x) {call_counter = 0 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m0) -> !m0
  %F2s2 = mpmd.fragment<mesh="m0", origin=["a"], stage=2> (%x) {call_counter = 2 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m0) -> !m0
  %B2s2 = mpmd.fragment<mesh="m0", origin=["a"(1)], stage=2> (%x) {call_counter = 2 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m0) -> !m0
  %F2s0 = mpmd.fragment<mesh="m0", origin=["a"], stage=0> (%x) {call_counter = 2 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m0) -> !m0
  %B2s0 = mpmd.fragment<mesh="m0", origin=["a"(1)], stage=0> (%x) {call_counter = 2 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m0) -> !m0
  return
}

// -----

!m0 = !mpmd.mesh_tensor<"m0", tensor<4xf32>>
!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>

// Microbatch 1 of stage 0 needs microbatch 0 of stage 2 (a merge tied them
// together): Circular would run it first; the data flow wins, the rest keeps
// the schedule's order.

// CIRC-LABEL: func.func @data_before_schedule
// CIRC: %[[A:.*]] = mpmd.fragment<mesh="m0", origin=["a"], stage=0> (%arg0) {call_counter = 0 : ui32}
// CIRC: %[[B:.*]] = mpmd.fragment<mesh="m0", origin=["a"], stage=2> (%[[A]]) {call_counter = 0 : ui32}
// CIRC: mpmd.fragment<mesh="m0", origin=["a"], stage=0> (%[[B]]) {call_counter = 1 : ui32}
func.func @data_before_schedule(%x: !m0) -> !m0 attributes {topology = #mpmd.topology<<"m0" : <["x"=2]>>, <"m1" : <["x"=2]>>>} {
  %a = mpmd.fragment<mesh="m0", origin=["a"], stage=0> (%x) {call_counter = 0 : ui32} (%arg: tensor<4xf32>) {
    mpmd.return %arg : tensor<4xf32>
  } : (!m0) -> !m0
  %b = mpmd.fragment<mesh="m0", origin=["a"], stage=2> (%a) {call_counter = 0 : ui32} (%arg: tensor<4xf32>) {
    mpmd.return %arg : tensor<4xf32>
  } : (!m0) -> !m0
  %c = mpmd.fragment<mesh="m0", origin=["a"], stage=0> (%b) {call_counter = 1 : ui32} (%arg: tensor<4xf32>) {
    mpmd.return %arg : tensor<4xf32>
  } : (!m0) -> !m0
  return %c : !m0
}
