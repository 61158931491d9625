//===- CopyConstants.cpp - constants into the fragments that read them ----===//
//
// A fragment result that is a constant (the body returns the result of a
// `stablehlo.constant`) is computed again in each fragment that reads it,
// directly or through a chain of transfers: the reader no longer waits for
// the value to arrive, and XLA folds the constant into what reads it. The
// operands, transfers and results are left as they are (the copied block
// arguments are no longer read), for -mpmd-fragment-dce to drop.
//
//===----------------------------------------------------------------------===//

#include "Common/PassBase.h"
#include "mpmd/Compat/Passes.h"

#include "mlir/IR/Builders.h"

namespace mlir::mpmd {
#define GEN_PASS_DEF_COPYCONSTANTSPASS
#include "mpmd/Compat/Passes.h.inc"

namespace {

/// Whether `op` is a `stablehlo.constant` (no operands, no regions, one
/// result).
bool isConstant(Operation *op) {
  return op && op->getName().getStringRef() == "stablehlo.constant" &&
         op->getNumOperands() == 0 && op->getNumRegions() == 0 && op->getNumResults() == 1;
}

/// Clones `constant` into every fragment reading `value` (a fragment result
/// or a transfer of one), in place of the block arguments that receive it.
void copyIntoReaders(Value value, Operation *constant) {
  SmallVector<Value> worklist{value};
  while (!worklist.empty()) {
    Value v = worklist.pop_back_val();
    for (OpOperand &use : v.getUses()) {
      Operation *user = use.getOwner();
      if (auto transfer = dyn_cast<TransferOp>(user)) {
        worklist.push_back(transfer.getResult());
        continue;
      }
      auto reader = dyn_cast<FragmentOp>(user);
      if (!reader)
        continue;
      BlockArgument arg = reader.getRegion().front().getArgument(use.getOperandNumber());
      if (arg.use_empty() || arg.getType() != constant->getResult(0).getType())
        continue;
      OpBuilder builder = OpBuilder::atBlockBegin(arg.getOwner());
      arg.replaceAllUsesWith(builder.clone(*constant)->getResult(0));
    }
  }
}

class CopyConstantsPass : public MpmdPass<CopyConstantsPass, impl::CopyConstantsPassBase> {
public:
  using MpmdPass::MpmdPass;

  void runOnFunction(func::FuncOp func, TopologyAttr) {
    for (FragmentOp producer : func.getBody().front().getOps<FragmentOp>()) {
      Operation *terminator = producer.getRegion().front().getTerminator();
      for (OpResult result : producer->getResults()) {
        Operation *def = terminator->getOperand(result.getResultNumber()).getDefiningOp();
        if (isConstant(def))
          copyIntoReaders(result, def);
      }
    }
  }
};

} // namespace
} // namespace mlir::mpmd
