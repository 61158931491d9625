//===- StableHloOps.h - building StableHLO ops without StableHLO -*- C++ -*-===//
//
// StableHLO is not linked into the mpmd libraries: the passes meet its ops as
// unregistered operations whose attributes are properties. These build such
// ops the way JAX's StableHLO spells them.
//
//===----------------------------------------------------------------------===//
#ifndef MPMD_LIB_TRANSFORMS_COMMON_STABLEHLOOPS_H
#define MPMD_LIB_TRANSFORMS_COMMON_STABLEHLOOPS_H

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"

namespace mlir::mpmd {

/// Creates the (unregistered) op `name` (e.g. "stablehlo.reshape") at `b`'s
/// insertion point, with `operands`, one result of type `result` and
/// `properties` (the op's attributes, as the printed form's `<{...}>`).
Operation *createStableHloOp(OpBuilder &b, Location loc, StringRef name, ValueRange operands,
                             Type result, ArrayRef<NamedAttribute> properties = {});

/// A `stablehlo.constant` holding `value` (its result has `value`'s type).
Value createStableHloConstant(OpBuilder &b, Location loc, ElementsAttr value);

} // namespace mlir::mpmd

#endif // MPMD_LIB_TRANSFORMS_COMMON_STABLEHLOOPS_H
