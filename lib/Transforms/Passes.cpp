//===- Passes.cpp - mpmd pipelines and registration -------------------------===//

#include "mpmd/Transforms/Passes.h"

#include "Common/TextOptions.h"

#include "mlir/IR/Diagnostics.h"
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
  pm.addPass(createInlineMpmdCallsPass());
  pm.addNestedPass<func::FuncOp>(std::move(mapNamedOps));
  pm.addPass(createIntroduceTransfersPass());
  pm.addNestedPass<func::FuncOp>(createInferMeshConvertReduceOpsPass());
  pm.addPass(std::move(inferMeshAssignment));
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
  // After the schedule (the W units in their places), before what merges
  // them with other fragments.
  if (options.batch_weight_gradients)
    pm.addNestedPass<func::FuncOp>(createBatchWeightGradientsPass());
  if (options.merge_inferred_after_scheduling)
    pm.addNestedPass<func::FuncOp>(createMergeInferredFragmentsPass());
  if (mergeRules)
    pm.addNestedPass<func::FuncOp>(std::move(mergeRules));
  if (options.fragment_remat)
    pm.addNestedPass<func::FuncOp>(createRematFragmentPass(options));
  if (options.merge_forward_with_backward)
    pm.addNestedPass<func::FuncOp>(createMergeForwardWithBackwardPass());
  if (options.dispatch_cost.call_us > 0) {
    MergeBackToBackUnitsPassOptions cost;
    cost.callCost = options.dispatch_cost.call_us;
    cost.kernelCost = options.dispatch_cost.kernel_us;
    cost.gflops = options.dispatch_cost.gflops;
    pm.addNestedPass<func::FuncOp>(createMergeBackToBackUnitsPass(cost));
  }
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
  if (options.recompute_operand_views)
    pm.addNestedPass<func::FuncOp>(createRecomputeOperandViewsPass());
  pm.addNestedPass<func::FuncOp>(createDelayArgumentTransfersPass());
  pm.addNestedPass<func::FuncOp>(createParameterizeFragmentConstantsPass());
  if (options.pack_fragment_values) {
    PackFragmentValuesPassOptions pack;
    // On CPU a device copy of a large value costs more than the host time of
    // passing it as a buffer of its own (benchmarks/RESULTS.md).
    pack.maxValueBytes = options.pack_large_fragment_values ? 0 : 16 * 1024;
    pm.addNestedPass<func::FuncOp>(createPackFragmentValuesPass(pack));
  }
  pm.addPass(createMarkAliasingAndDonationPass());
  pm.addNestedPass<func::FuncOp>(createMarkFragmentReservedMemoryPass());
  pm.addPass(createLowerToFragmentCallsPass());
  pm.addPass(createValidateProgramPass());
  if (options.partial_sums)
    pm.addPass(createMarkPartialSumsPass());
  if (options.validate_no_backward_deps)
    pm.addPass(createValidateNoBackwardDepsPass(options));
}

namespace {
using ErrorHandler = function_ref<LogicalResult(const Twine &)>;

/// The flags of one phase (the rows of `MPMD_PARTITION_FLAGS`,
/// include/mpmd/Pipeline.h, whose phase it is) as text options of a
/// pipeline: spelling, default and description come from the table, so a new
/// row needs nothing here.
class PhaseFlags {
public:
  using Flag = ::mlir::detail::PassOptions::Option<bool>;

  PhaseFlags(::mlir::detail::PassOptions &parent, ::mpmd::Phase phase) {
#define MPMD_FLAG_OPTION(name, value, ph, text, user, doc)                                          \
  if (::mpmd::Phase::ph == phase)                                                                  \
    flags.emplace_back(&::mpmd::PartitionOptions::name,                                            \
                       std::make_unique<Flag>(parent, text, llvm::cl::desc(doc),                  \
                                              llvm::cl::init(value)));
    MPMD_PARTITION_FLAGS(MPMD_FLAG_OPTION)
#undef MPMD_FLAG_OPTION
  }

