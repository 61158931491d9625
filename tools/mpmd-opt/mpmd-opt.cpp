//===- mpmd-opt.cpp - mpmd optimizer driver ---------------------------------===//
//
// mlir-opt for mpmd: our dialect, func, and every mpmd pass and pipeline.
// StableHLO, Shardy and the other dialects JAX emits are always accepted as
// unregistered operations (generic form), so modules printed by JAX parse.
//
//===----------------------------------------------------------------------===//

#include "mpmd/Dialect/MpmdDialect.h"
#include "mpmd/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/ToolOutputFile.h"

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  mlir::DialectRegistry registry;
  registry.insert<mlir::mpmd::MpmdDialect, mlir::func::FuncDialect>();
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  mlir::registerSymbolDCEPass();
  mlir::mpmd::registerMpmdPassesAndPipelines();

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
  auto output = mlir::openOutputFile(outputFilename, &error);
  if (!output) {
    llvm::errs() << error << "\n";
    return 1;
  }
  if (mlir::failed(mlir::MlirOptMain(output->os(), std::move(input), registry, config)))
    return 1;
  output->keep();
  return 0;
}
