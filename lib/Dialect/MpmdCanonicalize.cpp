//===- MpmdCanonicalize.cpp - mpmd canonicalization patterns ----------------===//
//
// Canonicalization patterns of the mpmd ops (declared with `hasCanonicalizer`
// in MpmdOps.td), the same rewrites as Shardy's mpmd dialect:
//
//   transfer    identity transfers; intra-mesh transfer-of-transfer chains
//   broadcast   broadcast-of-broadcast
//   reduce      reduce<K>(reduce<K>(a, b), c) -> reduce<K>(a, b, c);
//               reduce<none>(reduce<K>(...)) -> reduce<K>(...)
//   fragment    results that just return a block argument
//
//===----------------------------------------------------------------------===//

#include "mpmd/Dialect/MpmdDialect.h"

#include "mlir/IR/PatternMatch.h"
#include "llvm/ADT/BitVector.h"

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

/// Splits the list of a `#sdy.sharding_per_value<[s0, s1, ...]>` (carried as
/// an opaque attribute) into its top-level elements; failure when the text
/// does not have that shape.
static FailureOr<SmallVector<StringRef>> splitShardingPerValue(OpaqueAttr attr) {
  StringRef data = attr.getAttrData();
  if (attr.getDialectNamespace() != "sdy" || !data.consume_front("sharding_per_value<") ||
      !data.consume_back(">"))
    return failure();
  data = data.trim();
  if (!data.consume_front("[") || !data.consume_back("]"))
    return failure();
  SmallVector<StringRef> elements;
  if (data.trim().empty())
    return elements;
  int depth = 0;
  bool inString = false;
  size_t start = 0;
  for (size_t i = 0; i < data.size(); ++i) {
    char c = data[i];
    if (inString) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        inString = false;
      continue;
    }
    switch (c) {
    case '"':
      inString = true;
      break;
    case '<':
    case '[':
    case '{':
    case '(':
      ++depth;
      break;
    case '>':
    case ']':
    case '}':
    case ')':
      if (--depth < 0)
        return failure();
      break;
    case ',':
      if (depth == 0) {
        elements.push_back(data.slice(start, i).trim());
        start = i + 1;
      }
      break;
    default:
      break;
    }
  }
  if (depth != 0 || inString)
    return failure();
  elements.push_back(data.drop_front(start).trim());
  return elements;
}

/// The per-result sharding list `attr` without the results in `drop`, or
/// failure when `attr` is not such a list.
static FailureOr<Attribute> dropShardings(Attribute attr, const llvm::BitVector &drop) {
  auto opaque = dyn_cast<OpaqueAttr>(attr);
  if (!opaque)
    return failure();
  FailureOr<SmallVector<StringRef>> elements = splitShardingPerValue(opaque);
  if (failed(elements) || elements->size() != drop.size())
    return failure();
  std::string text = "sharding_per_value<[";
  bool first = true;
  for (auto [i, element] : llvm::enumerate(*elements)) {
    if (drop.test(i))
      continue;
    text += (first ? "" : ", ") + element.str();
    first = false;
  }
  text += "]>";
  return Attribute(OpaqueAttr::get(opaque.getDialectNamespace(), text, opaque.getType()));
}

/// A fragment result that just returns a block argument is the fragment's
/// corresponding operand when both have the same type (the same mesh tensor,
/// sharding included): its uses take the operand and the result is dropped.
///
///   %0:2 = mpmd.fragment<...> (%x, %y) (%a: T, %b: T) {
///     %1 = "stablehlo.add"(%a, %b) ...
///     mpmd.return %1, %b : T, T
///   } : (!m, !m) -> (!m, !m)
///   ~>
///   %0 = mpmd.fragment<...> (%x, %y) (%a: T, %b: T) {
///     %1 = "stablehlo.add"(%a, %b) ...
///     mpmd.return %1 : T
///   } : (!m, !m) -> !m             (and uses of %0#1 take %y)
///
/// Operands are kept. `out_shardings` and a per-result `res_attrs` array
/// drop the corresponding entries; when `out_shardings` cannot be split
/// (not a sharding list) the uses are still forwarded but the result stays.
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

    unsigned numResults = op.getNumResults();
    llvm::BitVector drop(numResults);
    SmallVector<Value> forwarded(numResults);
    for (unsigned i = 0; i < numResults; ++i) {
      auto arg = dyn_cast<BlockArgument>(terminator->getOperand(i));
      if (!arg || arg.getOwner() != &block || arg.getArgNumber() >= op.getNumOperands())
        continue;
      Value operand = op.getOperand(arg.getArgNumber());
      // (In a graph region the operand may be a result of the op itself.)
      if (operand.getType() != op.getResult(i).getType() || operand.getDefiningOp() == op)
        continue;
      drop.set(i);
      forwarded[i] = operand;
    }
    if (drop.none())
      return rewriter.notifyMatchFailure(op, "no result returns a block argument");

    // The attributes of the new fragment, without the dropped results.
    SmallVector<NamedAttribute> attrs;
    bool canDrop = true;
    for (NamedAttribute attr : op->getAttrs()) {
      if (attr.getName() == op.getOutShardingsAttrName()) {
        FailureOr<Attribute> kept = dropShardings(attr.getValue(), drop);
        if (failed(kept)) {
          canDrop = false;
          break;
        }
        attrs.emplace_back(attr.getName(), *kept);
        continue;
      }
      if (attr.getName() == "res_attrs") {
        auto array = dyn_cast<ArrayAttr>(attr.getValue());
        if (array && array.size() == numResults) {
          SmallVector<Attribute> kept;
          for (auto [i, a] : llvm::enumerate(array.getValue()))
            if (!drop.test(i))
              kept.push_back(a);
          attrs.emplace_back(attr.getName(), rewriter.getArrayAttr(kept));
          continue;
        }
      }
      attrs.push_back(attr);
    }

    if (!canDrop) {
      bool changed = false;
      for (unsigned i : drop.set_bits()) {
        if (op.getResult(i).use_empty())
          continue;
        rewriter.replaceAllUsesWith(op.getResult(i), forwarded[i]);
        changed = true;
      }
      return success(changed);
    }

    SmallVector<Type> resultTypes;
    for (unsigned i = 0; i < numResults; ++i)
      if (!drop.test(i))
        resultTypes.push_back(op.getResult(i).getType());
    auto newOp = FragmentOp::create(rewriter, op.getLoc(), resultTypes, op.getOperands(), attrs);
    rewriter.inlineRegionBefore(region, newOp.getRegion(), newOp.getRegion().end());
    rewriter.modifyOpInPlace(terminator, [&] { terminator->eraseOperands(drop); });

    SmallVector<Value> replacements;
    unsigned next = 0;
    for (unsigned i = 0; i < numResults; ++i)
      replacements.push_back(drop.test(i) ? forwarded[i] : newOp.getResult(next++));
    rewriter.replaceOp(op, replacements);
    return success();
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