  /// The partition's options: this phase's flags as given (or their
  /// defaults), every other option at its default.
  ::mpmd::PartitionOptions partitionOptions() const {
    ::mpmd::PartitionOptions options;
    for (const auto &[field, flag] : flags)
      options.*field = *flag;
    return options;
  }

  /// The text option of `field` (a flag of this phase).
  const Flag &operator[](bool ::mpmd::PartitionOptions::*field) const {
    for (const auto &[f, flag] : flags)
      if (f == field)
        return *flag;
    llvm_unreachable("not a flag of this phase");
  }

private:
  std::vector<std::pair<bool ::mpmd::PartitionOptions::*, std::unique_ptr<Flag>>> flags;
};

/// Registers pipeline `name` with text options `Options`; `build` adds its
/// passes, or reports options that contradict each other (or would silently
/// do nothing) through the handler. (Not PassPipelineRegistration, which
/// cannot report them.)
template <typename Options>
void registerTextPipeline(StringRef name, StringRef description,
                          LogicalResult (*build)(OpPassManager &, const Options &,
                                                 ErrorHandler)) {
  registerPassPipeline(
      name, description,
      [build](OpPassManager &pm, StringRef text, ErrorHandler errorHandler) -> LogicalResult {
        Options opts;
        if (failed(opts.parseFromString(text)))
          return failure();
        return build(pm, opts, errorHandler);
      },
      [](function_ref<void(const ::mlir::detail::PassOptions &)> optHandler) { optHandler(Options()); });
}

/// Parses a text option of `index@mesh` entries with the one parser of that
/// form (Common/TextOptions.h), reporting a malformed entry through `error`.
FailureOr<std::vector<::mpmd::IndexAssignment>>
parseIndexOption(ArrayRef<std::string> entries, StringRef what, StringRef pipeline,
                 ErrorHandler error) {
  if (entries.empty())
    return std::vector<::mpmd::IndexAssignment>();
  MLIRContext ctx(MLIRContext::Threading::DISABLED);
  std::string message;
  ScopedDiagnosticHandler handler(&ctx, [&](Diagnostic &diag) {
    message = diag.str();
    return success();
  });
  auto parsed = parseIndexAssignment(entries, what, [&] { return emitError(UnknownLoc::get(&ctx)); });
  if (failed(parsed))
    (void)error(pipeline + ": " + message);
  return parsed;
}

/// `mpmd-opt`'s text options of the import pipeline: the table's import
/// flags, the request as text (each handed to the pass that parses it) and
/// the import's own `merge-inferred`.
struct ImportPipelineOptions : public PassPipelineOptions<ImportPipelineOptions> {
  PhaseFlags flags{*this, ::mpmd::Phase::Import};
  ListOption<std::string> assignment{*this, "assignment",
                                     llvm::cl::desc("Name to mesh assignment: name@mesh[/stage]")};
  ListOption<std::string> inputAssignment{*this, "input-assignment",
                                          llvm::cl::desc("Input index to mesh: i@mesh")};
  ListOption<std::string> outputAssignment{*this, "output-assignment",
                                           llvm::cl::desc("Output index to mesh: i@mesh")};
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
      llvm::cl::desc("Shardy's sdy.mesh per topology mesh: not built (true is an error); "
                     "meshes of different shapes need no option"),
      llvm::cl::init(false)};
};

