//===- Utils.h - helpers shared by mpmd passes -------------------*- C++ -*-===//
#ifndef MPMD_LIB_TRANSFORMS_COMMON_UTILS_H
#define MPMD_LIB_TRANSFORMS_COMMON_UTILS_H

#include "mpmd/Dialect/MpmdDialect.h"

#include "llvm/ADT/StringMap.h"
#include <optional>

namespace mlir::mpmd {

/// A mesh (and optional stage) a user name is assigned to.
struct MeshAndStage {
  std::string mesh;
  std::optional<int64_t> stage;
};

/// Parses `name@mesh[/stage]` entries. Errors are reported on `anchor`.
FailureOr<llvm::StringMap<MeshAndStage>> parseNameAssignment(ArrayRef<std::string> entries,
                                                             Operation *anchor);

/// Parses `index@mesh` entries. Errors are reported on `anchor`.
FailureOr<llvm::DenseMap<int64_t, std::string>> parseIndexAssignment(ArrayRef<std::string> entries,
                                                                      StringRef what,
                                                                      Operation *anchor);

/// The index of mesh `name` in `topology`, or -1.
int64_t getMeshIndex(TopologyAttr topology, StringRef name);

/// Merges fragment `first` (which precedes `second` in the block) and
/// `second` into one fragment inserted before `insertionPoint`: the body of
/// `first` runs before that of `second`, uses of `first`'s results by `second`
/// become internal, and results still used elsewhere are kept. Origins are
/// united. Both fragments are erased; the merged fragment is returned.
FragmentOp mergeFragments(FragmentOp first, FragmentOp second, Operation *insertionPoint);

} // namespace mlir::mpmd

#endif // MPMD_LIB_TRANSFORMS_COMMON_UTILS_H
