//===- BlockOrder.h - reorder a block's ops under extra edges ------*- C++ -*-===//
//
// Schedules reorder a function body: the ops keep every data dependency and
// the orders a schedule adds (-mpmd-pipeline-schedule's chains of units,
// -mpmd-rule-based-schedule's chains of fragments), otherwise the order they
// had: a stable topological sort, the earliest ready op first.
//
//===----------------------------------------------------------------------===//

#ifndef MPMD_LIB_TRANSFORMS_COMMON_BLOCKORDER_H
#define MPMD_LIB_TRANSFORMS_COMMON_BLOCKORDER_H

#include "mlir/IR/Block.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SmallVector.h"

#include <vector>

namespace mlir::mpmd {

/// The ops of a block in program order (its terminator aside) and the data
/// edges between them.
struct BlockDependences {
  explicit BlockDependences(Block &block);

  SmallVector<Operation *> ops;
  llvm::DenseMap<Operation *, int64_t> index;
  /// For each op, the ops computing what it reads (its regions included),
  /// each once, in ascending order.
  std::vector<SmallVector<int64_t>> preds;

  /// Whether op `a` depends on op `b` through `preds` and `extra` (more
  /// predecessors per op), directly or not.
  bool dependsOn(int64_t a, int64_t b, const std::vector<SmallVector<int64_t>> &extra) const;
};

/// A stable topological order of ops 0..n-1 under the edges `succ` (op i
/// before each of succ[i]): the earliest ready op first. With a cycle it is
/// shorter than n, and `indegree` (filled here) keeps the blocked ops'
/// counts of unplaced predecessors.
SmallVector<int64_t> stableTopologicalOrder(const std::vector<SmallVector<int64_t>> &succ,
                                            std::vector<int64_t> &indegree);

/// Moves `ops[i]` for each i of `order`, in turn, before `block`'s terminator.
void reorderBlock(Block &block, ArrayRef<Operation *> ops, ArrayRef<int64_t> order);

} // namespace mlir::mpmd

#endif // MPMD_LIB_TRANSFORMS_COMMON_BLOCKORDER_H
