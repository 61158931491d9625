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

/// Whether `user` is another backward that waits for `fragment`'s result
/// without a transfer: the backward of another stage on the same mesh (as in
/// V-shaped schedules, where consecutive stages share a mesh), or of another
/// named computation of the same stage and microbatch (a stage of several
/// labelled blocks: block k's activation gradient feeds block k-1's
/// backward). A backward of a later microbatch that reads this one's result
/// (an accumulated weight gradient) does not make it B.
bool isActivationGradientConsumer(Operation *user, FragmentOp fragment) {
  auto other = dyn_cast<FragmentOp>(user);
  if (!other || other == fragment || !isBackwardFragment(other))
    return false;
  if (other.getStageId() != fragment.getStageId())
    return true;
  Attribute mine = fragment->getAttr(kCallCounterAttr);
  return mine && mine == other->getAttr(kCallCounterAttr);
}

/// How a backward fragment divides into its B (keep-transferred) and W
/// (drop-transferred) parts.
struct SplitPlan {
  /// The results B computes: those sent to another mesh (or resharded) by an
  /// mpmd.transfer, or read by another backward (isActivationGradientConsumer).
  llvm::BitVector transferred;
  /// B's ops: the backward slice (within the body) of the transferred results.
  llvm::DenseSet<Operation *> inB;
  /// Residuals: values computed in B that W needs, in program order.
  SmallVector<Value> residuals;
  /// The block arguments (and so operands) each part needs.
  SmallVector<BlockArgument> argsOfB, argsOfW;
};

enum class Part { B, W };

/// The part of `plan` that a use of a body value belongs to.
Part partOfUse(const SplitPlan &plan, Block &body, OpOperand &use) {
  Operation *owner = body.findAncestorOpInBlock(*use.getOwner());
  if (owner == body.getTerminator())
    return plan.transferred.test(use.getOperandNumber()) ? Part::B : Part::W;
  return plan.inB.contains(owner) ? Part::B : Part::W;
}

bool usedBy(const SplitPlan &plan, Block &body, Value v, Part part) {
  return llvm::any_of(v.getUses(),
                      [&](OpOperand &use) { return partOfUse(plan, body, use) == part; });
}

/// The ops of `body` that `roots` depend on (the roots' definitions, their
/// operands' definitions, and so on).
llvm::DenseSet<Operation *> backwardSlice(ValueRange roots) {
  llvm::DenseSet<Operation *> slice;
  SmallVector<Value> worklist(roots.begin(), roots.end());
  while (!worklist.empty()) {
    Operation *def = worklist.pop_back_val().getDefiningOp();
    if (!def || !slice.insert(def).second)
      continue;
    for (Value v : effectiveOperands(def))
      worklist.push_back(v);
  }
  return slice;
}

/// Divides `fragment`; fails, with an error, when W would need a value from
/// B that cannot cross fragments.
FailureOr<SplitPlan> planSplit(FragmentOp fragment) {
  Block &body = fragment.getRegion().front();
  Operation *terminator = body.getTerminator();
  SplitPlan plan;
  plan.transferred.resize(fragment.getNumResults());
  SmallVector<Value> transferredValues;
  for (OpResult result : fragment->getResults())
    if (llvm::any_of(result.getUsers(), [&](Operation *u) {
          return isa<TransferOp>(u) || isActivationGradientConsumer(u, fragment);
        })) {
      plan.transferred.set(result.getResultNumber());
      transferredValues.push_back(terminator->getOperand(result.getResultNumber()));
    }
  plan.inB = backwardSlice(transferredValues);

  for (Operation &op : body.without_terminator()) {
    if (!plan.inB.contains(&op))
      continue;
    for (Value result : op.getResults()) {
      if (!usedBy(plan, body, result, Part::W))
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
      plan.residuals.push_back(result);
    }
  }

  for (BlockArgument arg : body.getArguments()) {
    if (usedBy(plan, body, arg, Part::B))
      plan.argsOfB.push_back(arg);
    if (usedBy(plan, body, arg, Part::W))
      plan.argsOfW.push_back(arg);
  }
  return plan;
}

/// One part of a split fragment.
struct PartSpec {
  /// The body arguments it takes (as the fragment's operands) ...
  ArrayRef<BlockArgument> args;
  /// ... then these operands, standing for `extraValues` of the body.
  ValueRange extraOperands;
  ArrayRef<Value> extraValues;
  /// Which body ops it runs.
  function_ref<bool(Operation &)> inPart;
  /// The body values it returns, with the part's result types.
  ArrayRef<Value> returned;
  ArrayRef<Type> resultTypes;
  /// The attribute that marks it (kSplitKeepTransferredAttr, ...).
  StringRef marker;
};

