//===- MergeUserFragmentsIntoSchedulingUnits.cpp - one fragment per unit ---===//
//
// Merges a user fragment with its closest consumer on the same mesh when both
// belong to the same scheduling unit (forward or backward, microbatch, stage),
// so that labelling every block of a stage costs no more calls than labelling
// the stage.
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

class MergeUserFragmentsIntoSchedulingUnitsPass
    : public MpmdPass<MergeUserFragmentsIntoSchedulingUnitsPass,
                      impl::MergeUserFragmentsIntoSchedulingUnitsPassBase> {
public:
  void runOnFunction(func::FuncOp func, TopologyAttr) {
    if (failed(verifyCallCounters(func)))
      return signalPassFailure();
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
