//===- CallInline.cpp - inline mpmd.call, stamping call counters ------------===//

#include "Common/Inline.h"
#include "mpmd/Transforms/Passes.h"

namespace mlir::mpmd {
#define GEN_PASS_DEF_CALLINLINEPASS
#include "mpmd/Transforms/Passes.h.inc"

namespace {

class CallInlinePass : public impl::CallInlinePassBase<CallInlinePass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto collect = [&] {
      SmallVector<Operation *> calls;
      module.walk([&](CallOp call) { calls.push_back(call); });
      return calls;
    };
    // The call's discardable attributes (its `call_counter`) go onto the
    // labelled ops of the inlined body that do not have their own.
    auto stamp = [](Operation *call, Operation *clone) {
      clone->walk([&](Operation *inner) {
        if (!isa<NamedComputationOp, NamedTensorOp, FragmentOp, CallOp>(inner))
          return;
        for (NamedAttribute attr : call->getDiscardableAttrs())
          if (!inner->hasAttr(attr.getName()))
            inner->setAttr(attr.getName(), attr.getValue());
      });
    };
    if (failed(inlineAllCalls(module, "mpmd.call of", collect, stamp)))
      signalPassFailure();
  }
};

} // namespace
} // namespace mlir::mpmd
