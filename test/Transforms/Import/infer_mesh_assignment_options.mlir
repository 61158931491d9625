// RUN: not mpmd-opt %s -mpmd-infer-mesh-assignment="input-assignment=0@m9" 2>&1 | FileCheck %s --check-prefix=MESH
// RUN: not mpmd-opt %s -mpmd-infer-mesh-assignment="output-assignment=3@m1" 2>&1 | FileCheck %s --check-prefix=INDEX
// RUN: not mpmd-opt %s -mpmd-infer-mesh-assignment="input-assignment=x" 2>&1 | FileCheck %s --check-prefix=MALFORMED
// RUN: not mpmd-opt %s -mpmd-infer-mesh-assignment="input-assignment=0@m1#qwerty" 2>&1 | FileCheck %s --check-prefix=KIND
// RUN: not mpmd-opt %s -mpmd-infer-mesh-assignment="output-assignment=0@m1#unpinned_host" 2>&1 | FileCheck %s --check-prefix=OUTKIND
// RUN: not mpmd-opt %s -mpmd-infer-mesh-assignment="input-assignment=0@m1#pinned_host" 2>&1 | FileCheck %s --check-prefix=ATTR
// RUN: not mpmd-opt %s -mpmd-infer-mesh-assignment="output-assignment=0@m9#pinned_host" 2>&1 | FileCheck %s --check-prefix=KINDMESH

// MESH: input 0 is assigned to mesh "m9" which is not in the topology
// INDEX: output assignment names index 3 but @main has only 1 outputs
// MALFORMED: malformed input assignment entry 'x': expected index@mesh
// KIND: input 0 is assigned to memory kind "qwerty" of mesh "m1": expected "device" or "pinned_host" (e.g. 0@m1#pinned_host)
// OUTKIND: output 0 is assigned to memory kind "unpinned_host" of mesh "m1": expected "device" or "pinned_host"
// ATTR: input 0 of @main is assigned to memory kind "pinned_host" but is marked mhlo.memory_kind = "device": make the two agree
// KINDMESH: output 0 is assigned to mesh "m9" which is not in the topology
func.func @main(%arg0: tensor<4xf32> {mhlo.memory_kind = "device"}) -> tensor<4xf32>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  return %arg0 : tensor<4xf32>
}
