// Shardy's options that ours cannot honour, or that contradict ours, are
// errors, not silently ignored.

// RUN: not mpmd-opt %s -mpmd-import-pipeline='name-to-mesh-assignment=f@m0 enable-heterogeneous-meshes' 2>&1 | FileCheck %s --check-prefix=HETERO
// HETERO: mpmd-import-pipeline: enable-heterogeneous-meshes (an sdy.mesh for each mesh of the topology, named after it, with the shardings moved onto it) is not built; meshes of different shapes need no option: each fragment is compiled on its own mesh. Drop the option

// RUN: not mpmd-opt %s -mpmd-import-pipeline='assignment=f@m0 merge-after-scheduling=true merge-inferred=true' 2>&1 | FileCheck %s --check-prefix=IMPORT-MERGE
// IMPORT-MERGE: mpmd-import-pipeline: merge-after-scheduling and merge-inferred contradict each other

// RUN: not mpmd-opt %s -mpmd-optimize-pipeline='merge-after-scheduling=true merge-inferred=false' 2>&1 | FileCheck %s --check-prefix=OPT-MERGE
// OPT-MERGE: mpmd-optimize-pipeline: merge-after-scheduling and merge-inferred (the same option) have different values

// RUN: not mpmd-opt %s -mpmd-optimize-pipeline='pipeline-schedule=GPipe schedule="m0: F0"' 2>&1 | FileCheck %s --check-prefix=TWICE
// TWICE: mpmd-optimize-pipeline: give the schedule once, as schedule (an order) or pipeline-schedule (a name)

// RUN: not mpmd-opt %s -mpmd-absorb-inferred-fragments=merge-sideways=true 2>&1 | FileCheck %s --check-prefix=ABSORB
// ABSORB: this name of the pass takes no options

func.func @main(%arg0: tensor<4xf32>) -> tensor<4xf32>
    attributes {topology = #mpmd.topology<<"m0" : <["x"=2]>>>} {
  return %arg0 : tensor<4xf32>
}
