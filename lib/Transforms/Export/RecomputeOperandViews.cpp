//===- RecomputeOperandViews.cpp - recompute views where they are read ----===//
//
// A fragment result that is only a view of one of the fragment's operands
// (a transpose, reshape, broadcast or widening convert of it) is recomputed
// by each later fragment of the same mesh that reads it, from that operand,
// instead of being handed over as a buffer of its own (see Passes.td).
//
//===----------------------------------------------------------------------===//

#include "Common/MergeFragments.h"
#include "Common/PackValues.h"
#include "Common/PassBase.h"
#include "mpmd/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/SetVector.h"

#include <optional>

namespace mlir::mpmd {
#define GEN_PASS_DEF_RECOMPUTEOPERANDVIEWSPASS
#include "mpmd/Transforms/Passes.h.inc"

namespace {

/// Bytes of a static tensor of integer or floating-point elements, or
/// std::nullopt.
std::optional<int64_t> tensorBytes(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (!tensor || !tensor.hasStaticShape() || !tensor.getElementType().isIntOrFloat())
    return std::nullopt;
  return tensor.getNumElements() * ((tensor.getElementType().getIntOrFloatBitWidth() + 7) / 8);
}

/// Whether `op` computes a view of its one operand that holds at least as
/// many bytes: it moves, repeats or widens the elements, computing nothing.
bool isViewOp(Operation &op) {
  if (op.getNumOperands() != 1 || op.getNumResults() != 1 || op.getNumRegions() != 0)
    return false;
  StringRef name = op.getName().getStringRef();
  if (name != "stablehlo.transpose" && name != "stablehlo.reshape" &&
      name != "stablehlo.broadcast_in_dim" && name != "stablehlo.convert")
    return false;
  std::optional<int64_t> from = tensorBytes(op.getOperand(0).getType());
  std::optional<int64_t> to = tensorBytes(op.getResult(0).getType());
  return from && to && *to >= *from;
}

/// A value a fragment returns, seen as a chain of view ops from one of the
/// fragment's arguments.
struct View {
  BlockArgument source;
  /// The chain, from the op that reads `source` to the one that makes the
  /// returned value.
  SmallVector<Operation *> ops;
};

/// `value` (in `body`) as a view of one of `body`'s arguments, or
/// std::nullopt (not a chain of view ops, or the argument itself).
std::optional<View> viewOf(Value value, Block &body) {
  View view;
  while (true) {
    if (auto arg = dyn_cast<BlockArgument>(value)) {
      if (arg.getOwner() != &body || view.ops.empty())
        return std::nullopt;
      view.source = arg;
      std::reverse(view.ops.begin(), view.ops.end());
      return view;
    }
    Operation *op = value.getDefiningOp();
    if (!op || op->getBlock() != &body || !isViewOp(*op))
      return std::nullopt;
    view.ops.push_back(op);
    value = op->getOperand(0);
  }
}

class RecomputeOperandViewsPass
    : public MpmdPass<RecomputeOperandViewsPass, impl::RecomputeOperandViewsPassBase> {
public:
  using MpmdPass::MpmdPass;

  void runOnFunction(func::FuncOp func, TopologyAttr) {
    Block &block = func.getBody().front();
    llvm::SetVector<Operation *> producers;
    for (FragmentOp consumer : block.getOps<FragmentOp>())
      if (!hasPositionalAttrs(consumer))
        recomputeViews(consumer, producers);
    // Drop the results nobody reads any more (and the body ops only they needed).
    for (Operation *producer : producers)
      if (llvm::any_of(producer->getResults(), [](Value r) { return r.use_empty(); }))
        pruneFragment(cast<FragmentOp>(producer));
  }

private:
  /// Replaces each operand of `consumer` that an earlier fragment of its
  /// mesh returns as a view of one of its own operands by that view,
  /// computed in `consumer` from that operand. Adds the fragments whose
  /// results lost a use to `producers`.
  void recomputeViews(FragmentOp consumer, llvm::SetVector<Operation *> &producers) {
    Block &body = consumer.getRegion().front();
    OpBuilder builder = OpBuilder::atBlockBegin(&body);
    SmallVector<unsigned> replaced;
    for (unsigned i = 0, e = consumer.getNumOperands(); i < e; ++i) {
      Value operand = consumer.getOperand(i);
      auto producer = operand.getDefiningOp<FragmentOp>();
      if (!producer || producer.getMeshName() != consumer.getMeshName() ||
          hasPositionalAttrs(producer))
        continue;
      Block &producerBody = producer.getRegion().front();
      std::optional<View> view = viewOf(
          producerBody.getTerminator()->getOperand(cast<OpResult>(operand).getResultNumber()),
          producerBody);
      if (!view)
        continue;
      Value source = producer.getOperand(view->source.getArgNumber());
      auto sourceType = dyn_cast<MeshTensorType>(source.getType());
      if (!sourceType || sourceType.getMemoryKind())
        continue; // (a value in host memory is read where it is moved to the device)
      BlockArgument arg = existingArgument(consumer, source, replaced);
      if (!arg) {
        // A small view costs less handed over (packed with the producer's
        // other values) than as one more buffer the consumer takes.
        if (*tensorBytes(view->ops.back()->getResult(0).getType()) < minNewOperandBytes)
          continue;
        consumer.getInputsMutable().append(source);
        arg = body.addArgument(view->source.getType(), source.getLoc());
      }
      IRMapping mapping;
      mapping.map(view->source, arg);
      Operation *last = nullptr;
      for (Operation *op : view->ops)
        last = builder.clone(*op, mapping);
      body.getArgument(i).replaceAllUsesWith(last->getResult(0));
      replaced.push_back(i);
      producers.insert(producer);
    }
    for (unsigned i : llvm::reverse(replaced)) {
      consumer.getInputsMutable().erase(i);
      body.eraseArgument(i);
    }
  }

  /// The argument of `consumer`'s body that `source` is passed as (not one
  /// of the `replaced` operands), or null.
  static BlockArgument existingArgument(FragmentOp consumer, Value source,
                                        ArrayRef<unsigned> replaced) {
    for (auto [j, operand] : llvm::enumerate(consumer.getOperands()))
      if (operand == source && !llvm::is_contained(replaced, j))
        return consumer.getRegion().front().getArgument(j);
    return {};
  }
};

} // namespace
} // namespace mlir::mpmd
