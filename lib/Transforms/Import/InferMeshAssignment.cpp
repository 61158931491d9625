//===- InferMeshAssignment.cpp - place unlabelled ops on meshes -------------===//
//
// Mesh sets are bit sets over the topology (bit i = mesh i). For every op not
// yet on a mesh ("meshless"):
//   src(op) = meshes all its inputs are available on without a transfer
//             (function inputs and constants: every mesh);
//   use(op) = meshes its results are consumed on, from the consumers' own
//             placement (computed in reverse program order).
// The placement rules are documented in Passes.td.
//
//===----------------------------------------------------------------------===//

#include "Common/Utils.h"
#include "mpmd/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Transforms/RegionUtils.h"
#include "llvm/ADT/SetVector.h"

namespace mlir::mpmd {
#define GEN_PASS_DEF_INFERMESHASSIGNMENTPASS
#include "mpmd/Transforms/Passes.h.inc"

namespace {

using MeshSet = uint64_t;

bool isMeshless(Operation *op) {
  return !isa<AssignOp, UnassignOp, FragmentOp, TransferOp, func::ReturnOp>(op);
}

int lowestMesh(MeshSet set) { return llvm::countr_zero(set); }

class InferMeshAssignmentPass
    : public impl::InferMeshAssignmentPassBase<InferMeshAssignmentPass> {
  using InferMeshAssignmentPassBase::InferMeshAssignmentPassBase;

  func::FuncOp func;
  TopologyAttr topology;
  int64_t numMeshes = 0;
  MeshSet allMeshes = 0;
  llvm::DenseMap<int64_t, int64_t> inputMesh, outputMesh; // index -> mesh index
  llvm::DenseMap<Operation *, llvm::SetVector<Value>> inputs;
  llvm::DenseMap<Operation *, MeshSet> src, placement;
  llvm::DenseMap<Value, SmallVector<Value>> onMesh; // local value -> per-mesh value

  StringRef meshName(int64_t i) { return topology.getMeshes()[i].getName(); }

  std::string describeSet(MeshSet set) {
    std::string s;
    for (int64_t i = 0; i < numMeshes; ++i)
      if (set & (MeshSet(1) << i))
        s += (s.empty() ? "\"" : ", \"") + meshName(i).str() + "\"";
    return s.empty() ? "none" : s;
  }

  MeshSet meshBit(Type meshTensorType) {
    return MeshSet(1) << getMeshIndex(topology, cast<MeshTensorType>(meshTensorType).getMeshName());
  }

  LogicalResult parseIo(ArrayRef<std::string> entries, StringRef what, int64_t count,
                        llvm::DenseMap<int64_t, int64_t> &out) {
    auto parsed = parseIndexAssignment(entries, what, func);
    if (failed(parsed))
      return failure();
    for (auto &[index, mesh] : *parsed) {
      int64_t meshIndex = getMeshIndex(topology, mesh);
      if (meshIndex < 0)
        return func.emitError() << what << " " << index << " is assigned to mesh \"" << mesh
                                << "\" which is not in the topology";
      if (index >= count)
        return func.emitError() << what << " assignment names index " << index << " but @"
                                << func.getSymName() << " has only " << count << " " << what
                                << "s";
      out[index] = meshIndex;
    }
    return success();
  }

  MeshSet srcOf(Value v) {
    if (auto arg = dyn_cast<BlockArgument>(v)) {
      auto it = inputMesh.find(arg.getArgNumber());
      return it == inputMesh.end() ? allMeshes : MeshSet(1) << it->second;
    }
    if (auto unassign = v.getDefiningOp<UnassignOp>())
      return meshBit(unassign.getTensor().getType());
    auto it = src.find(v.getDefiningOp());
    return it == src.end() ? allMeshes : it->second;
  }

  MeshSet useOf(Value v, Block &block) {
    MeshSet use = 0;
    for (OpOperand &operand : v.getUses()) {
      Operation *user = block.findAncestorOpInBlock(*operand.getOwner());
      if (auto assign = dyn_cast<AssignOp>(user)) {
        use |= meshBit(assign.getType());
      } else if (isa<func::ReturnOp>(user)) {
        auto it = outputMesh.find(operand.getOperandNumber());
        if (it != outputMesh.end())
          use |= MeshSet(1) << it->second;
      } else {
        use |= placement.lookup(user);
      }
    }
    return use;
  }

  LogicalResult decide(Operation *op, MeshSet use, MeshSet from) {
    MeshSet chosen;
    if (from == allMeshes) {
      chosen = use ? use : MeshSet(1); // Cloned to every user; default mesh 0.
    } else if (from != 0) {
      chosen = llvm::popcount(use) == 1 ? use : from;
    } else if (llvm::popcount(use) == 1) {
      chosen = use;
    } else {
      InFlightDiagnostic diag =
          op->emitError() << "cannot place '" << op->getName()
                          << "' on a mesh: its operands come from different meshes and its "
                             "results are used on "
                          << (use ? "meshes " + describeSet(use) : std::string("no mesh"))
                          << "; label it with a named computation, or use it on one mesh";
      for (auto [i, v] : llvm::enumerate(inputs[op])) {
        MeshSet set = srcOf(v);
        if (set != allMeshes)
          diag.attachNote(v.getLoc()) << "operand #" << i << " comes from mesh " << describeSet(set);
      }
      return diag;
    }
    placement[op] = chosen;
    return success();
  }

  Value getOnMesh(Value v, int64_t mesh) {
    SmallVector<Value> &slots = onMesh[v];
    if (slots.empty())
      slots.resize(numMeshes);
    if (slots[mesh])
      return slots[mesh];
    Value source;
    for (Value s : slots)
      if (s) {
        source = s;
        break;
      }
    if (!source) {
      auto unassign = v.getDefiningOp<UnassignOp>();
      assert(unassign && "value has no mesh version");
      source = unassign.getTensor();
      slots[getMeshIndex(topology, cast<MeshTensorType>(source.getType()).getMeshName())] = source;
      if (slots[mesh])
        return slots[mesh];
    }
    OpBuilder builder(func.getContext());
    builder.setInsertionPointAfterValue(source);
    auto type = MeshTensorType::get(func.getContext(), meshName(mesh),
                                    cast<MeshTensorType>(source.getType()).getGlobalTensorType());
    Value transfer = builder.create<TransferOp>(source.getLoc(), type, source).getResult();
    slots[mesh] = transfer;
    return transfer;
  }

  /// The mesh an existing local value already lives on (first one found).
  int64_t homeOf(Value v) {
    if (auto unassign = v.getDefiningOp<UnassignOp>())
      return getMeshIndex(topology, cast<MeshTensorType>(unassign.getTensor().getType()).getMeshName());
    SmallVector<Value> &slots = onMesh[v];
    for (auto [i, s] : llvm::enumerate(slots))
      if (s)
        return i;
    return lowestMesh(placement.lookup(v.getDefiningOp()));
  }

  LogicalResult wrapInFragments(Operation *op) {
    for (Value r : op->getResults())
      if (!isa<RankedTensorType>(r.getType()))
        return op->emitError() << "cannot place '" << op->getName() << "' on a mesh: its result of type "
                               << r.getType() << " is not a ranked tensor";
    for (Value v : inputs[op])
      if (!isa<RankedTensorType>(v.getType()) && !isa<MeshTensorType>(v.getType()))
        return op->emitError() << "cannot place '" << op->getName() << "' on a mesh: its operand of type "
                               << v.getType() << " is not a ranked tensor";
    MLIRContext *ctx = func.getContext();
    for (int64_t mesh = 0; mesh < numMeshes; ++mesh) {
      if (!(placement[op] & (MeshSet(1) << mesh)))
        continue;
      SmallVector<Value> operands;
      for (Value v : inputs[op])
        operands.push_back(getOnMesh(v, mesh));
      SmallVector<Type> resultTypes;
      for (Value r : op->getResults())
        resultTypes.push_back(MeshTensorType::get(ctx, meshName(mesh), cast<RankedTensorType>(r.getType())));
      OpBuilder builder(op);
      auto fragment = builder.create<FragmentOp>(
          op->getLoc(), resultTypes, operands, builder.getArrayAttr({}),
          builder.getStringAttr(meshName(mesh)), IntegerAttr(), nullptr, nullptr);
      fragment->setAttr(kInferredByAttr, builder.getStrArrayAttr({getArgument()}));
      Block *block = builder.createBlock(&fragment.getRegion());
      IRMapping mapping;
      for (auto [v, operand] : llvm::zip(inputs[op], operands))
        mapping.map(v, block->addArgument(
                           cast<MeshTensorType>(operand.getType()).getGlobalTensorType(), v.getLoc()));
      Operation *clone = builder.clone(*op, mapping);
      builder.create<ReturnOp>(op->getLoc(), clone->getResults());
      for (auto [r, fr] : llvm::zip(op->getResults(), fragment.getResults())) {
        SmallVector<Value> &slots = onMesh[r];
        slots.resize(numMeshes);
        slots[mesh] = fr;
      }
    }
    return success();
  }

  void runOnOperation() override {
    func = getOperation();
    topology = func->getAttrOfType<TopologyAttr>(kTopologyAttr);
    if (!topology || func.isExternal())
      return;
    numMeshes = topology.getMeshes().size();
    if (numMeshes > 64) {
      func.emitError() << "at most 64 meshes are supported, the topology has " << numMeshes;
      return signalPassFailure();
    }
    allMeshes = numMeshes == 64 ? ~MeshSet(0) : (MeshSet(1) << numMeshes) - 1;
    Block &block = func.getBody().front();
    auto returnOp = cast<func::ReturnOp>(block.getTerminator());
    if (failed(parseIo(inputAssignment, "input", block.getNumArguments(), inputMesh)) ||
        failed(parseIo(outputAssignment, "output", returnOp.getNumOperands(), outputMesh)))
      return signalPassFailure();

    // Inputs of every meshless op: operands and values captured by its regions.
    SmallVector<Operation *> meshless;
    for (Operation &op : block)
      if (isMeshless(&op)) {
        meshless.push_back(&op);
        llvm::SetVector<Value> &in = inputs[&op];
        in.insert(op.getOperands().begin(), op.getOperands().end());
        getUsedValuesDefinedAbove(op.getRegions(), in);
      }

    // Forward: where inputs are available.
    for (Operation *op : meshless) {
      MeshSet from = allMeshes;
      for (Value v : inputs[op])
        from &= srcOf(v);
      src[op] = from;
    }
    // Backward: where results are used, and the placement.
    bool failedAny = false;
    for (Operation *op : llvm::reverse(meshless)) {
      MeshSet use = 0;
      for (Value r : op->getResults())
        use |= useOf(r, block);
      if (failed(decide(op, use, src[op])))
        failedAny = true;
    }
    if (failedAny)
      return signalPassFailure();

    // Function inputs live on the first mesh (in topology order) using them.
    MLIRContext *ctx = func.getContext();
    for (BlockArgument arg : block.getArguments()) {
      auto type = dyn_cast<RankedTensorType>(arg.getType());
      if (!type) {
        func.emitError() << "input #" << arg.getArgNumber() << " of type " << arg.getType()
                         << " cannot be placed on a mesh: only ranked tensors can be";
        return signalPassFailure();
      }
      auto it = inputMesh.find(arg.getArgNumber());
      MeshSet use = useOf(arg, block);
      int64_t home = it != inputMesh.end() ? it->second : (use ? lowestMesh(use) : 0);
      arg.setType(MeshTensorType::get(ctx, meshName(home), type));
      onMesh[arg].resize(numMeshes);
      onMesh[arg][home] = arg;
    }

    for (Operation *op : meshless)
      if (failed(wrapInFragments(op)))
        return signalPassFailure();
    for (AssignOp assign : llvm::make_early_inc_range(block.getOps<AssignOp>())) {
      int64_t mesh = getMeshIndex(topology, cast<MeshTensorType>(assign.getType()).getMeshName());
      assign.getResult().replaceAllUsesWith(getOnMesh(assign.getTensor(), mesh));
      assign.erase();
    }
    for (OpOperand &operand : returnOp->getOpOperands()) {
      Value v = operand.get();
      auto it = outputMesh.find(operand.getOperandNumber());
      operand.set(getOnMesh(v, it != outputMesh.end() ? it->second : homeOf(v)));
    }
    for (Operation *op : llvm::reverse(meshless)) {
      assert(op->use_empty() && "placed op still used");
      op->erase();
    }
    for (UnassignOp unassign : llvm::make_early_inc_range(block.getOps<UnassignOp>())) {
      if (!unassign.use_empty()) {
        unassign.emitError() << "value still used off its mesh after mesh inference";
        return signalPassFailure();
      }
      unassign.erase();
    }
    func.setFunctionType(FunctionType::get(ctx, block.getArgumentTypes(), returnOp.getOperandTypes()));
  }
};

} // namespace
} // namespace mlir::mpmd
