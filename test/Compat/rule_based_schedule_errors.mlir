// RUN: mpmd-opt %s -split-input-file -verify-diagnostics -mpmd-rule-based-schedule='rules=FragmentScheduleRule(ordered_fragments=[FragmentInfo(origins=["q"],mesh_name="m1")->FragmentInfo(origins=["p"],mesh_name="m1")])'
// RUN: not mpmd-opt %s -split-input-file -mpmd-rule-based-schedule='rules=FragmentScheduleRule(ordered_fragments=[FragmentInfo(origins=["p"],mesh="m1")])' 2>&1 | FileCheck %s --check-prefix=FIELD
// RUN: not mpmd-opt %s -split-input-file -mpmd-rule-based-schedule='rules=FragmentScheduleRule(ordered_fragments=[FragmentInfo(origins=["p"],mesh_name="m1")' 2>&1 | FileCheck %s --check-prefix=UNCLOSED
// FIELD: error: -mpmd-rule-based-schedule: cannot read `rules` at offset {{[0-9]+}}: unknown FragmentInfo field 'mesh' (known: origins, mesh_name, call_counter, stage_id)
// UNCLOSED: error: -mpmd-rule-based-schedule: cannot read `rules` at offset {{[0-9]+}}: expected ']'

!t = !mpmd.mesh_tensor<"m1", tensor<4xf32>>

// The rule puts q before p, but q reads what p computes: the data order
// stays, with a warning.
func.func @conflicting(%arg0: !t) -> !t
    attributes {topology = #mpmd.topology<<"m1" : <["x"=1]>>>} {
  // expected-note @+1 {{the fragment the rule puts after it}}
  %p = mpmd.fragment<mesh="m1", origin=["p"]> (%arg0) (%x: tensor<4xf32>) {
    mpmd.return %x : tensor<4xf32>
  } : (!t) -> !t
  // expected-warning @+1 {{puts this fragment before one that computes what it reads; the data order is kept}}
  %q = mpmd.fragment<mesh="m1", origin=["q"]> (%p) (%x: tensor<4xf32>) {
    mpmd.return %x : tensor<4xf32>
  } : (!t) -> !t
  return %q : !t
}

// -----

!t = !mpmd.mesh_tensor<"m1", tensor<4xf32>>

// Two fragments of the name (microbatches without call counters): which
// one the rule means is not known.
// expected-error @+1 {{-mpmd-rule-based-schedule: FragmentInfo(origins=["q"],mesh_name="m1") of rule FragmentScheduleRule(ordered_fragments=[FragmentInfo(origins=["q"],mesh_name="m1")->FragmentInfo(origins=["p"],mesh_name="m1")]) names 2 fragments of @ambiguous; give call_counter or stage_id to tell them apart}}
func.func @ambiguous(%arg0: !t) -> (!t, !t)
    attributes {topology = #mpmd.topology<<"m1" : <["x"=1]>>>} {
  %0 = mpmd.fragment<mesh="m1", origin=["q"]> (%arg0) (%x: tensor<4xf32>) {
    mpmd.return %x : tensor<4xf32>
  } : (!t) -> !t
  %1 = mpmd.fragment<mesh="m1", origin=["q"]> (%0) (%x: tensor<4xf32>) {
    mpmd.return %x : tensor<4xf32>
  } : (!t) -> !t
  return %0, %1 : !t, !t
}
