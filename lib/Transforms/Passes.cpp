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
  pm.addNestedPass<func::FuncOp>(createSumAtSourcePass());
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

namespace {
/// The optimize pipeline around its two configured passes (either may be
/// null: no schedule, no merge rules).
void addOptimizePasses(OpPassManager &pm, std::unique_ptr<Pass> schedule,
                       std::unique_ptr<Pass> mergeRules, const ::mpmd::PartitionOptions &options) {
  // One fragment per scheduling unit, however finely the model is labelled.
  pm.addNestedPass<func::FuncOp>(createMergeUserFragmentsIntoSchedulingUnitsPass());
  if (options.split_bwd_fragments)
    pm.addNestedPass<func::FuncOp>(createSplitBwdFragmentsPass());
  if (schedule)
    pm.addNestedPass<func::FuncOp>(std::move(schedule));
  if (options.merge_inferred_after_scheduling)
    pm.addNestedPass<func::FuncOp>(createMergeInferredFragmentsPass());
  if (mergeRules)
    pm.addNestedPass<func::FuncOp>(std::move(mergeRules));
  if (options.fragment_remat)
    pm.addNestedPass<func::FuncOp>(createRematFragmentPass(options));
  if (options.merge_forward_with_backward)
    pm.addNestedPass<func::FuncOp>(createMergeForwardWithBackwardPass());
}
} // namespace

void mlir::mpmd::addOptimizePipeline(OpPassManager &pm, const ::mpmd::Schedule &schedule,
                                     const ::mpmd::PartitionOptions &options) {
  addOptimizePasses(pm, schedule.empty() ? nullptr : createPipelineSchedulePass(schedule),
                    options.merge_rules.empty() ? nullptr
                                                : createRuleBasedMergePass(options.merge_rules),
                    options);
}

void mlir::mpmd::addExportPipeline(OpPassManager &pm, const ::mpmd::PartitionOptions &options) {
  pm.addNestedPass<func::FuncOp>(createDelayArgumentTransfersPass());
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
  Option<bool> mergeInferred{
      *this, "merge-inferred",
      llvm::cl::desc("Merge inferred fragments into their neighbours now (false: the optimize "
                     "pipeline's merge-inferred does it after scheduling, as with a schedule)"),
      llvm::cl::init(true)};
  // Shardy's spellings of the same options.
  ListOption<std::string> nameToMeshAssignment{
      *this, "name-to-mesh-assignment", llvm::cl::desc("The same as `assignment`")};
  Option<bool> mergeAfterScheduling{
      *this, "merge-after-scheduling",
      llvm::cl::desc("The opposite of `merge-inferred`: merge inferred fragments only after "
                     "scheduling (with the optimize pipeline's merge-after-scheduling)"),
      llvm::cl::init(false)};
  Option<bool> enableHeterogeneousMeshes{
      *this, "enable-heterogeneous-meshes",
      llvm::cl::desc("Meshes of different shapes: not supported (true is an error)"),
      llvm::cl::init(false)};
};

/// `mpmd-opt`'s text options of the optimize pipeline (the flags of
/// `PartitionOptions` it reads, and the schedule and merge rules as text).
struct OptimizePipelineOptions : public PassPipelineOptions<OptimizePipelineOptions> {
  Option<std::string> schedule{
      *this, "schedule",
      llvm::cl::desc("Per mesh, the order of its units: 'm0: F0 F1 B0 B1; m1: F0 B0 F1 B1'"),
      llvm::cl::init("")};
  Option<std::string> mergeRules{*this, "merge-rules",
                                 llvm::cl::desc("Units to merge: 'm1: F0 B0; m1: F1 B1'"),
                                 llvm::cl::init("")};
  Option<bool> splitBwdFragments{*this, "split-bwd-fragments",
                                 llvm::cl::desc("Split backward fragments into activation- and "
                                                "weight-gradient parts"),
                                 llvm::cl::init(false)};
  Option<bool> mergeInferred{*this, "merge-inferred",
                             llvm::cl::desc("Merge inferred fragments after scheduling (for an "
                                            "import run with merge-inferred=false)"),
                             llvm::cl::init(false)};
  Option<bool> fragmentRemat{*this, "fragment-remat",
                             llvm::cl::desc("Recompute forward fragments right before their "
                                            "backward"),
                             llvm::cl::init(false)};
  Option<bool> mergeRematFragments{*this, "merge-remat-fragments",
                                   llvm::cl::desc("Merge each recomputed forward into its "
                                                  "backward (with fragment-remat)"),
                                   llvm::cl::init(false)};
  Option<bool> mergeForwardWithBackward{
      *this, "merge-forward-with-backward",
      llvm::cl::desc("Merge a forward with the backward right after it"), llvm::cl::init(false)};
  // Shardy's spellings.
  Option<std::string> pipelineSchedule{
      *this, "pipeline-schedule",
      llvm::cl::desc("A built-in schedule by name (see -mpmd-builtin-schedule): GPipe, 1F1B, "
                     "GPipeBut1F1BForLastMesh, Circular, CircularWithReversedBackward, none"),
      llvm::cl::init("")};
  Option<bool> mergeAfterScheduling{*this, "merge-after-scheduling",
                                    llvm::cl::desc("The same as `merge-inferred`"),
                                    llvm::cl::init(false)};
};

