//===- PackValues.cpp - several tensors as one 1-D buffer -------------------===//
//
// See PackValues.h.
//
//===----------------------------------------------------------------------===//

#include "Common/PackValues.h"
#include "Common/StableHloOps.h"

#include "mpmd/Dialect/MpmdAttrNames.h"

namespace mlir::mpmd {

namespace {
RankedTensorType flatType(RankedTensorType type) {
  return RankedTensorType::get({type.getNumElements()}, type.getElementType());
}
} // namespace

RankedTensorType packableType(Value value) {
  auto type = dyn_cast<MeshTensorType>(value.getType());
  if (!type || type.getSharding() || type.getMemoryKind())
    return {};
  RankedTensorType tensor = type.getGlobalTensorType();
  if (!tensor.hasStaticShape() || !tensor.getElementType().isIntOrFloat())
    return {};
  return tensor;
}

bool hasPositionalAttrs(FragmentOp fragment) {
  return fragment.getInShardingsAttr() || fragment.getOutShardingsAttr() ||
         fragment->hasAttr(kFragmentArgAttrsAttr) || fragment->hasAttr(kFragmentResAttrsAttr);
}

RankedTensorType packedTensorType(TypeRange types) {
  int64_t size = 0;
  for (Type t : types)
    size += cast<RankedTensorType>(t).getNumElements();
  return RankedTensorType::get({size}, cast<RankedTensorType>(types.front()).getElementType());
}

Value packValues(OpBuilder &b, Location loc, ValueRange values) {
  SmallVector<Value> pieces;
  for (Value v : values) {
    auto type = cast<RankedTensorType>(v.getType());
    RankedTensorType flat = flatType(type);
    pieces.push_back(type == flat
                         ? v
                         : createStableHloOp(b, loc, "stablehlo.reshape", v, flat)->getResult(0));
  }
  if (pieces.size() == 1)
    return pieces.front();
  return createStableHloOp(b, loc, "stablehlo.concatenate", pieces,
                           packedTensorType(values.getTypes()),
                           {b.getNamedAttr("dimension", b.getI64IntegerAttr(0))})
      ->getResult(0);
}

Value unpackValue(OpBuilder &b, Location loc, Value packed, TypeRange types, unsigned index) {
  int64_t offset = 0;
  for (Type t : types.take_front(index))
    offset += cast<RankedTensorType>(t).getNumElements();
  auto type = cast<RankedTensorType>(types[index]);
  RankedTensorType flat = flatType(type);
  int64_t n = type.getNumElements();
  Value value =
      createStableHloOp(b, loc, "stablehlo.slice", packed, flat,
                        {b.getNamedAttr("start_indices", b.getDenseI64ArrayAttr({offset})),
                         b.getNamedAttr("limit_indices", b.getDenseI64ArrayAttr({offset + n})),
                         b.getNamedAttr("strides", b.getDenseI64ArrayAttr({1}))})
          ->getResult(0);
  if (type != flat)
    value = createStableHloOp(b, loc, "stablehlo.reshape", value, type)->getResult(0);
  return value;
}

SmallVector<Value> unpackValues(OpBuilder &b, Location loc, Value packed, TypeRange types) {
  SmallVector<Value> values;
  for (unsigned i = 0; i < types.size(); ++i)
    values.push_back(unpackValue(b, loc, packed, types, i));
  return values;
}

FragmentOp appendFragmentResults(FragmentOp fragment, ValueRange extraResults,
                                 TypeRange extraTypes) {
  Operation *terminator = fragment.getRegion().front().getTerminator();
  terminator->insertOperands(terminator->getNumOperands(), extraResults);
  SmallVector<Type> types(fragment.getResultTypes());
  types.append(extraTypes.begin(), extraTypes.end());
  OpBuilder b(fragment);
  auto replacement =
      FragmentOp::create(b, fragment.getLoc(), types, fragment.getOperands(), fragment->getAttrs());
  replacement.getRegion().takeBody(fragment.getRegion());
  for (auto [old, now] : llvm::zip(fragment.getResults(), replacement.getResults()))
    old.replaceAllUsesWith(now);
  fragment.erase();
  return replacement;
}

} // namespace mlir::mpmd
