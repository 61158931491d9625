//===- MergeFragments.cpp - merging two fragments, pruning one ------------===//

#include "Common/MergeFragments.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/BitVector.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SetVector.h"

using namespace mlir;
using namespace mlir::mpmd;

namespace {

/// Whether `op` can be erased when its results are unused. Unregistered ops
/// (StableHLO here) are treated as pure data flow, but an op without results
/// is kept: it can only be there for its effects.
bool isDeadWhenUnused(Operation &op) {
  if (op.getNumResults() == 0 || !op.use_empty())
    return false;
  return !op.isRegistered() || isMemoryEffectFree(&op);
}

/// The tensor type a merged operand has inside the merged body.
Type argumentType(Value v) { return cast<MeshTensorType>(v.getType()).getGlobalTensorType(); }

/// Makes argument `arg` of the kept body the one of merged operand `v`.
void adopt(BlockArgument arg, Value v) {
  if (Type type = argumentType(v); arg.getType() != type)
    arg.setType(type);
  arg.setLoc(v.getLoc());
}

/// Gives `merged` the discardable attributes of `first` and `second`:
/// `second`'s win where both have one, except
/// - `call_counter`: that of the user fragment where only one of the two is
///   one (an inferred fragment's counter says less about whose work it is);
///   none where both are inferred;
/// - `mpmd.inferred_by`: the passes of both, in order, or none where the
///   merged fragment is a user fragment.
void mergeDiscardableAttrs(FragmentOp first, FragmentOp second, FragmentOp merged) {
  for (NamedAttribute attr : first->getDiscardableAttrs())
    merged->setAttr(attr.getName(), attr.getValue());
  for (NamedAttribute attr : second->getDiscardableAttrs())
    merged->setAttr(attr.getName(), attr.getValue());
  bool firstUser = first.isUserFragment(), secondUser = second.isUserFragment();
  if (!firstUser && !secondUser)
    merged->removeAttr(kCallCounterAttr);
  else if (firstUser != secondUser) {
    FragmentOp user = firstUser ? first : second;
    if (Attribute counter = user->getAttr(kCallCounterAttr))
      merged->setAttr(kCallCounterAttr, counter);
    else
      merged->removeAttr(kCallCounterAttr);
  }
  if (merged.isUserFragment()) {
    merged->removeAttr(kInferredByAttr);
    return;
  }
  llvm::SetVector<Attribute> passes;
  for (FragmentOp fragment : {first, second})
    if (auto by = fragment->getAttrOfType<ArrayAttr>(kInferredByAttr))
      passes.insert(by.begin(), by.end());
  if (!passes.empty())
    merged->setAttr(kInferredByAttr, ArrayAttr::get(merged.getContext(), passes.getArrayRef()));
}

/// The fragment that merges `first` and `second`, without a body, before
/// `insertionPoint`: `resultTypes` and `operands` as given, the origins of
/// both (in order), `second`'s mesh, the stage of either, and the attributes
/// of `mergeDiscardableAttrs`.
FragmentOp createMergedFragment(FragmentOp first, FragmentOp second, TypeRange resultTypes,
                                ValueRange operands, Operation *insertionPoint) {
  llvm::SetVector<Attribute> origins(first.getOrigin().begin(), first.getOrigin().end());
  origins.insert(second.getOrigin().begin(), second.getOrigin().end());
  OpBuilder builder(insertionPoint);
  auto merged = FragmentOp::create(builder,
      second.getLoc(), resultTypes, operands, builder.getArrayAttr(origins.getArrayRef()),
      second.getMeshNameAttr(),
      second.getStageIdAttr() ? second.getStageIdAttr() : first.getStageIdAttr(),
      /*in_shardings=*/nullptr, /*out_shardings=*/nullptr);
  mergeDiscardableAttrs(first, second, merged);
  return merged;
}

/// Whether `first` is a one-in, one-out fragment whose only use is an operand
/// of `second`: then the merge keeps `second` as it is, with `first`'s
/// operand in place of its result and `first`'s ops in front (`mergeInPlace`).
/// (Not where `second` reads that operand already: it would read it twice.)
bool mergesInPlace(FragmentOp first, FragmentOp second) {
  return first.getNumOperands() == 1 && first.getNumResults() == 1 &&
         first->hasOneUse() && *first->user_begin() == second.getOperation() &&
         !llvm::is_contained(second.getOperands(), first.getOperand(0));
}

/// The merge of `mergesInPlace`: `second`'s operands and results, the use of
/// `first`'s result replaced by `first`'s operand (its block argument now
/// stands for that operand, and `first`'s body computes what it held).
FragmentOp mergeInPlace(FragmentOp first, FragmentOp second, Operation *insertionPoint) {
  OpOperand &use = *first->use_begin();
  unsigned index = use.getOperandNumber();
  SmallVector<Value> operands(second.getOperands());
  operands[index] = first.getOperand(0);
  FragmentOp merged =
      createMergedFragment(first, second, second.getResultTypes(), operands, insertionPoint);

  Block &firstBody = first.getRegion().front();
  Block &secondBody = second.getRegion().front();
  BlockArgument arg = secondBody.getArgument(index);
  Operation *firstReturn = firstBody.getTerminator();
  arg.replaceAllUsesWith(firstReturn->getOperand(0));
  firstBody.getArgument(0).replaceAllUsesWith(arg);
  arg.setType(firstBody.getArgument(0).getType());
  arg.setLoc(first.getOperand(0).getLoc());
  firstReturn->erase();
  secondBody.getOperations().splice(secondBody.begin(), firstBody.getOperations());
  merged.getRegion().takeBody(second.getRegion());
  second->replaceAllUsesWith(merged->getResults());
  second.erase();
  first.erase();
  return merged;
}

/// One merge of `first` into the later `second`, in steps: the merged
/// fragment's signature (on construction), the fragment itself, the kept
/// body's arguments, then the bodies moved in.
///
/// The bodies are moved, not cloned: the body of the larger fragment becomes
/// that of the merged one (its block arguments reshaped into one per merged
/// operand) and the ops of the smaller one are spliced in before or after its
/// ops, so a merge costs time in the size of the smaller fragment, not of the
/// merged one. The result is the same as inlining copies of both bodies,
/// `first`'s then `second`'s, into a new block.
class Merge {
public:
  Merge(FragmentOp first, FragmentOp second)
      : first(first), second(second), firstBody(first.getRegion().front()),
        secondBody(second.getRegion().front()) {
    // Operands: those of `first`, then those of `second` not produced by
    // `first`.
    operands.insert(first.getOperands().begin(), first.getOperands().end());
    numFirstOperands = operands.size();
    for (Value v : second.getOperands())
      if (v.getDefiningOp() != first.getOperation())
        operands.insert(v);
    // Results: those of `first` used outside `second`, then all of `second`
    // (Shardy's order).
    for (Value r : first.getResults())
      if (llvm::any_of(r.getUsers(), [&](Operation *u) { return u != second.getOperation(); }))
        keptFirstResults.push_back(r);
  }

