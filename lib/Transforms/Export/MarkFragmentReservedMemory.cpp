//===- MarkFragmentReservedMemory.cpp - memory other arrays hold ----------===//
//
// Writes on each fragment the bytes, per device, of the other arrays alive on
// its mesh while it runs: what its program cannot use, and what a memory
// estimate of the step adds to the program's own peak.
//
//===----------------------------------------------------------------------===//

#include "Common/Fragments.h"
#include "Common/PassBase.h"
#include "mpmd/Dialect/MemoryKinds.h"
#include "mpmd/Dialect/MpmdAttrNames.h"
#include "mpmd/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SetVector.h"

namespace mlir::mpmd {
#define GEN_PASS_DEF_MARKFRAGMENTRESERVEDMEMORYPASS
#include "mpmd/Transforms/Passes.h.inc"

namespace {

/// Bytes of one element of `type` (sub-byte types take a byte each).
int64_t elementBytes(Type type) {
  if (auto complex = dyn_cast<ComplexType>(type))
    return 2 * elementBytes(complex.getElementType());
  if (type.isIntOrFloat())
    return std::max<int64_t>(1, (type.getIntOrFloatBitWidth() + 7) / 8);
  return 0;
}

/// The memory kind JAX's spelling gives `v`: `mhlo.memory_kind` on the
/// function argument it is, or in the `res_attrs` of the fragment that makes
/// it; null when neither says.
StringAttr attributeMemoryKind(Value v, func::FuncOp func) {
  if (auto arg = dyn_cast<BlockArgument>(v))
    return func.getArgAttrOfType<StringAttr>(arg.getArgNumber(), kMhloMemoryKindAttr);
  auto fragment = v.getDefiningOp<FragmentOp>();
  auto resAttrs = fragment ? fragment->getAttrOfType<ArrayAttr>(kFragmentResAttrsAttr) : nullptr;
  unsigned index = cast<OpResult>(v).getResultNumber();
  if (!resAttrs || resAttrs.size() <= index)
    return {};
  auto dict = dyn_cast<DictionaryAttr>(resAttrs[index]);
  return dict ? dict.getAs<StringAttr>(kMhloMemoryKindAttr) : nullptr;
}

/// Per-device bytes of `v` on its mesh when it is an array in device memory,
/// else none (host memory, by its type or by `attributeMemoryKind`; tokens;
/// values without a mesh).
std::optional<std::pair<StringRef, int64_t>> deviceBytes(Value v, func::FuncOp func,
                                                          TopologyAttr topology) {
  auto type = dyn_cast<MeshTensorType>(v.getType());
  if (!type)
    return std::nullopt;
  for (StringAttr kind : {type.getMemoryKind(), attributeMemoryKind(v, func)})
    if (kind && kind.getValue() != kDeviceMemoryKind)
      return std::nullopt;
  MeshAttr mesh = topology.getMesh(type.getMeshName());
  if (!mesh)
    return std::nullopt;
  RankedTensorType local = type.getLocalTensorType(mesh);
  if (!local.hasStaticShape())
    return std::nullopt;
  return std::make_pair(type.getMeshName(),
                        local.getNumElements() * elementBytes(local.getElementType()));
}

class MarkFragmentReservedMemoryPass
    : public MpmdPass<MarkFragmentReservedMemoryPass,
                      impl::MarkFragmentReservedMemoryPassBase> {
public:
  void runOnFunction(func::FuncOp func, TopologyAttr topology) {
    Block &body = func.getBody().front();
    // The last op of the body that reads each value. A value returned by the
    // function stays alive to the end; an argument the caller did not donate
    // stays alive throughout (the caller holds it).
    llvm::DenseMap<Value, Operation *> lastUser;
    for (Operation &op : body)
      for (Value v : op.getOperands())
        lastUser[v] = &op;
    Operation *terminator = body.getTerminator();
    auto keptToTheEnd = [&](Value v) {
      if (auto arg = dyn_cast<BlockArgument>(v))
        if (!isDonatedArgument(func, arg.getArgNumber()))
          return true;
      return lastUser.lookup(v) == terminator;
    };

    // The values alive before the op being visited, in order of definition.
    llvm::SetVector<Value> live;
    for (BlockArgument arg : body.getArguments())
      if (lastUser.count(arg) || keptToTheEnd(arg))
        live.insert(arg);
    Builder builder(func.getContext());
    for (Operation &op : body) {
      if (auto fragment = dyn_cast<FragmentOp>(op)) {
        llvm::SmallPtrSet<Value, 8> operands(fragment->operand_begin(), fragment->operand_end());
        int64_t reserved = 0;
        for (Value v : live) {
          std::optional<std::pair<StringRef, int64_t>> bytes = deviceBytes(v, func, topology);
          if (bytes && bytes->first == fragment.getMeshName() && !operands.contains(v))
            reserved += bytes->second;
        }
        fragment->setAttr(kReservedHbmBytesAttr, builder.getI64IntegerAttr(reserved));
      }
      // Values whose last reader this op is are freed after it; its results
      // that something reads are alive from now on.
      for (Value v : op.getOperands())
        if (lastUser.lookup(v) == &op && !keptToTheEnd(v))
          live.remove(v);
      for (Value result : op.getResults())
        if (lastUser.count(result))
          live.insert(result);
    }
  }
};

} // namespace
} // namespace mlir::mpmd
