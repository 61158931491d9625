//===- BatchWeightGradients.cpp - one weight gradient for many microbatches ===//
//
// Replaces a run of a mesh's weight-gradient fragments (W units, one per
// microbatch, each adding its gradients into the previous one's
// accumulators) by one fragment that computes the gradients of all of them
// from their inputs concatenated along the batch (see Passes.td).
//
// The body of the W units is checked op by op: every value is either the
// same for every microbatch (invariant: weights, constants, masks), a
// concatenation of the microbatches' values along one dimension (batched),
// a sum over the microbatches (summed: a contraction or add-reduction over
// the batched dimension, and linear functions of such sums), an accumulator
// carried in from the previous unit, or such an accumulator plus a sum. Each
// rule below is an identity of the op on concatenated operands, so the
// rewritten body computes what the units computed one after the other, up to
// the order of the additions.
//
//===----------------------------------------------------------------------===//

#include "Common/DimensionNumbers.h"
#include "Common/Fragments.h"
#include "Common/MergeFragments.h"
#include "Common/PassBase.h"
#include "Common/StableHloOps.h"
#include "Common/StructuralKey.h"
#include "mpmd/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Transforms/RegionUtils.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringSet.h"

#include <numeric>
#include <optional>

namespace mlir::mpmd {
#define GEN_PASS_DEF_BATCHWEIGHTGRADIENTSPASS
#include "mpmd/Transforms/Passes.h.inc"

namespace {

//===----------------------------------------------------------------------===//
// Reading the (unregistered) StableHLO ops
//===----------------------------------------------------------------------===//

/// The properties of `op` (an unregistered op keeps them as a dictionary).
DictionaryAttr properties(Operation *op) {
  return dyn_cast_or_null<DictionaryAttr>(op->getPropertiesAsAttribute());
}

/// Property `name` of `op` as an i64 array (`array<i64: ...>`).
std::optional<SmallVector<int64_t>> i64Array(Operation *op, StringRef name) {
  DictionaryAttr props = properties(op);
  auto array = props ? dyn_cast_or_null<DenseI64ArrayAttr>(props.get(name)) : nullptr;
  if (!array)
    return std::nullopt;
  return SmallVector<int64_t>(array.asArrayRef());
}

/// Property `name` of `op` as an integer.
std::optional<int64_t> i64Property(Operation *op, StringRef name) {
  DictionaryAttr props = properties(op);
  auto value = props ? dyn_cast_or_null<IntegerAttr>(props.get(name)) : nullptr;
  if (!value)
    return std::nullopt;
  return value.getInt();
}

int64_t indexOf(ArrayRef<int64_t> values, int64_t v) {
  auto it = llvm::find(values, v);
  return it == values.end() ? -1 : it - values.begin();
}

/// The dimensions `0..rank` not in any of `excluded`, in order.
SmallVector<int64_t> otherDims(int64_t rank, ArrayRef<ArrayRef<int64_t>> excluded) {
  SmallVector<int64_t> dims;
  for (int64_t d = 0; d < rank; ++d)
    if (llvm::none_of(excluded, [&](ArrayRef<int64_t> set) { return llvm::is_contained(set, d); }))
      dims.push_back(d);
  return dims;
}

int64_t rankOf(Value v) { return cast<RankedTensorType>(v.getType()).getRank(); }
int64_t dimSize(Value v, int64_t d) { return cast<RankedTensorType>(v.getType()).getDimSize(d); }

/// Ops that apply one function to the elements at each index of operands of
/// one shape (a scalar `select` predicate or `clamp` bound is broadcast).
bool isElementwise(StringRef name) {
  static const llvm::StringSet<> names = {
      "stablehlo.abs", "stablehlo.add", "stablehlo.and", "stablehlo.atan2",
      "stablehlo.cbrt", "stablehlo.ceil", "stablehlo.clamp", "stablehlo.compare",
      "stablehlo.complex", "stablehlo.convert", "stablehlo.cosine",
      "stablehlo.count_leading_zeros", "stablehlo.divide", "stablehlo.exponential",
      "stablehlo.exponential_minus_one", "stablehlo.floor", "stablehlo.imag",
      "stablehlo.is_finite", "stablehlo.log", "stablehlo.log_plus_one", "stablehlo.logistic",
      "stablehlo.maximum", "stablehlo.minimum", "stablehlo.multiply", "stablehlo.negate",
      "stablehlo.not", "stablehlo.or", "stablehlo.popcnt", "stablehlo.power", "stablehlo.real",
      "stablehlo.reduce_precision", "stablehlo.remainder", "stablehlo.round_nearest_afz",
      "stablehlo.round_nearest_even", "stablehlo.rsqrt", "stablehlo.select",
      "stablehlo.shift_left", "stablehlo.shift_right_arithmetic",
      "stablehlo.shift_right_logical", "stablehlo.sign", "stablehlo.sine", "stablehlo.sqrt",
      "stablehlo.subtract", "stablehlo.tan", "stablehlo.tanh", "stablehlo.xor",
      "chlo.acos", "chlo.acosh", "chlo.asin", "chlo.asinh", "chlo.atan", "chlo.atanh",
      "chlo.bessel_i1e", "chlo.conj", "chlo.cosh", "chlo.digamma", "chlo.erf", "chlo.erf_inv",
      "chlo.erfc", "chlo.is_inf", "chlo.is_neg_inf", "chlo.is_pos_inf", "chlo.lgamma",
      "chlo.next_after", "chlo.polygamma", "chlo.sinh", "chlo.square", "chlo.tan", "chlo.zeta"};
  return names.contains(name);
}

/// Whether `value` is a constant of zeros (`stablehlo.constant dense<0.0>`,
/// possibly broadcast), or, as a fragment's block argument, is given zeros
/// that another fragment returns.
bool isZeroConstant(Value value) {
  if (auto arg = dyn_cast<BlockArgument>(value)) {
    auto fragment = dyn_cast_or_null<FragmentOp>(arg.getOwner()->getParentOp());
    return fragment && isZeroConstant(fragment.getOperand(arg.getArgNumber()));
  }
  if (auto given = dyn_cast<OpResult>(value))
    if (auto producer = dyn_cast<FragmentOp>(given.getOwner()))
      return isZeroConstant(
          producer.getRegion().front().getTerminator()->getOperand(given.getResultNumber()));
  Operation *op = value.getDefiningOp();
  if (op && op->getName().getStringRef() == "stablehlo.broadcast_in_dim")
    return isZeroConstant(op->getOperand(0));
  if (!op || op->getName().getStringRef() != "stablehlo.constant")
    return false;
  DictionaryAttr props = properties(op);
  auto dense = props ? dyn_cast_or_null<DenseElementsAttr>(props.get("value")) : nullptr;
  if (!dense || !dense.isSplat())
    return false;
  if (auto f = dyn_cast<FloatType>(dense.getElementType()))
    return dense.getSplatValue<APFloat>().isZero();
  if (dense.getElementType().isInteger())
    return dense.getSplatValue<APInt>().isZero();
  return false;
}

/// The value `value` is a copy of: through fragments that return one of
/// their operands as it is or through an optimization barrier (the barrier
/// `jax.checkpoint` puts over a recomputation's parameters, made for each
/// microbatch).
Value sourceOf(Value value) {
  while (auto result = dyn_cast<OpResult>(value)) {
    auto fragment = dyn_cast<FragmentOp>(result.getOwner());
    if (!fragment)
      return value;
    Value returned = fragment.getRegion().front().getTerminator()->getOperand(
        result.getResultNumber());
    if (auto inner = dyn_cast<OpResult>(returned);
        inner && isOptimizationBarrier(inner.getOwner()))
      returned = inner.getOwner()->getOperand(inner.getResultNumber());
    auto arg = dyn_cast<BlockArgument>(returned);
    if (!arg || arg.getOwner() != &fragment.getRegion().front())
      return value;
    value = fragment.getOperand(arg.getArgNumber());
  }
  return value;
}

/// The body arguments `value` (in a fragment body) is computed from;
/// std::nullopt where it goes through an op with regions (not followed).
std::optional<SmallVector<BlockArgument>> argumentsOf(Value value) {
  SmallVector<Value> stack{value};
  SmallVector<BlockArgument> args;
  llvm::DenseSet<Value> seen;
  while (!stack.empty()) {
    Value v = stack.pop_back_val();
    if (!seen.insert(v).second)
      continue;
    if (auto arg = dyn_cast<BlockArgument>(v)) {
      args.push_back(arg);
      continue;
    }
    Operation *op = v.getDefiningOp();
    if (op->getNumRegions() != 0)
      return std::nullopt;
    llvm::append_range(stack, op->getOperands());
  }
  return args;
}

/// Whether `a` and `b`, operands of two units, hold the same value: copies
/// of one value (`sourceOf`), or the same result of two fragments with the
/// same body computing it from operands that hold the same values (a
/// constant a backward computes for each microbatch, such as `sqrt(64)`, or
/// a weight a forward returns transposed for each microbatch).
bool isSameValue(Value a, Value b, int depth = 0) {
  a = sourceOf(a);
  b = sourceOf(b);
  if (a == b)
    return true;
  auto ra = dyn_cast<OpResult>(a), rb = dyn_cast<OpResult>(b);
  auto fa = ra ? dyn_cast<FragmentOp>(ra.getOwner()) : nullptr;
  auto fb = rb ? dyn_cast<FragmentOp>(rb.getOwner()) : nullptr;
  if (depth > 4 || !fa || !fb || ra.getResultNumber() != rb.getResultNumber() ||
      a.getType() != b.getType())
    return false;
  Block &body = fa.getRegion().front();
  std::optional<SmallVector<BlockArgument>> args =
      argumentsOf(body.getTerminator()->getOperand(ra.getResultNumber()));
  if (!args || !llvm::all_of(*args, [&](BlockArgument arg) {
        return isSameValue(fa.getOperand(arg.getArgNumber()), fb.getOperand(arg.getArgNumber()),
                           depth + 1);
      }))
    return false;
  return blockKey(body) == blockKey(fb.getRegion().front());
}

/// Whether `block` adds its two arguments with one `stablehlo.add` and
/// returns the sum.
bool addsItsTwoArguments(Block &block) {
  if (block.getNumArguments() != 2 || block.getOperations().size() != 2)
    return false;
  Operation &add = block.front();
  Operation *ret = block.getTerminator();
  return add.getName().getStringRef() == "stablehlo.add" && add.getNumOperands() == 2 &&
         llvm::is_contained(add.getOperands(), block.getArgument(0)) &&
         llvm::is_contained(add.getOperands(), block.getArgument(1)) &&
         ret->getNumOperands() == 1 && ret->getOperand(0) == add.getResult(0);
}

/// Whether the one region of `op` adds its two scalar arguments and returns
/// the sum (an add reducer or scatter combiner).
bool hasAddBody(Operation *op) {
  return op->getNumRegions() == 1 && op->getRegion(0).hasOneBlock() &&
         addsItsTwoArguments(op->getRegion(0).front());
}

//===----------------------------------------------------------------------===//
// What each value of a W body is across the microbatches
//===----------------------------------------------------------------------===//

struct Kind {
  enum Tag { Invariant, Batched, Summed, Carry, CarrySum } tag = Invariant;
  /// Batched: the dimension the microbatches are concatenated along.
  int64_t dim = -1;
  /// Carry, CarrySum: the body argument of the carried accumulator.
  int64_t carry = -1;