/// Creates the fragment of `spec` at `builder`'s insertion point, cloning
/// its ops from `fragment`'s body.
FragmentOp buildPart(OpBuilder &builder, FragmentOp fragment, const PartSpec &spec) {
  Block &body = fragment.getRegion().front();
  SmallVector<Value> operands;
  for (BlockArgument arg : spec.args)
    operands.push_back(fragment.getOperand(arg.getArgNumber()));
  llvm::append_range(operands, spec.extraOperands);
  auto part = FragmentOp::create(builder, fragment.getLoc(), spec.resultTypes, operands,
                                 fragment.getOriginAttr(), fragment.getMeshNameAttr(),
                                 fragment.getStageIdAttr(), /*in_shardings=*/nullptr,
                                 /*out_shardings=*/nullptr);
  copyDiscardableAttrs(fragment, part);
  part->setAttr(spec.marker, UnitAttr::get(fragment.getContext()));

  OpBuilder::InsertionGuard guard(builder);
  Block *block = builder.createBlock(&part.getRegion());
  IRMapping mapping;
  for (BlockArgument arg : spec.args)
    mapping.map(arg, block->addArgument(arg.getType(), arg.getLoc()));
  for (Value v : spec.extraValues)
    mapping.map(v, block->addArgument(v.getType(), v.getLoc()));
  for (Operation &op : body.without_terminator())
    if (spec.inPart(op))
      builder.clone(op, mapping);
  SmallVector<Value> results;
  for (Value v : spec.returned)
    results.push_back(mapping.lookup(v));
  ReturnOp::create(builder, body.getTerminator()->getLoc(), results);
  return part;
}

/// Splits `fragment` into its B (keep-transferred) and W (drop-transferred)
/// parts, replacing it.
LogicalResult split(FragmentOp fragment) {
  if (fragment.getInShardingsAttr() || fragment.getOutShardingsAttr())
    return fragment.emitError()
           << "cannot split backward " << describeFragment(fragment)
           << ": it has in_shardings/out_shardings; run -mpmd-split-bwd-fragments before "
              "shardings are assigned";
  FailureOr<SplitPlan> plan = planSplit(fragment);
  if (failed(plan))
    return failure();
  Operation *terminator = fragment.getRegion().front().getTerminator();
  unsigned numResults = fragment.getNumResults();
  auto inB = [&](Operation &op) { return plan->inB.contains(&op); };
  OpBuilder builder(fragment);

  // B: the transferred results, then the residuals, fully replicated
  // (shardings are assigned after the split).
  SmallVector<Value> returnedByB;
  SmallVector<Type> typesOfB;
  for (unsigned i : plan->transferred.set_bits()) {
    returnedByB.push_back(terminator->getOperand(i));
    typesOfB.push_back(fragment.getResult(i).getType());
  }
  for (Value residual : plan->residuals) {
    returnedByB.push_back(residual);
    typesOfB.push_back(MeshTensorType::get(fragment.getContext(), fragment.getMeshName(),
                                           cast<RankedTensorType>(residual.getType())));
  }
  FragmentOp partB = buildPart(builder, fragment,
                               {plan->argsOfB, /*extraOperands=*/{}, /*extraValues=*/{}, inB,
                                returnedByB, typesOfB, kSplitKeepTransferredAttr});

  // W: every other op, fed with the residuals; the other results.
  SmallVector<Value> returnedByW;
  SmallVector<Type> typesOfW;
  for (unsigned i = 0; i < numResults; ++i) {
    if (plan->transferred.test(i))
      continue;
    returnedByW.push_back(terminator->getOperand(i));
    typesOfW.push_back(fragment.getResult(i).getType());
  }
  builder.setInsertionPointAfter(partB);
  FragmentOp partW = buildPart(
      builder, fragment,
      {plan->argsOfW, partB.getResults().drop_front(plan->transferred.count()), plan->residuals,
       [&](Operation &op) { return !inB(op); }, returnedByW, typesOfW,
       kSplitDropTransferredAttr});

  unsigned nextB = 0, nextW = 0;
  for (unsigned i = 0; i < numResults; ++i)
    fragment.getResult(i).replaceAllUsesWith(plan->transferred.test(i) ? partB.getResult(nextB++)
                                                                        : partW.getResult(nextW++));
  fragment.erase();
  return success();
}

class SplitBwdFragmentsPass : public MpmdPass<SplitBwdFragmentsPass, impl::SplitBwdFragmentsPassBase> {
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
