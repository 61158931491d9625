//===- Utils.cpp - helpers shared by mpmd passes ----------------------------===//

#include "Common/Utils.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/SetVector.h"

using namespace mlir;
using namespace mlir::mpmd;

FailureOr<llvm::StringMap<MeshAndStage>>
mlir::mpmd::parseNameAssignment(ArrayRef<std::string> entries, Operation *anchor) {
  llvm::StringMap<MeshAndStage> result;
  for (StringRef entry : entries) {
    auto [name, rest] = entry.rsplit('@');
    if (name.empty() || rest.empty() || !entry.contains('@'))
      return anchor->emitError() << "malformed assignment entry '" << entry
                                 << "': expected name@mesh or name@mesh/stage";
    MeshAndStage value;
    auto [mesh, stage] = rest.split('/');
    value.mesh = mesh.str();
    if (rest.contains('/')) {
      int64_t stageId;
      if (stage.getAsInteger(10, stageId) || stageId < 0)
        return anchor->emitError() << "assignment entry '" << entry
                                   << "' has an invalid stage: expected a non-negative integer";
      value.stage = stageId;
    }
    if (!result.try_emplace(name, value).second)
      return anchor->emitError() << "name \"" << name << "\" is assigned more than once";
  }
  return result;
}

FailureOr<llvm::DenseMap<int64_t, std::string>>
mlir::mpmd::parseIndexAssignment(ArrayRef<std::string> entries, StringRef what,
                                 Operation *anchor) {
  llvm::DenseMap<int64_t, std::string> result;
  for (StringRef entry : entries) {
    auto [index, mesh] = entry.split('@');
    int64_t i;
    if (index.getAsInteger(10, i) || i < 0 || mesh.empty())
      return anchor->emitError() << "malformed " << what << " assignment entry '" << entry
                                 << "': expected index@mesh";
    result[i] = mesh.str();
  }
  return result;
}

int64_t mlir::mpmd::getMeshIndex(TopologyAttr topology, StringRef name) {
  for (auto [i, mesh] : llvm::enumerate(topology.getMeshes()))
    if (mesh.getName() == name)
      return i;
  return -1;
}

FragmentOp mlir::mpmd::mergeFragments(FragmentOp first, FragmentOp second,
                                      Operation *insertionPoint) {
  MLIRContext *ctx = first.getContext();
  // Operands: those of `first`, then those of `second` not produced by `first`.
  llvm::SetVector<Value> operands(first.getOperands().begin(), first.getOperands().end());
  for (Value v : second.getOperands())
    if (v.getDefiningOp() != first.getOperation())
      operands.insert(v);
  // Results: all of `second`, then those of `first` used outside `second`.
  SmallVector<Value> keptFirstResults;
  for (Value r : first.getResults())
    if (llvm::any_of(r.getUsers(), [&](Operation *u) { return u != second.getOperation(); }))
      keptFirstResults.push_back(r);
  SmallVector<Type> resultTypes(second.getResultTypes());
  for (Value r : keptFirstResults)
    resultTypes.push_back(r.getType());

  // Origins: union, in order.
  llvm::SetVector<Attribute> origins(first.getOrigin().begin(), first.getOrigin().end());
  origins.insert(second.getOrigin().begin(), second.getOrigin().end());

  OpBuilder builder(insertionPoint);
  auto merged = builder.create<FragmentOp>(
      second.getLoc(), resultTypes, operands.getArrayRef(),
      builder.getArrayAttr(origins.getArrayRef()), second.getMeshNameAttr(),
      second.getStageIdAttr() ? second.getStageIdAttr() : first.getStageIdAttr(),
      /*in_shardings=*/nullptr, /*out_shardings=*/nullptr);
  // Discardable attributes: those of `first`, overridden by `second`'s.
  for (NamedAttribute attr : first->getDiscardableAttrs())
    merged->setAttr(attr.getName(), attr.getValue());
  for (NamedAttribute attr : second->getDiscardableAttrs())
    merged->setAttr(attr.getName(), attr.getValue());
  if (merged.isUserFragment())
    merged->removeAttr(kInferredByAttr);

  Block *block = builder.createBlock(&merged.getRegion());
  IRMapping outer; // merged operand -> block argument
  for (Value v : operands)
    outer.map(v, block->addArgument(cast<MeshTensorType>(v.getType()).getGlobalTensorType(),
                                    v.getLoc()));
  builder.setInsertionPointToEnd(block);

  auto inlineBody = [&](FragmentOp fragment, IRMapping &mapping) {
    Block &body = fragment.getRegion().front();
    for (auto [arg, operand] : llvm::zip(body.getArguments(), fragment.getOperands()))
      mapping.map(arg, outer.lookupOrNull(operand));
    for (Operation &op : body.without_terminator())
      builder.clone(op, mapping);
  };
  IRMapping firstMapping;
  inlineBody(first, firstMapping);
  Operation *firstReturn = first.getTerminator();
  // Results of `first` used by `second` map to `first`'s returned values.
  for (auto [result, returned] : llvm::zip(first.getResults(), firstReturn->getOperands()))
    outer.map(result, firstMapping.lookupOrDefault(returned));
  IRMapping secondMapping;
  inlineBody(second, secondMapping);

  SmallVector<Value> returned;
  for (Value v : second.getTerminator()->getOperands())
    returned.push_back(secondMapping.lookupOrDefault(v));
  for (Value r : keptFirstResults)
    returned.push_back(outer.lookup(r));
  builder.create<ReturnOp>(second.getLoc(), returned);

  for (auto [old, now] : llvm::zip(second.getResults(),
                                   merged.getResults().take_front(second.getNumResults())))
    old.replaceAllUsesWith(now);
  for (auto [old, now] : llvm::zip(keptFirstResults,
                                   merged.getResults().drop_front(second.getNumResults())))
    old.replaceAllUsesWith(now);
  second.erase();
  first.erase();
  return merged;
}
