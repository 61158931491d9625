//===- MergeInferredFragments.cpp - merge inferred fragments ----------------===//

#include "Common/Fragments.h"
#include "Common/PassBase.h"
#include "Common/MergeFragments.h"
#include "Common/StructuralKey.h"
#include "mpmd/Dialect/MpmdAttrNames.h"
#include "mpmd/Transforms/Passes.h"

#include "llvm/ADT/StringMap.h"

#include <functional>
#include <map>
#include <set>

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
/// Positions are numbered once, with room between them: a merge puts the
/// merged fragment in the place of one of the two it replaces, and a transfer
/// moved up takes a free position between its new neighbours, so block order
/// is renumbered only when that room runs out (`Operation::isBeforeInBlock`
/// would renumber the block after every insertion).
class MergeInferredFragmentsPass : public MpmdPass<MergeInferredFragmentsPass, impl::MergeInferredFragmentsPassBase> {
public:
  using MpmdPass::MpmdPass;

private:
  llvm::DenseMap<Operation *, int64_t> position;
  std::map<int64_t, FragmentOp> worklist;
  Block *block = nullptr;
  /// Inferred fragments that would make one microbatch's fragment differ
  /// from the others' if merged into it (see `findOneOffs`).
  llvm::DenseSet<Operation *> oneOffs;

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
    bool oneOff = oneOffs.erase(first) + oneOffs.erase(second);
    FragmentOp merged = mergeFragments(first, second, at);
    position[merged] = where;
    if (oneOff)
      oneOffs.insert(merged);
    return merged;
  }

  /// The fragment on the same mesh closest before `fragment` that produces
  /// one of its operands, or null.
  FragmentOp closestProducer(FragmentOp fragment) const {
    FragmentOp producer;
    for (Value v : fragment.getOperands()) {
      auto def = v.getDefiningOp<FragmentOp>();
      if (def && def.getMeshName() == fragment.getMeshName() &&
          (!producer || isBefore(producer, def)))
        producer = def;
    }
    return producer;
  }

  /// The user fragment an inferred fragment would end up in through the
  /// producer rule: the latest user fragment on its mesh among its producers
  /// and, for inferred producers (which merge on into theirs), theirs; null
  /// if none. Memoized in `eventual` (program order: producers first).
  FragmentOp eventualProducer(FragmentOp fragment,
                              llvm::DenseMap<Operation *, FragmentOp> &eventual) const {
    FragmentOp latest;
    for (Value v : fragment.getOperands()) {
      auto def = v.getDefiningOp<FragmentOp>();
      if (!def || def.getMeshName() != fragment.getMeshName())
        continue;
      FragmentOp candidate = def.isUserFragment() ? def : eventual.lookup(def);
      if (candidate && (!latest || isBefore(latest, candidate)))
        latest = candidate;
    }
    return eventual[fragment] = latest;
  }

  /// Finds the inferred fragments whose producer is a microbatch's fragment
  /// but that have no counterpart with the same body after the fragments of
  /// that computation in other microbatches: work done once after the last
  /// microbatch (an optimizer update after the gradients are accumulated).
  /// Merged into that microbatch's fragment, it would give the last
  /// microbatch a program of its own; the per-microbatch work (adding a
  /// microbatch's gradient to the running sum) has a counterpart for every
  /// microbatch and merges as usual.
  void findOneOffs() {
    oneOffs.clear();
    // Computation (sibling key) -> its microbatches.
    llvm::StringMap<std::set<uint64_t>> microbatches;
    // (computation, inferred body) -> per microbatch, the inferred fragments
    // with that body after that microbatch's fragment, in program order.
    std::map<std::pair<std::string, std::string>, std::map<uint64_t, SmallVector<FragmentOp>>>
        followers;
    llvm::DenseMap<Operation *, FragmentOp> eventual;
    for (FragmentOp fragment : block->getOps<FragmentOp>()) {
      if (fragment.isUserFragment()) {
        if (auto counter = fragment->getAttrOfType<IntegerAttr>(kCallCounterAttr))
          microbatches[siblingKey(fragment)].insert(counter.getValue().getZExtValue());
        continue;
      }
      FragmentOp producer = eventualProducer(fragment, eventual);
      auto counter = producer ? producer->getAttrOfType<IntegerAttr>(kCallCounterAttr)
                              : IntegerAttr();
      if (!counter || !producer.isUserFragment())
        continue;
      std::string body = blockKey(fragment.getRegion().front(), /*withArguments=*/false);
      followers[{siblingKey(producer), std::move(body)}][counter.getValue().getZExtValue()]
          .push_back(fragment);
    }
    // Every microbatch has as many of the per-microbatch ones; those some
    // microbatch has in excess (the later ones) are one-offs.
    for (auto &[key, perMicrobatch] : followers) {
      size_t all = microbatches[key.first].size();
      size_t common = 0;
      if (all > 1 && perMicrobatch.size() == all) {
        common = perMicrobatch.begin()->second.size();
        for (auto &[_, fragments] : perMicrobatch)
          common = std::min(common, fragments.size());
      } else if (all <= 1) {
        continue; // one microbatch: nothing to differ from
      }
      for (auto &[_, fragments] : perMicrobatch)
        for (FragmentOp fragment : llvm::drop_begin(fragments, common))
          oneOffs.insert(fragment);
    }
  }

  /// Merges the inferred `fragment` into its closest producer on the same mesh
  /// or, failing that, its first consumer. A fragment that only passes its
  /// operands through optimization barriers tries its consumer first (see
  /// `onlyBarriers`). Returns the merged fragment.
  FragmentOp tryMerge(FragmentOp fragment) {
    bool barriers = onlyBarriers(fragment);
    if (barriers)
      if (FragmentOp merged = mergeIntoConsumer(fragment))
        return merged;
    FragmentOp producer = closestProducer(fragment);
    bool intoOneMicrobatch = producer && producer->hasAttr(kCallCounterAttr) &&
                             oneOffs.contains(fragment);
    if (producer && !intoOneMicrobatch && !mixesMicrobatches(producer, fragment) &&
        makeAvailableAt(fragment, producer))
      return merge(producer, fragment, producer);
    return barriers ? FragmentOp() : mergeIntoConsumer(fragment);
  }

  /// Makes every operand of `fragment` available at `point`, moving the
  /// transfers that bring the later ones right before `point` where what they
  /// read is available there (a transfer of a transfer moves with it); so a
  /// value sent back to this mesh does not keep the fragment from merging into
  /// its producer. Whether it could; if not, nothing moved.
  bool makeAvailableAt(FragmentOp fragment, Operation *point) {
    SmallVector<Operation *> toMove; // in dependency order
    llvm::SmallPtrSet<Operation *, 4> moving;
    // `point`'s own results are available to `fragment` (they become values
    // of the merged fragment), not to a transfer moved before it.
    std::function<bool(Value, bool)> bring = [&](Value v, bool forFragment) {
      Operation *def = v.getDefiningOp();
      if (!def || (def == point ? forFragment : isBefore(def, point)))
        return true;
      if (moving.contains(def))
        return true;
      if (!isa<TransferOp>(def) || !bring(def->getOperand(0), /*forFragment=*/false))
        return false;
      moving.insert(def);
      toMove.push_back(def);
      return true;
    };
    for (Value v : fragment.getOperands())
      if (!bring(v, /*forFragment=*/true))
        return false;
    for (Operation *op : toMove)
      moveBefore(op, point);
    return true;
  }

  /// Moves `op` right before `point`, giving it a position between those of
  /// its new neighbours (renumbering the block when there is no room left).
  void moveBefore(Operation *op, Operation *point) {
    op->moveBefore(point);
    Operation *previous = op->getPrevNode();
    int64_t low = previous ? positionOf(previous) : positionOf(point) - kPositionGap;
    int64_t high = positionOf(point);
    if (high - low < 2) {
      renumber();
      return;
    }
    position[op] = low + (high - low) / 2;
  }

  /// Room between consecutive positions: ops moved between two others take
  /// the middle of what is left.
  static constexpr int64_t kPositionGap = int64_t(1) << 20;

  /// Numbers the ops of the block in order, `kPositionGap` apart, and rekeys
  /// the worklist.
  void renumber() {
    int64_t index = 0;
    for (Operation &op : *block)
      position[&op] = kPositionGap * index++;
    std::map<int64_t, FragmentOp> rekeyed;
    for (auto &[_, fragment] : worklist)
      rekeyed[positionOf(fragment)] = fragment;
    worklist = std::move(rekeyed);
  }

  /// Whether every use of `producer`'s results is in `point` or after it.
  bool usedOnlyFrom(FragmentOp producer, Operation *point) const {
    return llvm::all_of(producer->getUsers(), [&](Operation *user) {
      Operation *ancestor = block->findAncestorOpInBlock(*user);
      return ancestor == point || isBefore(point, ancestor);
    });
  }

  /// Whether `fragment` computes nothing: its body is optimization barriers
  /// only, so each result is one of its operands. `jax.checkpoint` puts such
  /// a barrier over what a recomputation reads (the parameters, the block's
  /// input): it belongs with the recomputation, its consumer. In the
  /// producer (the forward) it would return each of those values once more,
  /// a copy of every parameter per microbatch and a second transfer of an
  /// activation already sent to the next mesh.
  static bool onlyBarriers(FragmentOp fragment) {
    Block &body = fragment.getRegion().front();
    return !body.without_terminator().empty() &&
           llvm::all_of(body.without_terminator(),
                        [](Operation &op) { return isOptimizationBarrier(&op); });
  }

  /// Merges the inferred `fragment` into its first consumer on the same mesh
  /// where that keeps the program's order and microbatches apart; the merged
  /// fragment, or null. (Only the first consumer can qualify: a later one
  /// comes after another use of the fragment's results and is not the next
  /// fragment of the mesh. So `merge-any-consumer` has nothing to add here.)
  FragmentOp mergeIntoConsumer(FragmentOp fragment) {
    FragmentOp consumer;
    for (Operation *user : fragment->getUsers()) {
      auto userFragment = dyn_cast<FragmentOp>(block->findAncestorOpInBlock(*user));
      if (userFragment && userFragment.getMeshName() == fragment.getMeshName() &&
          (!consumer || isBefore(userFragment, consumer)))
        consumer = userFragment;
    }
    if (!consumer || feedsOtherMicrobatches(fragment, consumer) ||
        mixesMicrobatches(fragment, consumer))
      return {};
    if (usedOnlyFrom(fragment, consumer))
      return merge(fragment, consumer, consumer);
    // A result is used before the consumer (e.g. sent to another mesh): the
    // consumer moves up to the fragment when it is the very next fragment of
    // the mesh (so the mesh's order stays) and its operands exist there.
    if (getNextFragmentOnMesh(fragment) == consumer &&
        llvm::all_of(consumer.getOperands(), [&](Value v) {
          return v.getDefiningOp() == fragment.getOperation() || availableAt(v, fragment);
        }))
      return merge(fragment, consumer, fragment);
    return {};
  }

  /// Calls `visit` with the call counter of each microbatch's fragment that
  /// results of `fragment` reach, directly or through inferred fragments
  /// (which may merge on), until `visit` returns true; whether it did.
  bool anyMicrobatchReached(FragmentOp fragment,
                            function_ref<bool(IntegerAttr)> visit) const {
    SmallVector<Operation *> stack{fragment};
    llvm::SmallPtrSet<Operation *, 8> seen{fragment};
    while (!stack.empty()) {
      Operation *op = stack.pop_back_val();
      for (Operation *user : op->getUsers()) {
        auto other = dyn_cast_or_null<FragmentOp>(block->findAncestorOpInBlock(*user));
        if (!other || !seen.insert(other).second)
          continue;
        if (auto counter = other->getAttrOfType<IntegerAttr>(kCallCounterAttr)) {
          if (visit(counter))
            return true;
        } else if (!other.isUserFragment()) {
          stack.push_back(other);
        }
      }
    }
    return false;
  }

  /// Which microbatch fragments the results of `fragment` reach: none (0
  /// and no counter), one (1 and its call counter) or several (2).
  std::pair<int, uint64_t> microbatchesReached(FragmentOp fragment) const {
    std::optional<uint64_t> first;
    bool several = anyMicrobatchReached(fragment, [&](IntegerAttr counter) {
      uint64_t value = counter.getValue().getZExtValue();
      if (first && *first != value)
        return true;
      first = value;
      return false;
    });
    if (several)
      return {2, 0};
    return first ? std::pair<int, uint64_t>{1, *first} : std::pair<int, uint64_t>{0, 0};
  }

  /// Whether merging the inferred fragments `a` and `b` would put work for
  /// one microbatch only together with work for other microbatches: e.g.
  /// slice i of a stacked batch with slice j, or with the reshape that feeds
  /// every slice. Merged, the slices of all microbatches would make one
  /// program with a result per microbatch (its compile growing with their
  /// number); apart, each slice merges into its microbatch's fragment, where
  /// the slices of all microbatches differ only in their offsets, which
  /// become an operand (-mpmd-parameterize-fragment-constants).
  bool mixesMicrobatches(FragmentOp a, FragmentOp b) const {
    if (a.isUserFragment() || b.isUserFragment())
      return false;
    auto ra = microbatchesReached(a);
    if (ra.first == 0)
      return false;
    auto rb = microbatchesReached(b);
    if (rb.first == 0 || (ra.first == 2 && rb.first == 2))
      return false;
    return ra != rb;
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
    return counter && anyMicrobatchReached(fragment, [&](IntegerAttr other) {
      return Attribute(other) != counter;
    });
  }

