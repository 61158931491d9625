//===- ValidateFragments.cpp - inferred and reshard-only fragments --------===//

#include "Common/PassBase.h"
#include "mpmd/Dialect/MpmdAttrNames.h"
#include "mpmd/Transforms/Passes.h"

namespace mlir::mpmd {
#define GEN_PASS_DEF_VALIDATEFRAGMENTSPASS
#include "mpmd/Transforms/Passes.h.inc"

namespace {

class ValidateFragmentsPass
    : public MpmdPass<ValidateFragmentsPass, impl::ValidateFragmentsPassBase> {
public:
  using MpmdPass::MpmdPass;

  void runOnFunction(func::FuncOp func, TopologyAttr) {
    bool failed = false;
    for (FragmentOp fragment : func.getBody().front().getOps<FragmentOp>()) {
      if ((warnOnInferredFragments || failOnInferredFragments) && !fragment.isUserFragment())
        failed |= reportInferred(fragment);
      if (failOnReshardOnlyFragments)
        failed |= reportReshardOnly(fragment);
    }
    if (failed)
      signalPassFailure();
  }

private:
  /// Reports the inferred `fragment`; whether that is an error.
  bool reportInferred(FragmentOp fragment) {
    InFlightDiagnostic diag =
        failOnInferredFragments ? fragment.emitError() : fragment.emitWarning();
    diag << "inferred fragment on mesh \"" << fragment.getMeshName() << "\"";
    if (auto by = fragment->getAttrOfType<ArrayAttr>(kInferredByAttr); by && !by.empty()) {
      diag << " (inferred by ";
      llvm::interleaveComma(by, diag, [&](Attribute pass) {
        if (auto name = dyn_cast<StringAttr>(pass))
          diag << name.getValue();
        else
          diag << pass;
      });
      diag << ")";
    }
    diag << " was not merged into a user fragment: it runs as a program of its own; label "
            "the computation it belongs to, or merge inferred fragments "
            "(-mpmd-merge-inferred-fragments)";
    return failOnInferredFragments;
  }

  /// Reports `fragment` if it computes nothing and returns an operand with
  /// another type (sharding or memory kind); whether it did.
  bool reportReshardOnly(FragmentOp fragment) {
    if (!fragment.getRegion().front().without_terminator().empty())
      return false;
    for (auto [i, returned] : llvm::enumerate(fragment.getTerminator()->getOperands())) {
      auto arg = dyn_cast<BlockArgument>(returned);
      if (!arg)
        continue;
      Value operand = fragment.getOperand(arg.getArgNumber());
      if (operand.getType() == fragment.getResult(i).getType())
        continue;
      fragment.emitError() << "fragment on mesh \"" << fragment.getMeshName()
                           << "\" only reshards: it computes nothing and returns operand #"
                           << arg.getArgNumber() << " of type " << operand.getType()
                           << " as result #" << i
                           << " of type " << fragment.getResult(i).getType()
                           << "; this usually is an unintended reshard: give the value the "
                              "sharding it is used with where it is computed";
      return true;
    }
    return false;
  }
};

} // namespace
} // namespace mlir::mpmd
