//===- InlineMpmdCalls.cpp - inline mpmd.call, stamping call counters -------===//
//
// The pass of `-mpmd-call-inline` (the flag keeps Shardy's spelling).
//
//===----------------------------------------------------------------------===//

#include "Common/PassBase.h"
#include "Common/InlineSingleBlockCallees.h"

#include "mlir/IR/SymbolTable.h"
#include "mpmd/Transforms/Passes.h"

namespace mlir::mpmd {
#define GEN_PASS_DEF_INLINEMPMDCALLSPASS
#include "mpmd/Transforms/Passes.h.inc"

namespace {

class InlineMpmdCallsPass : public CheckedPass<InlineMpmdCallsPass, impl::InlineMpmdCallsPassBase> {
public:
  using CheckedPass::CheckedPass;

  void runOnCheckedOperation() {
    ModuleOp module = getOperation();
    if (failed(checkInlinedSize(
            module, "mpmd.call", "max-inlined-ops of -mpmd-call-inline",
            [](Operation *op) { return isa<CallOp>(op); }, maxInlinedOps)))
      return signalPassFailure();
    warnDuplicateCounters(module);
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
    if (failed(inlineSingleBlockCallees(module, "mpmd.call of", collect, stamp)))
      signalPassFailure();
  }

  /// Two calls in one block with the same `call_counter` whose callees run
  /// the same named computations make one microbatch of both (usually a
  /// copy-pasted counter): a warning naming both call sites.
  static void warnDuplicateCounters(ModuleOp module) {
    SymbolTable symbols(module);
    module.walk([&](Block *block) {
      // (label name, counter) -> the first call running it.
      llvm::DenseMap<std::pair<StringAttr, Attribute>, CallOp> first;
      for (CallOp call : block->getOps<CallOp>()) {
        Attribute counter = call->getAttr(kCallCounterAttr);
        auto callee = symbols.lookup<func::FuncOp>(call.getCallee());
        if (!counter || !callee)
          continue;
        CallOp earlier;
        callee.walk([&](Operation *op) {
          StringAttr name;
          if (auto nc = dyn_cast<NamedComputationOp>(op))
            name = StringAttr::get(op->getContext(), nc.getOrigin().getUserName());
          else if (auto nt = dyn_cast<NamedTensorOp>(op))
            name = nt.getNameAttr();
          if (!name)
            return;
          auto [it, inserted] = first.try_emplace({name, counter}, call);
          if (!inserted && it->second != call && !earlier)
            earlier = it->second;
        });
        if (!earlier)
          continue;
        std::string value;
        if (auto integer = dyn_cast<IntegerAttr>(counter))
          value = std::to_string(integer.getValue().getZExtValue());
        else
          llvm::raw_string_ostream(value) << counter;
        InFlightDiagnostic diag =
            call.emitWarning() << "mpmd.call with call_counter " << value
                               << " runs the same named computations as an earlier call with "
                                  "that counter: both form one microbatch; give each "
                                  "microbatch its own call_counter";
        diag.attachNote(earlier.getLoc()) << "the earlier call with call_counter " << value;
      }
    });
  }
};

} // namespace
} // namespace mlir::mpmd
