//===- CopyTopologyFromMain.cpp - callees run on their caller's meshes -----===//
//
// A function called by `mpmd.call` from an entry point (a public function
// with a topology) runs on the entry point's meshes: it gets the entry
// point's `topology` and becomes private (mesh inference gives a callee's
// arguments and results mesh types, which an entry point's users could not
// call). Functions nothing calls by `mpmd.call` are left as they are.
//
//===----------------------------------------------------------------------===//

#include "Common/PassBase.h"
#include "mpmd/Compat/Passes.h"

#include "mlir/IR/SymbolTable.h"

namespace mlir::mpmd {
#define GEN_PASS_DEF_COPYTOPOLOGYFROMMAINPASS
#include "mpmd/Compat/Passes.h.inc"

namespace {

class CopyTopologyFromMainPass
    : public impl::CopyTopologyFromMainPassBase<CopyTopologyFromMainPass> {
public:
  using CopyTopologyFromMainPassBase::CopyTopologyFromMainPassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    // The entry point whose topology each callee got, for the errors.
    llvm::DenseMap<Operation *, func::FuncOp> givenBy;
    bool ok = true;
    for (func::FuncOp main : module.getOps<func::FuncOp>()) {
      if (failed(verifyTopologyAndSignature(main)))
        return signalPassFailure();
      TopologyAttr topology = getMpmdFunctionTopology(main);
      if (!topology || !main.isPublic())
        continue;
      main.walk([&](CallOp call) {
        auto callee =
            SymbolTable::lookupNearestSymbolFrom<func::FuncOp>(call, call.getCalleeAttr());
        if (!callee || callee == main)
          return; // Reported by the verifier.
        auto [it, first] = givenBy.try_emplace(callee, main);
        Attribute existing = callee->getAttr(kTopologyAttr);
        if (existing && existing != topology) {
          InFlightDiagnostic diag = callee.emitError();
          if (first)
            diag << "@" << callee.getSymName() << " has topology " << existing << " but @"
                 << main.getSymName() << ", which calls it, has " << topology;
          else
            diag << "@" << callee.getSymName() << " is called from @"
                 << it->second.getSymName() << " (topology " << existing << ") and from @"
                 << main.getSymName() << " (topology " << topology << ")";
          diag << ": a callee runs on the meshes of the entry points that call it";
          diag.attachNote(call.getLoc()) << "called here";
          ok = false;
          return;
        }
        callee->setAttr(kTopologyAttr, topology);
        callee.setPrivate();
      });
    }
    if (!ok)
      signalPassFailure();
  }
};

} // namespace
} // namespace mlir::mpmd