  /// The merged fragment, without a body, before `insertionPoint`.
  FragmentOp createFragment(Operation *insertionPoint) {
    SmallVector<Type> resultTypes;
    for (Value r : keptFirstResults)
      resultTypes.push_back(r.getType());
    llvm::append_range(resultTypes, second.getResultTypes());
    return createMergedFragment(first, second, resultTypes, operands.getArrayRef(),
                                insertionPoint);
  }

  /// Whether `first`'s body is kept (it has at least as many ops).
  bool keepsFirstBody() {
    auto a = firstBody.begin(), b = secondBody.begin();
    while (a != firstBody.end() && b != secondBody.end())
      ++a, ++b;
    return b == secondBody.end();
  }

  // Arguments of the kept body that stay, in order, are those of its first
  // use of an operand that is neither a result of `first` nor (for `second`)
  // an operand of `first`: exactly the merged operands they stand for, in the
  // same order. The others are replaced and erased.

  /// Makes `first`'s body's arguments one per merged operand and replaces
  /// the uses of `second`'s.
  void reshapeArgumentsKeepingFirst() {
    llvm::BitVector erased(firstBody.getNumArguments());
    for (auto [arg, v] : llvm::zip(firstBody.getArguments(), first.getOperands())) {
      auto [it, inserted] = keptArgOf.try_emplace(v, arg);
      if (inserted) {
        adopt(arg, v);
      } else {
        arg.replaceAllUsesWith(it->second);
        erased.set(arg.getArgNumber());
      }
    }
    if (erased.any())
      firstBody.eraseArguments(erased);
    for (Value v : operands.getArrayRef().drop_front(numFirstOperands))
      keptArgOf[v] = firstBody.addArgument(argumentType(v), v.getLoc());
    for (auto [arg, v] : llvm::zip(secondBody.getArguments(), second.getOperands()))
      arg.replaceAllUsesWith(v.getDefiningOp() == first.getOperation() ? valueOfFirstResult(v)
                                                                        : Value(keptArgOf[v]));
  }

