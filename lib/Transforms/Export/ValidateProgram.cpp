//===- ValidateProgram.cpp - only fragment calls and transfers are left ---===//

#include "Common/PassBase.h"
#include "mpmd/Transforms/Passes.h"

namespace mlir::mpmd {
#define GEN_PASS_DEF_VALIDATEPROGRAMPASS
#include "mpmd/Transforms/Passes.h.inc"

namespace {

class ValidateProgramPass : public MpmdPass<ValidateProgramPass, impl::ValidateProgramPassBase> {
public:
  void runOnFunction(func::FuncOp func, TopologyAttr) {
    bool ok = true;
    for (Operation &op : func.getBody().front()) {
      if (isa<FragmentCallOp, TransferOp, func::ReturnOp>(op)) {
        for (OpOperand &operand : op.getOpOperands()) {
          if (isa<MeshTensorType>(operand.get().getType()))
            continue;
          op.emitError() << "operand #" << operand.getOperandNumber() << " has type "
                         << operand.get().getType()
                         << ", which is not on any mesh: every value of the exported program "
                            "must live on a mesh";
          ok = false;
          break;
        }
        continue;
      }
      op.emitError() << "'" << op.getName()
                     << "' was left outside of any fragment: every computation of the "
                        "exported program must run in a fragment on a mesh (this is a bug "
                        "in the pass that should have placed it)";
      ok = false;
    }
    if (!ok)
      signalPassFailure();
  }
};

} // namespace
} // namespace mlir::mpmd
