//===- MergeInferredFragments.cpp - merge inferred fragments ----------------===//

#include "Common/Utils.h"
#include "mpmd/Transforms/Passes.h"

namespace mlir::mpmd {
#define GEN_PASS_DEF_MERGEINFERREDFRAGMENTSPASS
#include "mpmd/Transforms/Passes.h.inc"

namespace {

/// Whether `v` is available before `point` (a block argument or defined by an
/// op that comes before `point`, or by `point` itself).
bool availableAt(Value v, Operation *point) {
  Operation *def = v.getDefiningOp();
  return !def || def == point || def->isBeforeInBlock(point);
}

class MergeInferredFragmentsPass
    : public impl::MergeInferredFragmentsPassBase<MergeInferredFragmentsPass> {
  /// Merges the inferred `fragment` into its closest producer on the same mesh
  /// or, failing that, its first consumer. Returns the merged fragment.
  FragmentOp tryMerge(FragmentOp fragment) {
    FragmentOp producer;
    for (Value v : fragment.getOperands()) {
      auto def = v.getDefiningOp<FragmentOp>();
      if (def && def.getMeshName() == fragment.getMeshName() &&
          (!producer || producer->isBeforeInBlock(def)))
        producer = def;
    }
    if (producer && llvm::all_of(fragment.getOperands(),
                                 [&](Value v) { return availableAt(v, producer); }))
      return mergeFragments(producer, fragment, producer);

    Block *block = fragment->getBlock();
    FragmentOp consumer;
    for (Operation *user : fragment->getUsers()) {
      auto userFragment = dyn_cast<FragmentOp>(block->findAncestorOpInBlock(*user));
      if (userFragment && userFragment.getMeshName() == fragment.getMeshName() &&
          (!consumer || userFragment->isBeforeInBlock(consumer)))
        consumer = userFragment;
    }
    if (consumer && llvm::all_of(fragment->getUsers(), [&](Operation *user) {
          Operation *ancestor = block->findAncestorOpInBlock(*user);
          return ancestor == consumer || consumer->isBeforeInBlock(ancestor);
        }))
      return mergeFragments(fragment, consumer, consumer);
    return {};
  }

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (!func->hasAttr(kTopologyAttr) || func.isExternal())
      return;
    Block &block = func.getBody().front();
    bool changed = true;
    while (changed) {
      changed = false;
      for (FragmentOp fragment : llvm::make_early_inc_range(block.getOps<FragmentOp>())) {
        if (fragment.isUserFragment())
          continue;
        if (tryMerge(fragment)) {
          changed = true;
          break; // The merge erased ops; rescan.
        }
      }
    }
  }
};

} // namespace
} // namespace mlir::mpmd
