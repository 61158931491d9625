//===- MergeForwardWithBackward.cpp - merge F with the B right after it ---===//
//
// Merges a forward fragment with the backward fragment of the same microbatch
// that runs next on its mesh (the last stage of a 1F1B schedule).
//
//===----------------------------------------------------------------------===//

#include "Common/Utils.h"
#include "mpmd/Transforms/Passes.h"

namespace mlir::mpmd {
#define GEN_PASS_DEF_MERGEFORWARDWITHBACKWARDPASS
#include "mpmd/Transforms/Passes.h.inc"

namespace {

/// Whether `v` is available right before `point`.
bool availableBefore(Value v, Operation *point) {
  Operation *def = v.getDefiningOp();
  if (!def)
    return true; // A block argument of the function (or loop).
  Operation *ancestor = point->getBlock()->findAncestorOpInBlock(*def);
  return ancestor && ancestor->isBeforeInBlock(point);
}

class MergeForwardWithBackwardPass
    : public impl::MergeForwardWithBackwardPassBase<MergeForwardWithBackwardPass> {
  /// The backward fragment `forward` should merge with, or null.
  FragmentOp findPartner(FragmentOp forward) {
    std::optional<uint32_t> counter = *getCallCounter(forward);
    if (!counter)
      return {}; // Not a scheduling unit.
    FragmentOp backward = getNextFragmentOnMesh(forward);
    if (!backward || !isBackwardFragment(backward) ||
        backward.getStageId() != forward.getStageId() || *getCallCounter(backward) != counter)
      return {};
    if (llvm::none_of(backward.getOperands(),
                      [&](Value v) { return v.getDefiningOp() == forward.getOperation(); }))
      return {}; // Independent: nothing to gain, keep the schedule's units.
    return backward;
  }

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (!func->hasAttr(kTopologyAttr) || func.isExternal())
      return;
    if (failed(verifyCallCounters(func)))
      return signalPassFailure();
    SmallVector<FragmentOp> forwards;
    func.walk([&](FragmentOp fragment) {
      if (isForwardFragment(fragment))
        forwards.push_back(fragment);
    });
    // Merging a pair erases exactly that pair, so the other forwards stay
    // valid; their partners are looked up on the current program.
    for (FragmentOp forward : forwards) {
      FragmentOp backward = findPartner(forward);
      if (!backward)
        continue;
      Block *block = forward->getBlock();
      // At the backward's position, every other use of the forward's results
      // must come after it; at the forward's position, every operand of the
      // backward must be available before it.
      bool atBackward = llvm::all_of(forward->getUsers(), [&](Operation *user) {
        Operation *ancestor = block->findAncestorOpInBlock(*user);
        return ancestor == backward.getOperation() ||
               (ancestor && backward->isBeforeInBlock(ancestor));
      });
      bool atForward = llvm::all_of(backward.getOperands(), [&](Value v) {
        return v.getDefiningOp() == forward.getOperation() || availableBefore(v, forward);
      });
      if (atBackward)
        mergeFragments(forward, backward, backward);
      else if (atForward)
        mergeFragments(forward, backward, forward);
    }
  }
};

} // namespace
} // namespace mlir::mpmd
