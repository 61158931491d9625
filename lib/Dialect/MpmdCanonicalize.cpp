//===- MpmdCanonicalize.cpp - mpmd canonicalization patterns ----------------===//
//
// Canonicalization patterns of the mpmd ops (declared with `hasCanonicalizer`
// in MpmdOps.td), the same rewrites as Shardy's mpmd dialect:
//
//   transfer    identity transfers; intra-mesh transfer-of-transfer chains
//   broadcast   broadcast-of-broadcast
//   reduce      reduce<K>(reduce<K>(a, b), c) -> reduce<K>(a, b, c);
//               reduce<none>(reduce<K>(...)) -> reduce<K>(...)
//   fragment    uses of results that just return a block argument
//
//===----------------------------------------------------------------------===//

#include "mpmd/Dialect/MpmdDialect.h"

#include "mlir/IR/PatternMatch.h"

using namespace mlir;
using namespace mlir::mpmd;

namespace {

//===----------------------------------------------------------------------===//
// TransferOp
//===----------------------------------------------------------------------===//

/// transfer %x : (T) -> T  ~>  %x
struct RemoveIdentityTransfer : OpRewritePattern<TransferOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(TransferOp op, PatternRewriter &rewriter) const override {
    if (op.getTensor().getType() != op.getType())
      return rewriter.notifyMatchFailure(op, "changes the type");
    if (op.getTensor() == op.getResult())
      return rewriter.notifyMatchFailure(op, "uses itself (graph region)");
    rewriter.replaceOp(op, op.getTensor());
    return success();
  }
};

/// A chain of two transfers whose source, intermediate value and result are
/// all on one mesh is one reshard (or none):
///
///   %y = transfer %x : (M<D1>) -> M<D2>
///   %z = transfer %y : (M<D2>) -> M<D3>
///   ~>
///   %z = transfer %x : (M<D1>) -> M<D3>     (or %x itself when D1 == D3)
///
/// The first transfer stays while it has other uses. A chain that goes
/// through another mesh (m1 -> m2 -> m1) is kept, as in Shardy: it denotes
/// two explicit cross-mesh copies, which passes (and users) may rely on.
struct FoldIntraMeshTransferOfTransfer : OpRewritePattern<TransferOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(TransferOp op, PatternRewriter &rewriter) const override {
    auto inner = op.getTensor().getDefiningOp<TransferOp>();
    if (!inner || inner == op)
      return rewriter.notifyMatchFailure(op, "operand is not another transfer");
    Value source = inner.getTensor();
    // In graph regions the chain may be a cycle: never use the op itself, and
    // stop when nothing would change.
    if (source == op.getResult() || source == op.getTensor())
      return rewriter.notifyMatchFailure(op, "the chain is a cycle");
    auto sourceType = dyn_cast<MeshTensorType>(source.getType());
    auto midType = dyn_cast<MeshTensorType>(inner.getType());
    auto resultType = dyn_cast<MeshTensorType>(op.getType());
    if (!sourceType || !midType || !resultType)
      return rewriter.notifyMatchFailure(op, "not between mesh tensors");
    if (sourceType.getMeshName() != midType.getMeshName() ||
        midType.getMeshName() != resultType.getMeshName())
      return rewriter.notifyMatchFailure(op, "the chain crosses meshes");
    if (sourceType == resultType) {
      rewriter.replaceOp(op, source);
      return success();
    }
    rewriter.modifyOpInPlace(op, [&] { op.getTensorMutable().set(source); });
    return success();
  }
};

//===----------------------------------------------------------------------===//
// BroadcastOp
//===----------------------------------------------------------------------===//

/// broadcast(broadcast(%x))  ~>  broadcast(%x)
struct FoldBroadcastOfBroadcast : OpRewritePattern<BroadcastOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(BroadcastOp op, PatternRewriter &rewriter) const override {
    auto inner = op.getTensor().getDefiningOp<BroadcastOp>();
    if (!inner || inner == op)
      return rewriter.notifyMatchFailure(op, "operand is not another broadcast");
    Value source = inner.getTensor();
    // In graph regions the chain may be a cycle: never use the op itself, and
    // stop when nothing would change.
    if (source == op.getResult() || source == op.getTensor())
      return rewriter.notifyMatchFailure(op, "the chain is a cycle");
    rewriter.modifyOpInPlace(op, [&] { op.getTensorMutable().set(source); });
    return success();
  }
};

//===----------------------------------------------------------------------===//
// ReduceOp
//===----------------------------------------------------------------------===//

static ReductionType reductionType(ReduceOp op) { return op.getReduction().getReductionType(); }

