//===- MapInputOutputToMesh.cpp - assigned inputs/outputs onto meshes -----===//
//
// Gives the inputs and outputs that an input/output assignment names their
// mesh tensor types, with `mpmd.unassign` / `mpmd.assign` ops (origins
// "user_in" / "user_out") at the boundary of the body, and leaves the body
// itself to mesh inference.
//
//===----------------------------------------------------------------------===//

#include "Common/MemoryKinds.h"
#include "Common/PassBase.h"
#include "Common/TextOptions.h"
#include "Import/MeshAssignmentAnalysis.h"
#include "mpmd/Dialect/MpmdAttrNames.h"
#include "mpmd/Compat/Passes.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/STLExtras.h"

#include <map>

namespace mlir::mpmd {
#define GEN_PASS_DEF_MAPINPUTOUTPUTTOMESHPASS
#include "mpmd/Compat/Passes.h.inc"

namespace {

constexpr llvm::StringLiteral kUserInOrigin = "user_in";
constexpr llvm::StringLiteral kUserOutOrigin = "user_out";

/// One side of the assignment (inputs or outputs), checked against `func`:
/// index -> (mesh, memory kind or ""), ordered by index.
using CheckedAssignment = std::map<int64_t, std::pair<std::string, std::string>>;

/// Parses and checks `entries` (`what`: "input" or "output") against the
/// topology and the `count` inputs or outputs of `func`; `types` gives the
/// type of each. Fails after an error on `func`.
FailureOr<CheckedAssignment> checkAssignment(func::FuncOp func, TopologyAttr topology,
                                             ArrayRef<std::string> entries, StringRef what,
                                             TypeRange types,
                                             llvm::DenseMap<int64_t, std::string> &kinds) {
  auto parsed = parseIndexAssignment(entries, what, [&] { return func.emitError(); });
  if (failed(parsed) || failed(takeMemoryKinds(func, what, *parsed, kinds)))
    return failure();
  CheckedAssignment out;
  for (const ::mpmd::IndexAssignment &entry : *parsed) {
    if (failed(checkIndexAssignmentEntry(func, topology, entry, what, types.size())))
      return failure();
    Type type = types[entry.index];
    if (!isa<RankedTensorType>(type))
      return func.emitError() << what << " " << entry.index << " of @" << func.getSymName()
                              << " has type " << type
                              << ": only a ranked tensor not yet on a mesh can be assigned to "
                                 "mesh \""
                              << entry.mesh << "\"";
    auto [it, inserted] =
        out.try_emplace(entry.index, entry.mesh, kinds.lookup(entry.index));
    if (!inserted && it->second.first != entry.mesh)
      return func.emitError() << what << " " << entry.index << " of @" << func.getSymName()
                              << " is assigned to two meshes, \"" << it->second.first
                              << "\" and \"" << entry.mesh << "\": give it one";
  }
  return out;
}

MeshTensorType meshTypeFor(Type tensorType, StringRef mesh, StringRef kind) {
  return withMemoryKind(
      MeshTensorType::get(tensorType.getContext(), mesh, cast<RankedTensorType>(tensorType)),
      kind);
}

class MapInputOutputToMeshPass
    : public MpmdPass<MapInputOutputToMeshPass, impl::MapInputOutputToMeshPassBase> {
public:
  using MpmdPass::MpmdPass;

  void runOnFunction(func::FuncOp func, TopologyAttr topology) {
    if (func.isPrivate() || (inputAssignment.empty() && outputAssignment.empty()))
      return;
    Block &block = func.getBody().front();
    auto returnOp = cast<func::ReturnOp>(block.getTerminator());
    IoMemoryKinds kinds;
    FailureOr<CheckedAssignment> inputs = checkAssignment(
        func, topology, inputAssignment, "input", block.getArgumentTypes(), kinds.inputs);
    if (failed(inputs))
      return signalPassFailure();
    FailureOr<CheckedAssignment> outputs = checkAssignment(
        func, topology, outputAssignment, "output", returnOp.getOperandTypes(), kinds.outputs);
    if (failed(outputs) || failed(checkMemoryKindAttributes(func, kinds)))
      return signalPassFailure();

    OpBuilder builder(func.getContext());
    auto origin = [&](StringRef name) { return builder.getStringAttr(name); };
    // Inputs: one unassign each, at the top of the body in input order.
    builder.setInsertionPointToStart(&block);
    for (auto &[index, meshAndKind] : *inputs) {
      BlockArgument arg = block.getArgument(index);
      Type tensorType = arg.getType();
      arg.setType(meshTypeFor(tensorType, meshAndKind.first, meshAndKind.second));
      auto unassign = UnassignOp::create(builder, arg.getLoc(), tensorType, arg,
                                         origin(kUserInOrigin));
      arg.replaceAllUsesExcept(unassign.getResult(), unassign);
    }
    // Outputs: assigned just before the return.
    builder.setInsertionPoint(returnOp);
    for (auto &[index, meshAndKind] : *outputs) {
      OpOperand &operand = returnOp->getOpOperand(index);
      Value value = operand.get();
      auto assign = AssignOp::create(builder,
          returnOp.getLoc(), meshTypeFor(value.getType(), meshAndKind.first, meshAndKind.second),
          value, origin(kUserOutOrigin));
      operand.set(assign.getResult());
    }
    func.setFunctionType(FunctionType::get(func.getContext(), block.getArgumentTypes(),
                                           returnOp.getOperandTypes()));
  }
};

} // namespace
} // namespace mlir::mpmd
