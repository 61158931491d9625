//===- MergeUserFragmentsIntoSchedulingUnits.cpp - one fragment per unit ---===//
//
// Merges a user fragment with its closest consumer on the same mesh when both
// belong to the same scheduling unit (forward or backward, microbatch, stage),
// so that labelling every block of a stage costs no more calls than labelling
// the stage.
//
// A forward fragment that recomputes, for the backward, a named computation
// the same microbatch already ran forward on that mesh (`jax.checkpoint`
// around a label runs the label's body again inside the gradient), and whose
// results only that microbatch's backward fragments on the mesh read, is
// part of the backward unit: its origins get transpose count 1 and it is
// marked `remat`, so it merges into the backward call instead of running as
// a forward call of its own.
//
//===----------------------------------------------------------------------===//

#include "Common/Fragments.h"
#include "Common/MergeFragments.h"
#include "Common/PassBase.h"
#include "mpmd/Transforms/Passes.h"

#include <deque>

namespace mlir::mpmd {
#define GEN_PASS_DEF_MERGEUSERFRAGMENTSINTOSCHEDULINGUNITSPASS
#include "mpmd/Transforms/Passes.h.inc"

namespace {

/// 'F' for a forward user fragment, 'B' for a backward one, 0 otherwise
/// (inferred, or forward and backward already merged).
char kindOf(FragmentOp fragment) {
  if (isForwardFragment(fragment))
    return 'F';
  if (isBackwardFragment(fragment))
    return 'B';
  return 0;
}

/// Whether `a` and `b` belong to the same scheduling unit: same mesh and
/// kind, same `call_counter` (or none), same stage (or none).
bool sameUnit(FragmentOp a, FragmentOp b) {
  char kind = kindOf(a);
  return kind && kind == kindOf(b) && a.getMeshName() == b.getMeshName() &&
         *getCallCounter(a) == *getCallCounter(b) && a.getStageIdAttr() == b.getStageIdAttr();
}

/// The first fragment in block order that uses a result of `producer`, on
/// the same mesh, when it belongs to the producer's unit; else null.
FragmentOp closestConsumerInUnit(FragmentOp producer) {
  FragmentOp closest;
  for (Operation *user : producer->getUsers()) {
    auto consumer = dyn_cast<FragmentOp>(user);
    if (!consumer || consumer->getBlock() != producer->getBlock() ||
        consumer.getMeshName() != producer.getMeshName())
      continue;
    if (!closest || consumer->isBeforeInBlock(closest))
      closest = consumer;
  }
  return closest && sameUnit(producer, closest) ? closest : FragmentOp();
}

/// Whether `forward` recomputes for the backward: an earlier forward fragment
/// of its unit (same mesh, microbatch and stage) shares an origin name with
/// it, and its results are read only by backward fragments of that unit.
bool isRecomputation(FragmentOp forward, ArrayRef<FragmentOp> earlierForwards) {
  if (forward->use_empty())
    return false;
  llvm::SmallDenseSet<StringRef> names;
  for (Attribute a : forward.getOrigin())
    names.insert(cast<UserOriginAttr>(a).getUserName());
  bool ranBefore = llvm::any_of(earlierForwards, [&](FragmentOp earlier) {
    return sameUnit(earlier, forward) && llvm::any_of(earlier.getOrigin(), [&](Attribute a) {
             return names.contains(cast<UserOriginAttr>(a).getUserName());
           });
  });
  return ranBefore && llvm::all_of(forward->getUsers(), [&](Operation *user) {
           auto backward = dyn_cast<FragmentOp>(user);
           return backward && isBackwardFragment(backward) &&
                  backward.getMeshName() == forward.getMeshName() &&
                  *getCallCounter(backward) == *getCallCounter(forward) &&
                  backward.getStageIdAttr() == forward.getStageIdAttr();
         });
}

/// Makes each recomputing forward fragment (`isRecomputation`) part of its
/// backward unit: transpose count 1 on its origins, and the `remat` marker.
void relabelRecomputations(func::FuncOp func) {
  SmallVector<FragmentOp> forwards, recomputations;
  func.walk([&](FragmentOp fragment) {
    if (!isForwardFragment(fragment) || !*getCallCounter(fragment))
      return;
    if (isRecomputation(fragment, forwards))
      recomputations.push_back(fragment);
    else
      forwards.push_back(fragment);
  });
  for (FragmentOp fragment : recomputations) {
    SmallVector<Attribute> origins;
    for (Attribute a : fragment.getOrigin())
      origins.push_back(UserOriginAttr::get(fragment.getContext(),
                                            cast<UserOriginAttr>(a).getUserName(), 1));
    fragment.setOriginAttr(ArrayAttr::get(fragment.getContext(), origins));
    fragment->setAttr(kRematAttr, UnitAttr::get(fragment.getContext()));
  }
}

class MergeUserFragmentsIntoSchedulingUnitsPass
    : public MpmdPass<MergeUserFragmentsIntoSchedulingUnitsPass,
                      impl::MergeUserFragmentsIntoSchedulingUnitsPassBase> {
public:
  void runOnFunction(func::FuncOp func, TopologyAttr) {
    if (failed(verifyCallCounters(func)))
      return signalPassFailure();
    relabelRecomputations(func);
    // Block order; a merged fragment is queued again (it may merge with its
    // own closest consumer next: a chain of blocks folds into one fragment).
    std::deque<FragmentOp> worklist;
    func.walk([&](FragmentOp fragment) {
      if (kindOf(fragment))
        worklist.push_back(fragment);
    });
    llvm::DenseSet<Operation *> erased;
    while (!worklist.empty()) {
      FragmentOp producer = worklist.front();
      worklist.pop_front();
      if (erased.contains(producer.getOperation()))
        continue;
      FragmentOp consumer = closestConsumerInUnit(producer);
      if (!consumer)
        continue;
      Operation *first = producer.getOperation(), *second = consumer.getOperation();
      FragmentOp merged = mergeIfLegal(producer, consumer);
      if (!merged)
        continue;
      erased.insert(first);
      erased.insert(second);
      erased.erase(merged.getOperation()); // (an address may be reused)
      worklist.push_front(merged);
    }
  }
};

} // namespace
} // namespace mlir::mpmd