  static Kind batched(int64_t d) { return {Batched, d, -1}; }
  static Kind summed() { return {Summed, -1, -1}; }
};

/// How a remark names what a value is.
std::string describeKind(Kind k) {
  switch (k.tag) {
  case Kind::Invariant: return "the same for every microbatch";
  case Kind::Batched: return "one value per microbatch (dimension " + std::to_string(k.dim) + ")";
  case Kind::Summed: return "a sum over the microbatches";
  case Kind::Carry: return "an accumulator";
  case Kind::CarrySum: return "an accumulator plus a sum";
  }
  return "";
}

/// The analysis of a W body, and what rewriting it needs.
class BodyPlan {
public:
  /// `argKinds`: what each body argument is.
  BodyPlan(Block &body, ArrayRef<Kind> argKinds) : body(body) {
    for (auto [arg, kind] : llvm::zip(body.getArguments(), argKinds))
      kinds[arg] = kind;
  }

  /// Classifies every op; false (with `reason`) where an op is not known to
  /// commute with concatenating its operands.
  bool analyze() {
    for (Operation &op : body.without_terminator())
      if (!visit(op))
        return false;
    return true;
  }

  Kind kindOf(Value v) const {
    auto it = kinds.find(v);
    return it == kinds.end() ? Kind() : it->second;
  }

  /// Invariant operands to tile along a dimension: (op, operand) -> dim.
  llvm::DenseMap<std::pair<Operation *, unsigned>, int64_t> tiles;
  /// Property updates of batched ops (a slice's limits, a gather's sizes).
  llvm::DenseMap<Operation *, std::pair<StringRef, int64_t>> scaledProperty;
  /// Broadcasts of a batched operand of size 1 along its dimension to a
  /// larger one: each microbatch's row is repeated over its own rows.
  llvm::DenseSet<Operation *> repeatedRows;
  std::string reason;
  /// The op `reason` is about.
  std::optional<Location> where;

private:
  bool fail(Operation &op, const Twine &why) {
    reason = (op.getName().getStringRef() + ": " + why).str();
    where = op.getLoc();
    return false;
  }

  void setAll(Operation &op, Kind kind) {
    for (Value r : op.getResults())
      kinds[r] = kind;
  }

