//===- RemoveTransferCycles.cpp - no value travels back to where it was ----===//
//
// A chain of transfers can bring a value back to a mesh it already was on
// (m1 -> m2 -> m3 -> m1): the value that comes back is the one that left, so
// its uses take the earlier value, and the transfers replaced go (transfers
// left unused otherwise are -mpmd-fragment-dce's to remove).
// A chain that passes through host memory (a memory kind other than
// "device") is kept: that round trip is an offload, on purpose.
//
//===----------------------------------------------------------------------===//

#include "Common/MemoryKinds.h"
#include "Common/PassBase.h"
#include "mpmd/Compat/Passes.h"

#include "llvm/ADT/MapVector.h"

namespace mlir::mpmd {
#define GEN_PASS_DEF_REMOVETRANSFERCYCLESPASS
#include "mpmd/Compat/Passes.h.inc"

namespace {

class RemoveTransferCyclesPass
    : public MpmdPass<RemoveTransferCyclesPass, impl::RemoveTransferCyclesPassBase> {
public:
  using MpmdPass::MpmdPass;

  void runOnFunction(func::FuncOp func, TopologyAttr) {
    // For each transfer, the first value of its chain (as written, from the
    // value that is not a transfer result) with the transfer's type.
    llvm::MapVector<TransferOp, Value> earlier;
    for (TransferOp transfer : func.getBody().front().getOps<TransferOp>()) {
      SmallVector<Value> chain;
      bool host = isInHostMemory(transfer.getType());
      for (Value v = transfer.getTensor();;) {
        chain.push_back(v);
        host |= isInHostMemory(v.getType());
        auto previous = v.getDefiningOp<TransferOp>();
        if (!previous)
          break;
        v = previous.getTensor();
      }
      if (host)
        continue;
      for (Value v : llvm::reverse(chain))
        if (v.getType() == transfer.getType()) {
          earlier[transfer] = v;
          break;
        }
    }
    for (auto &[transfer, value] : earlier)
      transfer.getResult().replaceAllUsesWith(value);
    for (auto &[transfer, value] : llvm::reverse(earlier))
      if (transfer->use_empty())
        transfer.erase();
  }
};

} // namespace
} // namespace mlir::mpmd
