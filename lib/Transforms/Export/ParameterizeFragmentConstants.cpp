//===- ParameterizeFragmentConstants.cpp - constants to operands -------------===//
//
// Fragments of different microbatches often differ only in a scalar constant
// (an unrolled loop's index) or in the offsets of a static slice (microbatch i
// of a stacked batch). Turning those values into operands gives the fragments
// one body, so they share one program (see Passes.td).
//
//===----------------------------------------------------------------------===//

#include "Common/Fragments.h"
#include "Common/PassBase.h"
#include "Common/StableHloOps.h"
#include "Common/StructuralKey.h"
#include "mpmd/Dialect/MpmdAttrNames.h"
#include "mpmd/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/raw_ostream.h"


namespace mlir::mpmd {
#define GEN_PASS_DEF_PARAMETERIZEFRAGMENTCONSTANTSPASS
#include "mpmd/Transforms/Passes.h.inc"

namespace {

constexpr llvm::StringLiteral kConstantOp = "stablehlo.constant";
constexpr llvm::StringLiteral kSliceOp = "stablehlo.slice";
constexpr llvm::StringLiteral kDynamicSliceOp = "stablehlo.dynamic_slice";
constexpr llvm::StringLiteral kBroadcastInDimOp = "stablehlo.broadcast_in_dim";

/// The properties of an (unregistered) op as a dictionary, or null.
DictionaryAttr propertiesOf(Operation *op) {
  return dyn_cast_or_null<DictionaryAttr>(op->getPropertiesAsAttribute());
}

/// Whether the runtime can pass a value of type `type` as a scalar array of
/// the same type whatever JAX's 64-bit mode.
bool isParameterizableElement(Type element) {
  if (auto integer = dyn_cast<IntegerType>(element))
    return integer.getWidth() <= 32;
  return element.isF32() || element.isF16() || element.isBF16();
}
bool isParameterizable(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  return tensor && tensor.getRank() == 0 && isParameterizableElement(tensor.getElementType());
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

/// The properties of `site`'s op with its value zero / its offsets 0.
DictionaryAttr maskedProperties(const Site &site) {
  Operation *op = site.op;
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
  return props.getDictionary(op->getContext());
}

/// Sets the values of `sites` (ops of a copy) to zero / their offsets to 0.
void maskSites(ArrayRef<Site> sites) {
  for (const Site &site : sites)
    (void)site.op->setPropertiesFromAttribute(maskedProperties(site), nullptr);
}

/// The sites of a fragment body, in program order.
SmallVector<Site> sitesOf(Block &body) {
  SmallVector<Site> sites;
  for (Operation &op : body)
    if (std::optional<Site> site = asSite(op))
      sites.push_back(*site);
  return sites;
}

/// The positions of the block arguments of `body` in order of first use (the
/// unused ones last, in their order): the same for two bodies that are equal
/// up to the order of their arguments.
SmallVector<unsigned> firstUseOrder(Block &body) {
  SmallVector<unsigned> order;
  llvm::SmallDenseSet<unsigned> seen;
  body.walk([&](Operation *op) {
    for (Value v : op->getOperands())
      if (auto arg = dyn_cast<BlockArgument>(v); arg && arg.getOwner() == &body &&
                                                 seen.insert(arg.getArgNumber()).second)
        order.push_back(arg.getArgNumber());
  });
  for (unsigned i = 0; i < body.getNumArguments(); ++i)
    if (!seen.contains(i))
      order.push_back(i);
  return order;
}

/// Replaces the splat-producing `op` of a body by a new block argument of the
/// body (and erases it, with the constant it broadcasts when nothing else uses
/// that). Returns the argument.
BlockArgument liftToArgument(Operation *op, Block &body) {
  BlockArgument arg = body.addArgument(op->getResult(0).getType(), op->getLoc());
  op->getResult(0).replaceAllUsesWith(arg);
  Operation *constant = op->getName().getStringRef() == kBroadcastInDimOp
                            ? op->getOperand(0).getDefiningOp() : nullptr;
  op->erase();
  if (constant && constant->use_empty())
    constant->erase();
  return arg;
}

/// The key (`blockKey`) of a candidate's body with the values of its sites
/// masked, so that fragments that differ only there have the same key. The
/// sites are masked where they are: no copy of the body.
std::string maskedKey(const Candidate &candidate) {
  llvm::DenseMap<Operation *, Attribute> masked;
  for (const Site &site : candidate.sites)
    masked[site.op] = maskedProperties(site);
  FragmentOp fragment = candidate.fragment;
  return blockKey(fragment.getRegion().front(), /*withArguments=*/true,
                  [&](Operation *op) { return masked.lookup(op); });
}

/// The same for a copy of `fragment`'s body in which the ops `lift` are
/// block arguments (see `liftToArgument`), keyed with the arguments in
/// first-use order (so bodies equal up to their argument order have one key).
std::string liftedKey(FragmentOp fragment, ArrayRef<Operation *> lift = {}) {
  IRMapping mapping;
  Operation *copy = fragment->clone(mapping);
  Block &body = copy->getRegion(0).front();
  for (Operation *op : lift)
    liftToArgument(mapping.lookup(op), body);
  maskSites(sitesOf(body));
  unsigned n = body.getNumArguments();
  for (unsigned i : firstUseOrder(body)) {
    BlockArgument old = body.getArgument(i);
    old.replaceAllUsesWith(body.addArgument(old.getType(), old.getLoc()));
  }
  body.eraseArguments(0, n);
  std::string key = blockKey(body);
  copy->destroy();
  return key;
}

/// An op of a fragment body that produces a splat the runtime could pass
/// instead: a splat `stablehlo.constant`, or a `stablehlo.broadcast_in_dim`
/// of a 0-d one (a constant broadcast by itself is not a site: its broadcast
/// is).
struct SplatSite {
  Operation *op;
  /// The value, with the type of the op's result.
  DenseElementsAttr value;
};

std::optional<SplatSite> asSplatSite(Operation &op) {
  if (op.getNumResults() != 1)
    return std::nullopt;
  auto type = dyn_cast<RankedTensorType>(op.getResult(0).getType());
  if (!type || !type.hasStaticShape() || !isParameterizableElement(type.getElementType()))
    return std::nullopt;
  StringRef name = op.getName().getStringRef();
  if (name == kConstantOp) {
    DictionaryAttr props = propertiesOf(&op);
    auto value = props ? dyn_cast_or_null<DenseElementsAttr>(props.get("value")) : nullptr;
    bool broadcastOnly = !op.use_empty() && llvm::all_of(op.getUsers(), [](Operation *user) {
      return user->getName().getStringRef() == kBroadcastInDimOp;
    });
    if (!value || !value.isSplat() || broadcastOnly)
      return std::nullopt;
    return SplatSite{&op, value};
  }
  if (name == kBroadcastInDimOp && op.getNumOperands() == 1) {
    Operation *def = op.getOperand(0).getDefiningOp();
    DictionaryAttr props = def ? propertiesOf(def) : nullptr;
    auto value = props && def->getName().getStringRef() == kConstantOp
                     ? dyn_cast_or_null<DenseElementsAttr>(props.get("value")) : nullptr;
    if (!value || !value.isSplat() || value.getType().getRank() != 0)
      return std::nullopt;
    return SplatSite{&op, DenseElementsAttr::get(type, value.getSplatValue<Attribute>())};
  }
  return std::nullopt;
}

/// How a splat site is told apart from another: its value and type.
std::string splatSignature(const SplatSite &site) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << site.value;
  return text;
}

SmallVector<SplatSite> splatSitesOf(FragmentOp fragment) {
  SmallVector<SplatSite> sites;
  for (Operation &op : fragment.getRegion().front())
    if (std::optional<SplatSite> site = asSplatSite(op))
      sites.push_back(*site);
  return sites;
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
    liftSplatsThatKeepMicrobatchesApart(func);
    std::vector<Candidate> candidates;
    for (FragmentOp fragment : func.getBody().front().getOps<FragmentOp>()) {
      Candidate candidate{fragment, sitesOf(fragment.getRegion().front())};
      if (!candidate.sites.empty())
        candidates.push_back(std::move(candidate));
    }
    // Fragments with one body up to the values of their sites.
    llvm::MapVector<StringRef, SmallVector<Candidate *>> groups;
    std::vector<std::string> keys;
    keys.reserve(candidates.size());
    for (Candidate &candidate : candidates) {
      keys.push_back(maskedKey(candidate));
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
  /// The first microbatch's fragment often differs from the others' only in
  /// splats where they take an operand: its accumulators start from zeros
  /// (`0 + g`) where later microbatches add to the running sum (`acc + g`).
  /// For each such fragment, the splats that are in excess compared with a
  /// sibling become operands (new arguments of `func` carrying their value in
  /// `mpmd.constant`, donated: the runtime passes a fresh copy each time),
  /// in the sibling's operand order, when that makes the two bodies equal up
  /// to the constants and slices the rest of the pass parameterizes. Bodies
  /// that still differ are left as they are.
  void liftSplatsThatKeepMicrobatchesApart(func::FuncOp func) {
    llvm::MapVector<StringRef, SmallVector<FragmentOp>> siblings;
    std::vector<std::string> siblingKeys;
    SmallVector<FragmentOp> microbatched;
    for (FragmentOp fragment : func.getBody().front().getOps<FragmentOp>())
      if (fragment.isUserFragment() && fragment->hasAttr(kCallCounterAttr) &&
          !fragment.getInShardingsAttr())
        microbatched.push_back(fragment);
    siblingKeys.reserve(microbatched.size());
    for (FragmentOp fragment : microbatched) {
      siblingKeys.push_back(siblingKey(fragment));
      siblings[siblingKeys.back()].push_back(fragment);
    }
    for (auto &[_, group] : siblings) {
      if (group.size() < 2)
        continue;
      // Siblings by the size of their body and signature (cheap: most have
      // one, and only those of another size can need a lift), the most
      // frequent first (ties: program order).
      llvm::MapVector<std::tuple<unsigned, unsigned, size_t>, SmallVector<FragmentOp>> sizes;
      for (FragmentOp fragment : group)
        sizes[sizeOf(fragment)].push_back(fragment);
      if (sizes.size() < 2)
        continue;
      SmallVector<FragmentOp> targets;
      for (auto &[size, members] : sizes)
        targets.push_back(members.front());
      llvm::stable_sort(targets, [&](FragmentOp a, FragmentOp b) {
        return sizes[sizeOf(a)].size() > sizes[sizeOf(b)].size();
      });
      llvm::DenseMap<Operation *, std::string> targetKeys;
      for (auto &[size, members] : sizes)
        for (FragmentOp fragment : members)
          for (FragmentOp target : targets)
            if (sizeOf(target) != size && liftToMatch(func, fragment, target, targetKeys)) {
              targetKeys.erase(fragment); // its body changed
              break;
            }
    }
  }

  static std::tuple<unsigned, unsigned, size_t> sizeOf(FragmentOp fragment) {
    return {fragment.getNumOperands(), fragment.getNumResults(),
            fragment.getRegion().front().getOperations().size()};
  }

  /// Lifts splats of `fragment` so that its body becomes `target`'s up to the
  /// values the pass parameterizes; whether it did.
  bool liftToMatch(func::FuncOp func, FragmentOp fragment, FragmentOp target,
                   llvm::DenseMap<Operation *, std::string> &targetKeys) {
    SmallVector<SplatSite> mine = splatSitesOf(fragment);
    if (mine.empty() || fragment.getNumOperands() >= target.getNumOperands() ||
        fragment.getNumResults() != target.getNumResults())
      return false;
    llvm::StringMap<int64_t> excess;
    for (const SplatSite &site : mine)
      ++excess[splatSignature(site)];
    for (const SplatSite &site : splatSitesOf(target))
      --excess[splatSignature(site)];
    auto [it, inserted] = targetKeys.try_emplace(target);
    if (inserted)
      it->second = liftedKey(target);
    const std::string &want = it->second;
    // Which of several equal splats to lift is a guess (accumulators start
    // last, so try the last ones first); the key comparison decides.
    for (bool fromEnd : {true, false}) {
      llvm::StringMap<int64_t> left = excess;
      SmallVector<Operation *> lift;
      auto take = [&](const SplatSite &site) {
        if (int64_t &n = left[splatSignature(site)]; n > 0) {
          --n;
          lift.push_back(site.op);
        }
      };
      if (fromEnd) {
        for (const SplatSite &site : llvm::reverse(mine))
          take(site);
        std::reverse(lift.begin(), lift.end());
      } else {
        for (const SplatSite &site : mine)
          take(site);
      }
      if (lift.empty() ||
          fragment.getNumOperands() + lift.size() != target.getNumOperands() ||
          liftedKey(fragment, lift) != want)
        continue;
      liftInto(func, fragment, lift, target);
      return true;
    }
    return false;
  }

  /// Makes `lift` operands of `fragment` fed by new donated constant
  /// arguments of `func`, then orders its operands as `target`'s.
  void liftInto(func::FuncOp func, FragmentOp fragment, ArrayRef<Operation *> lift,
                FragmentOp target) {
    MLIRContext *ctx = func.getContext();
    Block &body = fragment.getRegion().front();
    SmallVector<Value> operands(fragment.getOperands());
    SmallVector<DenseElementsAttr> values;
    for (Operation *op : lift)
      values.push_back(asSplatSite(*op)->value);
    for (auto [op, value] : llvm::zip(lift, values)) {
      unsigned index = func.getNumArguments();
      NamedAttrList attrs;
      attrs.set(kConstantArgAttr, value);
      attrs.set(kBufferDonorAttr, BoolAttr::get(ctx, true));
      (void)func.insertArgument(
          index, MeshTensorType::get(ctx, fragment.getMeshName(),
                                     cast<RankedTensorType>(value.getType())),
          attrs.getDictionary(ctx), op->getLoc());
      operands.push_back(func.getArgument(index));
      liftToArgument(op, body);
    }
    // Argument i of `target` in first-use order is argument i of ours.
    SmallVector<unsigned> mine = firstUseOrder(body);
    SmallVector<unsigned> theirs = firstUseOrder(target.getRegion().front());
    SmallVector<unsigned> source(mine.size());
    for (auto [m, t] : llvm::zip(mine, theirs))
      source[t] = m;
    unsigned n = body.getNumArguments();
    SmallVector<Value> ordered;
    SmallVector<BlockArgument> olds(body.getArguments());
    for (unsigned position : source) {
      ordered.push_back(operands[position]);
      BlockArgument old = olds[position];
      old.replaceAllUsesWith(body.addArgument(old.getType(), old.getLoc()));
    }
    body.eraseArguments(0, n);
    fragment->setOperands(ordered);
  }

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
        starts.push_back(createStableHloConstant(builder, op->getLoc(), value));
      }
      Operation *dynamic = createStableHloOp(
          builder, op->getLoc(), kDynamicSliceOp, starts, op->getResult(0).getType(),
          builder.getNamedAttr("slice_sizes", builder.getDenseI64ArrayAttr(site.sizes)));
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
