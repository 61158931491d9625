//===- IntroduceTransfers.cpp - assign(unassign) to transfer ----------------===//
//
// -mpmd-introduce-transfers turns the moves between meshes that labels imply
// into `mpmd.transfer`s. For each MPMD function, in three steps:
//
//   1. Into callees. An argument of a function called through `mpmd.call`,
//      which every call site passes as a value unassigned from one and the
//      same mesh tensor type (directly, or as a result of a call whose callee
//      returns such a value) and which the callee assigns to a mesh, is
//      assigned to that type at the callee's entry (`assign` + `unassign`):
//      the moves inside the callee then start from that mesh.
//   2. Sums assigned to a mesh. `assign(add(a, b))` where every leaf of the
//      tree of single-use `stablehlo.add`s is an unassigned value runs the
//      additions on the assigned mesh, one inferred fragment per addition in
//      program order, each leaf moved there right before its fragment.
//   3. `assign(unassign(x))`: the same type folds to `x`; other types get one
//      transfer each, chained in topology order (x on m1 assigned to m2 and
//      m3: m1 -> m2 -> m3) where the first of those assigns was, so the
//      source mesh sends the value once.
//
//===----------------------------------------------------------------------===//

#include "Common/Fragments.h"
#include "Common/PassBase.h"
#include "mpmd/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/MapVector.h"

