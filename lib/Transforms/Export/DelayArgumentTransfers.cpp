//===- DelayArgumentTransfers.cpp - argument transfers at their first use -===//
//
// Moves each transfer of a function argument right before the first op that
// reads its result, so that the program's first fragment is issued first
// (see Passes.td).
//
//===----------------------------------------------------------------------===//

#include "Common/PassBase.h"
#include "mpmd/Transforms/Passes.h"

namespace mlir::mpmd {
#define GEN_PASS_DEF_DELAYARGUMENTTRANSFERSPASS
#include "mpmd/Transforms/Passes.h.inc"

namespace {

class DelayArgumentTransfersPass
    : public MpmdPass<DelayArgumentTransfersPass, impl::DelayArgumentTransfersPassBase> {
public:
  void runOnFunction(func::FuncOp func, TopologyAttr) {
    Block &body = func.getBody().front();
    SmallVector<TransferOp> transfers;
    for (TransferOp transfer : body.getOps<TransferOp>()) {
      auto arg = dyn_cast<BlockArgument>(transfer.getTensor());
      if (arg && arg.getOwner() == &body)
        transfers.push_back(transfer);
    }
    // In program order: transfers delayed to the same op keep their order.
    for (TransferOp transfer : transfers) {
      Operation *first = nullptr;
      for (Operation *user : transfer->getUsers()) {
        Operation *op = body.findAncestorOpInBlock(*user);
        if (op && (!first || op->isBeforeInBlock(first)))
          first = op;
      }
      if (first && transfer->getNextNode() != first)
        transfer->moveBefore(first);
    }
  }
};

} // namespace
} // namespace mlir::mpmd
