//===- SetTopology.cpp - give the entry function its meshes -----------------===//

#include "Common/PassBase.h"
#include "Common/TextOptions.h"
#include "mpmd/Transforms/Passes.h"

namespace mlir::mpmd {
#define GEN_PASS_DEF_SETTOPOLOGYPASS
#include "mpmd/Transforms/Passes.h.inc"

namespace {

class SetTopologyPass : public CheckedPass<SetTopologyPass, impl::SetTopologyPassBase> {
public:
  using CheckedPass::CheckedPass;

  void runOnCheckedOperation() {
    ModuleOp module = getOperation();
    if (!topology.empty() && failed(setTopology(module)))
      return signalPassFailure();
    bool any = false;
    for (func::FuncOp f : module.getOps<func::FuncOp>()) {
      if (!f->hasAttr(kTopologyAttr) || f.isExternal())
        continue;
      any = true;
      if (failed(checkNotImported(f)))
        return signalPassFailure();
    }
    if (!any) {
      module.emitError() << "no function has a `topology` attribute, so the mpmd passes have "
                            "nothing to do: give the meshes with the pipeline option "
                            "topology=\"m0:data=4;m1:data=4\" (for @"
                         << func << "), or set the attribute on the entry function";
      return signalPassFailure();
    }
  }

private:
  LogicalResult setTopology(ModuleOp module) {
    auto target = module.lookupSymbol<func::FuncOp>(func);
    if (!target)
      return module.emitError() << "option topology names no function: the module has no @"
                                << func << " (choose one with the option func=NAME)";
    auto emitError = [&] { return target.emitError(); };
    FailureOr<std::vector<::mpmd::MeshSpec>> meshes = parseTopology(topology, emitError);
    if (failed(meshes))
      return failure();
    TopologyAttr attr = buildTopology(module.getContext(), *meshes, emitError);
    if (!attr)
      return failure();
    if (Attribute existing = target->getAttr(kTopologyAttr); existing && existing != attr)
      return target.emitError() << "@" << func << " already has topology " << existing
                                << ", not the " << attr << " of the option topology";
    target->setAttr(kTopologyAttr, attr);
    return success();
  }

  static LogicalResult checkNotImported(func::FuncOp f) {
    bool fragments = false, labels = false;
    f.walk([&](Operation *op) {
      fragments |= isa<FragmentOp, FragmentCallOp>(op);
      labels |= isa<NamedComputationOp, NamedTensorOp, CallOp, ForOp>(op);
    });
    if (fragments && !labels)
      return f.emitError() << "@" << f.getSymName()
                           << " is imported already (it has fragments and no named "
                              "computations): run the optimize or export passes on it "
                              "(e.g. -mpmd-export-pipeline), not the import pipeline";
    return success();
  }
};

} // namespace
} // namespace mlir::mpmd