  /// The operands' kinds must all be invariant or batched along one
  /// dimension; invariant operands of rank > 0 are tiled. The dimension, or
  /// -1 (after `fail`).
  int64_t elementwise(Operation &op) {
    int64_t dim = -1;
    for (Value v : op.getOperands()) {
      Kind k = kindOf(v);
      if (k.tag == Kind::Invariant)
        continue;
      if (k.tag != Kind::Batched || (dim >= 0 && dim != k.dim))
        return fail(op, "operands concatenated along different dimensions (" + Twine(dim) +
                            " and " + Twine(k.dim) + ")"),
               -1;
      dim = k.dim;
    }
    for (OpOperand &operand : op.getOpOperands())
      if (kindOf(operand.get()).tag == Kind::Invariant && rankOf(operand.get()) > 0)
        tiles[{&op, operand.getOperandNumber()}] = dim;
    return dim;
  }

  bool visitSummed(Operation &op, StringRef name) {
    // Linear functions of sums (and an accumulator plus a sum) stay sums.
    SmallVector<Kind> ks;
    for (Value v : op.getOperands())
      ks.push_back(kindOf(v));
    auto is = [&](unsigned i, Kind::Tag t) { return ks[i].tag == t; };
    if (op.getNumOperands() == 1 && op.getNumResults() == 1 && is(0, Kind::Summed) &&
        (name == "stablehlo.negate" || name == "stablehlo.reshape" ||
         name == "stablehlo.transpose" || name == "stablehlo.broadcast_in_dim" ||
         name == "stablehlo.convert")) {
      setAll(op, Kind::summed());
      return true;
    }
    if (name == "stablehlo.reduce" && op.getNumOperands() == 2 && is(0, Kind::Summed) &&
        is(1, Kind::Invariant) && hasAddBody(&op) && isZeroConstant(op.getOperand(1))) {
      setAll(op, Kind::summed());
      return true;
    }
    if (op.getNumOperands() == 2 && (name == "stablehlo.add" || name == "stablehlo.subtract") &&
        is(0, Kind::Summed) && is(1, Kind::Summed)) {
      setAll(op, Kind::summed());
      return true;
    }
    if (op.getNumOperands() == 2 && name == "stablehlo.add") {
      for (unsigned i : {0u, 1u}) {
        if (is(i, Kind::Carry) && is(1 - i, Kind::Summed)) {
          setAll(op, {Kind::CarrySum, -1, ks[i].carry});
          return true;
        }
        if (is(i, Kind::Invariant) && is(1 - i, Kind::Summed) && isZeroConstant(op.getOperand(i))) {
          setAll(op, Kind::summed()); // zeros plus a sum
          return true;
        }
      }
    }
    if (op.getNumOperands() == 2 &&
        ((name == "stablehlo.multiply" && (is(0, Kind::Invariant) || is(1, Kind::Invariant))) ||
         (name == "stablehlo.divide" && is(1, Kind::Invariant))) &&
        (is(0, Kind::Summed) || is(1, Kind::Summed))) {
      setAll(op, Kind::summed());
      return true;
    }
    return fail(op, "uses a sum over the microbatches in a way that is not linear");
  }

  bool visit(Operation &op) {
    StringRef name = op.getName().getStringRef();
    // An op that may act outside the program (a host callback, I/O) would
    // run once instead of once per microbatch.
    if (name == "stablehlo.custom_call" || name == "stablehlo.send" ||
        name == "stablehlo.recv" || name == "stablehlo.infeed" || name == "stablehlo.outfeed")
      return fail(op, "may act outside the program, once per microbatch");
    // Values a region uses from outside it count as operands; only ops
    // whose regions are closed are handled.
    llvm::SetVector<Value> captured;
    for (Region &region : op.getRegions())
      getUsedValuesDefinedAbove(region, captured);
    bool allInvariant = llvm::all_of(op.getOperands(), [&](Value v) {
      return kindOf(v).tag == Kind::Invariant;
    }) && llvm::all_of(captured, [&](Value v) { return kindOf(v).tag == Kind::Invariant; });
    if (allInvariant)
      return true; // The same for every microbatch: computed once.
    if (!captured.empty())
      return fail(op, "a region uses a value of the microbatches from outside it");
    for (Value r : op.getResults())
      if (!isa<RankedTensorType>(r.getType()) ||
          !cast<RankedTensorType>(r.getType()).hasStaticShape())
        return fail(op, "a result that is not a static tensor");

    bool anySummed = llvm::any_of(op.getOperands(), [&](Value v) {
      Kind::Tag t = kindOf(v).tag;
      return t == Kind::Summed || t == Kind::Carry || t == Kind::CarrySum;
    });
    if (anySummed)
      return visitSummed(op, name);

    if (name == "stablehlo.optimization_barrier") {
      for (auto [operand, result] : llvm::zip(op.getOperands(), op.getResults()))
        kinds[result] = kindOf(operand);
      return true;
    }
    if (isElementwise(name)) {
      int64_t dim = elementwise(op);
      if (dim < 0)
        return false;
      setAll(op, Kind::batched(dim));
      return true;
    }
    if (op.getNumResults() != 1)
      return fail(op, "not a known op of one result");
    Value result = op.getResult(0);
    if (name == "stablehlo.broadcast_in_dim") {
      int64_t d = kindOf(op.getOperand(0)).dim;
      std::optional<SmallVector<int64_t>> dims = i64Array(&op, "broadcast_dimensions");
      if (!dims || d >= static_cast<int64_t>(dims->size()))
        return fail(op, "no broadcast_dimensions");
      int64_t e = (*dims)[d];
      if (dimSize(op.getOperand(0), d) != dimSize(result, e)) {
        if (dimSize(op.getOperand(0), d) != 1)
          return fail(op, "broadcasts along the microbatches' dimension");
        // Each microbatch's one row (a weight's view saved per microbatch)
        // repeated over its rows: the concatenation's rows repeated.
        repeatedRows.insert(&op);
      }
      kinds[result] = Kind::batched(e);
      return true;
    }
    if (name == "stablehlo.reshape") {
      int64_t d = kindOf(op.getOperand(0)).dim;
      auto in = cast<RankedTensorType>(op.getOperand(0).getType()).getShape();
      auto out = cast<RankedTensorType>(result.getType()).getShape();
      int64_t outer = std::accumulate(in.begin(), in.begin() + d, int64_t{1},
                                      std::multiplies<int64_t>());
      // The dimension of `out` whose outer dimensions hold as many elements
      // as those of `in`: each microbatch is a contiguous slab of both.
      // Of several (dimensions of size 1 around it), the one of the same size
      // (a batch of one stays a dimension of size 1), else one not of size 1.
      auto rank = [&](int64_t e) { return out[e] == in[d] ? 2 : out[e] != 1 ? 1 : 0; };
      int64_t chosen = -1, prefix = 1;
      for (int64_t e = 0; e < static_cast<int64_t>(out.size()); ++e) {
        if (prefix == outer && (chosen < 0 || rank(e) > rank(chosen)))
          chosen = e;
        prefix *= out[e];
      }
      if (chosen < 0)
        return fail(op, "splits the microbatches' dimension");
      kinds[result] = Kind::batched(chosen);
      return true;
    }
    if (name == "stablehlo.transpose") {
      int64_t d = kindOf(op.getOperand(0)).dim;
      std::optional<SmallVector<int64_t>> perm = i64Array(&op, "permutation");
      if (!perm || indexOf(*perm, d) < 0)
        return fail(op, "no permutation");
      kinds[result] = Kind::batched(indexOf(*perm, d));
      return true;
    }
    if (name == "stablehlo.slice") {
      int64_t d = kindOf(op.getOperand(0)).dim;
      auto start = i64Array(&op, "start_indices"), limit = i64Array(&op, "limit_indices"),
           strides = i64Array(&op, "strides");
      if (!start || !limit || !strides || (*start)[d] != 0 || (*strides)[d] != 1 ||
          (*limit)[d] != dimSize(op.getOperand(0), d))
        return fail(op, "slices the microbatches' dimension");
      scaledProperty[&op] = {"limit_indices", d};
      kinds[result] = Kind::batched(d);
      return true;
    }
    if (name == "stablehlo.concatenate") {
      int64_t dim = elementwise(op);
      if (dim < 0 || dim == i64Property(&op, "dimension"))
        return fail(op, "concatenates along the microbatches' dimension");
      kinds[result] = Kind::batched(dim);
      return true;
    }
    if (name == "stablehlo.dot_general")
      return visitDot(op);
    if (name == "stablehlo.reduce")
      return visitReduce(op);
    if (name == "stablehlo.gather")
      return visitGather(op);
    if (name == "stablehlo.scatter")
      return visitScatter(op);
    return fail(op, "not known to commute with concatenating the microbatches");
  }