namespace mlir::mpmd {
#define GEN_PASS_DEF_INTRODUCETRANSFERSPASS
#include "mpmd/Transforms/Passes.h.inc"

namespace {

//===----------------------------------------------------------------------===//
// 1. Unassigns at every call site, pushed into the callee
//===----------------------------------------------------------------------===//

/// The mesh tensor type `v` is unassigned from: `v` is an `mpmd.unassign`,
/// or a result of an `mpmd.call` whose callee returns one there (through at
/// most `depth` calls); else null.
Type unassignedType(Value v, int depth = 8) {
  if (auto unassign = v.getDefiningOp<UnassignOp>())
    return unassign.getTensor().getType();
  auto call = v.getDefiningOp<CallOp>();
  if (!call || depth == 0)
    return {};
  auto callee = SymbolTable::lookupNearestSymbolFrom<func::FuncOp>(call, call.getCalleeAttr());
  if (!callee || callee.isExternal())
    return {};
  Operation *terminator = callee.getBody().front().getTerminator();
  return unassignedType(terminator->getOperand(cast<OpResult>(v).getResultNumber()), depth - 1);
}

/// The mesh tensor type every call of `calls` passes as operand `index`
/// unassigned from (see unassignedType), if there is one.
Type commonUnassignedType(ArrayRef<CallOp> calls, unsigned index) {
  Type common;
  for (CallOp call : calls) {
    Type type = unassignedType(call.getTensors()[index]);
    if (!type)
      return {};
    if (common && common != type)
      return {};
    common = type;
  }
  return common;
}

void pushUnassignsIntoCallee(func::FuncOp callee) {
  auto module = callee->getParentOfType<ModuleOp>();
  if (!module)
    return;
  // Referenced otherwise, its arguments are not ours to change.
  std::optional<SmallVector<CallOp>> calls = getMpmdCalls(callee, module);
  if (!calls || calls->empty())
    return;
  for (BlockArgument arg : callee.getArguments()) {
    if (!isa<RankedTensorType>(arg.getType()) ||
        llvm::none_of(arg.getUsers(), [](Operation *user) { return isa<AssignOp>(user); }))
      continue;
    Type type = commonUnassignedType(*calls, arg.getArgNumber());
    if (!type)
      continue;
    // Each at the entry: the last argument's assign comes first.
    OpBuilder builder = OpBuilder::atBlockBegin(&callee.getBody().front());
    auto assign = AssignOp::create(builder, arg.getLoc(), type, arg, StringAttr());
    auto unassign = UnassignOp::create(builder, arg.getLoc(), arg.getType(), assign, StringAttr());
    arg.replaceAllUsesExcept(unassign, assign);
  }
}

//===----------------------------------------------------------------------===//
// 2. Sums of unassigned values, assigned to a mesh
//===----------------------------------------------------------------------===//

bool isAdd(Operation *op) {
  return op && op->getName().getStringRef() == "stablehlo.add" && op->getNumOperands() == 2 &&
         op->getNumResults() == 1 && op->getNumRegions() == 0;
}

/// Whether `v` is a leaf (an unassigned value) or a single-use addition of
/// such trees, all of local type `type`.
bool isSumOfUnassigned(Value v, Type type) {
  if (v.getType() != type)
    return false;
  if (v.getDefiningOp<UnassignOp>())
    return true;
  Operation *op = v.getDefiningOp();
  return isAdd(op) && v.hasOneUse() &&
         llvm::all_of(op->getOperands(), [&](Value o) { return isSumOfUnassigned(o, type); });
}

/// Builds the sum `v` on mesh tensor type `target` (see isSumOfUnassigned):
/// each addition becomes an inferred fragment right before it.
Value buildSumOnMesh(Value v, MeshTensorType target) {
  if (auto unassign = v.getDefiningOp<UnassignOp>())
    return unassign.getTensor(); // Moved below, right before its fragment.
  Operation *add = v.getDefiningOp();
  SmallVector<Value> operands =
      llvm::map_to_vector(add->getOperands(), [&](Value o) { return buildSumOnMesh(o, target); });
  OpBuilder builder(add);
  for (Value &operand : operands)
    if (operand.getType() != target)
      operand = TransferOp::create(builder, operand.getLoc(), target, operand).getResult();
  auto fragment = FragmentOp::create(builder, add->getLoc(), TypeRange{target}, operands,
                                     builder.getArrayAttr({}),
                                     builder.getStringAttr(target.getMeshName()),
                                     IntegerAttr(), nullptr, nullptr);
  fragment->setAttr(kInferredByAttr, builder.getStrArrayAttr({"mpmd-introduce-transfers"}));
  Block *block = builder.createBlock(&fragment.getRegion());
  IRMapping mapping;
  for (auto [original, operand] : llvm::zip(add->getOperands(), operands))
    mapping.map(original, block->addArgument(original.getType(), operand.getLoc()));
  Operation *clone = builder.clone(*add, mapping);
  ReturnOp::create(builder, add->getLoc(), clone->getResults());
  return fragment.getResult(0);
}

/// Erases the additions of a sum built on a mesh (their only uses are each
/// other and the replaced assign).
void eraseSum(Value v) {
  Operation *op = v.getDefiningOp();
  if (!isAdd(op) || !op->use_empty())
    return;
  SmallVector<Value> operands(op->getOperands());
  op->erase();
  for (Value operand : operands)
    eraseSum(operand);
}

void pushAssignsThroughSums(func::FuncOp func) {
  SmallVector<AssignOp> assigns(func.getBody().getOps<AssignOp>());
  for (AssignOp assign : assigns) {
    Value tensor = assign.getTensor();
    auto target = dyn_cast<MeshTensorType>(assign.getType());
    if (!target || !isAdd(tensor.getDefiningOp()) ||
        !isSumOfUnassigned(tensor, target.getGlobalTensorType()))
      continue;
    assign.getResult().replaceAllUsesWith(buildSumOnMesh(tensor, target));
    assign.erase();
    eraseSum(tensor);
  }
}

//===----------------------------------------------------------------------===//
// 3. assign(unassign(x))
//===----------------------------------------------------------------------===//

void introduceTransfers(func::FuncOp func, TopologyAttr topology) {
  // Same type: the assign is x itself. In program order, so that an unassign
  // of a folded assign reads x in turn.
  llvm::MapVector<Value, SmallVector<AssignOp>> crossMesh;
  for (AssignOp assign : llvm::make_early_inc_range(func.getBody().getOps<AssignOp>())) {
    auto unassign = assign.getTensor().getDefiningOp<UnassignOp>();
    if (!unassign)
      continue;
    Value source = unassign.getTensor();
    if (source.getType() == assign.getType()) {
      assign.getResult().replaceAllUsesWith(source);
      assign.erase();
      continue;
    }
    crossMesh[source].push_back(assign);
  }
  // Other types: one chain of transfers per source value, in program order.
  // A source may be an assign of an earlier group (memory kinds: device ->
  // host -> device): it is read as the transfer that replaced it.
  llvm::DenseMap<Value, Value> replacedBy;
  for (auto &[original, assigns] : crossMesh) {
    Value source = replacedBy.lookup(original);
    if (!source)
      source = original;
    llvm::MapVector<Type, SmallVector<AssignOp>> byType;
    for (AssignOp assign : assigns)
      byType[assign.getType()].push_back(assign);
    SmallVector<Type> destinations = llvm::to_vector(llvm::make_first_range(byType));
    llvm::stable_sort(destinations, [&](Type a, Type b) {
      return getMeshIndex(topology, cast<MeshTensorType>(a).getMeshName()) <
             getMeshIndex(topology, cast<MeshTensorType>(b).getMeshName());
    });
    // The chain goes where the first of the assigns is.
    OpBuilder builder(assigns.front());
    SmallVector<Value> chain;
    for (Type destination : destinations)
      chain.push_back(TransferOp::create(builder, byType[destination].front().getLoc(), destination,
                                         chain.empty() ? source : chain.back()));
    for (auto [destination, transfer] : llvm::zip(destinations, chain))
      for (AssignOp assign : byType[destination]) {
        assign.getResult().replaceAllUsesWith(transfer);
        replacedBy[assign.getResult()] = transfer;
        assign.erase();
      }
  }
  for (UnassignOp unassign : llvm::make_early_inc_range(func.getBody().getOps<UnassignOp>()))
    if (unassign.use_empty())
      unassign.erase();
}

class IntroduceTransfersPass : public MpmdPass<IntroduceTransfersPass, impl::IntroduceTransfersPassBase> {
public:
  void runOnFunction(func::FuncOp func, TopologyAttr topology) {
    pushUnassignsIntoCallee(func);
    pushAssignsThroughSums(func);
    introduceTransfers(func, topology);
  }
};

} // namespace
} // namespace mlir::mpmd
