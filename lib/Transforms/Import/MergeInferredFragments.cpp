//===- MergeInferredFragments.cpp - merge inferred fragments ----------------===//

#include "Common/PassBase.h"
#include "Common/MergeFragments.h"
#include "mpmd/Dialect/MpmdAttrNames.h"
#include "mpmd/Transforms/Passes.h"

#include <map>

namespace mlir::mpmd {
#define GEN_PASS_DEF_MERGEINFERREDFRAGMENTSPASS
#include "mpmd/Transforms/Passes.h.inc"

namespace {

/// Each step merges the first inferred fragment in block order that can be
/// merged, until none can. Rather than rescanning the block after every merge
/// (quadratic in the number of fragments), a worklist ordered by position
/// holds every inferred fragment that may be mergeable: one checked and found
/// unmergeable stays so until a merge moves one of its operands' definitions
/// or one of its users, i.e. until it uses a result of, or feeds an operand
/// of, a merged fragment; those are requeued. So the first fragment of the
/// worklist that merges is the first mergeable one in the block.
///
/// Positions are numbered once: a merge puts the merged fragment in the place
/// of one of the two it replaces, so block order never needs renumbering
/// (`Operation::isBeforeInBlock` would renumber the block after insertions).
class MergeInferredFragmentsPass : public MpmdPass<MergeInferredFragmentsPass, impl::MergeInferredFragmentsPassBase> {
  llvm::DenseMap<Operation *, int64_t> position;
  std::map<int64_t, FragmentOp> worklist;
  Block *block = nullptr;

  int64_t positionOf(Operation *op) const {
    auto it = position.find(op);
    assert(it != position.end() && "op is not in the block");
    return it->second;
  }
  bool isBefore(Operation *a, Operation *b) const { return positionOf(a) < positionOf(b); }

  /// Whether `v` is available before `point` (a block argument or defined by an
  /// op that comes before `point`, or by `point` itself).
  bool availableAt(Value v, Operation *point) const {
    Operation *def = v.getDefiningOp();
    return !def || def == point || isBefore(def, point);
  }

  /// Queues `op` if it is an inferred fragment of the block.
  void enqueue(Operation *op) {
    auto fragment = dyn_cast_or_null<FragmentOp>(op);
    if (fragment && fragment->getBlock() == block && !fragment.isUserFragment())
      worklist[positionOf(fragment)] = fragment;
  }

  /// Merges `first` into `second` at `at` (one of the two), keeping the
  /// positions and the worklist up to date.
  FragmentOp merge(FragmentOp first, FragmentOp second, Operation *at) {
    int64_t where = positionOf(at);
    for (Operation *op : {first.getOperation(), second.getOperation()}) {
      worklist.erase(positionOf(op));
      position.erase(op);
    }
    FragmentOp merged = mergeFragments(first, second, at);
    position[merged] = where;
    return merged;
  }

  /// Merges the inferred `fragment` into its closest producer on the same mesh
  /// or, failing that, its first consumer. Returns the merged fragment.
  FragmentOp tryMerge(FragmentOp fragment) {
    FragmentOp producer;
    for (Value v : fragment.getOperands()) {
      auto def = v.getDefiningOp<FragmentOp>();
      if (def && def.getMeshName() == fragment.getMeshName() &&
          (!producer || isBefore(producer, def)))
        producer = def;
    }
    if (producer && llvm::all_of(fragment.getOperands(),
                                 [&](Value v) { return availableAt(v, producer); }))
      return merge(producer, fragment, producer);

    FragmentOp consumer;
    for (Operation *user : fragment->getUsers()) {
      auto userFragment = dyn_cast<FragmentOp>(block->findAncestorOpInBlock(*user));
      if (userFragment && userFragment.getMeshName() == fragment.getMeshName() &&
          (!consumer || isBefore(userFragment, consumer)))
        consumer = userFragment;
    }
    if (consumer && llvm::all_of(fragment->getUsers(), [&](Operation *user) {
          Operation *ancestor = block->findAncestorOpInBlock(*user);
          return ancestor == consumer || isBefore(consumer, ancestor);
        }) && !feedsOtherMicrobatches(fragment, consumer))
      return merge(fragment, consumer, consumer);
    return {};
  }

  /// Whether results of `fragment` reach a fragment of another microbatch
  /// than `consumer` (a microbatch's fragment), directly or through inferred
  /// fragments (which may merge into it later). Such a fragment computes
  /// something once for several microbatches (slicing a stacked batch into
  /// all its microbatches, a cast of the parameters): merged into the first
  /// microbatch's fragment, it would give that microbatch a program of its
  /// own, so it stays a fragment of its own.
  bool feedsOtherMicrobatches(FragmentOp fragment, FragmentOp consumer) const {
    Attribute counter = consumer->getAttr(kCallCounterAttr);
    if (!counter)
      return false;
    SmallVector<Operation *> stack{fragment};
    llvm::SmallPtrSet<Operation *, 8> seen{fragment};
    while (!stack.empty()) {
      Operation *op = stack.pop_back_val();
      for (Operation *user : op->getUsers()) {
        auto other = dyn_cast_or_null<FragmentOp>(block->findAncestorOpInBlock(*user));
        if (!other || !seen.insert(other).second)
          continue;
        if (Attribute otherCounter = other->getAttr(kCallCounterAttr)) {
          if (otherCounter != counter)
            return true;
        } else if (!other.isUserFragment()) {
          stack.push_back(other);
        }
      }
    }
    return false;
  }

public:
  void runOnFunction(func::FuncOp func, TopologyAttr topology) {
    block = &func.getBody().front();
    position.clear();
    worklist.clear();
    int64_t index = 0;
    for (Operation &op : *block)
      position[&op] = index++;
    for (FragmentOp fragment : block->getOps<FragmentOp>())
      enqueue(fragment);
    while (!worklist.empty()) {
      FragmentOp fragment = worklist.begin()->second;
      worklist.erase(worklist.begin());
      FragmentOp merged = tryMerge(fragment);
      if (!merged)
        continue;
      // Only these may have become mergeable (fragments are isolated from
      // above: their operands are all their uses of outer values).
      enqueue(merged);
      for (Value v : merged.getOperands())
        enqueue(v.getDefiningOp());
      for (Operation *user : merged->getUsers())
        enqueue(block->findAncestorOpInBlock(*user));
    }
    position.clear();
  }
};

} // namespace
} // namespace mlir::mpmd
