//===- CallInline.cpp - inline mpmd.call, stamping call counters ------------===//

#include "mpmd/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/SymbolTable.h"

namespace mlir::mpmd {
#define GEN_PASS_DEF_CALLINLINEPASS
#include "mpmd/Transforms/Passes.h.inc"

namespace {

class CallInlinePass : public impl::CallInlinePassBase<CallInlinePass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    SymbolTable symbols(module);
    int64_t maxRounds = std::distance(module.getOps<func::FuncOp>().begin(),
                                      module.getOps<func::FuncOp>().end()) + 1;
    for (int64_t round = 0;; ++round) {
      SmallVector<CallOp> calls;
      module.walk([&](CallOp call) { calls.push_back(call); });
      if (calls.empty())
        break;
      if (round == maxRounds) {
        calls.front().emitError() << "recursive mpmd.call of @" << calls.front().getCallee()
                                  << " cannot be inlined";
        return signalPassFailure();
      }
      for (CallOp call : calls)
        if (failed(inlineCall(call, symbols)))
          return signalPassFailure();
    }
    for (func::FuncOp func : llvm::make_early_inc_range(module.getOps<func::FuncOp>()))
      if (func.isPrivate() && SymbolTable::symbolKnownUseEmpty(func, module))
        func.erase();
  }

  LogicalResult inlineCall(CallOp call, SymbolTable &symbols) {
    auto callee = symbols.lookup<func::FuncOp>(call.getCallee());
    if (!callee || callee.isExternal())
      return call.emitError() << "cannot inline mpmd.call of @" << call.getCallee()
                              << ": no function body in the module";
    if (!llvm::hasSingleElement(callee.getBody()))
      return call.emitError() << "cannot inline mpmd.call of @" << call.getCallee()
                              << ": its body has more than one block";
    Block &body = callee.getBody().front();
    IRMapping mapping;
    mapping.map(body.getArguments(), call.getOperands());
    OpBuilder builder(call);
    SmallVector<NamedAttribute> stamps(call->getDiscardableAttrs());
    for (Operation &op : body.without_terminator()) {
      Operation *clone = builder.clone(op, mapping);
      clone->walk([&](Operation *inner) {
        if (!isa<NamedComputationOp, NamedTensorOp, FragmentOp, CallOp>(inner))
          return;
        for (NamedAttribute attr : stamps)
          if (!inner->hasAttr(attr.getName()))
            inner->setAttr(attr.getName(), attr.getValue());
      });
    }
    for (auto [result, returned] : llvm::zip(call.getResults(), body.getTerminator()->getOperands()))
      result.replaceAllUsesWith(mapping.lookupOrDefault(returned));
    call.erase();
    return success();
  }
};

} // namespace
} // namespace mlir::mpmd
