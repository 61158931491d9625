//===- MemoryKinds.h - memory kinds in assignments ----------------*- C++ -*-===//
//
// An assignment may put a value in another memory of its mesh's devices by
// writing the memory kind after the mesh: `x@m1#pinned_host` (a named
// tensor), `0@m#pinned_host` (an input or output of the entry function), as
// Shardy:MPMD spells it. The mesh tensor types of such values carry the
// memory kind; moving between memory kinds is a transfer on the mesh.
//
//===----------------------------------------------------------------------===//

#ifndef MPMD_LIB_TRANSFORMS_COMMON_MEMORYKINDS_H
#define MPMD_LIB_TRANSFORMS_COMMON_MEMORYKINDS_H

#include "mpmd/Dialect/MemoryKinds.h"
#include "mpmd/Dialect/MpmdDialect.h"
#include "mpmd/Pipeline.h"

#include "mlir/IR/Builders.h"

namespace mlir::mpmd {

/// `mesh#kind` -> (`mesh`, `kind`); `kind` is empty when not written.
std::pair<StringRef, StringRef> splitMeshAndMemoryKind(StringRef meshAndKind);

/// The memory kind of a mesh tensor type ("" when it names none: device
/// memory).
StringRef memoryKindOf(Type type);

/// Whether `type` is a mesh tensor in host memory.
bool isInHostMemory(Type type);

/// `type` (a mesh tensor type) with memory kind `kind` ("": none).
MeshTensorType withMemoryKind(MeshTensorType type, StringRef kind);

/// `value` (on a mesh) in memory kind `kind` of its mesh: `value` itself
/// when it is there, else an `mpmd.transfer` created at `builder`'s
/// insertion point. A kind-less type and "device" are the same memory.
Value moveToMemoryKind(OpBuilder &builder, Location loc, Value value, StringRef kind);

/// The input and output assignment of the entry function with memory kinds
/// written (`0@m#pinned_host`): the entries without their kinds, and index
/// -> memory kind for those that have one.
struct IoMemoryKinds {
  llvm::DenseMap<int64_t, std::string> inputs, outputs;
};

/// Splits the memory kinds off `entries` (in place); fails with an error on
/// `func` naming the input or output (`what`) and a kind that cannot be
/// assigned.
LogicalResult takeMemoryKinds(func::FuncOp func, StringRef what,
                              std::vector<::mpmd::IndexAssignment> &entries,
                              llvm::DenseMap<int64_t, std::string> &kinds);

/// Checks `mhlo.memory_kind` attributes of the entry function's inputs and
/// outputs that `kinds` assigns against the assignment, and drops them (the
/// type carries the kind from now on); fails on a contradiction.
LogicalResult checkMemoryKindAttributes(func::FuncOp func, const IoMemoryKinds &kinds);

/// After mesh inference: gives each input and output that `kinds` assigns
/// its memory kind. An input in host memory is moved to device memory at
/// the function's entry for its readers; an output is moved into its memory
/// kind before the return. Transfers within one memory of a mesh (into a
/// named tensor of `m#device`) are dropped first.
void applyIoMemoryKinds(func::FuncOp func, const IoMemoryKinds &kinds);

} // namespace mlir::mpmd

#endif // MPMD_LIB_TRANSFORMS_COMMON_MEMORYKINDS_H
