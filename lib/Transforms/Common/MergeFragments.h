//===- MergeFragments.h - merging two fragments, pruning one ------*- C++ -*-===//
#ifndef MPMD_LIB_TRANSFORMS_COMMON_MERGEFRAGMENTS_H
#define MPMD_LIB_TRANSFORMS_COMMON_MERGEFRAGMENTS_H

#include "mpmd/Dialect/MpmdDialect.h"

namespace mlir::mpmd {

/// Merges fragment `first` (which precedes `second` in the block) and
/// `second` into one fragment inserted before `insertionPoint`: the body of
/// `first` runs before that of `second`, uses of `first`'s results by `second`
/// become internal, and results still used elsewhere are kept. Origins are
/// united. Both fragments are erased; the merged fragment is returned.
FragmentOp mergeFragments(FragmentOp first, FragmentOp second, Operation *insertionPoint);

/// Merges fragment `first` with the later fragment `second` where that is
/// legal: at `second`'s position when every other use of `first`'s results
/// comes after `second`, else at `first`'s position when every operand of
/// `second` is available there. Returns the merged fragment, or null when
/// neither position works (then nothing changed).
FragmentOp mergeIfLegal(FragmentOp first, FragmentOp second);

/// Replaces `fragment` (which has no per-value shardings) by one that returns
/// only its used results, keeps only the body ops those need and takes only
/// the operands they read. Returns the new fragment (`fragment` is erased).
FragmentOp pruneFragment(FragmentOp fragment);

} // namespace mlir::mpmd

#endif // MPMD_LIB_TRANSFORMS_COMMON_MERGEFRAGMENTS_H
