// RUN: not mpmd-opt %s -mpmd-map-named-ops-to-mpmd-ops='assignment=f' 2>&1 | FileCheck %s --check-prefix=MALFORMED
// RUN: not mpmd-opt %s -mpmd-map-named-ops-to-mpmd-ops='assignment=f@m1/x' 2>&1 | FileCheck %s --check-prefix=STAGE
// RUN: not mpmd-opt %s -mpmd-map-named-ops-to-mpmd-ops='assignment=f@m1,f@m1' 2>&1 | FileCheck %s --check-prefix=TWICE

// MALFORMED: malformed assignment entry 'f': expected name@mesh or name@mesh/stage
// STAGE: assignment entry 'f@m1/x' has an invalid stage
// TWICE: name "f" is assigned more than once
func.func @main(%arg0: tensor<4xf32>) -> tensor<4xf32>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  return %arg0 : tensor<4xf32>
}
