//===- Partition.cpp - the partitioner driver --------------------------------===//
//
// importProgram / ImportedProgram::finish / runPipeline of mpmd/Pipeline.h:
// contexts, parsing, the pass pipelines, timing and error collection. The
// program is read back by ProgramSerialization.cpp; diagnostics are formatted
// by Diagnostics.cpp; the `mpmd-opt` arguments that replay a partition are
// written by MpmdOptArgs.cpp.
//
//===----------------------------------------------------------------------===//

#include "mpmd/Pipeline.h"

#include "Common/Fragments.h"
#include "Common/TextOptions.h"
#include "Driver/Diagnostics.h"
#include "Driver/MpmdOptArgs.h"
#include "Driver/ProgramSerialization.h"
#include "mpmd/Dialect/MemoryKinds.h"
#include "mpmd/Dialect/MpmdDialect.h"
#include "mpmd/Support/Limits.h"
#include "mpmd/Transforms/Passes.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
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

void registerOnce() {
  static std::once_flag flag;
  std::call_once(flag, [] { md::registerMpmdPassesAndPipelines(); });
}

double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

/// The scheduling units of `main`, in program order.
std::vector<::mpmd::Unit> collectUnits(func::FuncOp main, md::TopologyAttr topology) {
  std::vector<::mpmd::Unit> units;
  for (md::FragmentOp fragment : main.getBody().front().getOps<md::FragmentOp>())
    if (std::optional<::mpmd::Unit> unit = md::getSchedulingUnit(fragment, topology))
      units.push_back(std::move(*unit));
  return units;
}

} // namespace