  bool visitDot(Operation &op) {
    DimensionNumbers numbers(properties(&op) ? properties(&op).get("dot_dimension_numbers")
                                             : Attribute());
    if (!numbers.valid())
      return fail(op, "no dot_dimension_numbers");
    SmallVector<int64_t> batch[2] = {numbers.list("lhs_batching_dimensions"),
                                     numbers.list("rhs_batching_dimensions")};
    SmallVector<int64_t> contract[2] = {numbers.list("lhs_contracting_dimensions"),
                                        numbers.list("rhs_contracting_dimensions")};
    Kind k[2] = {kindOf(op.getOperand(0)), kindOf(op.getOperand(1))};
    int64_t nb = batch[0].size();
    // Where a free dimension of each side lands in the result.
    auto freePosition = [&](unsigned side, int64_t d) -> int64_t {
      SmallVector<int64_t> free =
          otherDims(rankOf(op.getOperand(side)), {batch[side], contract[side]});
      int64_t at = indexOf(free, d);
      if (at < 0)
        return -1;
      if (side == 1)
        at += otherDims(rankOf(op.getOperand(0)), {batch[0], contract[0]}).size();
      return nb + at;
    };
    for (unsigned side : {0u, 1u}) {
      if (k[side].tag != Kind::Batched)
        continue;
      int64_t d = k[side].dim;
      unsigned other = 1 - side;
      if (int64_t q = indexOf(batch[side], d); q >= 0) {
        if (k[other].tag == Kind::Batched && k[other].dim != batch[other][q])
          return fail(op, "pairs the microbatches' dimension with another");
        if (k[other].tag == Kind::Invariant)
          tiles[{&op, other}] = batch[other][q];
        kinds[op.getResult(0)] = Kind::batched(q);
        return true;
      }
      if (int64_t q = indexOf(contract[side], d); q >= 0) {
        if (k[other].tag == Kind::Batched && k[other].dim != contract[other][q])
          return fail(op, "contracts the microbatches' dimension with another");
        if (k[other].tag == Kind::Invariant)
          tiles[{&op, other}] = contract[other][q];
        kinds[op.getResult(0)] = Kind::summed();
        return true;
      }
      if (k[other].tag == Kind::Batched)
        return fail(op, "multiplies two microbatches' values outer-product-wise");
      kinds[op.getResult(0)] = Kind::batched(freePosition(side, d));
      return true;
    }
    return fail(op, "unexpected operands");
  }

  bool visitReduce(Operation &op) {
    unsigned n = op.getNumOperands() / 2;
    std::optional<SmallVector<int64_t>> dims = i64Array(&op, "dimensions");
    if (!dims)
      return fail(op, "no dimensions");
    int64_t d = -1;
    for (unsigned i = 0; i < op.getNumOperands(); ++i) {
      Kind k = kindOf(op.getOperand(i));
      if (i >= n) {
        if (k.tag != Kind::Invariant)
          return fail(op, "an initial value differs between microbatches");
        continue;
      }
      if (k.tag != Kind::Batched || (d >= 0 && k.dim != d))
        return fail(op, "inputs not concatenated along one dimension");
      d = k.dim;
    }
    if (llvm::is_contained(*dims, d)) {
      if (n != 1 || !hasAddBody(&op) || !isZeroConstant(op.getOperand(1)))
        return fail(op, "reduces the microbatches' dimension other than by a sum from zero");
      setAll(op, Kind::summed());
      return true;
    }
    int64_t below = llvm::count_if(*dims, [&](int64_t r) { return r < d; });
    setAll(op, Kind::batched(d - below));
    return true;
  }

  /// The dimensions of an index tensor of rank `rank` that index (all but
  /// `indexVectorDim`, which may be `rank`: no such dimension).
  static SmallVector<int64_t> indexingDims(int64_t rank, int64_t indexVectorDim) {
    SmallVector<int64_t> dims;
    for (int64_t d = 0; d < rank; ++d)
      if (d != indexVectorDim)
        dims.push_back(d);
    return dims;
  }