  /// Makes `second`'s body's arguments one per merged operand (`first`'s in
  /// front) and replaces the uses of `first`'s.
  void reshapeArgumentsKeepingSecond() {
    llvm::BitVector erased(secondBody.getNumArguments());
    for (Value v : operands.getArrayRef().take_front(numFirstOperands))
      keptArgOf[v] = nullptr;
    for (auto [arg, v] : llvm::zip(secondBody.getArguments(), second.getOperands())) {
      if (v.getDefiningOp() == first.getOperation()) {
        erased.set(arg.getArgNumber());
        continue;
      }
      auto [it, inserted] = keptArgOf.try_emplace(v, arg);
      if (inserted)
        adopt(arg, v);
      else
        erased.set(arg.getArgNumber());
    }
    // The arguments of `first`'s operands go in front.
    for (auto [i, v] : llvm::enumerate(operands.getArrayRef().take_front(numFirstOperands)))
      keptArgOf[v] = secondBody.insertArgument(i, argumentType(v), v.getLoc());
    for (auto [arg, v] : llvm::zip(firstBody.getArguments(), first.getOperands()))
      arg.replaceAllUsesWith(keptArgOf[v]);
    for (auto [arg, v] : llvm::zip(secondBody.getArguments().drop_front(numFirstOperands),
                                   second.getOperands()))
      if (erased.test(arg.getArgNumber() - numFirstOperands))
        arg.replaceAllUsesWith(v.getDefiningOp() == first.getOperation() ? valueOfFirstResult(v)
                                                                          : Value(keptArgOf[v]));
    if (erased.any()) {
      llvm::BitVector shifted(secondBody.getNumArguments());
      for (unsigned i : erased.set_bits())
        shifted.set(i + numFirstOperands);
      secondBody.eraseArguments(shifted);
    }
  }

  /// Moves both bodies (arguments reshaped) into `merged`, which returns the
  /// kept results of `first` then `second`'s, takes over their uses and
  /// erases both fragments.
  void moveBodies(FragmentOp merged, bool keepFirst) {
    // Uses of the arguments are replaced: the terminators return final values.
    SmallVector<Value> returned;
    for (Value r : keptFirstResults)
      returned.push_back(valueOfFirstResult(r));
    llvm::append_range(returned, second.getTerminator()->getOperands());
    first.getTerminator()->erase();
    second.getTerminator()->erase();
    if (keepFirst)
      firstBody.getOperations().splice(firstBody.end(), secondBody.getOperations());
    else
      secondBody.getOperations().splice(secondBody.begin(), firstBody.getOperations());
    merged.getRegion().takeBody(keepFirst ? first.getRegion() : second.getRegion());
    OpBuilder builder = OpBuilder::atBlockEnd(&merged.getRegion().front());
    ReturnOp::create(builder, second.getLoc(), returned);

    for (auto [old, now] : llvm::zip(keptFirstResults,
                                     merged.getResults().take_front(keptFirstResults.size())))
      old.replaceAllUsesWith(now);
    for (auto [old, now] : llvm::zip(second.getResults(),
                                     merged.getResults().drop_front(keptFirstResults.size())))
      old.replaceAllUsesWith(now);
    second.erase();
    first.erase();
  }

private:
  /// The value `first`'s body returns as its result `result`.
  Value valueOfFirstResult(Value result) {
    return first.getTerminator()->getOperand(cast<OpResult>(result).getResultNumber());
  }

