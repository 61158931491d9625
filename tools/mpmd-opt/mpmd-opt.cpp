//===- mpmd-opt.cpp - mpmd optimizer driver ---------------------------------===//
//
// mlir-opt for mpmd: our dialect, func, and every mpmd pass and pipeline.
// StableHLO, Shardy and the other dialects JAX emits are always accepted as
// unregistered operations (generic form), so modules printed by JAX parse.
// Input with such ops in readable syntax goes through `python -m mpmd.opt`,
// which converts it (see ReadableInput.h).
//
//===----------------------------------------------------------------------===//

#include "ReadableInput.h"
#include "mpmd/Compat/Passes.h"
#include "mpmd/Dialect/MpmdDialect.h"
#include "mpmd/Support/Limits.h"
#include "mpmd/Transforms/Passes.h"

#include "mlir/Dialect/Func/Extensions/InlinerExtension.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/ToolOutputFile.h"

#include <cstdlib>

/// Readable output of stablehlo/chlo/sdy ops: the front end prints it.
static llvm::cl::opt<bool> printReadable(
    "print-readable",
    llvm::cl::desc("Print stablehlo/chlo/sdy ops in readable form (through python -m mpmd.opt, "
                   "with jaxlib); readable input gets readable output unless "
                   "--mlir-print-op-generic is given"),
    llvm::cl::init(false));

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  mlir::DialectRegistry registry;
  registry.insert<mlir::mpmd::MpmdDialect, mlir::func::FuncDialect>();
  mlir::func::registerInlinerExtension(registry);
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  mlir::registerSymbolDCEPass();
  // MLIR's inliner crashes on an unregistered op with a region (StableHLO's
  // reduce, sort, ... here): `-inline` checks for them first.
  mlir::registerPassPipeline(
      "inline",
      "MLIR's inliner, after -mpmd-check-inlinable; options as MLIR's -inline "
      "(default-pipeline, op-pipelines, max-iterations, inlining-threshold)",
      [](mlir::OpPassManager &pm, llvm::StringRef options,
         llvm::function_ref<llvm::LogicalResult(const llvm::Twine &)> errorHandler) {
        pm.addPass(mlir::mpmd::createCheckInlinablePass());
        std::unique_ptr<mlir::Pass> inliner = mlir::createInlinerPass();
        if (failed(inliner->initializeOptions(options, errorHandler)))
          return llvm::failure();
        pm.addPass(std::move(inliner));
        return llvm::success();
      },
      [](llvm::function_ref<void(const mlir::detail::PassOptions &)>) {});
  mlir::mpmd::registerMpmdPassesAndPipelines();
  // The compatibility wing: passes only mpmd-opt runs (include/mpmd/Compat/Passes.td).
  mlir::mpmd::registerMpmdCompatPasses();

  auto [inputFilename, outputFilename] =
      mlir::registerAndParseCLIOptions(argc, argv, "mpmd optimizer driver\n", registry);
  mlir::MlirOptMainConfig config = mlir::MlirOptMainConfig::createFromCLOptions();
  config.allowUnregisteredDialects(true);

  std::string error;
  auto input = mlir::openInputFile(inputFilename, &error);
  if (!input) {
    llvm::errs() << error << "\n";
    return 1;
  }
  // Before the output is opened: the front end writes it.
  if (const char *noFront = std::getenv("MPMD_OPT_NO_FRONT"); !noFront || !*noFront) {
    std::optional<mpmd::ReadableOp> op = mpmd::findReadableOp(input->getBuffer());
    if (op || printReadable)
      return mpmd::runPythonFrontEnd(argc, argv, inputFilename, *input, op);
  } else if (printReadable) {
    llvm::errs() << "mpmd-opt: error: --print-readable needs the Python front end, which "
                    "MPMD_OPT_NO_FRONT turns off\n";
    return 1;
  }
  auto output = mlir::openOutputFile(outputFilename, &error);
  if (!output) {
    llvm::errs() << error << "\n";
    return 1;
  }
  // Deep nesting would overflow the stack of MLIR's recursive parser: reject
  // it with a message, and parse and run passes on a thread with a stack that
  // holds the accepted depth (see mpmd/Support/Limits.h).
  if (std::string deep = mpmd::checkNestingDepth(input->getBuffer()); !deep.empty()) {
    llvm::errs() << inputFilename << ":" << deep << "\n";
    return 1;
  }
  bool ok = false;
  mpmd::runWithLargeStack([&] {
    ok = mlir::succeeded(mlir::MlirOptMain(output->os(), std::move(input), registry, config));
  });
  if (!ok)
    return 1;
  output->keep();
  return 0;
}
