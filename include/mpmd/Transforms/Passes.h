//===- Passes.h - mpmd passes ------------------------------------*- C++ -*-===//
#ifndef MPMD_TRANSFORMS_PASSES_H
#define MPMD_TRANSFORMS_PASSES_H

#include "mpmd/Dialect/MpmdDialect.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassManager.h"

namespace mlir::mpmd {

#define GEN_PASS_DECL
#include "mpmd/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "mpmd/Transforms/Passes.h.inc"

/// Options of the import pipeline (name-to-mesh assignment and I/O meshes).
struct ImportOptions {
  std::vector<std::string> assignment;       // name@mesh[/stage]
  std::vector<std::string> inputAssignment;  // index@mesh
  std::vector<std::string> outputAssignment; // index@mesh
  bool inferTransfers = false;
  bool inferCrossMeshReductions = false;
  /// Merge inferred fragments into their neighbours during import. Off when a
  /// schedule follows: merging would tie microbatches together (e.g. gradient
  /// accumulation into each backward), so the optimize pipeline merges them
  /// after scheduling instead.
  bool mergeInferredFragments = true;
};

/// Import: named computations to fragments, transfers, mesh inference, merging.
void addImportPipeline(OpPassManager &pm, const ImportOptions &options);

/// Options of the optimize pipeline.
struct OptimizeOptions {
  /// Per-mesh unit order (see -mpmd-pipeline-schedule); empty: program order.
  std::string schedule;
  bool splitBwdFragments = false;
  bool fragmentRemat = false;
  bool mergeRematFragments = false;
  bool mergeForwardWithBackward = false;
  /// Merge inferred fragments after scheduling (see ImportOptions).
  bool mergeInferredFragments = false;
  /// Units to merge (see -mpmd-rule-based-merge); empty: none.
  std::string mergeRules;
};

/// Optimize: split backward, schedule, remat, merge forward with backward.
void addOptimizePipeline(OpPassManager &pm, const OptimizeOptions &options);
/// Export: outline fragments into functions called by fragment_call.
struct ExportOptions {
  /// Check that forward-only programs flow from earlier to later meshes
  /// (-mpmd-validate-no-backward-deps); off for wrap-around pipelines, which
  /// flow back to the first mesh on purpose.
  bool validateNoBackwardDeps = true;
  /// Report backward dependencies as errors instead of warnings.
  bool failOnBackwardDeps = false;
};
void addExportPipeline(OpPassManager &pm, const ExportOptions &options = {});
/// Registers the passes and the `mpmd-import-pipeline` / `mpmd-export-pipeline`.
void registerMpmdPassesAndPipelines();

} // namespace mlir::mpmd

#endif // MPMD_TRANSFORMS_PASSES_H
