//===- LowerToFragmentCalls.cpp - outline fragments into functions ----------===//

#include "Common/PassBase.h"
#include "Common/Fragments.h"
#include "Common/StructuralKey.h"
#include "mpmd/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"

namespace mlir::mpmd {
#define GEN_PASS_DEF_LOWERTOFRAGMENTCALLSPASS
#include "mpmd/Transforms/Passes.h.inc"

namespace {

Type globalType(Type t) {
  if (auto meshType = dyn_cast<MeshTensorType>(t))
    return meshType.getGlobalTensorType();
  return t;
}

/// `#sdy.mesh<...>` for `mesh`: the form Shardy and XLA read.
Attribute meshShapeAttr(MeshAttr mesh) {
  std::string text;
  llvm::raw_string_ostream os(text);
  Attribute(mesh).print(os);
  StringRef body(text);
  body.consume_front("#mpmd.");
  MLIRContext *ctx = mesh.getContext();
  return OpaqueAttr::get(StringAttr::get(ctx, "sdy"), body, NoneType::get(ctx));
}

/// A readable base name for the function of `fragment`.
std::string baseName(FragmentOp fragment) {
  if (!fragment.isUserFragment())
    return "inferred";
  llvm::SetVector<StringRef> names;
  bool fwd = false, bwd = false;
  for (Attribute a : fragment.getOrigin()) {
    auto origin = cast<UserOriginAttr>(a);
    names.insert(origin.getUserName());
    (origin.getTransposeCount() == 0 ? fwd : bwd) = true;
  }
  std::string name;
  for (auto [i, n] : llvm::enumerate(names)) {
    if (i == 3) {
      name += "_etc";
      break;
    }
    name += (i ? "_" : "") + n.str();
  }
  for (char &c : name)
    if (!llvm::isAlnum(c) && c != '_')
      c = '_';
  return name + (fwd && bwd ? "_fwd_bwd" : bwd ? "_bwd" : "_fwd");
}

class LowerToFragmentCallsPass
    : public impl::LowerToFragmentCallsPassBase<LowerToFragmentCallsPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    SymbolTable symbols(module);
    llvm::StringMap<func::FuncOp> byBody;
    int64_t counter = 0;
    SmallVector<func::FuncOp> mpmdFuncs;
    // (The functions this pass creates are not visited.)
    for (func::FuncOp func : module.getOps<func::FuncOp>())
      if (getMpmdFunctionTopology(func))
        mpmdFuncs.push_back(func);
    for (func::FuncOp func : mpmdFuncs) {
      TopologyAttr topology = getMpmdFunctionTopology(func);
      SmallVector<FragmentOp> fragments;
      func.walk([&](FragmentOp f) { fragments.push_back(f); });
      for (FragmentOp fragment : fragments) {
        MeshAttr mesh = topology.getMesh(fragment.getMeshName());
        OpBuilder builder(module.getBodyRegion());
        builder.setInsertionPointToEnd(module.getBody());
        SmallVector<Type> ins, outs;
        for (Type t : fragment.getOperandTypes())
          ins.push_back(globalType(t));
        for (Type t : fragment.getResultTypes())
          outs.push_back(globalType(t));
        auto callee = builder.create<func::FuncOp>(fragment.getLoc(), "__outlined",
                                                   builder.getFunctionType(ins, outs));
        callee->setAttr(kMeshShapeAttr, meshShapeAttr(mesh));
        callee.getBody().takeBody(fragment.getRegion());
        Operation *terminator = callee.getBody().front().getTerminator();
        builder.setInsertionPoint(terminator);
        builder.create<func::ReturnOp>(terminator->getLoc(), terminator->getOperands());
        terminator->erase();
        // Operands the call may consume become `jax.buffer_donor` arguments:
        // calls that donate differently get different functions.
        if (auto donated = fragment->getAttrOfType<DenseI64ArrayAttr>(kDonatedOperandsAttr))
          for (int64_t index : donated.asArrayRef())
            callee.setArgAttr(index, kBufferDonorAttr, builder.getBoolAttr(true));

        // Identical bodies on meshes of the same shape share one function.
        auto [it, inserted] = byBody.try_emplace(opKey(callee), callee);
        if (!inserted) {
          callee.erase();
          callee = it->second;
        } else {
          callee.setSymName(("p" + llvm::Twine(counter++) + "_" + baseName(fragment)).str());
          symbols.insert(callee);
        }

        builder.setInsertionPoint(fragment);
        auto call = builder.create<FragmentCallOp>(
            fragment.getLoc(), fragment.getResultTypes(), fragment.getOperands(),
            fragment.getOriginAttr(), fragment.getMeshNameAttr(),
            FlatSymbolRefAttr::get(callee.getSymNameAttr()));
        for (NamedAttribute attr : fragment->getDiscardableAttrs())
          if (attr.getName() != kDonatedOperandsAttr)
            call->setAttr(attr.getName(), attr.getValue());
        if (std::optional<SchedulingUnit> unit = getSchedulingUnit(fragment, topology))
          call->setAttr(kUnitAttr, builder.getStringAttr(unit->str()));
        fragment.replaceAllUsesWith(call.getResults());
        fragment.erase();
      }
    }
  }
};

} // namespace
} // namespace mlir::mpmd
