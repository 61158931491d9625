//===- SplitBwdFragments.cpp - split backward into B and W parts ----------===//
//
// Splits each backward fragment into the part that computes the values sent
// to other meshes (activation gradients, B) and the rest (weight gradients,
// W), so that zero-bubble schedules can run W later.
//
//===----------------------------------------------------------------------===//

#include "Common/PassBase.h"
#include "Common/Fragments.h"
#include "mpmd/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Transforms/RegionUtils.h"
#include "llvm/ADT/BitVector.h"
#include "llvm/ADT/SetVector.h"

namespace mlir::mpmd {
#define GEN_PASS_DEF_SPLITBWDFRAGMENTSPASS
#include "mpmd/Transforms/Passes.h.inc"

namespace {

/// The values `op` reads: its operands and the values its regions use that
/// are defined outside of them. An op with regions moves as a whole, so these
/// are the dependencies of the whole op.
llvm::SetVector<Value> effectiveOperands(Operation *op) {
  llvm::SetVector<Value> values(op->operand_begin(), op->operand_end());
  for (Region &region : op->getRegions())
    getUsedValuesDefinedAbove(region, values);
  return values;
}

/// Discardable attributes to carry over to both parts: all but the
/// per-operand/per-result dictionaries, whose indices no longer match.
void copyDiscardableAttrs(FragmentOp from, FragmentOp to) {
  for (NamedAttribute attr : from->getDiscardableAttrs())
    if (attr.getName() != "arg_attrs" && attr.getName() != "res_attrs")
      to->setAttr(attr.getName(), attr.getValue());
}

class SplitBwdFragmentsPass : public MpmdPass<SplitBwdFragmentsPass, impl::SplitBwdFragmentsPassBase> {
  /// Whether `user` is another backward that waits for this one's result
  /// without a transfer: the backward of another stage on the same mesh (as
  /// in V-shaped schedules, where consecutive stages share a mesh), or of
  /// another named computation of the same stage and microbatch (a stage of
  /// several labelled blocks: block k's activation gradient feeds block
  /// k-1's backward). A backward of a later microbatch that reads this one's
  /// result (an accumulated weight gradient) does not make it B.
  static bool isActivationGradientConsumer(Operation *user, FragmentOp fragment) {
    auto other = dyn_cast<FragmentOp>(user);
    if (!other || other == fragment || !isBackwardFragment(other))
      return false;
    if (other.getStageId() != fragment.getStageId())
      return true;
    Attribute mine = fragment->getAttr(kCallCounterAttr);
    return mine && mine == other->getAttr(kCallCounterAttr);
  }

