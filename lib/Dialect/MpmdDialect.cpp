//===- MpmdDialect.cpp - mpmd dialect registration -------------------------===//

#include "mpmd/Dialect/MpmdDialect.h"

using namespace mlir;
using namespace mlir::mpmd;

#include "mpmd/Dialect/MpmdDialect.cpp.inc"

void MpmdDialect::initialize() {
  registerAttributes();
  registerTypes();
  addOperations<
#define GET_OP_LIST
#include "mpmd/Dialect/MpmdOps.cpp.inc"
      >();
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
