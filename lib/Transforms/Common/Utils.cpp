//===- Utils.cpp - helpers shared by mpmd passes ----------------------------===//

#include "Common/Utils.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/BitVector.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringExtras.h"

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

  // The bodies are moved, not cloned: the body of the larger fragment becomes
  // that of the merged one (its block arguments reshaped into one per merged
  // operand) and the ops of the smaller one are spliced in before or after
  // its ops, so a merge costs time in the size of the smaller fragment, not
  // of the merged one. The result is the same as inlining copies of both
  // bodies, `first`'s then `second`'s, into a new block.
  Block &firstBody = first.getRegion().front();
  Block &secondBody = second.getRegion().front();
  bool keepFirst = [&] {
    auto a = firstBody.begin(), b = secondBody.begin();
    while (a != firstBody.end() && b != secondBody.end())
      ++a, ++b;
    return b == secondBody.end();
  }();
  Block &kept = keepFirst ? firstBody : secondBody;
  auto argumentType = [](Value v) {
    return cast<MeshTensorType>(v.getType()).getGlobalTensorType();
  };
  // Makes argument `arg` of `kept` the one of merged operand `v`.
  auto adopt = [&](BlockArgument arg, Value v) {
    if (Type type = argumentType(v); arg.getType() != type)
      arg.setType(type);
    arg.setLoc(v.getLoc());
  };
  // Arguments of `kept` that stay, in order, are those of its first use of an
  // operand that is neither a result of `first` nor (for `second`) an operand
  // of `first`: exactly the merged operands they stand for, in the same order.
  // The others are replaced and erased.
  llvm::BitVector erased(kept.getNumArguments());
  llvm::SmallDenseMap<Value, BlockArgument, 16> keptArgOf;
  // The merged operands contributed by `first` (deduplicated, in order).
  size_t numFirstOperands = 0;
  {
    llvm::SmallDenseSet<Value, 16> seen;
    for (Value v : first.getOperands())
      numFirstOperands += seen.insert(v).second;
  }
  auto valueOfFirstResult = [&](Value result) {
    return first.getTerminator()->getOperand(cast<OpResult>(result).getResultNumber());
  };
  if (keepFirst) {
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
  } else {
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
  // Uses of the arguments are replaced: the terminators return final values.
  SmallVector<Value> returned(second.getTerminator()->getOperands());
  for (Value r : keptFirstResults)
    returned.push_back(valueOfFirstResult(r));
  first.getTerminator()->erase();
  second.getTerminator()->erase();
  if (keepFirst)
    firstBody.getOperations().splice(firstBody.end(), secondBody.getOperations());
  else
    secondBody.getOperations().splice(secondBody.begin(), firstBody.getOperations());
  merged.getRegion().takeBody(keepFirst ? first.getRegion() : second.getRegion());
  builder.setInsertionPointToEnd(&merged.getRegion().front());
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

bool mlir::mpmd::isForwardFragment(FragmentOp fragment) {
  return fragment.isUserFragment() && llvm::all_of(fragment.getOrigin(), [](Attribute a) {
           return cast<UserOriginAttr>(a).getTransposeCount() == 0;
         });
}

bool mlir::mpmd::isBackwardFragment(FragmentOp fragment) {
  return fragment.isUserFragment() && llvm::all_of(fragment.getOrigin(), [](Attribute a) {
           return cast<UserOriginAttr>(a).getTransposeCount() >= 1;
         });
}

FailureOr<std::optional<uint32_t>> mlir::mpmd::getCallCounter(FragmentOp fragment) {
  Attribute attr = fragment->getAttr(kCallCounterAttr);
  if (!attr)
    return std::optional<uint32_t>();
  auto integer = dyn_cast<IntegerAttr>(attr);
  if (!integer || !integer.getType().isUnsignedInteger(32))
    return fragment.emitError() << describeFragment(fragment)
                                << ": attribute `call_counter` must be a ui32 integer, got "
                                << attr;
  return std::optional<uint32_t>(static_cast<uint32_t>(integer.getValue().getZExtValue()));
}

LogicalResult mlir::mpmd::verifyCallCounters(Operation *root) {
  bool ok = true;
  root->walk([&](FragmentOp fragment) { ok &= succeeded(getCallCounter(fragment)); });
  return success(ok);
}

FragmentOp mlir::mpmd::getNextFragmentOnMesh(FragmentOp fragment) {
  for (Operation *op = fragment->getNextNode(); op; op = op->getNextNode())
    if (auto next = dyn_cast<FragmentOp>(op); next && next.getMeshName() == fragment.getMeshName())
      return next;
  return {};
}

std::string mlir::mpmd::describeFragment(FragmentOp fragment) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << "fragment [";
  llvm::interleaveComma(fragment.getOrigin(), os, [&](Attribute a) {
    auto origin = cast<UserOriginAttr>(a);
    os << '"' << origin.getUserName() << '"';
    if (origin.getTransposeCount() != 0)
      os << '(' << origin.getTransposeCount() << ')';
  });
  os << "]";
  auto counter = dyn_cast_or_null<IntegerAttr>(fragment->getAttr(kCallCounterAttr));
  if (counter && !counter.getType().isUnsignedInteger(32))
    counter = nullptr;
  std::optional<int64_t> stage = fragment.getStageId();
  if (counter)
    os << " (microbatch " << counter.getValue().getZExtValue();
  if (stage)
    os << (counter ? ", " : " (") << "stage " << *stage;
  if (counter || stage)
    os << ")";
  os << " on mesh \"" << fragment.getMeshName() << "\"";
  return text;
}

