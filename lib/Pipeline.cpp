//===- Pipeline.cpp - the partitioner driver --------------------------------===//

#include "mpmd/Pipeline.h"

#include <map>
#include <mutex>
#include <optional>

#include "mpmd/Dialect/MpmdDialect.h"
#include "mpmd/Transforms/Passes.h"
#include "Common/Utils.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <set>
#include <mutex>

using namespace mlir;
namespace md = mlir::mpmd;

namespace {

/// A context with our dialect and func loaded and unknown dialects allowed.
std::unique_ptr<MLIRContext> makeContext() {
  DialectRegistry registry;
  registry.insert<md::MpmdDialect, func::FuncDialect>();
  auto ctx = std::make_unique<MLIRContext>(registry, MLIRContext::Threading::DISABLED);
  ctx->allowUnregisteredDialects();
  // Diagnostics name the op and its source location; a dump of the whole
  // enclosing function would bury the message.
  ctx->printOpOnDiagnostic(false);
  ctx->loadAllAvailableDialects();
  return ctx;
}

/// A frame of a JAX source location: the Python function (if known) and
/// `file:line:col`.
struct Frame {
  std::string function;
  std::string position;
};

void collectFrames(Location loc, std::vector<Frame> &frames) {
  if (auto name = dyn_cast<NameLoc>(loc)) {
    if (auto file = dyn_cast<FileLineColLoc>(name.getChildLoc())) {
      frames.push_back({name.getName().str(), (file.getFilename().str() + ":" +
                                               std::to_string(file.getLine()) + ":" +
                                               std::to_string(file.getColumn()))});
      return;
    }
    collectFrames(name.getChildLoc(), frames);
  } else if (auto call = dyn_cast<CallSiteLoc>(loc)) {
    collectFrames(call.getCallee(), frames);
    collectFrames(call.getCaller(), frames);
  } else if (auto file = dyn_cast<FileLineColLoc>(loc)) {
    frames.push_back({"", file.getFilename().str() + ":" + std::to_string(file.getLine()) + ":" +
                              std::to_string(file.getColumn())});
  } else if (auto fused = dyn_cast<FusedLoc>(loc)) {
    if (!fused.getLocations().empty())
      collectFrames(fused.getLocations().front(), frames);
  }
}

/// `file:line:col` of the innermost frame, then the Python call chain:
/// `models.py:43:8 (in mlp_loss, called from sgd_step at models.py:49:16)`.
/// Empty for unknown locations.
std::string formatLocation(Location loc) {
  std::vector<Frame> frames;
  collectFrames(loc, frames);
  if (frames.empty())
    return "";
  std::string text = frames.front().position;
  std::string chain;
  for (size_t i = 0; i < frames.size(); ++i) {
    if (frames[i].function.empty())
      continue;
    chain += chain.empty() ? " (in " + frames[i].function
                           : ", called from " + frames[i].function + " at " + frames[i].position;
  }
  return chain.empty() ? text : text + chain + ")";
}

/// Collects diagnostics as `location: severity: message` lines (exact
/// repeats, e.g. a forward op and its transpose at one source line, once).
class DiagnosticCollector {
public:
  explicit DiagnosticCollector(MLIRContext *ctx)
      : handler(ctx, [this](Diagnostic &diag) { record(diag); }) {}
  std::string take() { return std::move(text); }

private:
  void record(Diagnostic &diag) {
    std::string line;
    llvm::raw_string_ostream os(line);
    std::string where = formatLocation(diag.getLocation());
    if (!where.empty())
      os << where << ": ";
    switch (diag.getSeverity()) {
    case DiagnosticSeverity::Error: os << "error: "; break;
    case DiagnosticSeverity::Warning: os << "warning: "; break;
    default: os << "note: "; break;
    }
    os << diag << "\n";
    for (Diagnostic &note : diag.getNotes()) {
      std::string noteWhere = formatLocation(note.getLocation());
      os << "  " << (noteWhere.empty() ? "" : noteWhere + ": ") << "note: " << note << "\n";
    }
    if (seen.insert(line).second)
      text += line;
  }
  std::string text;
  std::set<std::string> seen;
  ScopedDiagnosticHandler handler;
};

std::string print(Operation *op, bool generic, bool debugInfo) {
  std::string text;
  llvm::raw_string_ostream os(text);
  OpPrintingFlags flags;
  if (generic)
    flags.printGenericOpForm();
  if (debugInfo)
    flags.enableDebugInfo(/*enable=*/true, /*prettyForm=*/false);
  op->print(os, flags);
  return text;
}

void registerOnce() {
  static std::once_flag flag;
  std::call_once(flag, [] { md::registerMpmdPassesAndPipelines(); });
}

/// A standalone module whose public @main is `callee`, plus the module-level
/// non-function ops of `source` (e.g. Shardy mesh declarations).
std::string fragmentModuleText(ModuleOp source, func::FuncOp callee, int64_t numDevices) {
  OpBuilder builder(source.getContext());
  auto module = ModuleOp::create(source.getLoc(), callee.getSymName());
  module->setAttr("mhlo.num_partitions", builder.getI32IntegerAttr(numDevices));
  module->setAttr("mhlo.num_replicas", builder.getI32IntegerAttr(1));
  builder.setInsertionPointToEnd(module.getBody());
  for (Operation &op : source.getBody()->getOperations())
    if (!isa<func::FuncOp>(op))
      builder.clone(op);
  auto main = cast<func::FuncOp>(builder.clone(*callee));
  main.setSymName("main");
  main.setPublic();
  main->removeAttr(md::kMeshShapeAttr);
  std::string text = print(module, /*generic=*/true, /*debugInfo=*/true);
  module->erase();
  return text;
}

} // namespace

