//===- Passes.h - mpmd passes ------------------------------------*- C++ -*-===//
#ifndef MPMD_TRANSFORMS_PASSES_H
#define MPMD_TRANSFORMS_PASSES_H

#include "mpmd/Dialect/MpmdDialect.h"
#include "mpmd/Pipeline.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassManager.h"

namespace mlir::mpmd {

#define GEN_PASS_DECL
#include "mpmd/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "mpmd/Transforms/Passes.h.inc"

//===----------------------------------------------------------------------===//
// Passes with typed options
//===----------------------------------------------------------------------===//
//
// The driver gives these passes their options as the plain values of
// mpmd/Pipeline.h; `mpmd-opt` gives them as text, which the pass parses
// (lib/Transforms/Common/TextOptions.h).

/// -mpmd-map-named-ops-to-mpmd-ops with its assignment.
std::unique_ptr<Pass> createMapNamedOpsToMpmdOpsPass(std::vector<::mpmd::NameAssignment> assignment);
// A pass configured by flags of the partition takes all of `PartitionOptions`
// and reads its own, so a new flag of an existing pass needs no change here
// or in the pipeline builders.

/// -mpmd-infer-mesh-assignment with its flags and input/output assignment.
std::unique_ptr<Pass> createInferMeshAssignmentPass(const ::mpmd::PartitionOptions &options,
                                                    std::vector<::mpmd::IndexAssignment> inputs,
                                                    std::vector<::mpmd::IndexAssignment> outputs);
/// -mpmd-pipeline-schedule with a per-mesh order.
std::unique_ptr<Pass> createPipelineSchedulePass(::mpmd::Schedule schedule);
/// -mpmd-rule-based-merge with its rules.
std::unique_ptr<Pass> createRuleBasedMergePass(::mpmd::MergeRules rules);
/// -mpmd-remat-fragment with its flags.
std::unique_ptr<Pass> createRematFragmentPass(const ::mpmd::PartitionOptions &options);
/// -mpmd-validate-no-backward-deps with its flags.
std::unique_ptr<Pass> createValidateNoBackwardDepsPass(const ::mpmd::PartitionOptions &options);

//===----------------------------------------------------------------------===//
// Pipelines
//===----------------------------------------------------------------------===//

/// Import: named computations to fragments, transfers, mesh inference, merging
/// (reads `infer_transfers`, `infer_cross_mesh_reductions`,
/// `merge_inferred_after_scheduling`).
void addImportPipeline(OpPassManager &pm, const ::mpmd::ProgramSpec &spec,
                       const ::mpmd::PartitionOptions &options);

/// Optimize: split backward, the schedule, merges, remat, forward+backward
/// merge.
void addOptimizePipeline(OpPassManager &pm, const ::mpmd::Schedule &schedule,
                         const ::mpmd::PartitionOptions &options);

/// Export: outline fragments into functions called by fragment_call, donation
/// and partial-sum marks, validators (reads `pack_fragment_values`,
/// `pack_large_fragment_values`, `partial_sums`, `validate_no_backward_deps`,
/// `fail_on_backward_deps`).
void addExportPipeline(OpPassManager &pm, const ::mpmd::PartitionOptions &options = {});

/// Registers the passes and the `mpmd-import-pipeline` / `mpmd-export-pipeline`.
void registerMpmdPassesAndPipelines();

} // namespace mlir::mpmd

#endif // MPMD_TRANSFORMS_PASSES_H