public:
  void runOnFunction(func::FuncOp func, TopologyAttr topology) {
    block = &func.getBody().front();
    position.clear();
    worklist.clear();
    renumber();
    findOneOffs();
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
    mergeOneOffs();
    if (mergeSideways)
      mergeSidewaysAll();
    position.clear();
    oneOffs.clear();
  }

private:
  /// `merge-sideways`: each inferred fragment still on its own, in program
  /// order, merges with the next fragment of its mesh where neither needs
  /// the other's results in between: at the later one's position when
  /// nothing reads its results before that, else at its own when the later
  /// one's operands exist there. A merged fragment that is still inferred
  /// tries again with the next one.
  void mergeSidewaysAll() {
    SmallVector<FragmentOp> inferred;
    for (FragmentOp fragment : block->getOps<FragmentOp>())
      if (!fragment.isUserFragment())
        inferred.push_back(fragment);
    for (FragmentOp fragment : inferred) {
      // One merged into an earlier one is gone (its position too); a merged
      // fragment that took its address is a live one, as good to try.
      if (!position.count(fragment))
        continue;
      while (!fragment.isUserFragment()) {
        FragmentOp next = getNextFragmentOnMesh(fragment);
        if (!next || mixesMicrobatches(fragment, next) ||
            (oneOffs.contains(fragment) && next->hasAttr(kCallCounterAttr)))
          break;
        FragmentOp merged = mergeWhereLegal(fragment, next);
        if (!merged)
          break;
        fragment = merged;
      }
    }
  }

  /// The one-off fragments of each mesh (kept out of the last microbatch's
  /// fragment) merge with each other where the data flow allows: one
  /// fragment for the optimizer update of a mesh rather than one per
  /// parameter.
  void mergeOneOffs() {
    SmallVector<FragmentOp> ordered;
    for (FragmentOp fragment : block->getOps<FragmentOp>())
      if (oneOffs.contains(fragment))
        ordered.push_back(fragment);
    llvm::StringMap<FragmentOp> current;
    for (FragmentOp fragment : ordered) {
      FragmentOp &into = current[fragment.getMeshName()];
      if (!into) {
        into = fragment;
        continue;
      }
      FragmentOp merged = mergeWhereLegal(into, fragment);
      into = merged ? merged : fragment;
    }
  }

  /// Merges `first` with the later fragment `second` at `second`'s position
  /// when nothing reads `first`'s results before it, else at `first`'s when
  /// `second`'s operands exist there; the merged fragment, or null (nothing
  /// changed). (`mergeIfLegal` with this pass's positions.)
  FragmentOp mergeWhereLegal(FragmentOp first, FragmentOp second) {
    if (usedOnlyFrom(first, second))
      return merge(first, second, second);
    if (llvm::all_of(second.getOperands(), [&](Value v) { return availableAt(v, first); }))
      return merge(first, second, first);
    return {};
  }
};

} // namespace
} // namespace mlir::mpmd
