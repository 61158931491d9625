//===- EraseUnusedCalleeBlockArguments.cpp - trim mpmd.call signatures -----===//
//
// For a private function that only `mpmd.call` calls: a result that just
// returns an argument is dropped (each call's uses of it read the call's
// operand instead), then the arguments nothing reads any more are dropped
// from the function and from every call. A call of a function left with an
// empty body (no results, nothing to compute) is erased, and so is such a
// function once nothing calls it.
//
//===----------------------------------------------------------------------===//

#include "Common/Fragments.h"
#include "Common/PassBase.h"
#include "mpmd/Compat/Passes.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/BitVector.h"

namespace mlir::mpmd {
#define GEN_PASS_DEF_ERASEUNUSEDCALLEEBLOCKARGUMENTSPASS
#include "mpmd/Compat/Passes.h.inc"

namespace {

/// `call` rebuilt without the results in `drop` (their uses are gone).
CallOp dropResults(CallOp call, const llvm::BitVector &drop) {
  SmallVector<Type> types;
  SmallVector<Value> kept;
  for (OpResult result : call->getResults())
    if (!drop.test(result.getResultNumber())) {
      types.push_back(result.getType());
      kept.push_back(result);
    }
  OpBuilder b(call);
  auto replacement =
      CallOp::create(b, call.getLoc(), types, call->getOperands(), call->getAttrs());
  for (auto [old, now] : llvm::zip(kept, replacement->getResults()))
    old.replaceAllUsesWith(now);
  call.erase();
  return replacement;
}

class EraseUnusedCalleeBlockArgumentsPass
    : public CheckedPass<EraseUnusedCalleeBlockArgumentsPass, impl::EraseUnusedCalleeBlockArgumentsPassBase> {
public:
  using CheckedPass::CheckedPass;

  void runOnCheckedOperation() {
    ModuleOp module = getOperation();
    for (func::FuncOp func : llvm::make_early_inc_range(module.getOps<func::FuncOp>())) {
      if (func.isExternal() || !func.isPrivate())
        continue;
      std::optional<SmallVector<CallOp>> calls = getMpmdCalls(func, module);
      if (!calls || calls->empty())
        continue;
      trim(func, *calls);
    }
  }

private:
  void trim(func::FuncOp func, SmallVector<CallOp> calls) {
    Block &body = func.getBody().front();
    Operation *terminator = body.getTerminator();
    // Results that return an argument: the calls read their operand.
    llvm::BitVector forwarded(terminator->getNumOperands());
    for (OpOperand &returned : terminator->getOpOperands())
      if (auto arg = dyn_cast<BlockArgument>(returned.get()); arg && arg.getOwner() == &body) {
        forwarded.set(returned.getOperandNumber());
        for (CallOp call : calls)
          call->getResult(returned.getOperandNumber())
              .replaceAllUsesWith(call->getOperand(arg.getArgNumber()));
      }
    if (forwarded.any()) {
      terminator->eraseOperands(forwarded);
      (void)func.eraseResults(forwarded);
      for (CallOp &call : calls)
        call = dropResults(call, forwarded);
    }
    // Arguments nothing reads.
    llvm::BitVector unused(func.getNumArguments());
    for (BlockArgument arg : body.getArguments())
      if (arg.use_empty())
        unused.set(arg.getArgNumber());
    if (unused.any()) {
      (void)func.eraseArguments(unused);
      for (CallOp call : calls)
        call->eraseOperands(unused);
    }
    // Nothing left to compute: the calls and the function go.
    if (func.getNumResults() == 0 && &body.front() == terminator) {
      for (CallOp call : calls)
        call.erase();
      func.erase();
    }
  }
};

} // namespace
} // namespace mlir::mpmd
