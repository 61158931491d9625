// Shardy:MPMD's names of passes, pipelines and options, accepted as other
// names of ours (docs/compat.md): each spelling gives what ours gives.

// Mesh inference, on the inputs of infer_mesh_assignment*.mlir.
// RUN: mpmd-opt %S/../Transforms/Import/infer_mesh_assignment.mlir -split-input-file -mpmd-infer-mesh-pipeline > %t.peer
// RUN: mpmd-opt %S/../Transforms/Import/infer_mesh_assignment.mlir -split-input-file -mpmd-infer-mesh-convert-reduce-ops -mpmd-infer-mesh-assignment > %t.ours
// RUN: diff %t.peer %t.ours
// RUN: mpmd-opt %S/../Transforms/Import/infer_mesh_assignment_infer_transfers.mlir -split-input-file -mpmd-infer-mesh-pipeline='infer-transfers=true infer-cross-mesh-reductions=true' > %t.peer
// RUN: mpmd-opt %S/../Transforms/Import/infer_mesh_assignment_infer_transfers.mlir -split-input-file -mpmd-infer-mesh-convert-reduce-ops -mpmd-infer-mesh-assignment='infer-transfers=true infer-cross-mesh-reductions=true' > %t.ours
// RUN: diff %t.peer %t.ours

// RUN: mpmd-opt %s -mpmd-import-pipeline='name-to-mesh-assignment=f@m0,g@m1 merge-after-scheduling=true' > %t.peer
// RUN: mpmd-opt %s -mpmd-import-pipeline='assignment=f@m0,g@m1 merge-inferred=false' > %t.ours
// RUN: diff %t.peer %t.ours
// RUN: FileCheck %s --check-prefix=IMPORT < %t.peer
// RUN: mpmd-opt %s -mpmd-import-pipeline='name-to-mesh-assignment=f@m0,g@m1' -mpmd-absorb-inferred-fragments > %t.peer
// RUN: mpmd-opt %s -mpmd-import-pipeline='assignment=f@m0,g@m1' -mpmd-merge-inferred-fragments > %t.ours
// RUN: diff %t.peer %t.ours

// The schedulers, on the units of builtin_schedule.mlir.
// RUN: mpmd-opt %S/../Transforms/Optimize/builtin_schedule.mlir -split-input-file -mpmd-pipeline-scheduler='must-happen-before=1F1B' > %t.peer
// RUN: mpmd-opt %S/../Transforms/Optimize/builtin_schedule.mlir -split-input-file -mpmd-builtin-schedule=schedule=1F1B > %t.ours
// RUN: diff %t.peer %t.ours
// RUN: mpmd-opt %S/../Transforms/Optimize/builtin_schedule.mlir -split-input-file -mpmd-pipeline-scheduler='must-happen-before=builtin:Circular' > %t.peer
// RUN: mpmd-opt %S/../Transforms/Optimize/builtin_schedule.mlir -split-input-file -mpmd-builtin-schedule=schedule=Circular > %t.ours
// RUN: diff %t.peer %t.ours
// RUN: mpmd-opt %S/../Transforms/Optimize/builtin_schedule.mlir -split-input-file -mpmd-optimize-pipeline='pipeline-schedule=GPipe merge-after-scheduling=true' > %t.peer
// RUN: mpmd-opt %S/../Transforms/Optimize/builtin_schedule.mlir -split-input-file -mpmd-builtin-schedule=schedule=GPipe -mpmd-merge-inferred-fragments > %t.ours
// RUN: diff %t.peer %t.ours

// IMPORT-LABEL: func.func @main
// IMPORT: mpmd.fragment<mesh="m0", origin=["f"]>
// IMPORT: mpmd.fragment<mesh="m1", origin=["g"]>
func.func @main(%arg0: tensor<4xf32>) -> tensor<4xf32>
    attributes {topology = #mpmd.topology<<"m0" : <["x"=2]>>, <"m1" : <["x"=2]>>>} {
  %0 = mpmd.named_computation<"f"> (%arg0) (%a: tensor<4xf32>) {
    %1 = "stablehlo.negate"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %1 : tensor<4xf32>
  } : (tensor<4xf32>) -> tensor<4xf32>
  %2 = mpmd.named_computation<"g"> (%0) (%a: tensor<4xf32>) {
    %3 = "stablehlo.abs"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %3 : tensor<4xf32>
  } : (tensor<4xf32>) -> tensor<4xf32>
  %4 = "stablehlo.add"(%2, %2) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %4 : tensor<4xf32>
}