std::string mlir::mpmd::SchedulingUnit::str() const {
  std::string s = std::string(1, kind) + std::to_string(microbatch);
  if (stage != mesh)
    s += ".s" + std::to_string(stage);
  return s;
}

std::optional<SchedulingUnit> mlir::mpmd::getSchedulingUnit(FragmentOp fragment,
                                                             TopologyAttr topology) {
  bool fwd = isForwardFragment(fragment);
  if (!fwd && !isBackwardFragment(fragment))
    return std::nullopt; // Inferred, or forward and backward merged.
  auto counter = fragment->getAttrOfType<IntegerAttr>(kCallCounterAttr);
  if (!counter)
    return std::nullopt;
  SchedulingUnit unit;
  unit.kind = fwd ? 'F' : fragment->hasAttr(kSplitDropTransferredAttr) ? 'W' : 'B';
  unit.microbatch = counter.getValue().getZExtValue();
  unit.mesh = getMeshIndex(topology, fragment.getMeshName());
  unit.stage = fragment.getStageId() ? *fragment.getStageId() : unit.mesh;
  return unit;
}

SmallVector<std::string> mlir::mpmd::splitOptionLines(StringRef text) {
  SmallVector<std::string> lines;
  SmallVector<StringRef> pieces;
  text.split(pieces, '\n', -1, /*KeepEmpty=*/false);
  for (StringRef piece : pieces) {
    SmallVector<StringRef> parts;
    piece.split(parts, ';', -1, /*KeepEmpty=*/false);
    for (StringRef part : parts)
      if (StringRef line = part.split('#').first.trim(); !line.empty())
        lines.push_back(line.str());
  }
  return lines;
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

LogicalResult mlir::mpmd::inlineAllCalls(ModuleOp module, StringRef kind,
                                         function_ref<SmallVector<Operation *>()> collect,
                                         function_ref<void(Operation *, Operation *)> onClone) {
  SymbolTable symbols(module);
  auto calleeOf = [](Operation *call) {
    return call->getAttrOfType<FlatSymbolRefAttr>("callee").getValue();
  };
  // A chain of calls deeper than the number of functions is recursion.
  int64_t maxRounds = std::distance(module.getOps<func::FuncOp>().begin(),
                                    module.getOps<func::FuncOp>().end()) + 1;
  for (int64_t round = 0;; ++round) {
    SmallVector<Operation *> calls = collect();
    if (calls.empty())
      break;
    if (round == maxRounds)
      return calls.front()->emitError() << "recursive " << kind << " @" << calleeOf(calls.front())
                                        << " cannot be inlined";
    for (Operation *call : calls) {
      auto callee = symbols.lookup<func::FuncOp>(calleeOf(call));
      if (!callee || callee.isExternal())
        return call->emitError() << "cannot inline " << kind << " @" << calleeOf(call)
                                 << ": no function body in the module";
      if (!llvm::hasSingleElement(callee.getBody()))
        return call->emitError() << "cannot inline " << kind << " @" << calleeOf(call)
                                 << ": its body has more than one block";
      Block &body = callee.getBody().front();
      IRMapping mapping;
      mapping.map(body.getArguments(), call->getOperands());
      OpBuilder builder(call);
      for (Operation &op : body.without_terminator())
        onClone(call, builder.clone(op, mapping));
      for (auto [result, returned] :
           llvm::zip(call->getResults(), body.getTerminator()->getOperands()))
        result.replaceAllUsesWith(mapping.lookupOrDefault(returned));
      call->erase();
    }
  }
  // Erase, in module order, the private functions that are known to be
  // unreferenced (erasing one may leave a later one unreferenced). This is
  // `SymbolTable::symbolKnownUseEmpty(func, module)` for each function, from
  // one walk of the module instead of one per function: a function is known
  // unreferenced when no symbol use in the module has its name as root and the
  // walk meets no op that may be an unknown symbol table (an unregistered op
  // with one region, e.g. `stablehlo.reduce`). With such an op, none is, and
  // none becomes so by erasing others (a function holding it is not erased).
  std::optional<SymbolTable::UseRange> uses = SymbolTable::getSymbolUses(&module.getBodyRegion());
  if (!uses)
    return success();
  llvm::DenseMap<StringAttr, int64_t> useCount;
  llvm::DenseMap<Operation *, SmallVector<StringAttr>> rootsUsedIn; // top-level op -> uses
  for (const SymbolTable::SymbolUse &use : *uses) {
    StringAttr root = use.getSymbolRef().getRootReference();
    ++useCount[root];
    rootsUsedIn[module.getBody()->findAncestorOpInBlock(*use.getUser())].push_back(root);
  }
  for (func::FuncOp func : llvm::make_early_inc_range(module.getOps<func::FuncOp>())) {
    if (!func.isPrivate() || useCount.lookup(func.getSymNameAttr()) != 0)
      continue;
    for (StringAttr root : rootsUsedIn.lookup(func))
      --useCount[root];
    func.erase();
  }
  return success();
}
