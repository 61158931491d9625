//===- ParameterizeFragmentConstants.cpp - constants to operands -------------===//
//
// Fragments of different microbatches often differ only in a scalar constant
// (an unrolled loop's index) or in the offsets of a static slice (microbatch i
// of a stacked batch). Turning those values into operands gives the fragments
// one body, so they share one program (see Passes.td).
//
//===----------------------------------------------------------------------===//

#include "Common/PassBase.h"
#include "mpmd/Transforms/Passes.h"

#include "mlir/IR/AsmState.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/Support/raw_ostream.h"


namespace mlir::mpmd {
#define GEN_PASS_DEF_PARAMETERIZEFRAGMENTCONSTANTSPASS
#include "mpmd/Transforms/Passes.h.inc"

namespace {

constexpr llvm::StringLiteral kConstantOp = "stablehlo.constant";
constexpr llvm::StringLiteral kSliceOp = "stablehlo.slice";
constexpr llvm::StringLiteral kDynamicSliceOp = "stablehlo.dynamic_slice";

/// The properties of an (unregistered) op as a dictionary, or null.
DictionaryAttr propertiesOf(Operation *op) {
  return dyn_cast_or_null<DictionaryAttr>(op->getPropertiesAsAttribute());
}

/// Whether the runtime can pass a value of type `type` as a scalar array of
/// the same type whatever JAX's 64-bit mode.
bool isParameterizable(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (!tensor || tensor.getRank() != 0)
    return false;
  Type element = tensor.getElementType();
  if (auto integer = dyn_cast<IntegerType>(element))
    return integer.getWidth() <= 32;
  return element.isF32() || element.isF16() || element.isBF16();
}

/// An op of a fragment body whose value may tell microbatches apart: a 0-d
/// constant, or a slice with unit strides (its start offsets).
struct Site {
  Operation *op = nullptr;
  /// The constant's value, or null for a slice.
  DenseElementsAttr value;
  /// The slice's start offsets and sizes.
  SmallVector<int64_t> starts, sizes;
};

std::optional<Site> asSite(Operation &op) {
  DictionaryAttr props = propertiesOf(&op);
  if (!props)
    return std::nullopt;
  if (op.getName().getStringRef() == kConstantOp && op.getNumResults() == 1 &&
      isParameterizable(op.getResult(0).getType())) {
    auto value = dyn_cast_or_null<DenseElementsAttr>(props.get("value"));
    if (!value)
      return std::nullopt;
    return Site{&op, value, {}, {}};
  }
  if (op.getName().getStringRef() == kSliceOp && op.getNumOperands() == 1) {
    auto start = dyn_cast_or_null<DenseI64ArrayAttr>(props.get("start_indices"));
    auto limit = dyn_cast_or_null<DenseI64ArrayAttr>(props.get("limit_indices"));
    auto strides = dyn_cast_or_null<DenseI64ArrayAttr>(props.get("strides"));
    if (!start || !limit || !strides || start.size() != limit.size() ||
        llvm::any_of(strides.asArrayRef(), [](int64_t s) { return s != 1; }))
      return std::nullopt;
    Site site{&op, {}, {}, {}};
    for (auto [s, l] : llvm::zip(start.asArrayRef(), limit.asArrayRef())) {
      site.starts.push_back(s);
      site.sizes.push_back(l - s);
    }
    return site;
  }
  return std::nullopt;
}

/// A fragment and the sites of its top-level body, in program order.
struct Candidate {
  FragmentOp fragment;
  SmallVector<Site> sites;
};

/// The body of `fragment` as text, with the values of its sites masked (so
/// fragments that differ only there have the same key).
std::string maskedKey(FragmentOp fragment, ArrayRef<Site> sites) {
  // Mask a copy: the constants' values become zero, the slices' offsets 0.
  IRMapping mapping;
  Operation *copy = fragment->clone(mapping);
  Block &body = copy->getRegion(0).front();
  for (const Site &site : sites) {
    Operation *op = mapping.lookup(site.op);
    NamedAttrList props(propertiesOf(op));
    if (site.value) {
      props.set("value", DenseElementsAttr::get(site.value.getType(),
                                                 Attribute(Builder(op).getZeroAttr(
                                                     site.value.getElementType()))));
    } else {
      props.set("start_indices", DenseI64ArrayAttr::get(op->getContext(),
                                                        SmallVector<int64_t>(site.sizes.size())));
      props.set("limit_indices", DenseI64ArrayAttr::get(op->getContext(), site.sizes));
    }
    (void)op->setPropertiesFromAttribute(props.getDictionary(op->getContext()), nullptr);
  }
  std::string key;
  llvm::raw_string_ostream os(key);
  for (BlockArgument arg : body.getArguments())
    os << arg.getType() << ";";
  AsmState state(copy, OpPrintingFlags().printGenericOpForm().useLocalScope());
  for (Operation &op : body) {
    op.print(os, state);
    os << "\n";
  }
  copy->destroy();
  return key;
}

/// Whether the sites at one position of a group's members hold different
/// values, and (for slices) which offsets differ.
struct Varying {
  bool any = false;
  SmallVector<bool> dims;
};

Varying compareSites(ArrayRef<Candidate *> group, size_t k) {
  const Site &first = group.front()->sites[k];
  Varying varying;
  varying.dims.assign(first.starts.size(), false);
  for (Candidate *member : group.drop_front()) {
    const Site &site = member->sites[k];
    if (first.value) {
      varying.any |= site.value != first.value;
      continue;
    }
    for (size_t d = 0; d < first.starts.size(); ++d)
      if (site.starts[d] != first.starts[d])
        varying.dims[d] = varying.any = true;
  }
  return varying;
}

class ParameterizeFragmentConstantsPass
    : public MpmdPass<ParameterizeFragmentConstantsPass,
                              impl::ParameterizeFragmentConstantsPassBase> {
public:
  void runOnFunction(func::FuncOp func, TopologyAttr) {
    std::vector<Candidate> candidates;
    for (FragmentOp fragment : func.getBody().front().getOps<FragmentOp>()) {
      Candidate candidate{fragment, {}};
      for (Operation &op : fragment.getRegion().front())
        if (std::optional<Site> site = asSite(op))
          candidate.sites.push_back(*site);
      if (!candidate.sites.empty())
        candidates.push_back(std::move(candidate));
    }
    // Fragments with one body up to the values of their sites.
    llvm::MapVector<StringRef, SmallVector<Candidate *>> groups;
    std::vector<std::string> keys;
    keys.reserve(candidates.size());
    for (Candidate &candidate : candidates) {
      keys.push_back(maskedKey(candidate.fragment, candidate.sites));
      groups[keys.back()].push_back(&candidate);
    }
    arguments.clear();
    for (auto &[key, group] : groups) {
      if (group.size() < 2)
        continue;
      SmallVector<std::pair<size_t, Varying>> varying;
      for (size_t k = 0; k < group.front()->sites.size(); ++k)
        if (Varying v = compareSites(group, k); v.any)
          varying.push_back({k, std::move(v)});
      for (Candidate *member : group)
        parameterize(func, *member, varying);
    }
  }

private:
  /// The argument of `func` that holds `value` on `mesh` (made on first use).
  Value argumentFor(func::FuncOp func, StringRef mesh, DenseElementsAttr value) {
    auto key = std::make_pair(StringAttr::get(func.getContext(), mesh), Attribute(value));
    if (auto it = arguments.find(key); it != arguments.end())
      return it->second;
    MLIRContext *ctx = func.getContext();
    auto type = MeshTensorType::get(ctx, mesh, cast<RankedTensorType>(value.getType()));
    unsigned index = func.getNumArguments();
    NamedAttrList attrs;
    attrs.set(kConstantArgAttr, value);
    (void)func.insertArgument(index, type, attrs.getDictionary(ctx), func.getLoc());
    return arguments[key] = func.getArgument(index);
  }

