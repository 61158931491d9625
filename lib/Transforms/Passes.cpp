//===- Passes.cpp - mpmd pipelines and registration -------------------------===//

#include "mpmd/Transforms/Passes.h"

#include "mlir/Pass/PassRegistry.h"

using namespace mlir;
using namespace mlir::mpmd;

void mlir::mpmd::addImportPipeline(OpPassManager &pm, const ImportOptions &options) {
  pm.addPass(createInlineFuncCallsPass());
  pm.addNestedPass<func::FuncOp>(createUnrollForLoopsPass());
  pm.addPass(createCallInlinePass());
  MapNamedOpsToMpmdOpsPassOptions mapOptions;
  mapOptions.assignment.assign(options.assignment.begin(), options.assignment.end());
  pm.addNestedPass<func::FuncOp>(createMapNamedOpsToMpmdOpsPass(mapOptions));
  pm.addNestedPass<func::FuncOp>(createIntroduceTransfersPass());
  pm.addNestedPass<func::FuncOp>(createConvertReduceOpsPass());
  InferMeshAssignmentPassOptions inferOptions;
  inferOptions.inferTransfers = options.inferTransfers;
  inferOptions.inferCrossMeshReductions = options.inferCrossMeshReductions;
  inferOptions.inputAssignment.assign(options.inputAssignment.begin(), options.inputAssignment.end());
  inferOptions.outputAssignment.assign(options.outputAssignment.begin(), options.outputAssignment.end());
  pm.addNestedPass<func::FuncOp>(createInferMeshAssignmentPass(inferOptions));
  if (options.mergeInferredFragments)
    pm.addNestedPass<func::FuncOp>(createMergeInferredFragmentsPass());
}

void mlir::mpmd::addOptimizePipeline(OpPassManager &pm, const OptimizeOptions &options) {
  if (options.splitBwdFragments)
    pm.addNestedPass<func::FuncOp>(createSplitBwdFragmentsPass());
  if (!options.schedule.empty()) {
    PipelineSchedulePassOptions scheduleOptions;
    scheduleOptions.order = options.schedule;
    pm.addNestedPass<func::FuncOp>(createPipelineSchedulePass(scheduleOptions));
  }
  if (options.mergeInferredFragments)
    pm.addNestedPass<func::FuncOp>(createMergeInferredFragmentsPass());
  if (!options.mergeRules.empty()) {
    RuleBasedMergePassOptions mergeOptions;
    mergeOptions.rules = options.mergeRules;
    pm.addNestedPass<func::FuncOp>(createRuleBasedMergePass(mergeOptions));
  }
  if (options.fragmentRemat) {
    RematFragmentPassOptions rematOptions;
    rematOptions.mergeRematFragments = options.mergeRematFragments;
    pm.addNestedPass<func::FuncOp>(createRematFragmentPass(rematOptions));
  }
  if (options.mergeForwardWithBackward)
    pm.addNestedPass<func::FuncOp>(createMergeForwardWithBackwardPass());
}

void mlir::mpmd::addExportPipeline(OpPassManager &pm, const ExportOptions &options) {
  pm.addPass(createMarkAliasingAndDonationPass());
  pm.addPass(createLowerToFragmentCallsPass());
  pm.addPass(createValidateProgramPass());
  if (options.validateNoBackwardDeps)
    pm.addPass(createValidateNoBackwardDepsPass(
        ValidateNoBackwardDepsPassOptions{options.failOnBackwardDeps}));
}

namespace {
struct ImportPipelineOptions : public PassPipelineOptions<ImportPipelineOptions> {
  ListOption<std::string> assignment{*this, "assignment",
                                     llvm::cl::desc("Name to mesh assignment: name@mesh[/stage]")};
  ListOption<std::string> inputAssignment{*this, "input-assignment",
                                          llvm::cl::desc("Input index to mesh: i@mesh")};
  ListOption<std::string> outputAssignment{*this, "output-assignment",
                                           llvm::cl::desc("Output index to mesh: i@mesh")};
  Option<bool> inferTransfers{*this, "infer-transfers",
                              llvm::cl::desc("Create transfers that no label implies"),
                              llvm::cl::init(false)};
  Option<bool> inferCrossMeshReductions{
      *this, "infer-cross-mesh-reductions",
      llvm::cl::desc("Infer cross-mesh reductions of values from several meshes"),
      llvm::cl::init(false)};
};
} // namespace

void mlir::mpmd::registerMpmdPassesAndPipelines() {
  registerMpmdPasses();
  PassPipelineRegistration<ImportPipelineOptions>(
      "mpmd-import-pipeline",
      "Named computations to fragments on meshes, transfers, mesh inference and merging",
      [](OpPassManager &pm, const ImportPipelineOptions &opts) {
        ImportOptions options;
        options.assignment.assign(opts.assignment.begin(), opts.assignment.end());
        options.inputAssignment.assign(opts.inputAssignment.begin(), opts.inputAssignment.end());
        options.outputAssignment.assign(opts.outputAssignment.begin(), opts.outputAssignment.end());
        options.inferTransfers = opts.inferTransfers;
        options.inferCrossMeshReductions = opts.inferCrossMeshReductions;
        addImportPipeline(pm, options);
      });
  PassPipelineRegistration<>("mpmd-export-pipeline",
                             "Outline fragments into functions called by mpmd.fragment_call",
                             [](OpPassManager &pm) { addExportPipeline(pm); });
}