namespace mpmd {

struct ImportedProgram::Impl {
  std::unique_ptr<MLIRContext> ctx;
  OwningOpRef<ModuleOp> module;
  std::string funcName;
  /// The request and options of the import (for the replay arguments).
  ProgramSpec spec;
  PartitionOptions importOptions;
  std::string error;
  std::string warnings;
  std::vector<Unit> units;
  double seconds = 0;
};

ImportedProgram::ImportedProgram() : impl(std::make_unique<Impl>()) {}
ImportedProgram::ImportedProgram(ImportedProgram &&) noexcept = default;
ImportedProgram &ImportedProgram::operator=(ImportedProgram &&) noexcept = default;
ImportedProgram::~ImportedProgram() {
  // The module must go before the context that owns its storage.
  if (impl)
    impl->module = nullptr;
}

bool ImportedProgram::ok() const { return impl && impl->module; }
const std::string &ImportedProgram::error() const { return impl->error; }
const std::string &ImportedProgram::warnings() const { return impl->warnings; }
const std::vector<Unit> &ImportedProgram::units() const { return impl->units; }
double ImportedProgram::seconds() const { return impl->seconds; }

std::string ImportedProgram::text() const {
  return ok() ? md::printOp(*impl->module, /*generic=*/false, /*debugInfo=*/false) : "";
}

ImportedProgram ImportedProgram::importOnThisThread(const std::string &moduleText,
                                                   const ProgramSpec &spec,
                                                   const PartitionOptions &options) {
  auto start = std::chrono::steady_clock::now();
  ImportedProgram imported;
  ImportedProgram::Impl &impl = *imported.impl;
  impl.ctx = makeContext();
  impl.funcName = spec.func_name;
  impl.spec = spec;
  impl.importOptions = options;
  md::DiagnosticCollector diagnostics(impl.ctx.get());
  auto fail = [&](const std::string &what) {
    impl.module = nullptr;
    std::string details = diagnostics.take();
    impl.error = details.empty() ? what : details;
    return std::move(imported);
  };

  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(moduleText, impl.ctx.get());
  if (!module)
    return fail("cannot parse the module lowered by JAX");
  auto main = module->lookupSymbol<func::FuncOp>(spec.func_name);
  if (!main)
    return fail("the module has no function @" + spec.func_name);
  md::TopologyAttr topology =
      md::buildTopology(impl.ctx.get(), spec.topology, [&] { return main.emitError(); });
  if (!topology)
    return fail("invalid topology");
  main->setAttr(md::kTopologyAttr, topology);

  PassManager pm(impl.ctx.get());
  md::addImportPipeline(pm, spec, options);
  if (failed(pm.run(*module)))
    return fail("mpmd import failed");
  impl.units = collectUnits(main, topology);
  impl.warnings = diagnostics.take();
  impl.module = std::move(module);
  impl.seconds = secondsSince(start);
  return imported;
}

ImportedProgram importProgram(const std::string &moduleText, const ProgramSpec &spec,
                              const PartitionOptions &options) {
  registerOnce();
  if (std::string deep = checkNestingDepth(moduleText); !deep.empty()) {
    ImportedProgram failed;
    failed.impl->error = deep;
    return failed;
  }
  ImportedProgram imported;
  runWithLargeStack([&] { imported = ImportedProgram::importOnThisThread(moduleText, spec, options); });
  return imported;
}

PartitionResult ImportedProgram::finish(const Schedule &schedule,
                                        const PartitionOptions &options) const {
  PartitionResult result;
  runWithLargeStack([&] { result = finishOnThisThread(schedule, options); });
  return result;
}

PartitionResult ImportedProgram::finishOnThisThread(const Schedule &schedule,
                                                    const PartitionOptions &options) const {
  PartitionResult result;
  if (!ok()) {
    result.error = "the program was not imported: " + impl->error;
    return result;
  }
  auto start = std::chrono::steady_clock::now();
  // Rendered from the values the pipelines run with, for a failed run too.
  result.mpmd_opt_args = md::mpmdOptArgs(impl->spec, impl->importOptions, schedule, options);
  md::DiagnosticCollector diagnostics(impl->ctx.get());
  // Work on a copy: the imported module stays as it is for another finish.
  OwningOpRef<ModuleOp> module = impl->module->clone();
  auto fail = [&](const std::string &what) {
    std::string details = diagnostics.take();
    result.ok = false;
    result.error = details.empty() ? what : details;
    return result;
  };

  PassManager pm(impl->ctx.get());
  md::addOptimizePipeline(pm, schedule, options);
  md::addExportPipeline(pm, options);
  if (failed(pm.run(*module)))
    return fail("mpmd export failed");
  result.exported_text = md::printOp(*module, /*generic=*/false, /*debugInfo=*/false);
  auto main = module->lookupSymbol<func::FuncOp>(impl->funcName);
  auto topology = main->getAttrOfType<md::TopologyAttr>(md::kTopologyAttr);
  if (failed(md::serializeProgram(*module, main, topology, result)))
    return fail("mpmd export produced an invalid program");
  result.seconds = secondsSince(start);
  result.warnings = diagnostics.take();
  result.ok = true;
  return result;
}

namespace {

std::pair<bool, std::string> runPipelineOnThisThread(const std::string &text,
                                                     const std::string &pipeline, bool generic) {
  auto ctx = makeContext();
  md::DiagnosticCollector diagnostics(ctx.get());
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
  return {true, md::printOp(*module, generic, /*debugInfo=*/false)};
}

} // namespace

std::pair<bool, std::string> runPipeline(const std::string &text, const std::string &pipeline,
                                         bool generic) {
  registerOnce();
  if (std::string deep = checkNestingDepth(text); !deep.empty())
    return {false, deep};
  std::pair<bool, std::string> result;
  runWithLargeStack([&] { result = runPipelineOnThisThread(text, pipeline, generic); });
  return result;
}

std::vector<std::string> assignableMemoryKinds() {
  std::vector<std::string> kinds;
  for (llvm::StringLiteral kind : mlir::mpmd::kAssignableMemoryKinds)
    kinds.push_back(kind.str());
  return kinds;
}

} // namespace mpmd
