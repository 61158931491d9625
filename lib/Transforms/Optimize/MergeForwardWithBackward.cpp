//===- MergeForwardWithBackward.cpp - merge F with the B right after it ---===//
//
// Merges a forward fragment with the backward fragment of the same microbatch
// that runs next on its mesh and reads one of its results (the last stage of
// a 1F1B schedule). Fragments without a `call_counter` pair with each other.
//
//===----------------------------------------------------------------------===//

#include "Common/PassBase.h"
#include "Common/Fragments.h"
#include "Common/MergeFragments.h"
#include "mpmd/Transforms/Passes.h"

namespace mlir::mpmd {
#define GEN_PASS_DEF_MERGEFORWARDWITHBACKWARDPASS
#include "mpmd/Transforms/Passes.h.inc"

namespace {

class MergeForwardWithBackwardPass : public MpmdPass<MergeForwardWithBackwardPass, impl::MergeForwardWithBackwardPassBase> {
  /// The backward fragment `forward` should merge with, or null.
  FragmentOp findPartner(FragmentOp forward) {
    // Both of one microbatch (the same `call_counter`), or both without one
    // (a program that is not microbatched: the pair is F and B of its one
    // step).
    std::optional<uint32_t> counter = *getCallCounter(forward);
    FragmentOp backward = getNextFragmentOnMesh(forward);
    if (!backward || !isBackwardFragment(backward) ||
        backward.getStageId() != forward.getStageId() || *getCallCounter(backward) != counter)
      return {};
    if (llvm::none_of(backward.getOperands(),
                      [&](Value v) { return v.getDefiningOp() == forward.getOperation(); }))
      return {}; // Independent: nothing to gain, keep the schedule's units.
    return backward;
  }

public:
  void runOnFunction(func::FuncOp func, TopologyAttr topology) {
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
      // At the backward's position if the forward's other uses come later,
      // else at the forward's if the backward's operands exist there. The
      // merged fragment runs both units: its calls are named `F3+B3`.
      std::string name = mergedUnitName(forward, backward, topology);
      FragmentOp merged = mergeIfLegal(forward, backward);
      if (merged && !name.empty())
        merged->setAttr(kUnitAttr, StringAttr::get(func.getContext(), name));
    }
  }
};

} // namespace
} // namespace mlir::mpmd
