//===- FragmentDce.cpp - remove what no fragment or output needs -----------===//
//
// Dead code across fragment boundaries: a fragment result nobody uses is
// dropped (with what computed it inside the body), then a block argument
// nothing reads (with its operand), then a fragment or transfer whose results
// are all unused and whose body has no side effects. Repeated until nothing
// changes, so a chain of producers that only fed dropped values goes too.
//
// Ops of StableHLO and CHLO are carried unregistered, so MLIR cannot tell
// which are pure: `isPureOp` lists the ones that are not (side effects,
// communication, custom calls) and treats every other op of those dialects,
// and registered ops without memory effects, as removable when unused.
//
//===----------------------------------------------------------------------===//

#include "Common/PassBase.h"
#include "mpmd/Compat/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/BitVector.h"
#include "llvm/ADT/StringSet.h"

namespace mlir::mpmd {
#define GEN_PASS_DEF_FRAGMENTDCEPASS
#include "mpmd/Compat/Passes.h.inc"

namespace {

/// StableHLO and CHLO ops that must stay even when their results are unused.
bool hasHiddenEffects(StringRef name) {
  static const llvm::StringSet<> effects = {
      "stablehlo.custom_call",       "stablehlo.send",           "stablehlo.recv",
      "stablehlo.infeed",            "stablehlo.outfeed",        "stablehlo.after_all",
      "stablehlo.create_token",      "stablehlo.all_reduce",     "stablehlo.all_gather",
      "stablehlo.all_to_all",        "stablehlo.reduce_scatter", "stablehlo.collective_permute",
      "stablehlo.collective_broadcast", "stablehlo.rng",          "stablehlo.rng_bit_generator",
      "stablehlo.while"};
  return effects.contains(name);
}

/// Whether `op` (and everything nested in it) may be removed when unused.
bool isPureOp(Operation *op) {
  if (op->hasTrait<OpTrait::IsTerminator>())
    return false;
  bool pure;
  if (isa<FragmentOp>(op)) {
    pure = true; // As pure as its body.
  } else if (op->isRegistered()) {
    pure = isMemoryEffectFree(op);
  } else {
    StringRef dialect = op->getName().getDialectNamespace();
    pure = (dialect == "stablehlo" || dialect == "chlo") &&
           !hasHiddenEffects(op->getName().getStringRef());
  }
  if (!pure)
    return false;
  for (Region &region : op->getRegions())
    for (Operation &inner : region.getOps())
      if (!inner.hasTrait<OpTrait::IsTerminator>() && !isPureOp(&inner))
        return false;
  return true;
}

/// Removes unused pure ops of `block`, last first; true if any went.
bool eraseDeadOps(Block &block) {
  bool changed = false;
  for (Operation &op : llvm::make_early_inc_range(llvm::reverse(block))) {
    if (op.use_empty() && isPureOp(&op)) {
      op.erase();
      changed = true;
    }
  }
  return changed;
}

/// `attrs` (an array with one entry per position) without the entries in
/// `drop`; null when there is no such array.
Attribute dropEntries(Attribute attrs, const llvm::BitVector &drop, Builder &b) {
  auto array = dyn_cast_if_present<ArrayAttr>(attrs);
  if (!array || array.size() != drop.size())
    return {};
  SmallVector<Attribute> kept;
  for (auto [i, a] : llvm::enumerate(array.getValue()))
    if (!drop.test(i))
      kept.push_back(a);
  return b.getArrayAttr(kept);
}

/// Drops the results of `fragment` nobody uses; the fragment is replaced.
/// Skipped when its result shardings cannot be cut to match.
bool dropUnusedResults(FragmentOp &fragment) {
  unsigned n = fragment.getNumResults();
  llvm::BitVector drop(n);
  for (unsigned i = 0; i < n; ++i)
    if (fragment.getResult(i).use_empty())
      drop.set(i);
  if (drop.none() || fragment.getOutShardingsAttr())
    return false;
  OpBuilder b(fragment);
  SmallVector<NamedAttribute> attrs;
  for (NamedAttribute attr : fragment->getAttrs()) {
    if (attr.getName() == "res_attrs") {
      Attribute kept = dropEntries(attr.getValue(), drop, b);
      if (!kept)
        return false;
      attrs.emplace_back(attr.getName(), kept);
    } else {
      attrs.push_back(attr);
    }
  }
  SmallVector<Type> types;
  SmallVector<unsigned> kept;
  for (unsigned i = 0; i < n; ++i)
    if (!drop.test(i)) {
      types.push_back(fragment.getResult(i).getType());
      kept.push_back(i);
    }
  auto replacement = FragmentOp::create(b, fragment.getLoc(), types, fragment.getOperands(), attrs);
  replacement.getRegion().takeBody(fragment.getRegion());
  replacement.getRegion().front().getTerminator()->eraseOperands(drop);
  for (auto [newIndex, oldIndex] : llvm::enumerate(kept))
    fragment.getResult(oldIndex).replaceAllUsesWith(replacement.getResult(newIndex));
  fragment.erase();
  fragment = replacement;
  return true;
}

/// Drops the block arguments of `fragment` nothing reads, with their
/// operands. Skipped when its argument shardings cannot be cut to match.
bool dropUnusedArguments(FragmentOp fragment) {
  Block &body = fragment.getRegion().front();
  llvm::BitVector drop(body.getNumArguments());
  for (BlockArgument arg : body.getArguments())
    if (arg.use_empty())
      drop.set(arg.getArgNumber());
  if (drop.none() || fragment.getInShardingsAttr())
    return false;
  Builder b(fragment.getContext());
  if (Attribute argAttrs = fragment->getAttr("arg_attrs")) {
    Attribute kept = dropEntries(argAttrs, drop, b);
    if (!kept)
      return false;
    fragment->setAttr("arg_attrs", kept);
  }
  body.eraseArguments(drop);
  fragment->eraseOperands(drop);
  return true;
}

/// One sweep over the top-level ops of `block`, last first.
bool sweep(Block &block) {
  bool changed = false;
  for (Operation &op : llvm::make_early_inc_range(llvm::reverse(block))) {
    if (auto transfer = dyn_cast<TransferOp>(op)) {
      if (transfer.use_empty()) {
        transfer.erase();
        changed = true;
      }
      continue;
    }
    auto fragment = dyn_cast<FragmentOp>(op);
    if (!fragment)
      continue;
    if (fragment.use_empty() && isPureOp(&op)) {
      fragment.erase();
      changed = true;
      continue;
    }
    changed |= dropUnusedResults(fragment);
    changed |= eraseDeadOps(fragment.getRegion().front());
    changed |= dropUnusedArguments(fragment);
  }
  return changed;
}

class FragmentDcePass : public MpmdPass<FragmentDcePass, impl::FragmentDcePassBase> {
public:
  using MpmdPass::MpmdPass;

  void runOnFunction(func::FuncOp func, TopologyAttr) {
    while (sweep(func.getBody().front())) {
    }
  }
};

} // namespace
} // namespace mlir::mpmd
