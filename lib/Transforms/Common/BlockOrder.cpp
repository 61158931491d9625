//===- BlockOrder.cpp - reorder a block's ops under extra edges ------------===//
//
// See BlockOrder.h.
//
//===----------------------------------------------------------------------===//

#include "Common/BlockOrder.h"

#include "mlir/IR/Operation.h"
#include "llvm/ADT/DenseSet.h"

#include <functional>
#include <queue>

namespace mlir::mpmd {

BlockDependences::BlockDependences(Block &block) {
  for (Operation &op : block.without_terminator()) {
    index[&op] = ops.size();
    ops.push_back(&op);
  }
  preds.resize(ops.size());
  for (auto [i, op] : llvm::enumerate(ops)) {
    llvm::DenseSet<int64_t> seen;
    op->walk([&](Operation *inner) {
      for (Value v : inner->getOperands())
        if (Operation *def = v.getDefiningOp())
          if (Operation *anc = block.findAncestorOpInBlock(*def);
              anc && anc != op && index.count(anc) && seen.insert(index[anc]).second)
            preds[i].push_back(index[anc]);
    });
    llvm::sort(preds[i]);
  }
}

bool BlockDependences::dependsOn(int64_t a, int64_t b,
                                 const std::vector<SmallVector<int64_t>> &extra) const {
  SmallVector<int64_t> stack{a};
  llvm::DenseSet<int64_t> seen;
  while (!stack.empty()) {
    int64_t i = stack.pop_back_val();
    if (i == b)
      return true;
    if (!seen.insert(i).second)
      continue;
    stack.append(preds[i].begin(), preds[i].end());
    if (i < static_cast<int64_t>(extra.size()))
      stack.append(extra[i].begin(), extra[i].end());
  }
  return false;
}

SmallVector<int64_t> stableTopologicalOrder(const std::vector<SmallVector<int64_t>> &succ,
                                            std::vector<int64_t> &indegree) {
  int64_t n = succ.size();
  indegree.assign(n, 0);
  for (const SmallVector<int64_t> &targets : succ)
    for (int64_t t : targets)
      ++indegree[t];
  std::priority_queue<int64_t, std::vector<int64_t>, std::greater<int64_t>> ready;
  for (int64_t i = 0; i < n; ++i)
    if (indegree[i] == 0)
      ready.push(i);
  SmallVector<int64_t> sorted;
  while (!ready.empty()) {
    int64_t i = ready.top();
    ready.pop();
    sorted.push_back(i);
    for (int64_t s : succ[i])
      if (--indegree[s] == 0)
        ready.push(s);
  }
  return sorted;
}

void reorderBlock(Block &block, ArrayRef<Operation *> ops, ArrayRef<int64_t> order) {
  Operation *terminator = block.getTerminator();
  for (int64_t i : order)
    ops[i]->moveBefore(terminator);
}

} // namespace mlir::mpmd