  bool visitGather(Operation &op) {
    DimensionNumbers numbers(properties(&op) ? properties(&op).get("dimension_numbers")
                                             : Attribute());
    if (!numbers.valid())
      return fail(op, "no dimension_numbers");
    Value operand = op.getOperand(0), indices = op.getOperand(1), result = op.getResult(0);
    Kind ko = kindOf(operand), ki = kindOf(indices);
    SmallVector<int64_t> offsetDims = numbers.list("offset_dims");
    SmallVector<int64_t> collapsed = numbers.list("collapsed_slice_dims");
    SmallVector<int64_t> operandBatching = numbers.list("operand_batching_dims");
    SmallVector<int64_t> indicesBatching = numbers.list("start_indices_batching_dims");
    SmallVector<int64_t> startIndexMap = numbers.list("start_index_map");
    int64_t ivd = numbers.scalar("index_vector_dim", 0);
    SmallVector<int64_t> indexing = indexingDims(rankOf(indices), ivd);
    SmallVector<int64_t> resultBatch = otherDims(rankOf(result), {offsetDims});
    if (ko.tag == Kind::Invariant && ki.tag == Kind::Batched) {
      // Rows of an invariant table looked up by the microbatches' indices.
      int64_t at = indexOf(indexing, ki.dim);
      if (at < 0 || llvm::is_contained(indicesBatching, ki.dim))
        return fail(op, "indexes along the microbatches' dimension");
      kinds[result] = Kind::batched(resultBatch[at]);
      return true;
    }
    if (ko.tag == Kind::Batched && ki.tag == Kind::Batched) {
      // take_along_axis: the microbatches' dimension is a batching one.
      int64_t q = indexOf(operandBatching, ko.dim);
      if (q < 0 || indicesBatching[q] != ki.dim)
        return fail(op, "the microbatches' dimensions are not paired batching dimensions");
      kinds[result] = Kind::batched(resultBatch[indexOf(indexing, ki.dim)]);
      return true;
    }
    if (ko.tag == Kind::Batched && ki.tag == Kind::Invariant) {
      // A slice of every microbatch: the dimension must be taken whole.
      int64_t d = ko.dim;
      std::optional<SmallVector<int64_t>> sizes = i64Array(&op, "slice_sizes");
      if (!sizes || llvm::is_contained(collapsed, d) || llvm::is_contained(operandBatching, d) ||
          llvm::is_contained(startIndexMap, d) || (*sizes)[d] != dimSize(operand, d))
        return fail(op, "slices the microbatches' dimension");
      SmallVector<int64_t> windows = otherDims(rankOf(operand), {collapsed, operandBatching});
      scaledProperty[&op] = {"slice_sizes", d};
      kinds[result] = Kind::batched(offsetDims[indexOf(windows, d)]);
      return true;
    }
    return fail(op, "unexpected operands");
  }

  bool visitScatter(Operation &op) {
    if (op.getNumOperands() != 3)
      return fail(op, "scatters several arrays");
    DimensionNumbers numbers(properties(&op) ? properties(&op).get("scatter_dimension_numbers")
                                             : Attribute());
    if (!numbers.valid())
      return fail(op, "no scatter_dimension_numbers");
    Value operand = op.getOperand(0), indices = op.getOperand(1), updates = op.getOperand(2);
    Kind ko = kindOf(operand), ki = kindOf(indices), ku = kindOf(updates);
    SmallVector<int64_t> windowDims = numbers.list("update_window_dims");
    SmallVector<int64_t> inserted = numbers.list("inserted_window_dims");
    SmallVector<int64_t> inputBatching = numbers.list("input_batching_dims");
    SmallVector<int64_t> indicesBatching = numbers.list("scatter_indices_batching_dims");
    SmallVector<int64_t> toOperand = numbers.list("scatter_dims_to_operand_dims");
    int64_t ivd = numbers.scalar("index_vector_dim", 0);
    SmallVector<int64_t> indexing = indexingDims(rankOf(indices), ivd);
    SmallVector<int64_t> updateScatter = otherDims(rankOf(updates), {windowDims});
    if (ko.tag == Kind::Invariant && ki.tag == Kind::Batched && ku.tag == Kind::Batched) {
      // Adding every microbatch's updates into zeros: a sum.
      int64_t at = indexOf(indexing, ki.dim);
      if (at < 0 || llvm::is_contained(indicesBatching, ki.dim) || updateScatter[at] != ku.dim)
        return fail(op, "the microbatches' dimensions of indices and updates do not match");
      if (!hasAddBody(&op) || !isZeroConstant(operand))
        return fail(op, "scatters the microbatches' updates other than by adding into zeros");
      setAll(op, Kind::summed());
      return true;
    }
    if (ko.tag == Kind::Batched && ki.tag == Kind::Batched && ku.tag == Kind::Batched) {
      int64_t q = indexOf(inputBatching, ko.dim);
      int64_t at = indexOf(indexing, ki.dim);
      if (q < 0 || indicesBatching[q] != ki.dim || at < 0 || updateScatter[at] != ku.dim)
        return fail(op, "the microbatches' dimensions are not paired batching dimensions");
      setAll(op, Kind::batched(ko.dim));
      return true;
    }
    if (ko.tag == Kind::Batched && ki.tag == Kind::Invariant && ku.tag == Kind::Batched) {
      // Every microbatch's updates, each into its own part of the operand.
      int64_t d = ko.dim;
      SmallVector<int64_t> windows = otherDims(rankOf(operand), {inserted, inputBatching});
      int64_t at = indexOf(windows, d);
      if (at < 0 || llvm::is_contained(toOperand, d) || windowDims[at] != ku.dim ||
          dimSize(updates, ku.dim) != dimSize(operand, d))
        return fail(op, "scatters along the microbatches' dimension");
      setAll(op, Kind::batched(d));
      return true;
    }
    return fail(op, "unexpected operands");
  }

