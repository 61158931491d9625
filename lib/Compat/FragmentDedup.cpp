//===- FragmentDedup.cpp - one block argument per operand, one result per value ===//
//
// A value passed to a fragment several times is read through the block
// argument of its first position; a value returned several times with the
// same type is used through its first result. The duplicate arguments and
// results are left unused for -mpmd-fragment-dce to drop.
//
//===----------------------------------------------------------------------===//

#include "Common/PassBase.h"
#include "mpmd/Compat/Passes.h"

#include "llvm/ADT/DenseMap.h"

namespace mlir::mpmd {
#define GEN_PASS_DEF_FRAGMENTDEDUPPASS
#include "mpmd/Compat/Passes.h.inc"

namespace {

class FragmentDedupPass : public MpmdPass<FragmentDedupPass, impl::FragmentDedupPassBase> {
public:
  using MpmdPass::MpmdPass;

  void runOnFunction(func::FuncOp func, TopologyAttr) {
    for (FragmentOp fragment : func.getBody().front().getOps<FragmentOp>()) {
      Block &body = fragment.getRegion().front();
      // Operands: (value, argument type) -> first block argument.
      llvm::DenseMap<std::pair<Value, Type>, BlockArgument> firstArgument;
      for (BlockArgument arg : body.getArguments()) {
        Value operand = fragment.getOperand(arg.getArgNumber());
        auto [it, inserted] = firstArgument.try_emplace({operand, arg.getType()}, arg);
        if (!inserted)
          arg.replaceAllUsesWith(it->second);
      }
      // Results: (returned value, result type) -> first result.
      Operation *terminator = body.getTerminator();
      llvm::DenseMap<std::pair<Value, Type>, Value> firstResult;
      for (OpResult result : fragment->getResults()) {
        Value returned = terminator->getOperand(result.getResultNumber());
        auto [it, inserted] = firstResult.try_emplace({returned, result.getType()}, result);
        if (!inserted)
          result.replaceAllUsesWith(it->second);
      }
    }
  }
};

} // namespace
} // namespace mlir::mpmd