  FragmentOp first, second;
  Block &firstBody, &secondBody;
  llvm::SetVector<Value> operands;
  /// How many of `operands` are `first`'s (its operands, deduplicated).
  size_t numFirstOperands = 0;
  SmallVector<Value> keptFirstResults;
  /// The kept body's argument for each merged operand.
  llvm::SmallDenseMap<Value, BlockArgument, 16> keptArgOf;
};

} // namespace

FragmentOp mlir::mpmd::mergeFragments(FragmentOp first, FragmentOp second,
                                      Operation *insertionPoint) {
  if (mergesInPlace(first, second))
    return mergeInPlace(first, second, insertionPoint);
  Merge merge(first, second);
  FragmentOp merged = merge.createFragment(insertionPoint);
  bool keepFirst = merge.keepsFirstBody();
  if (keepFirst)
    merge.reshapeArgumentsKeepingFirst();
  else
    merge.reshapeArgumentsKeepingSecond();
  merge.moveBodies(merged, keepFirst);
  return merged;
}

FragmentOp mlir::mpmd::mergeIfLegal(FragmentOp first, FragmentOp second) {
  Block *block = first->getBlock();
  bool atSecond = llvm::all_of(first->getUsers(), [&](Operation *user) {
    Operation *ancestor = block->findAncestorOpInBlock(*user);
    return ancestor == second.getOperation() || (ancestor && second->isBeforeInBlock(ancestor));
  });
  if (atSecond)
    return mergeFragments(first, second, second);
  bool atFirst = llvm::all_of(second.getOperands(), [&](Value v) {
    Operation *def = v.getDefiningOp();
    if (!def || def == first.getOperation())
      return true; // A block argument, or a result of `first`.
    Operation *ancestor = block->findAncestorOpInBlock(*def);
    return ancestor && ancestor->isBeforeInBlock(first);
  });
  if (atFirst)
    return mergeFragments(first, second, first);
  return {};
}

FragmentOp mlir::mpmd::pruneFragment(FragmentOp fragment) {
  Block &body = fragment.getRegion().front();
  Operation *terminator = body.getTerminator();

  llvm::BitVector keptResults(fragment.getNumResults());
  SmallVector<Value> returned;
  SmallVector<Type> resultTypes;
  for (OpResult result : fragment->getResults()) {
    if (result.use_empty())
      continue;
    keptResults.set(result.getResultNumber());
    returned.push_back(terminator->getOperand(result.getResultNumber()));
    resultTypes.push_back(result.getType());
  }
  terminator->setOperands(returned);
  for (Operation *op = terminator->getPrevNode(); op;) {
    Operation *prev = op->getPrevNode();
    if (isDeadWhenUnused(*op))
      op->erase();
    op = prev;
  }

  llvm::BitVector deadArgs(body.getNumArguments());
  SmallVector<Value> operands;
  for (BlockArgument arg : body.getArguments()) {
    if (arg.use_empty())
      deadArgs.set(arg.getArgNumber());
    else
      operands.push_back(fragment.getOperand(arg.getArgNumber()));
  }
  body.eraseArguments(deadArgs);

  OpBuilder builder(fragment);
  auto pruned = FragmentOp::create(builder, fragment.getLoc(), resultTypes, operands,
                                   fragment.getOriginAttr(), fragment.getMeshNameAttr(),
                                   fragment.getStageIdAttr(), /*in_shardings=*/nullptr,
                                   /*out_shardings=*/nullptr);
  // Per-operand/per-result dictionaries no longer line up: not carried over.
  for (NamedAttribute attr : fragment->getDiscardableAttrs())
    if (attr.getName() != "arg_attrs" && attr.getName() != "res_attrs")
      pruned->setAttr(attr.getName(), attr.getValue());
  pruned.getRegion().takeBody(fragment.getRegion());
  unsigned next = 0;
  for (unsigned i : keptResults.set_bits())
    fragment.getResult(i).replaceAllUsesWith(pruned.getResult(next++));
  fragment.erase();
  return pruned;
}