/// Options of `-mpmd-infer-mesh-pipeline` (Shardy's name of mesh inference).
struct InferMeshPipelineOptions : public PassPipelineOptions<InferMeshPipelineOptions> {
  Option<bool> inferTransfers{*this, "infer-transfers",
                              llvm::cl::desc("Create transfers that no label implies"),
                              llvm::cl::init(false)};
  Option<bool> inferCrossMeshReductions{
      *this, "infer-cross-mesh-reductions",
      llvm::cl::desc("Infer cross-mesh reductions of values from several meshes"),
      llvm::cl::init(false)};
};

/// Options of `-mpmd-pipeline-scheduler` (Shardy's name of scheduling).
struct PipelineSchedulerOptions : public PassPipelineOptions<PipelineSchedulerOptions> {
  Option<std::string> mustHappenBefore{
      *this, "must-happen-before",
      llvm::cl::desc("The built-in schedule by name, optionally as builtin:NAME"),
      llvm::cl::init("GPipe")};
};

/// Registers `name` as another name of a pass without options, `create`.
void registerAlias(StringRef name, StringRef description, std::unique_ptr<Pass> (*create)()) {
  registerPassPipeline(
      name, description,
      [create](OpPassManager &pm, StringRef text,
               function_ref<LogicalResult(const Twine &)> errorHandler) -> LogicalResult {
        if (!text.trim().empty())
          return errorHandler("this name of the pass takes no options");
        pm.addNestedPass<func::FuncOp>(create());
        return success();
      },
      [](function_ref<void(const ::mlir::detail::PassOptions &)>) {});
}

/// `mpmd-opt`'s text options of the export pipeline.
struct ExportPipelineOptions : public PassPipelineOptions<ExportPipelineOptions> {
  Option<bool> validateNoBackwardDeps{
      *this, "validate-no-backward-deps",
      llvm::cl::desc("Check that forward-only programs flow from earlier to later meshes"),
      llvm::cl::init(true)};
  Option<bool> failOnBackwardDeps{
      *this, "fail-on-backward-deps",
      llvm::cl::desc("Report backward dependencies as errors instead of warnings"),
      llvm::cl::init(false)};
};
} // namespace

