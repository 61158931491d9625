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
};

/// Import: named ops to fragments, transfers, mesh inference, merging.
void addImportPipeline(OpPassManager &pm, const ImportOptions &options);
/// Export: outline fragments into functions called by fragment_call.
void addExportPipeline(OpPassManager &pm);
/// Registers the passes and the `mpmd-import-pipeline` / `mpmd-export-pipeline`.
void registerMpmdPassesAndPipelines();

} // namespace mlir::mpmd

#endif // MPMD_TRANSFORMS_PASSES_H