LogicalResult buildImportPipeline(OpPassManager &pm, const ImportPipelineOptions &opts,
                                  ErrorHandler error) {
  if (opts.enableHeterogeneousMeshes)
    return error("mpmd-import-pipeline: enable-heterogeneous-meshes (an sdy.mesh for each mesh "
                 "of the topology, named after it, with the shardings moved onto it) is not "
                 "built; meshes of different shapes need no option: each fragment is compiled "
                 "on its own mesh. Drop the option");
  if (opts.mergeAfterScheduling.hasValue() && opts.mergeInferred.hasValue() &&
      opts.mergeAfterScheduling == opts.mergeInferred)
    return error("mpmd-import-pipeline: merge-after-scheduling and merge-inferred "
                 "contradict each other (one is the opposite of the other)");
  bool mergeInferred = opts.mergeAfterScheduling.hasValue() ? !opts.mergeAfterScheduling
                                                            : bool(opts.mergeInferred);
  auto inputs = parseIndexOption(opts.inputAssignment, "input", "mpmd-import-pipeline", error);
  auto outputs = parseIndexOption(opts.outputAssignment, "output", "mpmd-import-pipeline", error);
  if (failed(inputs) || failed(outputs))
    return failure();
  MapNamedOpsToMpmdOpsPassOptions map;
  map.assignment.assign(opts.assignment.begin(), opts.assignment.end());
  map.assignment.append(opts.nameToMeshAssignment.begin(), opts.nameToMeshAssignment.end());
  SetTopologyPassOptions topology;
  topology.topology = opts.topology;
  topology.func = opts.func;
  addImportPasses(pm, createMapNamedOpsToMpmdOpsPass(map),
                  createInferMeshAssignmentPass(opts.flags.partitionOptions(), std::move(*inputs),
                                                std::move(*outputs)),
                  mergeInferred, std::move(topology));
  return success();
}

/// `mpmd-opt`'s text options of the optimize pipeline: the table's optimize
/// flags, and the schedule and merge rules as text.
struct OptimizePipelineOptions : public PassPipelineOptions<OptimizePipelineOptions> {
  PhaseFlags flags{*this, ::mpmd::Phase::Optimize};
  Option<std::string> schedule{
      *this, "schedule",
      llvm::cl::desc("Per mesh, the order of its units: 'm0: F0 F1 B0 B1; m1: F0 B0 F1 B1'"),
      llvm::cl::init("")};
  Option<std::string> mergeRules{*this, "merge-rules",
                                 llvm::cl::desc("Units to merge: 'm1: F0 B0; m1: F1 B1'"),
                                 llvm::cl::init("")};
  Option<std::string> dispatchCost{
      *this, "dispatch-cost",
      llvm::cl::desc("What a program call costs, 'CALL_US,KERNEL_US,GFLOPS': back-to-back units "
                     "merge where the second's estimated run time is at most a call's "
                     "(-mpmd-merge-back-to-back-units); empty or '0': no such merging"),
      llvm::cl::init("")};
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

LogicalResult buildOptimizePipeline(OpPassManager &pm, const OptimizePipelineOptions &opts,
                                    ErrorHandler error) {
  ::mpmd::PartitionOptions options = opts.flags.partitionOptions();
  if (options.merge_remat_fragments && !options.fragment_remat)
    return error("mpmd-optimize-pipeline: merge-remat-fragments=true needs "
                 "fragment-remat=true (it merges the recomputed forwards that "
                 "fragment-remat creates)");
  if (!opts.schedule.empty() && !opts.pipelineSchedule.empty())
    return error("mpmd-optimize-pipeline: give the schedule once, as schedule (an "
                 "order) or pipeline-schedule (a name)");
  const auto &mergeInferred = opts.flags[&::mpmd::PartitionOptions::merge_inferred_after_scheduling];
  if (opts.mergeAfterScheduling.hasValue() && mergeInferred.hasValue() &&
      opts.mergeAfterScheduling != mergeInferred)
    return error("mpmd-optimize-pipeline: merge-after-scheduling and "
                 "merge-inferred (the same option) have different values");
  options.merge_inferred_after_scheduling |= opts.mergeAfterScheduling;
  if (StringRef cost = StringRef(opts.dispatchCost).trim(); !cost.empty() && cost != "0") {
    SmallVector<StringRef> parts;
    cost.split(parts, ',');
    double figures[3];
    if (parts.size() != 3 || llvm::any_of(llvm::seq<size_t>(0, parts.size()), [&](size_t i) {
          return parts[i].trim().getAsDouble(figures[i]) || figures[i] < 0;
        }))
      return error("mpmd-optimize-pipeline: dispatch-cost='" + cost.str() +
                   "': expected CALL_US,KERNEL_US,GFLOPS (three non-negative numbers, e.g. "
                   "'30,5,1000'), or 0");
    options.dispatch_cost = {figures[0], figures[1], figures[2]};
  }
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
}

/// `mpmd-opt`'s text options of the export pipeline: the table's export flags.
struct ExportPipelineOptions : public PassPipelineOptions<ExportPipelineOptions> {
  PhaseFlags flags{*this, ::mpmd::Phase::Export};
  // Shardy's checks of the fragments that reach export (-mpmd-validate-fragments).
  Option<bool> failOnInferredFragments{
      *this, "fail-on-inferred-fragments",
      llvm::cl::desc("Report inferred fragments left on their own: errors if true, warnings if "
                     "false, nothing if not given"),
      llvm::cl::init(false)};
  Option<bool> failOnReshardOnlyFragments{
      *this, "fail-on-reshard-only-fragments",
      llvm::cl::desc("Make fragments that only reshard an operand errors"), llvm::cl::init(false)};
};

LogicalResult buildExportPipeline(OpPassManager &pm, const ExportPipelineOptions &opts,
                                  ErrorHandler) {
  if (opts.failOnInferredFragments.hasValue() || opts.failOnReshardOnlyFragments) {
    ValidateFragmentsPassOptions validate;
    validate.warnOnInferredFragments = opts.failOnInferredFragments.hasValue();
    validate.failOnInferredFragments = opts.failOnInferredFragments;
    validate.failOnReshardOnlyFragments = opts.failOnReshardOnlyFragments;
    pm.addNestedPass<func::FuncOp>(createValidateFragmentsPass(validate));
  }
  addExportPipeline(pm, opts.flags.partitionOptions());
  return success();
}

/// Options of `-mpmd-infer-mesh-pipeline` (Shardy's name of mesh inference):
/// the table's import flags.
struct InferMeshPipelineOptions : public PassPipelineOptions<InferMeshPipelineOptions> {
  PhaseFlags flags{*this, ::mpmd::Phase::Import};
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
      [create](OpPassManager &pm, StringRef text, ErrorHandler errorHandler) -> LogicalResult {
        if (!text.trim().empty())
          return errorHandler("this name of the pass takes no options");
        pm.addNestedPass<func::FuncOp>(create());
        return success();
      },
      [](function_ref<void(const ::mlir::detail::PassOptions &)>) {});
}
} // namespace

