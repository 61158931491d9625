//===- MemoryKinds.h - the memory kinds of mesh tensors -----------*- C++ -*-===//
//
// The one definition of the memory kinds a value on a mesh can be in, as
// Shardy:MPMD spells them (`!mpmd.mesh_tensor<..., memory_kind="pinned_host">`,
// `x@m1#pinned_host` in an assignment). The type accepts Shardy's three so
// that its files read; a program places values in, and transfers between,
// the assignable ones, which are what the runtime runs. Python reads
// `_mpmd.MEMORY_KINDS` (the assignable kinds) from here.
//
//===----------------------------------------------------------------------===//

#ifndef MPMD_DIALECT_MEMORYKINDS_H
#define MPMD_DIALECT_MEMORYKINDS_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringRef.h"

#include <string>

namespace mlir::mpmd {

/// The memory of the mesh's devices (a kind-less mesh tensor is there too).
inline constexpr llvm::StringLiteral kDeviceMemoryKind = "device";
/// Page-locked host memory of the mesh's devices.
inline constexpr llvm::StringLiteral kPinnedHostMemoryKind = "pinned_host";
/// Pageable host memory (Shardy's files name it; no program places values there).
inline constexpr llvm::StringLiteral kUnpinnedHostMemoryKind = "unpinned_host";

/// The kinds values can be assigned to and transferred between.
inline constexpr llvm::StringLiteral kAssignableMemoryKinds[] = {kDeviceMemoryKind,
                                                                 kPinnedHostMemoryKind};
/// The kinds a mesh tensor type may name: the assignable ones and Shardy's
/// `unpinned_host`.
inline constexpr llvm::StringLiteral kTypeMemoryKinds[] = {
    kDeviceMemoryKind, kPinnedHostMemoryKind, kUnpinnedHostMemoryKind};

/// Whether values can be assigned to (and transferred into) memory kind `kind`.
inline bool isAssignableMemoryKind(llvm::StringRef kind) {
  return llvm::is_contained(kAssignableMemoryKinds, kind);
}

/// Whether a mesh tensor type may name memory kind `kind`.
inline bool isTypeMemoryKind(llvm::StringRef kind) {
  return llvm::is_contained(kTypeMemoryKinds, kind);
}

/// `kinds` for an error message, each in `quote`s: `"a", "b" or "c"`.
inline std::string listMemoryKinds(llvm::ArrayRef<llvm::StringLiteral> kinds, char quote) {
  std::string text;
  for (size_t i = 0; i < kinds.size(); ++i) {
    if (i > 0)
      text += i + 1 == kinds.size() ? " or " : ", ";
    text += quote;
    text += kinds[i].str();
    text += quote;
  }
  return text;
}

} // namespace mlir::mpmd

#endif // MPMD_DIALECT_MEMORYKINDS_H
