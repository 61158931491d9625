//===- MemoryKinds.cpp - memory kinds in assignments -------------------------===//

#include "Common/MemoryKinds.h"

#include "mpmd/Dialect/MpmdAttrNames.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

using namespace mlir;
using namespace mlir::mpmd;

std::pair<StringRef, StringRef> mlir::mpmd::splitMeshAndMemoryKind(StringRef meshAndKind) {
  auto [mesh, kind] = meshAndKind.split('#');
  return {mesh, kind};
}

StringRef mlir::mpmd::memoryKindOf(Type type) {
  auto meshType = dyn_cast<MeshTensorType>(type);
  if (!meshType || !meshType.getMemoryKind())
    return "";
  return meshType.getMemoryKind().getValue();
}

bool mlir::mpmd::isInHostMemory(Type type) {
  StringRef kind = memoryKindOf(type);
  return !kind.empty() && kind != kDeviceMemoryKind;
}

MeshTensorType mlir::mpmd::withMemoryKind(MeshTensorType type, StringRef kind) {
  MLIRContext *ctx = type.getContext();
  return MeshTensorType::get(ctx, type.getMeshName(), type.getRankedTensorType(),
                             type.getSharding(),
                             kind.empty() ? StringAttr() : StringAttr::get(ctx, kind));
}

/// A kind-less mesh tensor and one in "device" memory are in the same memory.
static bool sameMemory(StringRef a, StringRef b) {
  auto normal = [](StringRef k) { return k.empty() ? StringRef(kDeviceMemoryKind) : k; };
  return normal(a) == normal(b);
}

Value mlir::mpmd::moveToMemoryKind(OpBuilder &builder, Location loc, Value value,
                                   StringRef kind) {
  if (sameMemory(memoryKindOf(value.getType()), kind))
    return value;
  auto type = withMemoryKind(cast<MeshTensorType>(value.getType()), kind);
  return TransferOp::create(builder, loc, type, value).getResult();
}

LogicalResult mlir::mpmd::takeMemoryKinds(func::FuncOp func, StringRef what,
                                          std::vector<::mpmd::IndexAssignment> &entries,
                                          llvm::DenseMap<int64_t, std::string> &kinds) {
  for (::mpmd::IndexAssignment &entry : entries) {
    auto [mesh, kind] = splitMeshAndMemoryKind(entry.mesh);
    if (!StringRef(entry.mesh).contains('#'))
      continue;
    if (!isAssignableMemoryKind(kind))
      return func.emitError() << what << " " << entry.index << " is assigned to memory kind \""
                              << kind << "\" of mesh \"" << mesh
                              << "\": expected " << listMemoryKinds(kAssignableMemoryKinds, '"')
                              << " (e.g. " << entry.index
                              << "@" << mesh << "#pinned_host)";
    kinds[entry.index] = kind.str();
    entry.mesh = mesh.str();
  }
  return success();
}

/// Checks and drops the `mhlo.memory_kind` of one input or output.
static LogicalResult checkAttribute(func::FuncOp func, StringRef what, int64_t index,
                                    StringRef assigned, DictionaryAttr attrs,
                                    function_ref<void()> drop) {
  auto given = attrs ? attrs.getAs<StringAttr>(kMhloMemoryKindAttr) : StringAttr();
  if (!given)
    return success();
  if (given.getValue() != assigned)
    return func.emitError() << what << " " << index << " of @" << func.getSymName()
                            << " is assigned to memory kind \"" << assigned
                            << "\" but is marked " << kMhloMemoryKindAttr << " = \""
                            << given.getValue() << "\": make the two agree";
  drop();
  return success();
}

LogicalResult mlir::mpmd::checkMemoryKindAttributes(func::FuncOp func,
                                                    const IoMemoryKinds &kinds) {
  auto name = StringAttr::get(func.getContext(), kMhloMemoryKindAttr);
  for (auto &[index, kind] : kinds.inputs)
    if (index < func.getNumArguments() &&
        failed(checkAttribute(func, "input", index, kind, func.getArgAttrDict(index),
                              [&] { func.removeArgAttr(index, name); })))
      return failure();
  for (auto &[index, kind] : kinds.outputs)
    if (index < func.getNumResults() &&
        failed(checkAttribute(func, "output", index, kind, func.getResultAttrDict(index),
                              [&] { func.removeResultAttr(index, name); })))
      return failure();
  return success();
}

/// Drops the transfers of `block` that stay in one memory of one mesh (a
/// kind-less type and "device": a named tensor assigned to `m#device`), with
/// the same sharding: their readers take the source. Kept where they are
/// returned (an output's type is its signature's).
static void dropSameMemoryTransfers(Block &block) {
  for (TransferOp transfer : llvm::make_early_inc_range(block.getOps<TransferOp>())) {
    auto in = cast<MeshTensorType>(transfer.getTensor().getType());
    auto out = cast<MeshTensorType>(transfer.getType());
    if (in.getMeshName() != out.getMeshName() || in.getSharding() != out.getSharding() ||
        !sameMemory(memoryKindOf(in), memoryKindOf(out)) ||
        llvm::any_of(transfer->getUsers(), [](Operation *u) { return isa<func::ReturnOp>(u); }))
      continue;
    transfer.getResult().replaceAllUsesWith(transfer.getTensor());
    transfer.erase();
  }
}

void mlir::mpmd::applyIoMemoryKinds(func::FuncOp func, const IoMemoryKinds &kinds) {
  Block &block = func.getBody().front();
  dropSameMemoryTransfers(block);
  OpBuilder builder(func.getContext());
  for (auto &[index, kind] : kinds.inputs) {
    BlockArgument arg = block.getArgument(index);
    auto type = cast<MeshTensorType>(arg.getType());
    arg.setType(withMemoryKind(type, kind));
    if (!isInHostMemory(arg.getType()))
      continue;
    // Its readers compute in device memory: one copy there, at the entry.
    builder.setInsertionPointToStart(&block);
    Value onDevice = moveToMemoryKind(builder, arg.getLoc(), arg, "");
    arg.replaceAllUsesExcept(onDevice, onDevice.getDefiningOp());
  }
  auto returnOp = cast<func::ReturnOp>(block.getTerminator());
  builder.setInsertionPoint(returnOp);
  for (auto &[index, kind] : kinds.outputs) {
    OpOperand &operand = returnOp->getOpOperand(index);
    Value value = operand.get();
    if (kind == kDeviceMemoryKind && memoryKindOf(value.getType()).empty()) {
      // The same memory: written in the type only (a copy would be wasted).
      // A value also used elsewhere gets a transfer to the typed form.
      if (value.hasOneUse())
        value.setType(withMemoryKind(cast<MeshTensorType>(value.getType()), kind));
      else
        operand.set(TransferOp::create(builder,
            returnOp.getLoc(), withMemoryKind(cast<MeshTensorType>(value.getType()), kind),
            value));
      continue;
    }
    operand.set(moveToMemoryKind(builder, returnOp.getLoc(), value, kind));
  }
  func.setFunctionType(FunctionType::get(func.getContext(), block.getArgumentTypes(),
                                         returnOp.getOperandTypes()));
}