void mlir::mpmd::registerMpmdPassesAndPipelines() {
  registerMpmdPasses();
  registerTextPipeline<ImportPipelineOptions>(
      "mpmd-import-pipeline",
      "Named computations to fragments on meshes, transfers, mesh inference and merging",
      buildImportPipeline);
  registerTextPipeline<OptimizePipelineOptions>(
      "mpmd-optimize-pipeline",
      "Split backward, the pipeline schedule, merges, remat, forward+backward merge",
      buildOptimizePipeline);
  registerTextPipeline<ExportPipelineOptions>(
      "mpmd-export-pipeline", "Outline fragments into functions called by mpmd.fragment_call",
      buildExportPipeline);

  // Shardy's names of passes and pipelines that ours match (docs/compat.md).
  PassPipelineRegistration<InferMeshPipelineOptions>(
      "mpmd-infer-mesh-pipeline",
      "Shardy's name of mesh inference: -mpmd-infer-mesh-convert-reduce-ops, then "
      "-mpmd-infer-mesh-assignment",
      [](OpPassManager &pm, const InferMeshPipelineOptions &opts) {
        pm.addNestedPass<func::FuncOp>(createInferMeshConvertReduceOpsPass());
        pm.addPass(createInferMeshAssignmentPass(opts.flags.partitionOptions(), {}, {}));
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