  /// Replaces the varying sites of `member` by new block arguments fed by
  /// arguments of `func`, in site order (the same order in every member).
  void parameterize(func::FuncOp func, Candidate &member,
                    ArrayRef<std::pair<size_t, Varying>> varying) {
    FragmentOp fragment = member.fragment;
    Block &body = fragment.getRegion().front();
    MLIRContext *ctx = func.getContext();
    auto i32 = RankedTensorType::get({}, IntegerType::get(ctx, 32));
    SmallVector<Value> operands;
    auto addInput = [&](DenseElementsAttr value, Location loc) -> Value {
      operands.push_back(argumentFor(func, fragment.getMeshName(), value));
      return body.addArgument(value.getType(), loc);
    };
    for (const auto &[k, v] : varying) {
      const Site &site = member.sites[k];
      Operation *op = site.op;
      if (site.value) {
        op->getResult(0).replaceAllUsesWith(addInput(site.value, op->getLoc()));
        op->erase();
        continue;
      }
      // slice(x)[starts, starts + sizes) == dynamic_slice(x, starts, sizes).
      OpBuilder builder(op);
      SmallVector<Value> starts{op->getOperand(0)};
      for (auto [d, start] : llvm::enumerate(site.starts)) {
        auto value = DenseElementsAttr::get(i32, builder.getI32IntegerAttr(start).getValue());
        if (v.dims[d]) {
          starts.push_back(addInput(value, op->getLoc()));
          continue;
        }
        OperationState constant(op->getLoc(), kConstantOp);
        constant.addTypes(i32);
        constant.propertiesAttr = builder.getDictionaryAttr(builder.getNamedAttr("value", value));
        starts.push_back(builder.create(constant)->getResult(0));
      }
      OperationState slice(op->getLoc(), kDynamicSliceOp);
      slice.addOperands(starts);
      slice.addTypes(op->getResultTypes());
      slice.propertiesAttr = builder.getDictionaryAttr(
          builder.getNamedAttr("slice_sizes", builder.getDenseI64ArrayAttr(site.sizes)));
      Operation *dynamic = builder.create(slice);
      op->getResult(0).replaceAllUsesWith(dynamic->getResult(0));
      op->erase();
    }
    fragment->insertOperands(fragment->getNumOperands(), operands);
  }

  /// (mesh, value) -> the function argument holding it, for one function.
  llvm::DenseMap<std::pair<StringAttr, Attribute>, Value> arguments;
};

} // namespace
} // namespace mlir::mpmd
