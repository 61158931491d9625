//===- PackValues.h - several tensors as one 1-D buffer ------------*- C++ -*-===//
//
// Values handed over as one buffer (-mpmd-pack-fragment-values, between two
// fragments of a mesh; -mpmd-merge-transfers, between meshes): the producer
// flattens and concatenates them (`stablehlo.reshape`,
// `stablehlo.concatenate`), the consumer slices and reshapes them back
// (`stablehlo.slice`, `stablehlo.reshape`). StableHLO is not registered with
// mpmd-opt, so the ops are built by name.
//
//===----------------------------------------------------------------------===//

#ifndef MPMD_LIB_TRANSFORMS_COMMON_PACKVALUES_H
#define MPMD_LIB_TRANSFORMS_COMMON_PACKVALUES_H

#include "mpmd/Dialect/MpmdDialect.h"

#include "mlir/IR/Builders.h"

namespace mlir::mpmd {

/// The global tensor type of `value` when it may be packed: a mesh tensor of
/// static shape with neither sharding nor memory kind, of an integer or
/// floating-point element type; else null.
RankedTensorType packableType(Value value);

/// Whether fragment attributes that describe positions (shardings, argument
/// or result attributes) rule out changing its operands or results.
bool hasPositionalAttrs(FragmentOp fragment);

/// The 1-D tensor type holding `types` (of one element type) packed.
RankedTensorType packedTensorType(TypeRange types);

/// `values` (local tensors of one element type) flattened and concatenated
/// in order, built at `b`'s insertion point; a single flat value is its own
/// packing.
Value packValues(OpBuilder &b, Location loc, ValueRange values);

/// Value `index` of `types` sliced and reshaped back from `packed` (what
/// packValues made of values of `types`), built at `b`'s insertion point.
Value unpackValue(OpBuilder &b, Location loc, Value packed, TypeRange types, unsigned index);

/// Every value of `types` unpacked from `packed`, in order.
SmallVector<Value> unpackValues(OpBuilder &b, Location loc, Value packed, TypeRange types);

/// `fragment` rebuilt with `extraResults` returned after its results (the
/// body is moved; the old fragment's uses take the new one's results and it
/// is erased). Returns the new fragment.
FragmentOp appendFragmentResults(FragmentOp fragment, ValueRange extraResults,
                                 TypeRange extraTypes);

} // namespace mlir::mpmd

#endif // MPMD_LIB_TRANSFORMS_COMMON_PACKVALUES_H
