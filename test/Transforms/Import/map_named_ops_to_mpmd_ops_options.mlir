// RUN: not mpmd-opt %s -mpmd-map-named-ops-to-mpmd-ops='assignment=f' 2>&1 | FileCheck %s --check-prefix=MALFORMED
// RUN: not mpmd-opt %s -mpmd-map-named-ops-to-mpmd-ops='assignment=f@m1/x' 2>&1 | FileCheck %s --check-prefix=STAGE
// RUN: not mpmd-opt %s -mpmd-map-named-ops-to-mpmd-ops='assignment=f@m1,f@m1' 2>&1 | FileCheck %s --check-prefix=TWICE
// RUN: not mpmd-opt %s -mpmd-map-named-ops-to-mpmd-ops='assignment=f@m1#qwerty' 2>&1 | FileCheck %s --check-prefix=KIND
// RUN: not mpmd-opt %s -mpmd-map-named-ops-to-mpmd-ops='assignment=f@m1#unpinned_host' 2>&1 | FileCheck %s --check-prefix=UNPINNED
// RUN: not mpmd-opt %s -mpmd-map-named-ops-to-mpmd-ops='assignment=f@m2#pinned_host' 2>&1 | FileCheck %s --check-prefix=KINDMESH

// MALFORMED: malformed assignment entry 'f': expected name@mesh or name@mesh/stage
// STAGE: assignment entry 'f@m1/x' has an invalid stage
// TWICE: name "f" is assigned more than once
// KIND: name "f" is assigned to memory kind "qwerty" of mesh "m1": expected "device" or "pinned_host" (e.g. f@m1#pinned_host)
// UNPINNED: name "f" is assigned to memory kind "unpinned_host" of mesh "m1": expected "device" or "pinned_host"
// KINDMESH: name "f" is assigned to mesh "m2" which is not in the topology (meshes: "m1")
func.func @main(%arg0: tensor<4xf32>) -> tensor<4xf32>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  %0 = mpmd.named_tensor %arg0 name="f" : tensor<4xf32>
  return %0 : tensor<4xf32>
}