/// reduce<none>(reduce<K>(...))  ~>  reduce<K>(...)
///
/// `none` says that its operand is the same value wherever it is computed;
/// the inner reduce already denotes that value.
struct ForwardNoneReduceOfReduce : OpRewritePattern<ReduceOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(ReduceOp op, PatternRewriter &rewriter) const override {
    if (reductionType(op) != ReductionType::kNone || op.getTensors().size() != 1)
      return rewriter.notifyMatchFailure(op, "not a reduce<none> of one value");
    auto inner = op.getTensors().front().getDefiningOp<ReduceOp>();
    if (!inner || inner == op || inner.getType() != op.getType())
      return rewriter.notifyMatchFailure(op, "operand is not another reduce");
    rewriter.replaceOp(op, inner.getResult());
    return success();
  }
};

/// reduce<K>(reduce<K>(%a, %b), %c)  ~>  reduce<K>(%a, %b, %c)
///
/// Only when the inner reduce has no other use (otherwise its reduction
/// would be computed twice). Every reduction but `none` is associative.
struct FlattenReduceOfReduce : OpRewritePattern<ReduceOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(ReduceOp op, PatternRewriter &rewriter) const override {
    ReductionType kind = reductionType(op);
    if (kind == ReductionType::kNone)
      return rewriter.notifyMatchFailure(op, "reduce<none> takes one operand");
    SmallVector<Value> operands;
    bool changed = false;
    for (Value operand : op.getTensors()) {
      auto inner = operand.getDefiningOp<ReduceOp>();
      if (inner && inner != op && reductionType(inner) == kind && operand.hasOneUse() &&
          inner.getType() == op.getType()) {
        llvm::append_range(operands, inner.getTensors());
        changed = true;
      } else {
        operands.push_back(operand);
      }
    }
    if (!changed)
      return rewriter.notifyMatchFailure(op, "no single-use operand reduce of the same kind");
    rewriter.modifyOpInPlace(op, [&] { op.getTensorsMutable().assign(operands); });
    return success();
  }
};

//===----------------------------------------------------------------------===//
// FragmentOp
//===----------------------------------------------------------------------===//

/// A fragment result that just returns a block argument is the fragment's
/// corresponding operand when both have the same type (the same mesh tensor,
/// sharding included): its uses take the operand.
///
///   %0:2 = mpmd.fragment<...> (%x, %y) (%a: T, %b: T) {
///     %1 = "stablehlo.add"(%a, %b) ...
///     mpmd.return %1, %b : T, T
///   } : (!m, !m) -> (!m, !m)
///   use(%0#1)
///   ~>
///   (the fragment unchanged)
///   use(%y)
///
/// The fragment keeps every result and operand, as Shardy's canonicalization
/// does: the result, now unused, is -mpmd-fragment-dce's to drop (with its
/// entries of `out_shardings` and `res_attrs`), and passes that pair results
/// with operands or attributes by position see the fragment they were given.
struct ForwardFragmentPassThroughResults : OpRewritePattern<FragmentOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(FragmentOp op, PatternRewriter &rewriter) const override {
    Region &region = op.getRegion();
    if (!llvm::hasSingleElement(region))
      return failure();
    Block &block = region.front();
    if (block.empty())
      return failure();
    Operation *terminator = &block.back();
    if (!isa<ReturnOp>(terminator) || terminator->getNumOperands() != op.getNumResults())
      return rewriter.notifyMatchFailure(op, "malformed body");

    bool changed = false;
    for (unsigned i = 0, e = op.getNumResults(); i < e; ++i) {
      Value result = op.getResult(i);
      auto arg = dyn_cast<BlockArgument>(terminator->getOperand(i));
      if (result.use_empty() || !arg || arg.getOwner() != &block ||
          arg.getArgNumber() >= op.getNumOperands())
        continue;
      Value operand = op.getOperand(arg.getArgNumber());
      // (In a graph region the operand may be a result of the op itself.)
      if (operand.getType() != result.getType() || operand.getDefiningOp() == op)
        continue;
      rewriter.replaceAllUsesWith(result, operand);
      changed = true;
    }
    return success(changed);
  }
};

} // namespace

void TransferOp::getCanonicalizationPatterns(RewritePatternSet &results, MLIRContext *context) {
  results.add<RemoveIdentityTransfer, FoldIntraMeshTransferOfTransfer>(context);
}

void BroadcastOp::getCanonicalizationPatterns(RewritePatternSet &results, MLIRContext *context) {
  results.add<FoldBroadcastOfBroadcast>(context);
}

void ReduceOp::getCanonicalizationPatterns(RewritePatternSet &results, MLIRContext *context) {
  results.add<ForwardNoneReduceOfReduce, FlattenReduceOfReduce>(context);
}

void FragmentOp::getCanonicalizationPatterns(RewritePatternSet &results, MLIRContext *context) {
  results.add<ForwardFragmentPassThroughResults>(context);
}
