//===- ValidateNoBackwardDeps.cpp - forward-only programs flow forward ----===//

#include "Common/PassBase.h"
#include "Common/Fragments.h"
#include "mpmd/Transforms/Passes.h"

namespace mlir::mpmd {
#define GEN_PASS_DEF_VALIDATENOBACKWARDDEPSPASS
#include "mpmd/Transforms/Passes.h.inc"

namespace {

/// The fragment call that computes `v`, looking through transfers; null for
/// function arguments.
FragmentCallOp producerOf(Value v) {
  while (auto transfer = v.getDefiningOp<TransferOp>())
    v = transfer.getTensor();
  return v.getDefiningOp<FragmentCallOp>();
}

/// The first fragment call with an origin of a non-zero transpose count (a
/// backward fragment), or null: the program is forward-only (fragments
/// without origins, inferred ones, count as forward).
FragmentCallOp firstBackwardCall(func::FuncOp func) {
  for (FragmentCallOp call : func.getBody().front().getOps<FragmentCallOp>())
    for (Attribute a : call.getOrigin())
      if (cast<UserOriginAttr>(a).getTransposeCount() != 0)
        return call;
  return {};
}

std::string describeCall(FragmentCallOp call) {
  std::string text = "call of @" + call.getCallee().str();
  if (auto unit = call->getAttrOfType<StringAttr>(kUnitAttr))
    text += " (unit " + unit.getValue().str() + ")";
  return text + " on mesh \"" + call.getMeshName().str() + "\"";
}

class ValidateNoBackwardDepsPass
    : public MpmdPass<ValidateNoBackwardDepsPass, impl::ValidateNoBackwardDepsPassBase> {
public:
  using MpmdPass::MpmdPass;
  /// The driver's pass, configured by the partition's options.
  explicit ValidateNoBackwardDepsPass(const ::mpmd::PartitionOptions &options) {
    failOnBackwardDeps = options.fail_on_backward_deps;
  }

  void runOnFunction(func::FuncOp func, TopologyAttr topology) {
    if (FragmentCallOp backward = firstBackwardCall(func)) {
      // Asking for errors says the program must be forward-only (Shardy's
      // meaning of the option); otherwise a training program is not checked.
      if (failOnBackwardDeps) {
        InFlightDiagnostic diag = func.emitError();
        diag << "@" << func.getSymName()
             << " is not a forward-only program, which fail-on-backward-deps "
                "(mpmd_fail_on_backward_deps) expects: the "
             << describeCall(backward)
             << " is a backward fragment; drop the option for a training step";
        diag.attachNote(backward.getLoc()) << "the backward fragment is called here";
        signalPassFailure();
      }
      return;
    }
    bool failedAny = false;
    for (FragmentCallOp call : func.getBody().front().getOps<FragmentCallOp>()) {
      int64_t mesh = getMeshIndex(topology, call.getMeshName());
      for (Value operand : call.getOperands()) {
        FragmentCallOp producer = producerOf(operand);
        if (!producer || getMeshIndex(topology, producer.getMeshName()) <= mesh)
          continue;
        InFlightDiagnostic diag = failOnBackwardDeps ? call.emitError() : call.emitWarning();
        diag << "forward-only program flows backward: the " << describeCall(call)
             << " reads a value computed by the " << describeCall(producer)
             << ", a later mesh of the topology; order the meshes along the pipeline";
        diag.attachNote(producer.getLoc()) << "the value is computed here";
        failedAny |= failOnBackwardDeps;
        break;
      }
    }
    if (failedAny)
      signalPassFailure();
  }
};

} // namespace

std::unique_ptr<Pass> createValidateNoBackwardDepsPass(const ::mpmd::PartitionOptions &options) {
  return std::make_unique<ValidateNoBackwardDepsPass>(options);
}

} // namespace mlir::mpmd