void mlir::mpmd::registerMpmdPassesAndPipelines() {
  registerMpmdPasses();
  // Registered by hand (not PassPipelineRegistration) so that contradicting
  // options are reported.
  registerPassPipeline(
      "mpmd-import-pipeline",
      "Named computations to fragments on meshes, transfers, mesh inference and merging",
      [](OpPassManager &pm, StringRef text,
         function_ref<LogicalResult(const Twine &)> errorHandler) -> LogicalResult {
        ImportPipelineOptions opts;
        if (failed(opts.parseFromString(text)))
          return failure();
        if (opts.enableHeterogeneousMeshes)
          return errorHandler("mpmd-import-pipeline: enable-heterogeneous-meshes is not "
                              "supported: every mesh of a topology has the same axes and sizes");
        if (opts.mergeAfterScheduling.hasValue() && opts.mergeInferred.hasValue() &&
            opts.mergeAfterScheduling == opts.mergeInferred)
          return errorHandler("mpmd-import-pipeline: merge-after-scheduling and merge-inferred "
                              "contradict each other (one is the opposite of the other)");
        bool mergeInferred = opts.mergeAfterScheduling.hasValue() ? !opts.mergeAfterScheduling
                                                                  : bool(opts.mergeInferred);
        MapNamedOpsToMpmdOpsPassOptions map;
        map.assignment.assign(opts.assignment.begin(), opts.assignment.end());
        map.assignment.append(opts.nameToMeshAssignment.begin(), opts.nameToMeshAssignment.end());
        InferMeshAssignmentPassOptions infer;
        infer.inferTransfers = opts.inferTransfers;
        infer.inferCrossMeshReductions = opts.inferCrossMeshReductions;
        infer.inputAssignment.assign(opts.inputAssignment.begin(), opts.inputAssignment.end());
        infer.outputAssignment.assign(opts.outputAssignment.begin(), opts.outputAssignment.end());
        SetTopologyPassOptions topology;
        topology.topology = opts.topology;
        topology.func = opts.func;
        addImportPasses(pm, createMapNamedOpsToMpmdOpsPass(map),
                        createInferMeshAssignmentPass(infer), mergeInferred,
                        std::move(topology));
        return success();
      },
      [](function_ref<void(const ::mlir::detail::PassOptions &)> optHandler) {
        optHandler(ImportPipelineOptions());
      });
  // Registered by hand (not PassPipelineRegistration) so that option
  // combinations that would silently do nothing are reported.
  registerPassPipeline(
      "mpmd-optimize-pipeline",
      "Split backward, the pipeline schedule, merges, remat, forward+backward merge",
      [](OpPassManager &pm, StringRef text,
         function_ref<LogicalResult(const Twine &)> errorHandler) -> LogicalResult {
        OptimizePipelineOptions opts;
        if (failed(opts.parseFromString(text)))
          return failure();
        if (opts.mergeRematFragments && !opts.fragmentRemat)
          return errorHandler("mpmd-optimize-pipeline: merge-remat-fragments=true needs "
                              "fragment-remat=true (it merges the recomputed forwards that "
                              "fragment-remat creates)");
        if (!opts.schedule.empty() && !opts.pipelineSchedule.empty())
          return errorHandler("mpmd-optimize-pipeline: give the schedule once, as schedule (an "
                              "order) or pipeline-schedule (a name)");
        if (opts.mergeAfterScheduling.hasValue() && opts.mergeInferred.hasValue() &&
            opts.mergeAfterScheduling != opts.mergeInferred)
          return errorHandler("mpmd-optimize-pipeline: merge-after-scheduling and "
                              "merge-inferred (the same option) have different values");
        ::mpmd::PartitionOptions options;
        options.split_bwd_fragments = opts.splitBwdFragments;
        options.merge_inferred_after_scheduling =
            opts.mergeInferred || opts.mergeAfterScheduling;
        options.fragment_remat = opts.fragmentRemat;
        options.merge_remat_fragments = opts.mergeRematFragments;
        options.merge_forward_with_backward = opts.mergeForwardWithBackward;
        std::unique_ptr<Pass> schedule, mergeRules;
        if (!opts.schedule.empty()) {
          PipelineSchedulePassOptions order;
          order.order = opts.schedule;
          schedule = createPipelineSchedulePass(order);
        }
        if (!opts.pipelineSchedule.empty()) {
          BuiltinSchedulePassOptions builtin;
          builtin.schedule = opts.pipelineSchedule;
          schedule = createBuiltinSchedulePass(builtin);
        }
        if (!opts.mergeRules.empty()) {
          RuleBasedMergePassOptions rules;
          rules.rules = opts.mergeRules;
          mergeRules = createRuleBasedMergePass(rules);
        }
        addOptimizePasses(pm, std::move(schedule), std::move(mergeRules), options);
        return success();
      },
      [](function_ref<void(const ::mlir::detail::PassOptions &)> optHandler) {
        optHandler(OptimizePipelineOptions());
      });
  PassPipelineRegistration<ExportPipelineOptions>(
      "mpmd-export-pipeline", "Outline fragments into functions called by mpmd.fragment_call",
      [](OpPassManager &pm, const ExportPipelineOptions &opts) {
        ::mpmd::PartitionOptions options;
        options.validate_no_backward_deps = opts.validateNoBackwardDeps;
        options.fail_on_backward_deps = opts.failOnBackwardDeps;
        addExportPipeline(pm, options);
      });

  // Shardy's names of passes and pipelines that ours match (docs/compat.md).
  PassPipelineRegistration<InferMeshPipelineOptions>(
      "mpmd-infer-mesh-pipeline",
      "Shardy's name of mesh inference: -mpmd-infer-mesh-convert-reduce-ops, then "
      "-mpmd-infer-mesh-assignment",
      [](OpPassManager &pm, const InferMeshPipelineOptions &opts) {
        pm.addNestedPass<func::FuncOp>(createConvertReduceOpsPass());
        InferMeshAssignmentPassOptions infer;
        infer.inferTransfers = opts.inferTransfers;
        infer.inferCrossMeshReductions = opts.inferCrossMeshReductions;
        pm.addNestedPass<func::FuncOp>(createInferMeshAssignmentPass(infer));
      });
  PassPipelineRegistration<PipelineSchedulerOptions>(
      "mpmd-pipeline-scheduler",
      "Shardy's name of scheduling by a built-in schedule: -mpmd-builtin-schedule",
      [](OpPassManager &pm, const PipelineSchedulerOptions &opts) {
        BuiltinSchedulePassOptions builtin;
        StringRef name = opts.mustHappenBefore;
        name.consume_front("builtin:");
        builtin.schedule = name.str();
        pm.addNestedPass<func::FuncOp>(createBuiltinSchedulePass(builtin));
      });
  registerAlias("mpmd-absorb-inferred-fragments",
                "Shardy's name of -mpmd-merge-inferred-fragments",
                [] { return createMergeInferredFragmentsPass(); });
}
