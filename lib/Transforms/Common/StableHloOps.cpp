//===- StableHloOps.cpp - building StableHLO ops without StableHLO ---------===//
//
// See StableHloOps.h.
//
//===----------------------------------------------------------------------===//

#include "Common/StableHloOps.h"

namespace mlir::mpmd {

Operation *createStableHloOp(OpBuilder &b, Location loc, StringRef name, ValueRange operands,
                             Type result, ArrayRef<NamedAttribute> properties) {
  OperationState state(loc, name);
  state.addOperands(operands);
  state.addTypes(result);
  if (!properties.empty())
    state.propertiesAttr = b.getDictionaryAttr(properties);
  return b.create(state);
}

Value createStableHloConstant(OpBuilder &b, Location loc, ElementsAttr value) {
  return createStableHloOp(b, loc, "stablehlo.constant", {}, value.getType(),
                           b.getNamedAttr("value", value))
      ->getResult(0);
}

} // namespace mlir::mpmd