/// Imported modules kept between the two phases of a two-phase run (so that
/// phase 2 neither prints nor parses them), by token; the oldest go first.
struct Handoff {
  std::unique_ptr<MLIRContext> ctx;
  OwningOpRef<ModuleOp> module;
};
std::mutex handoffMutex;
std::map<int64_t, Handoff> handoffs;
int64_t nextHandoffToken = 1;
constexpr size_t kMaxHandoffs = 8;

int64_t keepHandoff(std::unique_ptr<MLIRContext> ctx, OwningOpRef<ModuleOp> module) {
  std::lock_guard<std::mutex> lock(handoffMutex);
  while (handoffs.size() >= kMaxHandoffs)
    handoffs.erase(handoffs.begin());
  int64_t token = nextHandoffToken++;
  handoffs[token] = Handoff{std::move(ctx), std::move(module)};
  return token;
}

std::optional<Handoff> takeHandoff(int64_t token) {
  std::lock_guard<std::mutex> lock(handoffMutex);
  auto it = handoffs.find(token);
  if (it == handoffs.end())
    return std::nullopt;
  Handoff handoff = std::move(it->second);
  handoffs.erase(it);
  return handoff;
}

::mpmd::PartitionResult (::mpmd::partition)(const ::mpmd::PartitionRequest &request) {
  registerOnce();
  ::mpmd::PartitionResult result;
  std::unique_ptr<MLIRContext> ctx;
  OwningOpRef<ModuleOp> module;
  if (request.skip_import && request.handoff_token != 0) {
    std::optional<Handoff> handoff = takeHandoff(request.handoff_token);
    if (!handoff) {
      result.error = "the imported module of handoff token " +
                     std::to_string(request.handoff_token) +
                     " is gone (each token is used once; at most 8 are kept)";
      return result;
    }
    ctx = std::move(handoff->ctx);
    module = std::move(handoff->module);
  } else {
    ctx = makeContext();
  }
  DiagnosticCollector diagnostics(ctx.get());
  auto fail = [&](const std::string &what) {
    result.ok = false;
    std::string details = diagnostics.take();
    result.error = details.empty() ? what : details;
    return result;
  };

  if (!module)
    module = parseSourceString<ModuleOp>(request.module_text, ctx.get());
  if (!module)
    return fail("cannot parse the module lowered by JAX");
  auto main = module->lookupSymbol<func::FuncOp>(request.func_name);
  if (!main)
    return fail("the module has no function @" + request.func_name);

  // The topology becomes the `topology` attribute of the entry function.
  OpBuilder builder(ctx.get());
  if (request.skip_import && !main->hasAttr(md::kTopologyAttr))
    return fail("skip_import needs an imported module (its @" + request.func_name +
                " has no topology)");
  SmallVector<md::NamedMeshAttr> meshes;
  for (const ::mpmd::MeshSpec &spec : request.topology) {
    SmallVector<md::MeshAxisAttr> axes;
    for (const auto &[name, size] : spec.axes)
      axes.push_back(md::MeshAxisAttr::get(ctx.get(), name, size));
    meshes.push_back(md::NamedMeshAttr::get(
        ctx.get(), spec.name, md::MeshAttr::get(ctx.get(), axes, ArrayRef<int64_t>())));
  }
  auto topology = md::TopologyAttr::getChecked(
      [&]() { return emitError(main.getLoc()); }, ctx.get(), ArrayRef<md::NamedMeshAttr>(meshes));
  if (!topology)
    return fail("invalid topology");
  main->setAttr(md::kTopologyAttr, topology);

  auto start = std::chrono::steady_clock::now();
  if (!request.skip_import) {
    PassManager importPm(ctx.get());
    md::ImportOptions options;
    options.assignment = request.assignment;
    options.inputAssignment = request.input_assignment;
    options.outputAssignment = request.output_assignment;
    options.inferTransfers = request.infer_transfers;
    options.inferCrossMeshReductions = request.infer_cross_mesh_reductions;
    options.mergeInferredFragments = !request.merge_inferred_after_scheduling;
    md::addImportPipeline(importPm, options);
    if (failed(importPm.run(*module)))
      return fail("mpmd import failed");
    // (Phase 2 of a two-phase run starts from the imported module, whose text
    // the caller already has from phase 1.)
    result.imported_text = print(*module, /*generic=*/false, /*debugInfo=*/false);
  }
  if (request.stop_after_import) {
    for (md::FragmentOp fragment : main.getBody().front().getOps<md::FragmentOp>())
      if (std::optional<md::SchedulingUnit> unit = md::getSchedulingUnit(fragment, topology))
        result.units.push_back({fragment.getMeshName().str(), std::string(1, unit->kind),
                                unit->microbatch, unit->stage});
    result.import_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    result.warnings = diagnostics.take();
    if (request.keep_handoff)
      result.handoff_token = keepHandoff(std::move(ctx), std::move(module));
    else
      result.handoff_text = print(*module, /*generic=*/true, /*debugInfo=*/true);
    result.ok = true;
    return result;
  }
  auto mid = std::chrono::steady_clock::now();

  PassManager exportPm(ctx.get());
  md::OptimizeOptions optimize;
  optimize.schedule = request.schedule;
  optimize.splitBwdFragments = request.split_bwd_fragments;
  optimize.fragmentRemat = request.fragment_remat;
  optimize.mergeRematFragments = request.merge_remat_fragments;
  optimize.mergeForwardWithBackward = request.merge_forward_with_backward;
  optimize.mergeInferredFragments = request.merge_inferred_after_scheduling;
  optimize.mergeRules = request.merge_rules;
  md::addOptimizePipeline(exportPm, optimize);
  md::ExportOptions exportOptions;
  exportOptions.validateNoBackwardDeps = request.validate_no_backward_deps;
  exportOptions.failOnBackwardDeps = request.fail_on_backward_deps;
  md::addExportPipeline(exportPm, exportOptions);
  if (failed(exportPm.run(*module)))
    return fail("mpmd export failed");
  result.exported_text = print(*module, /*generic=*/false, /*debugInfo=*/false);
  auto end = std::chrono::steady_clock::now();
  result.import_seconds = std::chrono::duration<double>(mid - start).count();
  result.export_seconds = std::chrono::duration<double>(end - mid).count();

  // The program: value ids in order of definition in the entry function.
  llvm::DenseMap<Value, int64_t> ids;
  auto idOf = [&](Value v) {
    auto [it, inserted] = ids.try_emplace(v, static_cast<int64_t>(ids.size()));
    return it->second;
  };
  auto meshOf = [](Value v) { return cast<md::MeshTensorType>(v.getType()).getMeshName().str(); };
  for (BlockArgument arg : main.getArguments()) {
    result.input_ids.push_back(idOf(arg));
    result.input_meshes.push_back(meshOf(arg));
  }
  llvm::StringMap<int64_t> functionIndex;
  for (Operation &op : main.getBody().front()) {
    if (auto call = dyn_cast<md::FragmentCallOp>(op)) {
      ::mpmd::Instruction inst;
      inst.kind = ::mpmd::Instruction::Kind::kCall;
      inst.callee = call.getCallee().str();
      inst.mesh = call.getMeshName().str();
      for (Value v : call.getOperands())
        inst.operands.push_back(idOf(v));
      for (Value v : call.getResults())
        inst.results.push_back(idOf(v));
      for (Attribute a : call.getOrigin()) {
        auto origin = cast<md::UserOriginAttr>(a);
        std::string name = origin.getUserName().str();
        if (origin.getTransposeCount())
          name += "(" + std::to_string(origin.getTransposeCount()) + ")";
        inst.origins.push_back(name);
      }
      inst.location = formatLocation(call.getLoc());
      if (auto unit = call->getAttrOfType<StringAttr>(md::kUnitAttr))
        inst.unit = unit.getValue().str();
      if (!functionIndex.count(inst.callee)) {
        auto callee = module->lookupSymbol<func::FuncOp>(call.getCallee());
        ::mpmd::FragmentFunction function;
        function.name = inst.callee;
        function.num_inputs = callee.getNumArguments();
        function.num_outputs = callee.getNumResults();
        for (unsigned i = 0; i < callee.getNumArguments(); ++i)
          if (callee.getArgAttr(i, md::kBufferDonorAttr))
            function.donated_args.push_back(i);
        function.module_text = fragmentModuleText(
            *module, callee, topology.getMesh(call.getMeshName()).getNumDevices());
        functionIndex[inst.callee] = result.functions.size();
        result.functions.push_back(std::move(function));
      }
      result.program.push_back(std::move(inst));
    } else if (auto transfer = dyn_cast<md::TransferOp>(op)) {
      ::mpmd::Instruction inst;
      inst.kind = ::mpmd::Instruction::Kind::kTransfer;
      inst.src_mesh = meshOf(transfer.getTensor());
      inst.mesh = meshOf(transfer.getResult());
      inst.operands.push_back(idOf(transfer.getTensor()));
      inst.results.push_back(idOf(transfer.getResult()));
      inst.location = formatLocation(transfer.getLoc());
      inst.donate = transfer->hasAttr(md::kDonateAttr);
      llvm::raw_string_ostream typeText(inst.value_type);
      cast<md::MeshTensorType>(transfer.getResult().getType()).getRankedTensorType().print(typeText);
      result.program.push_back(std::move(inst));
    } else if (auto ret = dyn_cast<func::ReturnOp>(op)) {
      for (Value v : ret.getOperands()) {
        result.output_ids.push_back(idOf(v));
        result.output_meshes.push_back(meshOf(v));
      }
    } else {
      op.emitError() << "unexpected op left in the partitioned program";
      return fail("mpmd export produced an invalid program");
    }
  }
  result.warnings = diagnostics.take();
  result.ok = true;
  return result;
}

std::pair<bool, std::string> (::mpmd::runPipeline)(const std::string &text,
                                               const std::string &pipeline, bool generic) {
  registerOnce();
  auto ctx = makeContext();
  DiagnosticCollector diagnostics(ctx.get());
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(text, ctx.get());
  if (!module)
    return {false, diagnostics.take()};
  if (!pipeline.empty()) {
    PassManager pm(ctx.get());
    std::string error;
    llvm::raw_string_ostream errorStream(error);
    if (failed(parsePassPipeline(pipeline, pm, errorStream)))
      return {false, "invalid pass pipeline: " + error};
    if (failed(pm.run(*module)))
      return {false, diagnostics.take()};
  } else if (failed(verify(*module))) {
    return {false, diagnostics.take()};
  }
  return {true, print(*module, generic, /*debugInfo=*/false)};
}