  /// Splits `fragment` into its B (keep-transferred) and W (drop-transferred)
  /// parts, replacing it.
  LogicalResult split(FragmentOp fragment) {
    if (fragment.getInShardingsAttr() || fragment.getOutShardingsAttr())
      return fragment.emitError()
             << "cannot split backward " << describeFragment(fragment)
             << ": it has in_shardings/out_shardings; run -mpmd-split-bwd-fragments before "
                "shardings are assigned";

    MLIRContext *ctx = fragment.getContext();
    Block &body = fragment.getRegion().front();
    Operation *terminator = body.getTerminator();
    unsigned numResults = fragment.getNumResults();

    // Results sent to another mesh (or resharded) by an mpmd.transfer.
    llvm::BitVector transferred(numResults);
    for (OpResult result : fragment->getResults())
      if (llvm::any_of(result.getUsers(), [&](Operation *u) {
            return isa<TransferOp>(u) || isActivationGradientConsumer(u, fragment);
          }))
        transferred.set(result.getResultNumber());

    // B: the backward slice (within the body) of the transferred results.
    llvm::DenseSet<Operation *> inB;
    SmallVector<Value> worklist;
    for (unsigned i : transferred.set_bits())
      worklist.push_back(terminator->getOperand(i));
    while (!worklist.empty()) {
      Operation *def = worklist.pop_back_val().getDefiningOp();
      if (!def || !inB.insert(def).second)
        continue;
      for (Value v : effectiveOperands(def))
        worklist.push_back(v);
    }

    // Which part each use of a body value belongs to.
    enum class Part { B, W };
    auto partOfUse = [&](OpOperand &use) -> Part {
      Operation *owner = body.findAncestorOpInBlock(*use.getOwner());
      if (owner == terminator)
        return transferred.test(use.getOperandNumber()) ? Part::B : Part::W;
      return inB.contains(owner) ? Part::B : Part::W;
    };
    auto usedBy = [&](Value v, Part part) {
      return llvm::any_of(v.getUses(), [&](OpOperand &use) { return partOfUse(use) == part; });
    };

    // Residuals: values computed in B that W needs, in program order.
    SmallVector<Value> residuals;
    for (Operation &op : body.without_terminator()) {
      if (!inB.contains(&op))
        continue;
      for (Value result : op.getResults()) {
        if (!usedBy(result, Part::W))
          continue;
        if (!isa<RankedTensorType>(result.getType())) {
          InFlightDiagnostic diag =
              fragment.emitError()
              << "cannot split backward " << describeFragment(fragment)
              << ": its weight-gradient part needs a value of type " << result.getType()
              << " computed by its activation-gradient part, and only ranked tensors can be "
                 "passed between fragments";
          diag.attachNote(op.getLoc()) << "the value is computed here";
          return diag;
        }
        residuals.push_back(result);
      }
    }

    // The block arguments (and so operands) each part needs.
    SmallVector<BlockArgument> argsOfB, argsOfW;
    for (BlockArgument arg : body.getArguments()) {
      if (usedBy(arg, Part::B))
        argsOfB.push_back(arg);
      if (usedBy(arg, Part::W))
        argsOfW.push_back(arg);
    }

    StringRef mesh = fragment.getMeshName();
    OpBuilder builder(fragment);

    // Builds one part: its operands are the fragment operands of `args` and
    // then `extraOperands` (mapped to `extraValues` of the body), it clones
    // the body ops for which `inPart` holds and returns `returned`.
    auto buildPart = [&](ArrayRef<BlockArgument> args, ValueRange extraOperands,
                         ArrayRef<Value> extraValues, function_ref<bool(Operation &)> inPart,
                         ArrayRef<Value> returned, ArrayRef<Type> resultTypes,
                         StringRef marker) {
      SmallVector<Value> operands;
      for (BlockArgument arg : args)
        operands.push_back(fragment.getOperand(arg.getArgNumber()));
      llvm::append_range(operands, extraOperands);
      auto part = FragmentOp::create(builder, fragment.getLoc(), resultTypes, operands,
                                     fragment.getOriginAttr(), fragment.getMeshNameAttr(),
                                     fragment.getStageIdAttr(), /*in_shardings=*/nullptr,
                                     /*out_shardings=*/nullptr);
      copyDiscardableAttrs(fragment, part);
      part->setAttr(marker, UnitAttr::get(ctx));

      OpBuilder::InsertionGuard guard(builder);
      Block *block = builder.createBlock(&part.getRegion());
      IRMapping mapping;
      for (BlockArgument arg : args)
        mapping.map(arg, block->addArgument(arg.getType(), arg.getLoc()));
      for (Value v : extraValues)
        mapping.map(v, block->addArgument(v.getType(), v.getLoc()));
      for (Operation &op : body.without_terminator())
        if (inPart(op))
          builder.clone(op, mapping);
      SmallVector<Value> results;
      for (Value v : returned)
        results.push_back(mapping.lookup(v));
      ReturnOp::create(builder, terminator->getLoc(), results);
      return part;
    };

    // B: the transferred results, then the residuals.
    SmallVector<Value> returnedByB;
    SmallVector<Type> typesOfB;
    for (unsigned i : transferred.set_bits()) {
      returnedByB.push_back(terminator->getOperand(i));
      typesOfB.push_back(fragment.getResult(i).getType());
    }
    // Residuals are fully replicated: shardings are assigned after the split.
    for (Value residual : residuals) {
      returnedByB.push_back(residual);
      auto type = cast<RankedTensorType>(residual.getType());
      typesOfB.push_back(MeshTensorType::get(ctx, mesh, type));
    }
    FragmentOp partB = buildPart(
        argsOfB, /*extraOperands=*/{}, /*extraValues=*/{},
        [&](Operation &op) { return inB.contains(&op); }, returnedByB, typesOfB,
        kSplitKeepTransferredAttr);

    // W: every other op, fed with the residuals; the other results.
    SmallVector<Value> returnedByW;
    SmallVector<Type> typesOfW;
    for (unsigned i = 0; i < numResults; ++i) {
      if (transferred.test(i))
        continue;
      returnedByW.push_back(terminator->getOperand(i));
      typesOfW.push_back(fragment.getResult(i).getType());
    }
    builder.setInsertionPointAfter(partB);
    FragmentOp partW = buildPart(
        argsOfW, partB.getResults().drop_front(transferred.count()), residuals,
        [&](Operation &op) { return !inB.contains(&op); }, returnedByW, typesOfW,
        kSplitDropTransferredAttr);

    unsigned nextB = 0, nextW = 0;
    for (unsigned i = 0; i < numResults; ++i)
      fragment.getResult(i).replaceAllUsesWith(transferred.test(i) ? partB.getResult(nextB++)
                                                                    : partW.getResult(nextW++));
    fragment.erase();
    return success();
  }

public:
  void runOnFunction(func::FuncOp func, TopologyAttr topology) {
    SmallVector<FragmentOp> candidates;
    func.walk([&](FragmentOp fragment) {
      if (isBackwardFragment(fragment) && !fragment->hasAttr(kSplitKeepTransferredAttr) &&
          !fragment->hasAttr(kSplitDropTransferredAttr))
        candidates.push_back(fragment);
    });
    bool failed = false;
    for (FragmentOp fragment : candidates)
      failed |= mlir::failed(split(fragment));
    if (failed)
      signalPassFailure();
  }
};

} // namespace
} // namespace mlir::mpmd