  Block &body;
  llvm::DenseMap<Value, Kind> kinds;
};

//===----------------------------------------------------------------------===//
// Runs of W units and their rewrite
//===----------------------------------------------------------------------===//

/// `type` with dimension `dim` `times` as large.
RankedTensorType scaled(Type type, int64_t dim, int64_t times) {
  auto tensor = cast<RankedTensorType>(type);
  SmallVector<int64_t> shape(tensor.getShape());
  shape[dim] *= times;
  return RankedTensorType::get(shape, tensor.getElementType(), tensor.getEncoding());
}

/// Creates an op of the (unregistered) StableHLO dialect; its one result.
Value createOp(OpBuilder &b, Location loc, StringRef name, ValueRange operands, Type result,
               ArrayRef<NamedAttribute> props) {
  return createStableHloOp(b, loc, name, operands, result, props)->getResult(0);
}

/// The sum of the `times` blocks `value` (the microbatches' values
/// concatenated along `dim`) is made of: a reshape that splits `dim` into
/// (`times`, block), then an add-reduction over the first.
Value sumOverMicrobatches(OpBuilder &b, Location loc, Value value, int64_t dim, int64_t times) {
  auto type = cast<RankedTensorType>(value.getType());
  SmallVector<int64_t> split(type.getShape()), summed(type.getShape());
  split[dim] /= times;
  summed[dim] /= times;
  split.insert(split.begin() + dim, times);
  Type element = type.getElementType();
  Value blocks = createOp(b, loc, "stablehlo.reshape", value, RankedTensorType::get(split, element), {});
  auto scalar = RankedTensorType::get({}, element);
  Attribute zero = isa<FloatType>(element)
                       ? Attribute(DenseElementsAttr::get(scalar, APFloat::getZero(
                                                                      cast<FloatType>(element).getFloatSemantics())))
                       : Attribute(DenseElementsAttr::get(
                             scalar, APInt::getZero(element.getIntOrFloatBitWidth())));
  Value init = createOp(b, loc, "stablehlo.constant", {}, scalar, {b.getNamedAttr("value", zero)});
  OperationState state(loc, "stablehlo.reduce");
  state.addOperands({blocks, init});
  state.addTypes(RankedTensorType::get(summed, element));
  state.propertiesAttr = b.getDictionaryAttr(
      {b.getNamedAttr("dimensions", b.getDenseI64ArrayAttr({dim}))});
  Region *region = state.addRegion();
  OpBuilder::InsertionGuard guard(b);
  Block *body = b.createBlock(region, {}, {scalar, scalar}, {loc, loc});
  Value sum = createOp(b, loc, "stablehlo.add", {body->getArgument(0), body->getArgument(1)},
                       scalar, {});
  OperationState ret(loc, "stablehlo.return");
  ret.addOperands(sum);
  b.create(ret);
  b.setInsertionPointAfterValue(init);
  return b.create(state)->getResult(0);
}

/// `value` repeated `times` times along dimension `dim`.
Value tile(OpBuilder &b, Location loc, Value value, int64_t dim, int64_t times) {
  auto type = cast<RankedTensorType>(value.getType());
  SmallVector<int64_t> shape(type.getShape()), dims;
  shape.insert(shape.begin() + dim, times);
  for (int64_t d = 0; d < type.getRank(); ++d)
    dims.push_back(d < dim ? d : d + 1);
  Value repeated =
      createOp(b, loc, "stablehlo.broadcast_in_dim", value,
               RankedTensorType::get(shape, type.getElementType()),
               {b.getNamedAttr("broadcast_dimensions", b.getDenseI64ArrayAttr(dims))});
  return createOp(b, loc, "stablehlo.reshape", repeated, scaled(type, dim, times), {});
}

/// `op`, a broadcast of a value of size 1 along the microbatches' dimension
/// to `rows` rows at result dimension `dim`, applied to `operand` (the
/// microbatches' values concatenated: size `times` there): each value
/// repeated over its own `rows` rows (broadcast to `times` x `rows`, then
/// the two dimensions merged).
Value repeatRows(OpBuilder &b, Operation &op, Value operand, int64_t dim, int64_t times) {
  auto resultType = cast<RankedTensorType>(op.getResult(0).getType());
  SmallVector<int64_t> shape(resultType.getShape());
  shape.insert(shape.begin() + dim, times);
  SmallVector<int64_t> dims = *i64Array(&op, "broadcast_dimensions");
  for (int64_t &d : dims)
    d = d <= dim ? d : d + 1; // the operand's dimension at `dim` maps to `times`
  Value repeated =
      createOp(b, op.getLoc(), "stablehlo.broadcast_in_dim", operand,
               RankedTensorType::get(shape, resultType.getElementType()),
               {b.getNamedAttr("broadcast_dimensions", b.getDenseI64ArrayAttr(dims))});
  return createOp(b, op.getLoc(), "stablehlo.reshape", repeated, scaled(resultType, dim, times),
                  {});
}

/// A run of W units to batch: consecutive siblings with the same body, each
/// after the first taking the previous one's accumulators.
struct Run {
  SmallVector<FragmentOp> units;
  /// Accumulators inside the units: operand index -> the result of the
  /// previous unit it carries.
  llvm::SmallDenseMap<unsigned, unsigned> carries;
  /// Accumulators outside them: per result, the fragment that adds it to
  /// the previous unit's sum, one per unit (empty where the result is read
  /// by nobody).
  SmallVector<SmallVector<FragmentOp>> adds;
};

/// Whether `add` is an inferred fragment of one `stablehlo.add` of its two
/// (different) operands.
bool isAddFragment(FragmentOp add) {
  return add.getOrigin().empty() && add.getNumOperands() == 2 && add.getNumResults() == 1 &&
         add.getOperand(0) != add.getOperand(1) && !add.getInShardingsAttr() &&
         !add.getOutShardingsAttr() && addsItsTwoArguments(add.getRegion().front());
}

/// The fragment that adds `result` (its only use) to another value (the
/// accumulation `jax.tree.map(jnp.add, grads, g)` after import); null
/// otherwise.
FragmentOp accumulationOf(Value result) {
  if (!result.hasOneUse())
    return nullptr;
  auto add = dyn_cast<FragmentOp>(result.getUses().begin()->getOwner());
  return add && isAddFragment(add) ? add : nullptr;
}

/// The operand of accumulation `add` that is not `term`.
Value otherOperand(FragmentOp add, Value term) {
  return add.getOperand(0) == term ? add.getOperand(1) : add.getOperand(0);
}

/// Per result of `unit`, its accumulation fragment (null where the result is
/// unused); std::nullopt when a used result is read otherwise.
std::optional<SmallVector<FragmentOp>> accumulationsOf(FragmentOp unit) {
  SmallVector<FragmentOp> adds;
  for (Value r : unit.getResults()) {
    FragmentOp add = r.use_empty() ? nullptr : accumulationOf(r);
    if (!r.use_empty() && !add)
      return std::nullopt;
    adds.push_back(add);
  }
  return adds;
}

/// Whether each result of `next` is added to the sum that adds the same
/// result of `previous` (and nothing else reads that sum).
bool accumulatesAfter(ArrayRef<FragmentOp> previous, FragmentOp next,
                      ArrayRef<FragmentOp> nextAdds) {
  for (auto [r, add] : llvm::enumerate(nextAdds)) {
    FragmentOp before = previous[r];
    if (!add || !before) {
      if (add || before)
        return false;
      continue;
    }
    Value sum = before.getResult(0);
    if (!sum.hasOneUse() || otherOperand(add, next.getResult(r)) != sum)
      return false;
  }
  return true;
}

/// Operand index -> result index of `previous` for each operand of `next`
/// that is a result of `previous`; std::nullopt when `previous`'s results
/// have other users.
std::optional<llvm::SmallDenseMap<unsigned, unsigned>> carriesBetween(FragmentOp previous,
                                                                       FragmentOp next) {
  llvm::SmallDenseMap<unsigned, unsigned> carries;
  for (OpOperand &use : previous->getUses()) {
    if (use.getOwner() != next.getOperation())
      return std::nullopt;
  }
  for (OpOperand &operand : next->getOpOperands())
    if (auto result = dyn_cast<OpResult>(operand.get()); result && result.getOwner() == previous)
      carries[operand.getOperandNumber()] = result.getResultNumber();
  return carries;
}

/// Replaces the units of `run` by one fragment at the last one's position.
/// Returns false (nothing changed) when its body cannot be batched.
bool batchRun(Run &run, TopologyAttr topology, std::string &reason,
              std::optional<Location> &where) {
  FragmentOp last = run.units.back(), first = run.units.front();
  int64_t m = run.units.size();
  Block &body = last.getRegion().front();
  unsigned numArgs = body.getNumArguments();

  // Each operand: invariant (one value for all units), carried, or batched
  // (along its dimension 0).
  SmallVector<Kind> argKinds(numArgs);
  for (unsigned p = 0; p < numArgs; ++p) {
    if (run.carries.count(p)) {
      argKinds[p] = {Kind::Carry, -1, static_cast<int64_t>(p)};
      continue;
    }
    Value v = last.getOperand(p);
    // (Zeros or constants made for each microbatch are one value.)
    bool same =
        llvm::all_of(run.units, [&](FragmentOp u) { return isSameValue(u.getOperand(p), v); }) ||
        llvm::all_of(run.units, [&](FragmentOp u) { return isZeroConstant(u.getOperand(p)); });
    auto type = dyn_cast<RankedTensorType>(body.getArgument(p).getType());
    if (same)
      continue;
    if (!type || !type.hasStaticShape() || type.getRank() == 0) {
      reason = "an operand that differs between microbatches is a scalar";
      return false;
    }
    argKinds[p] = Kind::batched(0);
  }
  BodyPlan plan(body, argKinds);
  if (!plan.analyze()) {
    reason = plan.reason;
    where = plan.where;
    return false;
  }
  // Each returned value read after the run: an accumulator carried on (the
  // sum of the run added to what the first unit was given), or invariant.
  Operation *terminator = body.getTerminator();
  for (auto [p, r] : run.carries) {
    Kind k = plan.kindOf(terminator->getOperand(r));
    if ((k.tag != Kind::CarrySum && k.tag != Kind::Carry) || k.carry != p) {
      reason = "a value handed from unit to unit is not an accumulator plus a sum";
      return false;
    }
  }
  for (unsigned r = 0; r < last.getNumResults(); ++r) {
    if (!run.adds.empty() && run.adds[r].empty())
      continue; // Read by nobody.
    if (!run.adds.empty()) {
      Kind k = plan.kindOf(terminator->getOperand(r));
      // (One value per microbatch is summed over the microbatches at the end:
      // a bias's gradient when a microbatch is one sequence, its batch
      // dimension of size 1 reshaped away rather than reduced.)
      if (k.tag != Kind::Summed && k.tag != Kind::Batched) {
        reason = ("result #" + Twine(r) + ", added up over the microbatches, is " +
                  describeKind(k) + ", not a sum over the microbatch")
                     .str();
        if (Operation *def = terminator->getOperand(r).getDefiningOp())
          where = def->getLoc();
        return false;
      }
      continue;
    }
    if (last.getResult(r).use_empty())
      continue;
    Kind k = plan.kindOf(terminator->getOperand(r));
    if (k.tag == Kind::Invariant)
      continue;
    bool carriedOn = (k.tag == Kind::CarrySum || k.tag == Kind::Carry) &&
                     run.carries.lookup(k.carry) == r && run.carries.count(k.carry);
    if (!carriedOn) {
      reason = "a result read after the run is not an accumulator carried from unit to unit";
      return false;
    }
  }

  // The new fragment: invariant and carried operands once (the carried ones
  // as the first unit got them), batched ones once per unit.
  OpBuilder builder(last);
  Location loc = last.getLoc();
  SmallVector<Value> operands;
  SmallVector<std::pair<unsigned, unsigned>> argSlots; // template arg -> (first new arg, count)
  for (unsigned p = 0; p < numArgs; ++p) {
    argSlots.push_back({static_cast<unsigned>(operands.size()),
                        argKinds[p].tag == Kind::Batched ? static_cast<unsigned>(m) : 1u});
    if (argKinds[p].tag == Kind::Batched) {
      for (FragmentOp u : run.units)
        operands.push_back(u.getOperand(p));
    } else {
      operands.push_back((argKinds[p].tag == Kind::Carry ? first : last).getOperand(p));
    }
  }
  SmallVector<Type> resultTypes;
  for (unsigned r = 0; r < last.getNumResults(); ++r) {
    Kind k = plan.kindOf(terminator->getOperand(r));
    auto meshType = cast<MeshTensorType>(last.getResult(r).getType());
    bool summedAtEnd = k.tag == Kind::Batched && !run.adds.empty();
    resultTypes.push_back(k.tag == Kind::Batched && !summedAtEnd
                              ? MeshTensorType::get(last.getContext(), meshType.getMeshName(),
                                                    scaled(meshType.getGlobalTensorType(), k.dim,
                                                           m))
                              : meshType);
  }
  auto batched = FragmentOp::create(builder, loc, resultTypes, operands, last.getOriginAttr(),
                                    last.getMeshNameAttr(), last.getStageIdAttr(),
                                    /*in_shardings=*/nullptr, /*out_shardings=*/nullptr);
  for (NamedAttribute attr : last->getDiscardableAttrs())
    if (attr.getName() != "arg_attrs" && attr.getName() != "res_attrs" &&
        attr.getName() != kDonatedOperandsAttr)
      batched->setAttr(attr.getName(), attr.getValue());
  std::string name;
  for (FragmentOp u : run.units) {
    std::optional<::mpmd::Unit> unit = getSchedulingUnit(u, topology);
    name += (name.empty() ? "" : "+") + (unit ? formatUnit(*unit, topology) : std::string("W"));
  }
  batched->setAttr(kUnitAttr, builder.getStringAttr(name));

  Block *block = builder.createBlock(&batched.getRegion());
  for (Value v : operands)
    block->addArgument(cast<MeshTensorType>(v.getType()).getGlobalTensorType(), loc);
  IRMapping mapping;
  for (unsigned p = 0; p < numArgs; ++p) {
    auto [at, count] = argSlots[p];
    if (count == 1) {
      mapping.map(body.getArgument(p), block->getArgument(at));
      continue;
    }
    SmallVector<Value> pieces(block->getArguments().slice(at, count));
    mapping.map(body.getArgument(p),
                createOp(builder, loc, "stablehlo.concatenate", pieces,
                         scaled(body.getArgument(p).getType(), 0, m),
                         {builder.getNamedAttr("dimension", builder.getI64IntegerAttr(0))}));
  }
  llvm::DenseMap<std::pair<Value, int64_t>, Value> tiled;
  for (Operation &op : body.without_terminator()) {
    if (plan.repeatedRows.contains(&op)) {
      mapping.map(op.getResult(0), repeatRows(builder, op, mapping.lookup(op.getOperand(0)),
                                              plan.kindOf(op.getResult(0)).dim, m));
      continue;
    }
    Operation *copy = builder.clone(op, mapping);
    for (OpOperand &operand : copy->getOpOperands()) {
      auto it = plan.tiles.find({&op, operand.getOperandNumber()});
      if (it == plan.tiles.end())
        continue;
      Value original = op.getOperand(operand.getOperandNumber());
      Value &t = tiled[{original, it->second}];
      if (!t) {
        OpBuilder::InsertionGuard guard(builder);
        builder.setInsertionPoint(copy);
        t = tile(builder, op.getLoc(), operand.get(), it->second, m);
      }
      operand.set(t);
    }
    for (auto [original, result] : llvm::zip(op.getResults(), copy->getResults())) {
      Kind k = plan.kindOf(original);
      if (k.tag == Kind::Batched)
        result.setType(scaled(original.getType(), k.dim, m));
    }
    if (auto it = plan.scaledProperty.find(&op); it != plan.scaledProperty.end()) {
      auto [propName, dim] = it->second;
      DictionaryAttr props = properties(copy);
      NamedAttrList list(props);
      SmallVector<int64_t> values(cast<DenseI64ArrayAttr>(props.get(propName)).asArrayRef());
      values[dim] *= m;
      list.set(propName, builder.getDenseI64ArrayAttr(values));
      (void)copy->setPropertiesFromAttribute(list.getDictionary(builder.getContext()), nullptr);
    }
  }
  SmallVector<Value> returned;
  for (Value v : terminator->getOperands()) {
    Kind k = plan.kindOf(v);
    returned.push_back(k.tag == Kind::Batched && !run.adds.empty()
                           ? sumOverMicrobatches(builder, loc, mapping.lookup(v), k.dim, m)
                           : mapping.lookup(v));
  }
  ReturnOp::create(builder, terminator->getLoc(), returned);

  if (!run.adds.empty()) {
    // The last addition adds the run's sum to what the first one started
    // from; the others go.
    for (auto [r, adds] : llvm::enumerate(run.adds)) {
      if (adds.empty())
        continue;
      FragmentOp lastAdd = adds.back();
      Value start = otherOperand(adds.front(), run.units.front().getResult(r));
      Value term = last.getResult(r);
      for (OpOperand &operand : lastAdd->getOpOperands())
        operand.set(operand.get() == term ? batched.getResult(r) : start);
      for (FragmentOp add : llvm::reverse(ArrayRef(adds).drop_back()))
        add.erase();
    }
  } else {
    for (unsigned r = 0; r < last.getNumResults(); ++r)
      last.getResult(r).replaceAllUsesWith(batched.getResult(r));
  }
  for (FragmentOp u : llvm::reverse(run.units))
    u.erase();
  pruneFragment(batched);
  return true;
}

/// `unit` with the inferred fragments merged into it that read one of its
/// results (as their only reader) and otherwise only values that exist
/// before it, such as an embedding's scatter-add of the rows a backward
/// returns (but not the additions into the accumulators: those stay apart).
FragmentOp absorbConsumers(FragmentOp unit) {
  for (bool changed = true; changed;) {
    changed = false;
    for (OpOperand &use : unit->getUses()) {
      auto consumer = dyn_cast<FragmentOp>(use.getOwner());
      if (!consumer || isAddFragment(consumer) || !consumer.getOrigin().empty() ||
          consumer.getMeshName() != unit.getMeshName() || consumer.getInShardingsAttr() ||
          consumer.getOutShardingsAttr() || consumer->getBlock() != unit->getBlock())
        continue;
      bool available = llvm::all_of(consumer.getOperands(), [&](Value v) {
        if (v.getDefiningOp() == unit.getOperation())
          return true;
        Operation *def = v.getDefiningOp();
        return !def || (def->getBlock() == unit->getBlock() && def->isBeforeInBlock(unit));
      });
      if (!available)
        continue;
      unit = mergeFragments(unit, consumer, unit.getOperation());
      changed = true;
      break;
    }
  }
  return unit;
}

class BatchWeightGradientsPass
    : public MpmdPass<BatchWeightGradientsPass, impl::BatchWeightGradientsPassBase> {
public:
  using MpmdPass::MpmdPass;

  void runOnFunction(func::FuncOp func, TopologyAttr topology) {
    // The W units of each computation on each mesh, in program order.
    llvm::StringMap<unsigned> groupOf;
    SmallVector<SmallVector<FragmentOp>> siblings;
    SmallVector<FragmentOp> weightUnits;
    for (auto fragment : func.getBody().front().getOps<FragmentOp>())
      if (fragment->hasAttr(kSplitDropTransferredAttr))
        weightUnits.push_back(fragment);
    for (FragmentOp fragment : weightUnits) {
      MeshAttr mesh = topology.getMesh(fragment.getMeshName());
      if (mesh && mesh.getNumDevices() == 1 && !fragment->hasAttr(kUnitAttr))
        absorbConsumers(fragment);
    }
    for (auto fragment : func.getBody().front().getOps<FragmentOp>()) {
      if (!fragment->hasAttr(kSplitDropTransferredAttr) || fragment->hasAttr(kUnitAttr) ||
          fragment.getInShardingsAttr() || fragment.getOutShardingsAttr() ||
          fragment->hasAttr(kFragmentArgAttrsAttr) || fragment->hasAttr(kFragmentResAttrsAttr))
        continue;
      MeshAttr mesh = topology.getMesh(fragment.getMeshName());
      if (!mesh || mesh.getNumDevices() != 1)
        continue; // Concatenating a batch split over devices would move it.
      auto [it, added] = groupOf.try_emplace(siblingKey(fragment), siblings.size());
      if (added)
        siblings.emplace_back();
      siblings[it->second].push_back(fragment);
    }
    for (SmallVector<FragmentOp> &units : siblings) {
      SmallVector<Run> runs;
      std::string previousKey;
      // (Per unit: its results' accumulation fragments, if that is how
      // they are read.)
      SmallVector<std::optional<SmallVector<FragmentOp>>> accumulations;
      for (FragmentOp unit : units) {
        std::string bodyKey = blockKey(unit.getRegion().front());
        std::optional<SmallVector<FragmentOp>> adds = accumulationsOf(unit);
        Run *current = runs.empty() ? nullptr : &runs.back();
        if (current && bodyKey == previousKey) {
          FragmentOp previous = current->units.back();
          std::optional<llvm::SmallDenseMap<unsigned, unsigned>> carries =
              carriesBetween(previous, unit);
          bool outside = current->units.size() == 1 || !current->adds.empty();
          bool inside = current->units.size() == 1 || current->adds.empty();
          if (inside && carries && !carries->empty() &&
              (current->units.size() == 1 || *carries == current->carries)) {
            current->carries = std::move(*carries);
            current->units.push_back(unit);
            continue;
          }
          const auto &previousAdds = accumulations.back();
          if (outside && previousAdds && adds && accumulatesAfter(*previousAdds, unit, *adds)) {
            if (current->adds.empty())
              for (FragmentOp add : *previousAdds)
                current->adds.push_back(add ? SmallVector<FragmentOp>{add}
                                            : SmallVector<FragmentOp>{});
            for (auto [r, add] : llvm::enumerate(*adds))
              if (add)
                current->adds[r].push_back(add);
            current->units.push_back(unit);
            accumulations.push_back(std::move(adds));
            continue;
          }
        }
        previousKey = bodyKey;
        runs.emplace_back();
        runs.back().units.push_back(unit);
        accumulations.push_back(std::move(adds));
      }
      for (Run &run : runs) {
        if (run.units.size() < 2)
          continue;
        std::string reason;
        std::string described = describeFragment(run.units.back());
        std::optional<Location> where;
        if (!batchRun(run, topology, reason, where) && verbose) {
          InFlightDiagnostic remark = emitRemark(run.units.back().getLoc())
                                      << "-mpmd-batch-weight-gradients: " << described
                                      << " and the "
                                      << (run.units.size() == 2
                                              ? std::string("unit")
                                              : std::to_string(run.units.size() - 1) + " units")
                                      << " before it stay one call each: " << reason;
          if (where)
            remark.attachNote(*where) << "the op";
        }
      }
    }
  }
};

} // namespace
} // namespace mlir::mpmd
