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
// a forward call of its own. What stands between two fragments of a unit
// (a transfer that could come earlier, the barrier `jax.checkpoint` puts on
// a residual) is moved or merged out of the way (`clearPath`).
//
//===----------------------------------------------------------------------===//

#include "Common/Fragments.h"
#include "Common/MergeFragments.h"
#include "Common/PassBase.h"
#include "mpmd/Transforms/Passes.h"

#include <deque>
#include <functional>

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

/// The first user fragment in block order that uses a result of `producer`
/// on the same mesh, directly or through an inferred fragment of that mesh
/// that only it reads (the barrier `jax.checkpoint` puts on a residual),
/// when it belongs to the producer's unit; else null.
FragmentOp closestConsumerInUnit(FragmentOp producer) {
  FragmentOp closest;
  for (Operation *user : producer->getUsers()) {
    auto consumer = dyn_cast<FragmentOp>(user);
    if (!consumer || consumer->getBlock() != producer->getBlock() ||
        consumer.getMeshName() != producer.getMeshName())
      continue;
    if (!consumer.isUserFragment()) {
      auto users = consumer->getUsers();
      if (users.empty() || !llvm::all_equal(users))
        continue;
      auto through = dyn_cast<FragmentOp>(*users.begin());
      if (!through || !through.isUserFragment() ||
          through.getMeshName() != producer.getMeshName())
        continue;
      consumer = through;
    }
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
    if (!isForwardFragment(fragment))
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

/// Whether `op` may run earlier than it does: a transfer, or an inferred
/// fragment whose body only computes (no op without results, no custom call).
bool isMovable(Operation *op) {
  if (isa<TransferOp>(op))
    return true;
  auto fragment = dyn_cast<FragmentOp>(op);
  if (!fragment || fragment.isUserFragment())
    return false;
  return llvm::all_of(fragment.getRegion().front().without_terminator(), [](Operation &inner) {
    return inner.getNumResults() > 0 && inner.getName().getStringRef() != "stablehlo.custom_call";
  });
}

/// Clears what keeps `consumer` from merging at `producer`'s position: each
/// operand of `consumer` made between the two
/// - by a movable op (`isMovable`), with the movable ops made there that
///   it needs, is moved right before `producer`;
/// - by an inferred fragment on the consumer's mesh that only `consumer`
///   reads (the barrier `jax.checkpoint` puts on a residual) is merged into
///   `consumer`.
/// Returns the consumer (merged with those fragments); `cleared` says
/// whether nothing else is in the way.
FragmentOp clearPath(FragmentOp producer, FragmentOp consumer,
                     llvm::DenseSet<Operation *> &erased, bool &cleared) {
  cleared = false;
  Block *block = producer->getBlock();
  auto between = [&](Operation *def) {
    return def && def != producer.getOperation() && def->getBlock() == block &&
           producer->isBeforeInBlock(def) && def->isBeforeInBlock(consumer);
  };
  // Moves `op` (made between the two) and what it needs from there right
  // before `producer`; false (nothing moved) when one of them cannot move.
  std::function<bool(Operation *, bool)> hoist = [&](Operation *op, bool apply) {
    if (op == producer.getOperation())
      return false;
    if (!between(op))
      return true;
    if (!isMovable(op))
      return false;
    for (Value operand : op->getOperands())
      if (!hoist(operand.getDefiningOp(), apply))
        return false;
    if (apply && between(op))
      op->moveBefore(producer);
    return true;
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (Value v : consumer->getOperands()) {
      Operation *def = v.getDefiningOp();
      if (!between(def))
        continue;
      auto fragment = dyn_cast<FragmentOp>(def);
      if (hoist(def, /*apply=*/false)) {
        hoist(def, /*apply=*/true);
      } else if (fragment && !fragment.isUserFragment() &&
                 fragment.getMeshName() == consumer.getMeshName() &&
                 llvm::all_of(def->getUsers(), [&](Operation *u) { return u == consumer; })) {
        FragmentOp merged = mergeFragments(fragment, consumer, consumer);
        erased.insert(def);
        erased.insert(consumer.getOperation());
        erased.erase(merged.getOperation());
        consumer = merged;
      } else {
        return consumer;
      }
      changed = true;
      break;
    }
  }
  cleared = true;
  return consumer;
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
    // Until nothing merges: a pair may only become legal once a fragment
    // between them has merged with the second.
    for (bool mergedAny = true; mergedAny;)
      mergedAny = mergeRound(func);
  }

  /// One pass over the fragments in block order; whether anything merged.
  bool mergeRound(func::FuncOp func) {
    bool mergedAny = false;
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
      FragmentOp merged = mergeIfLegal(producer, consumer);
      if (!merged) {
        bool cleared;
        FragmentOp before = consumer;
        consumer = clearPath(producer, consumer, erased, cleared);
        if (consumer != before)
          worklist.push_back(consumer); // (merged with what stood in the way)
        merged = cleared ? mergeIfLegal(producer, consumer) : FragmentOp();
      }
      if (!merged)
        continue;
      Operation *first = producer.getOperation(), *second = consumer.getOperation();
      erased.insert(first);
      erased.insert(second);
      erased.erase(merged.getOperation()); // (an address may be reused)
      worklist.push_front(merged);
      mergedAny = true;
    }
    return mergedAny;
  }
};

} // namespace
} // namespace mlir::mpmd
