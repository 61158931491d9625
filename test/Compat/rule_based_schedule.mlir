// RUN: mpmd-opt %s -split-input-file -mpmd-rule-based-schedule='rules=FragmentScheduleRule(ordered_fragments=[FragmentInfo(origins=["a"],mesh_name="m1",call_counter=0)->FragmentInfo(origins=["b"(1)],mesh_name="m1")->FragmentInfo(origins=["missing"],mesh_name="m1")->FragmentInfo(origins=["c"],mesh_name="m1",stage_id=0)]),FragmentScheduleRule(ordered_fragments=[FragmentInfo(origins=["e"],mesh_name="m2")->FragmentInfo(origins=["d"],mesh_name="m2")])' | FileCheck %s

!t1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>
!t2 = !mpmd.mesh_tensor<"m2", tensor<4xf32>>

// Chains a -> b(1) -> c on m1 (the fragment the rule names that the program
// lacks is left out) and e -> d on m2; the transfer keeps its place after
// what it reads, the rest their order.
// CHECK-LABEL: func.func @chains
// CHECK:         mpmd.fragment<mesh="m1", origin=["a"]>
// CHECK:         mpmd.fragment<mesh="m1", origin=["b"(1)]>
// CHECK:         mpmd.fragment<mesh="m1", origin=["c"], stage=0>
// CHECK:         mpmd.transfer
// CHECK:         mpmd.fragment<mesh="m2", origin=["e"]>
// CHECK:         mpmd.fragment<mesh="m2", origin=["d"]>
// CHECK:         return
func.func @chains(%arg0: !t1, %arg1: !t2) -> (!t1, !t1, !t1, !t2, !t2)
    attributes {topology = #mpmd.topology<<"m1" : <["x"=1]>>, <"m2" : <["x"=1]>>>} {
  %c = mpmd.fragment<mesh="m1", origin=["c"], stage=0> (%arg0) (%x: tensor<4xf32>) {
    mpmd.return %x : tensor<4xf32>
  } : (!t1) -> !t1
  %b = mpmd.fragment<mesh="m1", origin=["b"(1)]> (%arg0) (%x: tensor<4xf32>) {
    mpmd.return %x : tensor<4xf32>
  } : (!t1) -> !t1
  %a = mpmd.fragment<mesh="m1", origin=["a"]> (%arg0) {call_counter = 0 : ui32} (%x: tensor<4xf32>) {
    mpmd.return %x : tensor<4xf32>
  } : (!t1) -> !t1
  %t = mpmd.transfer %a : (!t1) -> !t2
  %d = mpmd.fragment<mesh="m2", origin=["d"]> (%arg1) (%x: tensor<4xf32>) {
    mpmd.return %x : tensor<4xf32>
  } : (!t2) -> !t2
  %e = mpmd.fragment<mesh="m2", origin=["e"]> (%t) (%x: tensor<4xf32>) {
    mpmd.return %x : tensor<4xf32>
  } : (!t2) -> !t2
  return %a, %b, %c, %d, %e : !t1, !t1, !t1, !t2, !t2
}
