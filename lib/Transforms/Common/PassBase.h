//===- PassBase.h - base classes of the mpmd passes ---------------*- C++ -*-===//
//
// Every mpmd pass works on MPMD functions: functions with a body that carry a
// `topology` attribute. Other functions (helpers JAX emitted, fragment
// functions after export) are left alone. The base classes below make that
// check once; a pass implements
//
//   void runOnFunction(func::FuncOp func, TopologyAttr topology);
//
// and calls signalPassFailure() on errors. Use with the ODS-generated base:
//
//   class FooPass : public MpmdPass<FooPass, impl::FooPassBase> { ... };
//
// A pass that works on its whole op instead (every function, or the calls
// between them) uses CheckedPass and implements runOnCheckedOperation().
//
//===----------------------------------------------------------------------===//

#ifndef MPMD_LIB_TRANSFORMS_COMMON_PASSBASE_H
#define MPMD_LIB_TRANSFORMS_COMMON_PASSBASE_H

#include "mpmd/Dialect/MpmdDialect.h"

#include "mlir/IR/BuiltinOps.h"

namespace mlir::mpmd {

/// The topology of `func` when it is an MPMD function with a body, else null.
inline TopologyAttr getMpmdFunctionTopology(func::FuncOp func) {
  if (func.isExternal())
    return {};
  return func->getAttrOfType<TopologyAttr>(kTopologyAttr);
}

/// Fails, with an error on `func`, when it has a `topology` attribute that is
/// not a `#mpmd.topology`, or a mesh tensor type in its signature that is
/// malformed (`MeshTensorType::verifyLayout`), on a mesh the topology does
/// not list, or invalid for its mesh (`verifyForMesh`). The ops' verifiers
/// check the types they use; nothing else checks the signature's.
inline LogicalResult verifyTopologyAndSignature(func::FuncOp func) {
  Attribute attr = func->getAttr(kTopologyAttr);
  auto topology = dyn_cast_if_present<TopologyAttr>(attr);
  if (attr && !topology)
    return func.emitError() << "attribute `topology` of @" << func.getSymName()
                            << " must be a #mpmd.topology<...> listing the meshes, got " << attr;
  FunctionType type = func.getFunctionType();
  auto check = [&](TypeRange types, StringRef what) -> LogicalResult {
    for (auto [i, t] : llvm::enumerate(types)) {
      auto meshTensor = dyn_cast<MeshTensorType>(t);
      if (!meshTensor)
        continue;
      auto emitError = [&, i = i]() {
        return func.emitError() << what << " #" << i << " of @" << func.getSymName() << ": ";
      };
      if (!topology) {
        if (failed(meshTensor.verifyLayout(emitError)))
          return failure();
        continue;
      }
      if (MeshAttr mesh = topology.getMesh(meshTensor.getMeshName())) {
        if (failed(meshTensor.verifyForMesh(mesh, emitError)))
          return failure();
        continue;
      }
      InFlightDiagnostic diag = func.emitError()
                                << what << " #" << i << " of @" << func.getSymName()
                                << " is on mesh \"" << meshTensor.getMeshName()
                                << "\", which is not in its topology (meshes:";
      for (NamedMeshAttr mesh : topology.getMeshes())
        diag << " \"" << mesh.getName() << "\"";
      return diag << ")";
    }
    return success();
  };
  return failure(failed(check(type.getInputs(), "input")) ||
                 failed(check(type.getResults(), "output")));
}

/// `verifyTopologyAndSignature` for the op a pass runs on: the function, or
/// every function of the module.
inline LogicalResult verifyTopologiesAndSignatures(Operation *root) {
  if (auto func = dyn_cast<func::FuncOp>(root))
    return verifyTopologyAndSignature(func);
  for (func::FuncOp func : cast<ModuleOp>(root).getOps<func::FuncOp>())
    if (failed(verifyTopologyAndSignature(func)))
      return failure();
  return success();
}

/// The base of an mpmd pass that works on its whole op (a module pass over
/// calls, a function pass that also takes functions without a topology):
/// checks every function's topology and signature first, then runs
///
///   void runOnCheckedOperation();
template <typename DerivedT, template <typename> class GeneratedBaseT>
class CheckedPass : public GeneratedBaseT<DerivedT> {
public:
  using GeneratedBase = GeneratedBaseT<DerivedT>;
  using GeneratedBase::GeneratedBase;

  void runOnOperation() final {
    if (failed(verifyTopologiesAndSignatures(this->getOperation())))
      return this->signalPassFailure();
    static_cast<DerivedT *>(this)->runOnCheckedOperation();
  }
};

/// The base of every mpmd pass: on a `func.func` pass, runs `runOnFunction`
/// when the function is an MPMD function; on a module pass, runs it on each
/// MPMD function of the module in turn (those that exist when it starts:
/// functions the pass creates are not visited).
template <typename DerivedT, template <typename> class GeneratedBaseT>
class MpmdPass : public GeneratedBaseT<DerivedT> {
public:
  using GeneratedBase = GeneratedBaseT<DerivedT>;
  using GeneratedBase::GeneratedBase;

  void runOnOperation() final {
    SmallVector<func::FuncOp> functions;
    Operation *root = this->getOperation();
    if (auto func = dyn_cast<func::FuncOp>(root))
      functions.push_back(func);
    else
      llvm::append_range(functions, cast<ModuleOp>(root).getOps<func::FuncOp>());
    for (func::FuncOp func : functions) {
      if (failed(verifyTopologyAndSignature(func)))
        return this->signalPassFailure();
      if (TopologyAttr topology = getMpmdFunctionTopology(func))
        static_cast<DerivedT *>(this)->runOnFunction(func, topology);
    }
  }
};

} // namespace mlir::mpmd

#endif // MPMD_LIB_TRANSFORMS_COMMON_PASSBASE_H
