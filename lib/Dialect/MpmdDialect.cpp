//===- MpmdDialect.cpp - mpmd dialect registration -------------------------===//

#include "mpmd/Dialect/MpmdDialect.h"

#include "mlir/Transforms/InliningUtils.h"

using namespace mlir;
using namespace mlir::mpmd;

#include "mpmd/Dialect/MpmdDialect.cpp.inc"

namespace {
/// What upstream inlining (`-inline`, which inlines `func.call`s) may do with
/// mpmd ops: move them into the caller where they would still verify. The
/// `mpmd.call`s and `mpmd.fragment_call`s themselves are never inlined (they
/// are not call ops to the inliner: meshes and microbatches are ours to
/// place, by `-mpmd-call-inline` and export).
struct MpmdInlinerInterface : public DialectInlinerInterface {
  using DialectInlinerInterface::DialectInlinerInterface;

  /// A fragment is checked as a whole: its body (StableHLO computing on one
  /// mesh) moves with it and never meets the caller's values.
  bool shouldAnalyzeRecursively(Operation *op) const final {
    return !op->hasTrait<OpTrait::IsIsolatedFromAbove>();
  }

  bool isLegalToInline(Operation *op, Region *dest, bool /*wouldBeCloned*/,
                       IRMapping & /*valueMapping*/) const final {
    // The meshes an op names are those of its function's topology: it moves
    // only into a function of the same topology (or none, as it came).
    Operation *destOp = dest->getParentOp();
    if (getTopology(op) != getTopology(destOp))
      return false;
    // An mpmd.call stays where its verifier allows it: directly in a
    // function or an mpmd.for body, and in a function with a topology only in
    // the entry point.
    if (isa<CallOp>(op)) {
      if (!isa<func::FuncOp, ForOp>(destOp))
        return false;
      auto func = dyn_cast<func::FuncOp>(destOp);
      if (!func)
        func = destOp->getParentOfType<func::FuncOp>();
      return !func || !func->hasAttr(kTopologyAttr) || func.isPublic();
    }
    return true;
  }
};
} // namespace

void MpmdDialect::initialize() {
  registerAttributes();
  registerTypes();
  addOperations<
#define GET_OP_LIST
#include "mpmd/Dialect/MpmdOps.cpp.inc"
      >();
  addInterfaces<MpmdInlinerInterface>();
}

TopologyAttr mlir::mpmd::getTopology(Operation *op) {
  for (Operation *p = op; p; p = p->getParentOp())
    if (auto func = dyn_cast<func::FuncOp>(p))
      return func->getAttrOfType<TopologyAttr>(kTopologyAttr);
  return {};
}

FailureOr<MeshAttr> mlir::mpmd::getMeshOrError(Operation *op, StringRef meshName) {
  TopologyAttr topology = getTopology(op);
  if (!topology) {
    auto func = op->getParentOfType<func::FuncOp>();
    return op->emitOpError() << "uses mesh \"" << meshName << "\" but the enclosing function"
                             << (func ? " @" + func.getSymName().str() : std::string())
                             << " has no `topology` attribute";
  }
  if (MeshAttr mesh = topology.getMesh(meshName))
    return mesh;
  InFlightDiagnostic diag = op->emitOpError()
                            << "uses mesh \"" << meshName << "\" which is not in the topology (meshes:";
  for (NamedMeshAttr m : topology.getMeshes())
    diag << " \"" << m.getName() << "\"";
  diag << ")";
  return diag;
}
