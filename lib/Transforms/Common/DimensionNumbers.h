//===- DimensionNumbers.h - StableHLO dimension numbers as lists --*- C++ -*-===//
//
// StableHLO is not linked into the mpmd libraries: its ops are unregistered
// and their dimension-numbers attributes (`#stablehlo.dot<...>`,
// `#stablehlo.gather<...>`, `#stablehlo.scatter<...>`) opaque. This reads
// their fields from the printed form.
//
//===----------------------------------------------------------------------===//
#ifndef MPMD_LIB_TRANSFORMS_COMMON_DIMENSIONNUMBERS_H
#define MPMD_LIB_TRANSFORMS_COMMON_DIMENSIONNUMBERS_H

#include "mlir/IR/Attributes.h"
#include "llvm/ADT/SmallVector.h"

#include <string>

namespace mlir::mpmd {

/// The fields of a dimension-numbers attribute (`#stablehlo.dot<
/// lhs_contracting_dimensions = [2], ...>`): `field = [a, b]` as a list,
/// `field = n` as one element; an absent field is empty.
class DimensionNumbers {
public:
  /// Reads `attr` (null: no fields).
  explicit DimensionNumbers(Attribute attr);
  /// Whether there was an attribute to read.
  bool valid() const { return !text.empty(); }
  /// Field `field`'s numbers (empty where absent).
  SmallVector<int64_t> list(StringRef field) const;
  /// A field holding one number (`index_vector_dim`), `fallback` if absent.
  int64_t scalar(StringRef field, int64_t fallback) const;

private:
  std::string text;
};

} // namespace mlir::mpmd

#endif // MPMD_LIB_TRANSFORMS_COMMON_DIMENSIONNUMBERS_H
