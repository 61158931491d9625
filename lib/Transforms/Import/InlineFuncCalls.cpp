//===- InlineFuncCalls.cpp - inline func.call ops ---------------------------===//

#include "Common/PassBase.h"
#include "Common/InlineSingleBlockCallees.h"
#include "mpmd/Transforms/Passes.h"

namespace mlir::mpmd {
#define GEN_PASS_DEF_INLINEFUNCCALLSPASS
#include "mpmd/Transforms/Passes.h.inc"

namespace {

class InlineFuncCallsPass : public CheckedPass<InlineFuncCallsPass, impl::InlineFuncCallsPassBase> {
public:
  using CheckedPass::CheckedPass;

  void runOnCheckedOperation() {
    ModuleOp module = getOperation();
    if (failed(checkInlinedSize(
            module, "func.call", "max-inlined-ops of -mpmd-inline-func-calls",
            [](Operation *op) { return isa<func::CallOp>(op); }, maxInlinedOps)))
      return signalPassFailure();
    auto collect = [&] {
      SmallVector<Operation *> calls;
      module.walk([&](func::CallOp call) { calls.push_back(call); });
      return calls;
    };
    if (failed(inlineSingleBlockCallees(module, "call to", collect, [](Operation *, Operation *) {})))
      signalPassFailure();
  }
};

} // namespace
} // namespace mlir::mpmd
