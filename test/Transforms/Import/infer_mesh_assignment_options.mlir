// RUN: not mpmd-opt %s -mpmd-infer-mesh-assignment="input-assignment=0@m9" 2>&1 | FileCheck %s --check-prefix=MESH
// RUN: not mpmd-opt %s -mpmd-infer-mesh-assignment="output-assignment=3@m1" 2>&1 | FileCheck %s --check-prefix=INDEX
// RUN: not mpmd-opt %s -mpmd-infer-mesh-assignment="input-assignment=x" 2>&1 | FileCheck %s --check-prefix=MALFORMED

// MESH: input 0 is assigned to mesh "m9" which is not in the topology
// INDEX: output assignment names index 3 but @main has only 1 outputs
// MALFORMED: malformed input assignment entry 'x': expected index@mesh
func.func @main(%arg0: tensor<4xf32>) -> tensor<4xf32>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  return %arg0 : tensor<4xf32>
}
