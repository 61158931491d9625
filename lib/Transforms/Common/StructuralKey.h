//===- StructuralKey.h - IR structure as a comparable key ---------*- C++ -*-===//
#ifndef MPMD_LIB_TRANSFORMS_COMMON_STRUCTURALKEY_H
#define MPMD_LIB_TRANSFORMS_COMMON_STRUCTURALKEY_H

#include "mlir/IR/Block.h"
#include "mlir/IR/Operation.h"

#include <string>

namespace mlir::mpmd {

/// Which properties an op is keyed with: its own (null), or others (e.g. a
/// constant whose value is masked). The result must be a uniqued attribute.
using PropertiesOverride = function_ref<Attribute(Operation *)>;

/// A key of the structure of IR: two keys are equal exactly when the IR is
/// the same up to value names and locations, i.e. when both would print the
/// same in generic form without debug info (attributes and types compared by
/// their uniqued identity, which is equality of their contents). It is made
/// of the ops' names, properties, attributes, operand numbering, result and
/// block argument types, successors and regions, and is much cheaper to make
/// than the printed form (no formatting). The bytes are meant for maps
/// (`llvm::StringMap`, `std::map`), not for reading.
///
/// `blockKey` keys the ops of `block` (with its argument types when
/// `withArguments`); `opKey` keys `op` itself, regions included.
std::string blockKey(Block &block, bool withArguments = true,
                     PropertiesOverride properties = nullptr);
std::string opKey(Operation *op, PropertiesOverride properties = nullptr);

} // namespace mlir::mpmd

#endif // MPMD_LIB_TRANSFORMS_COMMON_STRUCTURALKEY_H
