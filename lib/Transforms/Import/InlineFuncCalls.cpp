//===- InlineFuncCalls.cpp - inline func.call ops ---------------------------===//

#include "mpmd/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/SymbolTable.h"

namespace mlir::mpmd {
#define GEN_PASS_DEF_INLINEFUNCCALLSPASS
#include "mpmd/Transforms/Passes.h.inc"

namespace {

class InlineFuncCallsPass : public impl::InlineFuncCallsPassBase<InlineFuncCallsPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    SymbolTable symbols(module);
    // Each round inlines the calls present; callees may themselves call, so
    // repeat. A call chain deeper than the number of functions is recursion.
    int64_t maxRounds = std::distance(module.getOps<func::FuncOp>().begin(),
                                      module.getOps<func::FuncOp>().end()) + 1;
    for (int64_t round = 0;; ++round) {
      SmallVector<func::CallOp> calls;
      module.walk([&](func::CallOp call) { calls.push_back(call); });
      if (calls.empty())
        break;
      if (round == maxRounds) {
        calls.front().emitError() << "recursive call to @" << calls.front().getCallee()
                                  << " cannot be inlined";
        return signalPassFailure();
      }
      for (func::CallOp call : calls)
        if (failed(inlineCall(call, symbols)))
          return signalPassFailure();
    }
    for (func::FuncOp func : llvm::make_early_inc_range(module.getOps<func::FuncOp>()))
      if (func.isPrivate() && SymbolTable::symbolKnownUseEmpty(func, module))
        func.erase();
  }

  LogicalResult inlineCall(func::CallOp call, SymbolTable &symbols) {
    auto callee = symbols.lookup<func::FuncOp>(call.getCallee());
    if (!callee || callee.isExternal())
      return call.emitError() << "cannot inline call to @" << call.getCallee()
                              << ": no function body in the module";
    if (!llvm::hasSingleElement(callee.getBody()))
      return call.emitError() << "cannot inline call to @" << call.getCallee()
                              << ": its body has more than one block";
    Block &body = callee.getBody().front();
    IRMapping mapping;
    mapping.map(body.getArguments(), call.getOperands());
    OpBuilder builder(call);
    for (Operation &op : body.without_terminator())
      builder.clone(op, mapping);
    for (auto [result, returned] : llvm::zip(call.getResults(), body.getTerminator()->getOperands()))
      result.replaceAllUsesWith(mapping.lookupOrDefault(returned));
    call.erase();
    return success();
  }
};

} // namespace
} // namespace mlir::mpmd
