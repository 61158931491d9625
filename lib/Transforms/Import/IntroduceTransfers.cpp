//===- IntroduceTransfers.cpp - assign(unassign) to transfer ----------------===//

#include "Common/PassBase.h"
#include "mpmd/Transforms/Passes.h"

#include "mlir/IR/Builders.h"

namespace mlir::mpmd {
#define GEN_PASS_DEF_INTRODUCETRANSFERSPASS
#include "mpmd/Transforms/Passes.h.inc"

namespace {

class IntroduceTransfersPass : public MpmdPass<IntroduceTransfersPass, impl::IntroduceTransfersPassBase> {
public:
  void runOnFunction(func::FuncOp func, TopologyAttr topology) {
    // (source mesh value, destination type) -> transfer result.
    llvm::DenseMap<std::pair<Value, Type>, Value> transfers;
    SmallVector<AssignOp> assigns(func.getBody().getOps<AssignOp>());
    for (AssignOp assign : assigns) {
      auto unassign = assign.getTensor().getDefiningOp<UnassignOp>();
      if (!unassign)
        continue;
      Value source = unassign.getTensor();
      Type target = assign.getType();
      if (source.getType() == target) {
        assign.getResult().replaceAllUsesWith(source);
        assign.erase();
        continue;
      }
      Value &transfer = transfers[{source, target}];
      if (!transfer) {
        OpBuilder builder(func.getContext());
        builder.setInsertionPointAfterValue(source);
        transfer = builder.create<TransferOp>(assign.getLoc(), target, source).getResult();
      }
      assign.getResult().replaceAllUsesWith(transfer);
      assign.erase();
    }
    for (UnassignOp unassign : llvm::make_early_inc_range(func.getBody().getOps<UnassignOp>()))
      if (unassign.use_empty())
        unassign.erase();
  }
};

} // namespace
} // namespace mlir::mpmd
