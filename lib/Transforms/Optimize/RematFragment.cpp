//===- RematFragment.cpp - recompute forward fragments before backward ----===//
//
// Clones a forward fragment right before each backward fragment of the same
// microbatch that uses it (when the backward does not already run right after
// it), so that the forward's results need not stay alive in between.
//
//===----------------------------------------------------------------------===//

#include "Common/PassBase.h"
#include "Common/Fragments.h"
#include "Common/MergeFragments.h"
#include "mpmd/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/SetVector.h"

namespace mlir::mpmd {
#define GEN_PASS_DEF_REMATFRAGMENTPASS
#include "mpmd/Transforms/Passes.h.inc"

namespace {

class RematFragmentPass : public MpmdPass<RematFragmentPass, impl::RematFragmentPassBase> {
public:
  using MpmdPass::MpmdPass;
  /// The driver's pass, configured by the partition's options.
  explicit RematFragmentPass(const ::mpmd::PartitionOptions &options) {
    mergeRematFragments = options.merge_remat_fragments;
  }

private:
  /// Clones `forward` right before `backward`, which alone uses the clone.
  /// Returns the fragment that now stands for `backward` (itself, or the
  /// merged fragment).
  FragmentOp remat(FragmentOp forward, FragmentOp backward) {
    OpBuilder builder(backward);
    auto clone = cast<FragmentOp>(builder.clone(*forward));
    clone->setAttr(kRematAttr, builder.getUnitAttr());
    for (auto [original, cloned] : llvm::zip(forward.getResults(), clone.getResults()))
      original.replaceUsesWithIf(cloned,
                                 [&](OpOperand &use) { return use.getOwner() == backward; });
    // Per-value shardings would no longer line up: such a clone stays whole.
    if (!clone.getInShardingsAttr() && !clone.getOutShardingsAttr())
      clone = pruneFragment(clone);
    if (!mergeRematFragments)
      return backward;
    return mergeFragments(clone, backward, backward);
  }

public:
  void runOnFunction(func::FuncOp func, TopologyAttr topology) {

    if (failed(verifyCallCounters(func)))
      return signalPassFailure();

    // Decide every (forward, backward) pair on the schedule as it is, then
    // rewrite: the clones do not change which pairs qualify.
    SmallVector<std::pair<FragmentOp, FragmentOp>> pairs;
    func.walk([&](FragmentOp forward) {
      if (!isForwardFragment(forward) || forward->hasAttr(kRematAttr))
        return;
      std::optional<uint32_t> counter = *getCallCounter(forward);
      if (!counter)
        return; // Not a scheduling unit.
      FragmentOp next = getNextFragmentOnMesh(forward);
      llvm::SetVector<FragmentOp> backwards;
      for (Operation *user : forward->getUsers()) {
        auto backward = dyn_cast<FragmentOp>(user);
        if (backward && backward != next && backward->getBlock() == forward->getBlock() &&
            isBackwardFragment(backward) && backward.getMeshName() == forward.getMeshName() &&
            backward.getStageId() == forward.getStageId() &&
            *getCallCounter(backward) == counter)
          backwards.insert(backward);
      }
      SmallVector<FragmentOp> ordered = backwards.takeVector();
      llvm::sort(ordered, [](FragmentOp a, FragmentOp b) { return a->isBeforeInBlock(b); });
      for (FragmentOp backward : ordered)
        pairs.emplace_back(forward, backward);
    });

    // A backward may use several forwards; merging replaces it.
    llvm::DenseMap<Operation *, FragmentOp> current;
    for (auto [forward, backward] : pairs) {
      FragmentOp target = current.lookup(backward);
      current[backward] = remat(forward, target ? target : backward);
    }
  }
};

} // namespace

std::unique_ptr<Pass> createRematFragmentPass(const ::mpmd::PartitionOptions &options) {
  return std::make_unique<RematFragmentPass>(options);
}

} // namespace mlir::mpmd
