//===- Passes.cpp - mpmd pipelines and registration -------------------------===//

#include "mpmd/Transforms/Passes.h"

#include "mlir/Pass/PassRegistry.h"

using namespace mlir;
using namespace mlir::mpmd;

namespace {

/// The import pipeline around its two configured passes (built from typed
/// values by the driver, or from text options by `mpmd-opt`).
void addImportPasses(OpPassManager &pm, std::unique_ptr<Pass> mapNamedOps,
                     std::unique_ptr<Pass> inferMeshAssignment, bool mergeInferredFragments,
                     SetTopologyPassOptions topology = {}) {
  pm.addPass(createSetTopologyPass(std::move(topology)));
  pm.addPass(createInlineFuncCallsPass());
  pm.addNestedPass<func::FuncOp>(createUnrollForLoopsPass());
  pm.addPass(createCallInlinePass());
  pm.addNestedPass<func::FuncOp>(std::move(mapNamedOps));
  pm.addNestedPass<func::FuncOp>(createIntroduceTransfersPass());
  pm.addNestedPass<func::FuncOp>(createConvertReduceOpsPass());
  pm.addNestedPass<func::FuncOp>(std::move(inferMeshAssignment));
  // With a schedule to follow, inferred fragments stay apart until the
  // optimize pipeline has ordered the units: merging them now would tie
  // microbatches together (e.g. gradient accumulation into each backward).
  if (mergeInferredFragments)
    pm.addNestedPass<func::FuncOp>(createMergeInferredFragmentsPass());
}

} // namespace

void mlir::mpmd::addImportPipeline(OpPassManager &pm, const ::mpmd::ProgramSpec &spec,
                                   const ::mpmd::PartitionOptions &options) {
  addImportPasses(pm, createMapNamedOpsToMpmdOpsPass(spec.assignment),
                  createInferMeshAssignmentPass(options, spec.input_assignment,
                                                spec.output_assignment),
                  !options.merge_inferred_after_scheduling);
}

void mlir::mpmd::addOptimizePipeline(OpPassManager &pm, const ::mpmd::Schedule &schedule,
                                     const ::mpmd::PartitionOptions &options) {
  if (options.split_bwd_fragments)
    pm.addNestedPass<func::FuncOp>(createSplitBwdFragmentsPass());
  if (!schedule.empty())
    pm.addNestedPass<func::FuncOp>(createPipelineSchedulePass(schedule));
  if (options.merge_inferred_after_scheduling)
    pm.addNestedPass<func::FuncOp>(createMergeInferredFragmentsPass());
  if (!options.merge_rules.empty())
    pm.addNestedPass<func::FuncOp>(createRuleBasedMergePass(options.merge_rules));
  if (options.fragment_remat)
    pm.addNestedPass<func::FuncOp>(createRematFragmentPass(options));
  if (options.merge_forward_with_backward)
    pm.addNestedPass<func::FuncOp>(createMergeForwardWithBackwardPass());
}

void mlir::mpmd::addExportPipeline(OpPassManager &pm, const ::mpmd::PartitionOptions &options) {
  pm.addNestedPass<func::FuncOp>(createParameterizeFragmentConstantsPass());
  pm.addPass(createMarkAliasingAndDonationPass());
  pm.addPass(createLowerToFragmentCallsPass());
  pm.addPass(createValidateProgramPass());
  if (options.validate_no_backward_deps)
    pm.addPass(createValidateNoBackwardDepsPass(options));
}

namespace {
/// `mpmd-opt`'s text options of the import pipeline (each handed to the pass
/// that parses it).
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
  Option<std::string> topology{
      *this, "topology",
      llvm::cl::desc("The meshes of the entry function: name:axis=size,...;name:..."),
      llvm::cl::init("")};
  Option<std::string> func{*this, "func",
                           llvm::cl::desc("The entry function that `topology` is for"),
                           llvm::cl::init("main")};
};
} // namespace

void mlir::mpmd::registerMpmdPassesAndPipelines() {
  registerMpmdPasses();
  PassPipelineRegistration<ImportPipelineOptions>(
      "mpmd-import-pipeline",
      "Named computations to fragments on meshes, transfers, mesh inference and merging",
      [](OpPassManager &pm, const ImportPipelineOptions &opts) {
        MapNamedOpsToMpmdOpsPassOptions map;
        map.assignment.assign(opts.assignment.begin(), opts.assignment.end());
        InferMeshAssignmentPassOptions infer;
        infer.inferTransfers = opts.inferTransfers;
        infer.inferCrossMeshReductions = opts.inferCrossMeshReductions;
        infer.inputAssignment.assign(opts.inputAssignment.begin(), opts.inputAssignment.end());
        infer.outputAssignment.assign(opts.outputAssignment.begin(), opts.outputAssignment.end());
        SetTopologyPassOptions topology;
        topology.topology = opts.topology;
        topology.func = opts.func;
        addImportPasses(pm, createMapNamedOpsToMpmdOpsPass(map),
                        createInferMeshAssignmentPass(infer), /*mergeInferredFragments=*/true,
                        std::move(topology));
      });
  PassPipelineRegistration<>("mpmd-export-pipeline",
                             "Outline fragments into functions called by mpmd.fragment_call",
                             [](OpPassManager &pm) { addExportPipeline(pm); });
}
