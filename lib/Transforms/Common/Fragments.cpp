//===- Fragments.cpp - what a fragment is in the pipeline -------------------===//

#include "Common/Fragments.h"
#include "Common/TextOptions.h"
#include "mpmd/Dialect/MpmdAttrNames.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringExtras.h"

using namespace mlir;
using namespace mlir::mpmd;

int64_t mlir::mpmd::getMeshIndex(TopologyAttr topology, StringRef name) {
  for (auto [i, mesh] : llvm::enumerate(topology.getMeshes()))
    if (mesh.getName() == name)
      return i;
  return -1;
}

bool mlir::mpmd::isOptimizationBarrier(Operation *op) {
  return op->getName().getStringRef() == "stablehlo.optimization_barrier" &&
         op->getNumRegions() == 0;
}

bool mlir::mpmd::isDonatedArgument(func::FuncOp func, unsigned index) {
  return func.getArgAttr(index, kBufferDonorAttr) || func.getArgAttr(index, kAliasingOutputAttr);
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

std::string mlir::mpmd::siblingKey(FragmentOp fragment) {
  std::string key;
  llvm::raw_string_ostream os(key);
  os << fragment.getMeshName() << ";" << fragment.getOrigin() << ";";
  if (fragment.getStageIdAttr())
    os << fragment.getStageIdAttr().getInt();
  for (NamedAttribute attr : fragment->getDiscardableAttrs())
    if (attr.getName() != kCallCounterAttr && attr.getName() != kDonatedOperandsAttr)
      os << ";" << attr.getName().getValue();
  return key;
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

std::string mlir::mpmd::formatUnit(const ::mpmd::Unit &unit, TopologyAttr topology) {
  return formatUnit(unit, getMeshIndex(topology, unit.mesh));
}

std::optional<::mpmd::Unit> mlir::mpmd::getSchedulingUnit(FragmentOp fragment,
                                                           TopologyAttr topology) {
  if (fragment->hasAttr(kUnitAttr))
    return std::nullopt; // Merged units, named by the pass that merged them.
  bool fwd = isForwardFragment(fragment);
  if (!fwd && !isBackwardFragment(fragment))
    return std::nullopt; // Inferred, or forward and backward merged.
  auto counter = fragment->getAttrOfType<IntegerAttr>(kCallCounterAttr);
  if (!counter)
    return std::nullopt;
  ::mpmd::Unit unit;
  unit.mesh = fragment.getMeshName().str();
  unit.kind = fwd ? "F" : fragment->hasAttr(kSplitDropTransferredAttr) ? "W" : "B";
  unit.microbatch = counter.getValue().getZExtValue();
  unit.stage = fragment.getStageId() ? *fragment.getStageId()
                                     : getMeshIndex(topology, fragment.getMeshName());
  return unit;
}

std::string mlir::mpmd::mergedUnitName(FragmentOp first, FragmentOp second,
                                       TopologyAttr topology) {
  auto name = [&](FragmentOp fragment) -> std::string {
    if (auto named = fragment->getAttrOfType<StringAttr>(kUnitAttr))
      return named.str();
    if (std::optional<::mpmd::Unit> unit = getSchedulingUnit(fragment, topology))
      return formatUnit(*unit, topology);
    return "";
  };
  std::string a = name(first), b = name(second);
  if (a.empty() || b.empty())
    return a.empty() ? b : a;
  return a + "+" + b;
}

std::optional<SmallVector<CallOp>> mlir::mpmd::getMpmdCalls(func::FuncOp callee,
                                                            ModuleOp module) {
  std::optional<SymbolTable::UseRange> uses = SymbolTable::getSymbolUses(callee, module);
  if (!uses)
    return std::nullopt;
  SmallVector<CallOp> calls;
  for (const SymbolTable::SymbolUse &use : *uses) {
    auto call = dyn_cast<CallOp>(use.getUser());
    if (!call)
      return std::nullopt;
    calls.push_back(call);
  }
  return calls;
}

std::vector<std::pair<int64_t, int64_t>> mlir::mpmd::accumulatedArguments(func::FuncOp callee) {
  std::vector<std::pair<int64_t, int64_t>> pairs;
  llvm::SmallDenseSet<int64_t> taken;
  Operation *ret = callee.getBody().front().getTerminator();
  for (auto [j, value] : llvm::enumerate(ret->getOperands())) {
    Operation *add = value.getDefiningOp();
    auto type = dyn_cast<RankedTensorType>(value.getType());
    Type element = type ? type.getElementType() : Type();
    if (!add || add->getName().getStringRef() != "stablehlo.add" || !type ||
        type.getRank() == 0 || !(element.isF16() || element.isBF16() || element.isF32() || element.isF64()))
      continue;
    for (Value operand : add->getOperands()) {
      auto arg = dyn_cast<BlockArgument>(operand);
      if (arg && arg.getOwner() == &callee.getBody().front() && arg.getType() == type &&
          taken.insert(arg.getArgNumber()).second) {
        pairs.emplace_back(static_cast<int64_t>(j), static_cast<int64_t>(arg.getArgNumber()));
        break;
      }
    }
  }
  return pairs;
}
