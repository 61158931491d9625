//===- InferMeshAssignment.cpp - place unlabelled ops on meshes -------------===//
//
// -mpmd-infer-mesh-assignment. A module with `mpmd.call`s first gets the
// meshes of its callees' signatures (MeshInferenceAcrossCalls.h); then each
// function is inferred on its own, in two halves built anew for it:
// MeshAssignmentAnalysis (MeshAssignmentAnalysis.h: the rules) computes where
// each op not yet on a mesh runs and where each input lives, without changing
// the IR; MeshAssignmentRewriter (here) applies that assignment: it wraps
// each op in an inferred fragment on each of its meshes and moves values
// between meshes with transfers. The only change made before the analysis is
// splitting optimization barriers that join values of several meshes (the
// analysis is then computed again on the split barriers).
//
// A value several meshes need goes down a chain of transfers (m1 -> m2 ->
// m3, in the order the meshes first need it), so its mesh sends it once.
// Every transfer is classified as implied (a labelled boundary, an input
// copied to another mesh, a broadcast, a reduction, a gradient summed for one
// labelled consumer) or inferred; inferred transfers are errors unless
// `infer-transfers` is set. With `infer-cross-mesh-reductions`, a value
// computed from cross-mesh reductions alone (a global norm) may go to every
// mesh that reads it.
//
//===----------------------------------------------------------------------===//

#include "MeshAssignmentAnalysis.h"
#include "MeshInferenceAcrossCalls.h"

#include "Common/Fragments.h"
#include "Common/MemoryKinds.h"
#include "Common/PassBase.h"
#include "Common/TextOptions.h"
#include "mpmd/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/MapVector.h"

#include <algorithm>
#include <deque>

namespace mlir::mpmd {
#define GEN_PASS_DEF_INFERMESHASSIGNMENTPASS
#include "mpmd/Transforms/Passes.h.inc"

namespace {

/// The StableHLO op combining two values for a cross-mesh reduction kind.
std::optional<StringRef> combinerOp(ReductionType kind) {
  switch (kind) {
  case ReductionType::kAdd: return StringRef("stablehlo.add");
  case ReductionType::kMax: return StringRef("stablehlo.maximum");
  case ReductionType::kMin: return StringRef("stablehlo.minimum");
  case ReductionType::kMul: return StringRef("stablehlo.multiply");
  case ReductionType::kOr: return StringRef("stablehlo.or");
  case ReductionType::kAnd: return StringRef("stablehlo.and");
  case ReductionType::kNone: return std::nullopt;
  }
  return std::nullopt;
}

//===----------------------------------------------------------------------===//
// Before the analysis: optimization barriers across meshes
//===----------------------------------------------------------------------===//

/// Splits every unlabelled `stablehlo.optimization_barrier` whose values
/// belong to different meshes into one barrier per mesh set. Each result is
/// its operand, and programs of different meshes share no schedule that a
/// joint barrier could order: `jax.checkpoint` (prevent_cse) puts such a
/// barrier over a labelled stage's residuals and the cotangent from the next
/// mesh. A barrier read by labelled computations only (`MeshRole::kBarrier`,
/// placed where it is read) is split by the meshes reading each result,
/// any other by the meshes each operand comes from (`sources`' source sets).
/// Returns whether anything was split (then `sources` is stale).
bool splitMixedBarriers(const MeshAssignmentAnalysis &sources) {
  bool changed = false;
  for (Operation *op : sources.getMeshless()) {
    if (!isOptimizationBarrier(op) || op->getNumOperands() < 2)
      continue;
    bool byUse = sources.getRole(op) == MeshRole::kBarrier;
    llvm::MapVector<MeshSet, SmallVector<unsigned>> groups;
    for (auto [i, v] : llvm::enumerate(op->getOperands()))
      groups[byUse ? sources.useOf(op->getResult(i)) : sources.srcOf(v)].push_back(i);
    if (groups.size() < 2)
      continue;
    OpBuilder builder(op);
    for (auto &[set, indices] : groups) {
      SmallVector<Value> operands;
      SmallVector<Type> types;
      for (unsigned i : indices) {
        operands.push_back(op->getOperand(i));
        types.push_back(op->getResult(i).getType());
      }
      OperationState state(op->getLoc(), op->getName(), operands, types, op->getAttrs());
      Operation *split = builder.create(state);
      for (auto [k, i] : llvm::enumerate(indices))
        op->getResult(i).replaceAllUsesWith(split->getResult(k));
    }
    op->erase();
    changed = true;
  }
  return changed;
}

//===----------------------------------------------------------------------===//
// annotate-only: the analysis as attributes
//===----------------------------------------------------------------------===//

/// Records each meshless op's source set, use set and placement (after
/// placeByUse) as attributes, for tests; the IR is otherwise unchanged.
void annotate(const MeshAssignmentAnalysis &analysis) {
  Builder b(analysis.getFunc().getContext());
  auto names = [&](MeshSet set) { return b.getStrArrayAttr(analysis.meshNames(set)); };
  for (Operation *op : analysis.getMeshless()) {
    MeshSet use = 0;
    for (Value r : op->getResults())
      use |= analysis.useOf(r);
    op->setAttr(kSrcSetAttr, names(analysis.getSource(op)));
    op->setAttr(kUseSetAttr, names(use));
    op->setAttr(kPlacementAttr, names(analysis.getPlacement(op)));
  }
}

//===----------------------------------------------------------------------===//
// The rewrite
//===----------------------------------------------------------------------===//

/// Applies a complete MeshAssignmentAnalysis to its function. What it adds
/// (each value's version on each mesh, the inferred transfers reported) lives
/// here and is dropped with it.
class MeshAssignmentRewriter {
public:
  MeshAssignmentRewriter(const MeshAssignmentAnalysis &analysis, StringRef passArgument)
      : analysis(analysis), func(analysis.getFunc()), numMeshes(analysis.getNumMeshes()),
        inferTransfers(analysis.getOptions().inferTransfers),
        inferCrossMeshReductions(analysis.getOptions().inferCrossMeshReductions),
        passArgument(passArgument) {}

  /// Rewrites the function; fails after reporting errors.
  LogicalResult run();

private:
  const MeshAssignmentAnalysis &analysis;
  func::FuncOp func;
  int64_t numMeshes;
  bool inferTransfers, inferCrossMeshReductions;
  /// The pass's command line name, recorded on the fragments it creates.
  StringRef passArgument;

  llvm::DenseMap<Value, SmallVector<Value>> onMesh; // local value -> per-mesh value
  // Local value -> the last transfer made of it: the next mesh that needs it
  // gets it from there (a chain m1 -> m2 -> m3), so its mesh sends it once.
  llvm::DenseMap<Value, Value> lastTransfer;
  // Inferred transfers already reported, as (value, mesh).
  llvm::DenseSet<std::pair<Value, int64_t>> reported;
  bool failedTransfers = false;

  StringRef meshName(int64_t i) const { return analysis.meshName(i); }
  int64_t meshIndexOf(Type type) const { return analysis.meshIndexOf(type); }

  void placeInputs();
  LogicalResult rewrite(Operation *op);
  LogicalResult checkTypes(Operation *op);
  FragmentOp createFragment(Operation *anchor, int64_t mesh, ValueRange operands,
                            TypeRange localResultTypes,
                            function_ref<SmallVector<Value>(OpBuilder &, ValueRange)> build);
  void setOnMesh(Operation *op, int64_t mesh, ValueRange values);
  Value getOnMesh(Value v, int64_t mesh, Operation *consumer, bool implied);
  Value labelledTransfer(Value source, Type type, Operation *consumer);
  std::string describeValue(Value v);
  int64_t homeOf(Value v);
};

LogicalResult MeshAssignmentRewriter::run() {
  Block &block = func.getBody().front();
  auto returnOp = cast<func::ReturnOp>(block.getTerminator());
  placeInputs();
  for (Operation *op : analysis.getMeshless())
    if (failed(rewrite(op)))
      return failure();
  // Values consumed by labelled computations and outputs the user placed:
  // those transfers are implied.
  // Values of assigns the function returns as they are: an output the body
  // itself puts on a mesh (`-mpmd-map-input-output-to-mesh`) keeps the mesh
  // and memory kind it is assigned to.
  llvm::DenseMap<Value, Type> assignedOutputs; // -> the assign's type
  for (AssignOp assign : llvm::make_early_inc_range(block.getOps<AssignOp>())) {
    Value placed =
        getOnMesh(assign.getTensor(), meshIndexOf(assign.getType()), assign, /*implied=*/true);
    OpBuilder builder(assign); // An assign to host memory (a named tensor) moves it there.
    Value moved =
        moveToMemoryKind(builder, assign.getLoc(), placed, memoryKindOf(assign.getType()));
    if (llvm::is_contained(assign->getUsers(), returnOp.getOperation()))
      assignedOutputs[moved] = assign.getType();
    assign.getResult().replaceAllUsesWith(moved);
    assign.erase();
  }
  for (OpOperand &operand : returnOp->getOpOperands()) {
    Value v = operand.get();
    std::optional<int64_t> mesh = analysis.getOutputMesh(operand.getOperandNumber());
    if (auto it = assignedOutputs.find(v);
        it != assignedOutputs.end() && (!mesh || *mesh == meshIndexOf(v.getType()))) {
      // Device memory written out as "device" in the assign's type only: the
      // same memory, retyped (a copy would be wasted) unless used elsewhere.
      if (v.getType() != it->second) {
        if (v.hasOneUse()) {
          v.setType(it->second);
        } else {
          OpBuilder builder(returnOp);
          operand.set(TransferOp::create(builder, returnOp.getLoc(), it->second, v));
        }
      }
      continue;
    }
    operand.set(getOnMesh(v, mesh ? *mesh : homeOf(v), returnOp, /*implied=*/true));
  }
  if (failedTransfers)
    return failure();
  for (Operation *op : llvm::reverse(analysis.getMeshless())) {
    assert(op->use_empty() && "placed op still used");
    op->erase();
  }
  for (UnassignOp unassign : llvm::make_early_inc_range(block.getOps<UnassignOp>())) {
    if (!unassign.use_empty())
      return unassign.emitError() << "value still used off its mesh after mesh inference";
    unassign.erase();
  }
  func.setFunctionType(
      FunctionType::get(func.getContext(), block.getArgumentTypes(), returnOp.getOperandTypes()));
  return success();
}

/// Gives each function input the type of its home mesh.
void MeshAssignmentRewriter::placeInputs() {
  for (BlockArgument arg : func.getArguments()) {
    if (isa<MeshTensorType>(arg.getType()))
      continue; // Already placed.
    int64_t home = analysis.getInputHome(arg);
    arg.setType(MeshTensorType::get(func.getContext(), meshName(home),
                                    cast<RankedTensorType>(arg.getType())));
    onMesh[arg].resize(numMeshes);
    onMesh[arg][home] = arg;
  }
}

LogicalResult MeshAssignmentRewriter::checkTypes(Operation *op) {
  for (Value r : op->getResults())
    if (!isa<RankedTensorType>(r.getType()))
      return op->emitError() << "cannot place '" << op->getName()
                             << "' on a mesh: its result of type " << r.getType()
                             << " is not a ranked tensor";
  for (Value v : analysis.getInputs(op))
    if (!isa<RankedTensorType, MeshTensorType>(v.getType()))
      return op->emitError() << "cannot place '" << op->getName()
                             << "' on a mesh: its operand of type " << v.getType()
                             << " is not a ranked tensor";
  return success();
}

/// Replaces uses of `op` by a fragment on each mesh of its placement (a
/// reduction: its operands combined in order).
LogicalResult MeshAssignmentRewriter::rewrite(Operation *op) {
  MeshRole role = analysis.getRole(op);
  if (role == MeshRole::kBroadcast)
    return success(); // Resolved by its users through getOnMesh.
  if (failed(checkTypes(op)))
    return failure();
  ArrayRef<Value> inputs = analysis.getInputs(op);
  for (int64_t mesh = 0; mesh < numMeshes; ++mesh) {
    if (!(analysis.getPlacement(op) & (MeshSet(1) << mesh)))
      continue;
    SmallVector<Value> operands;
    for (Value v : inputs)
      operands.push_back(getOnMesh(v, mesh, op, /*implied=*/role != MeshRole::kOrdinary));
    // The operands already on the mesh first, then those moved there by a
    // transfer (each group in the op's order): a fixed order, whichever
    // fragment made the transfer, so that like fragments stay alike.
    SmallVector<unsigned> order = llvm::to_vector(llvm::seq<unsigned>(0, inputs.size()));
    std::stable_partition(order.begin(), order.end(), [&](unsigned i) {
      return !operands[i].getDefiningOp<TransferOp>();
    });
    SmallVector<Value> orderedInputs, orderedOperands;
    for (unsigned i : order) {
      orderedInputs.push_back(inputs[i]);
      orderedOperands.push_back(operands[i]);
    }
    FragmentOp fragment;
    if (role == MeshRole::kReduce) {
      std::optional<StringRef> combiner = combinerOp(analysis.getReductionKind(op));
      fragment = createFragment(op, mesh, orderedOperands, op->getResultTypes(),
                                [&](OpBuilder &b, ValueRange args) -> SmallVector<Value> {
        // Combine the op's operands in order (`inputs` holds each value once).
        IRMapping mapping;
        for (auto [v, arg] : llvm::zip(orderedInputs, args))
          mapping.map(v, arg);
        SmallVector<Value> combined =
            llvm::map_to_vector(op->getOperands(), [&](Value v) { return mapping.lookup(v); });
        Value acc = combined.front();
        for (Value next : ArrayRef<Value>(combined).drop_front()) {
          OperationState state(op->getLoc(), *combiner, ValueRange{acc, next},
                               TypeRange{acc.getType()}, {});
          acc = b.create(state)->getResult(0);
        }
        return {acc};
      });
    } else {
      fragment = createFragment(op, mesh, orderedOperands, op->getResultTypes(),
                                [&](OpBuilder &b, ValueRange args) -> SmallVector<Value> {
        IRMapping mapping;
        for (auto [v, arg] : llvm::zip(orderedInputs, args))
          mapping.map(v, arg);
        return llvm::to_vector_of<Value>(b.clone(*op, mapping)->getResults());
      });
    }
    setOnMesh(op, mesh, fragment.getResults());
  }
  return success();
}

/// Creates an inferred fragment on `mesh` taking `operands` (values on the
/// mesh); `build` fills its body from the block arguments and returns the
/// values to return.
FragmentOp MeshAssignmentRewriter::createFragment(
    Operation *anchor, int64_t mesh, ValueRange operands, TypeRange localResultTypes,
    function_ref<SmallVector<Value>(OpBuilder &, ValueRange)> build) {
  MLIRContext *ctx = func.getContext();
  SmallVector<Type> resultTypes;
  for (Type t : localResultTypes)
    resultTypes.push_back(MeshTensorType::get(ctx, meshName(mesh), cast<RankedTensorType>(t)));
  OpBuilder builder(anchor);
  auto fragment = FragmentOp::create(builder, anchor->getLoc(), resultTypes, operands,
                                     builder.getArrayAttr({}),
                                     builder.getStringAttr(meshName(mesh)),
                                     IntegerAttr(), nullptr, nullptr);
  fragment->setAttr(kInferredByAttr, builder.getStrArrayAttr({passArgument}));
  Block *block = builder.createBlock(&fragment.getRegion());
  for (Value v : operands)
    block->addArgument(cast<MeshTensorType>(v.getType()).getGlobalTensorType(), v.getLoc());
  SmallVector<Value> returned = build(builder, block->getArguments());
  ReturnOp::create(builder, anchor->getLoc(), returned);
  return fragment;
}

void MeshAssignmentRewriter::setOnMesh(Operation *op, int64_t mesh, ValueRange values) {
  for (auto [r, v] : llvm::zip(op->getResults(), values)) {
    SmallVector<Value> &slots = onMesh[r];
    slots.resize(numMeshes);
    slots[mesh] = v;
  }
}

/// `v` on mesh `mesh`, transferring it there if needed. `consumer` is the op
/// that needs it (for diagnostics); `implied` says whether a transfer is
/// implied by the labels (else it is inferred).
Value MeshAssignmentRewriter::getOnMesh(Value v, int64_t mesh, Operation *consumer,
                                        bool implied) {
  SmallVector<Value> &slots = onMesh[v];
  if (slots.empty())
    slots.resize(numMeshes);
  if (slots[mesh])
    return slots[mesh];
  // Broadcasts are aliases of their operand that may go anywhere.
  if (auto broadcast = v.getDefiningOp<BroadcastOp>()) {
    // The recursion may grow `onMesh`: `slots` is looked up again after it.
    Value onTarget = getOnMesh(broadcast.getTensor(), mesh, consumer, /*implied=*/true);
    return onMesh[v][mesh] = onTarget;
  }
  Value source;
  int64_t sourceMesh = -1;
  for (auto [i, s] : llvm::enumerate(slots))
    if (s) {
      source = s;
      sourceMesh = i;
      break;
    }
  if (!source) {
    // A value already on a mesh, or taken off one by an unassign: every
    // other local value got its mesh versions when its op was placed.
    if (isa<MeshTensorType>(v.getType()))
      source = v;
    else
      source = cast<UnassignOp>(v.getDefiningOp()).getTensor();
    sourceMesh = meshIndexOf(source.getType());
    if (isInHostMemory(source.getType())) { // Its readers compute in device memory.
      OpBuilder builder(func.getContext());
      builder.setInsertionPointAfterValue(source);
      source = moveToMemoryKind(builder, source.getLoc(), source, "");
    }
    slots[sourceMesh] = source;
    if (sourceMesh == mesh)
      return source;
  }
  bool fromReduction = inferCrossMeshReductions && v.getDefiningOp() &&
                       analysis.isReductionDerived(v.getDefiningOp());
  if (!implied && !fromReduction && !isa<BlockArgument>(v) && !analysis.isSliceOfInput(v) &&
      !inferTransfers && reported.insert({v, mesh}).second) {
    failedTransfers = true;
    InFlightDiagnostic diag = consumer->emitError()
                              << "'" << consumer->getName() << "' on mesh \"" << meshName(mesh)
                              << "\" needs " << describeValue(v) << ", which is on mesh \""
                              << meshName(sourceMesh) << "\": no label implies this transfer; ";
    if (analysis.sumsAcrossMeshes(consumer))
      // The gradient of a weight used on two meshes (a tied embedding): a
      // cross-mesh reduction, not a transfer, is what it needs.
      diag << "it sums values from meshes \"" << meshName(mesh) << "\" and \""
           << meshName(sourceMesh)
           << "\" (e.g. the gradients of a weight used on both, such as a tied embedding): "
              "set the partitioning option mpmd_infer_cross_mesh_reductions to sum them once "
              "across meshes, or use mpmd.broadcast on the weight";
    else
      diag << "label the computation with a named computation, or set the partitioning "
              "option mpmd_infer_transfers";
    diag.attachNote(v.getLoc()) << "the value is computed here, on mesh \""
                                << meshName(sourceMesh) << "\"";
  }
  // (After the check: a transfer the labels made for other readers does not
  // make this reader's need implied.)
  auto type = MeshTensorType::get(func.getContext(), meshName(mesh),
                                  cast<MeshTensorType>(source.getType()).getGlobalTensorType());
  Value &last = lastTransfer[v];
  if (!last)
    if (Value made = labelledTransfer(source, type, consumer))
      return slots[mesh] = made;
  Value from = last ? last : source;
  OpBuilder builder(func.getContext());
  builder.setInsertionPointAfterValue(from);
  last = TransferOp::create(builder, source.getLoc(), type, from).getResult();
  return slots[mesh] = last;
}

/// A transfer of `source` to `type` that the labels made already
/// (-mpmd-introduce-transfers, for a labelled consumer) and that comes before
/// `consumer`, or null: a value read on a mesh by a labelled computation and
/// by an inferred op (the barrier before a recomputation) crosses once.
Value MeshAssignmentRewriter::labelledTransfer(Value source, Type type, Operation *consumer) {
  Operation *at = func.getBody().front().findAncestorOpInBlock(*consumer);
  for (Operation *user : source.getUsers())
    if (auto transfer = dyn_cast<TransferOp>(user);
        transfer && transfer.getType() == type && at && transfer->getBlock() == at->getBlock() &&
        transfer->isBeforeInBlock(at))
      return transfer.getResult();
  return {};
}

/// A description of where `v` comes from, for diagnostics.
std::string MeshAssignmentRewriter::describeValue(Value v) {
  std::string s;
  llvm::raw_string_ostream os(s);
  if (auto unassign = v.getDefiningOp<UnassignOp>()) {
    Value source = unassign.getTensor();
    if (auto fragment = source.getDefiningOp<FragmentOp>()) {
      os << "result #" << cast<OpResult>(source).getResultNumber() << " of ";
      if (fragment.isUserFragment()) {
        os << "named computation ";
        llvm::interleaveComma(fragment.getOrigin(), os, [&](Attribute a) {
          auto origin = cast<UserOriginAttr>(a);
          os << "\"" << origin.getUserName() << "\"";
          if (origin.getTransposeCount())
            os << "(" << origin.getTransposeCount() << ")";
        });
      } else {
        os << "an inferred fragment";
      }
      return s;
    }
    os << "a value";
    return s;
  }
  if (auto result = dyn_cast<OpResult>(v)) {
    os << "result #" << result.getResultNumber() << " of '" << result.getOwner()->getName() << "'";
    return s;
  }
  os << "input #" << cast<BlockArgument>(v).getArgNumber();
  return s;
}

/// The mesh an existing local value already lives on (first one found).
int64_t MeshAssignmentRewriter::homeOf(Value v) {
  if (isa<MeshTensorType>(v.getType()))
    return meshIndexOf(v.getType());
  if (auto unassign = v.getDefiningOp<UnassignOp>())
    return meshIndexOf(unassign.getTensor().getType());
  if (auto broadcast = v.getDefiningOp<BroadcastOp>())
    return homeOf(broadcast.getTensor());
  for (auto [i, s] : llvm::enumerate(onMesh[v]))
    if (s)
      return i;
  return llvm::countr_zero(analysis.getPlacement(v.getDefiningOp()));
}

//===----------------------------------------------------------------------===//
// The pass
//===----------------------------------------------------------------------===//

/// Mesh inference on one function: the analysis, then the rewrite (or the
/// annotation). Fails after reporting errors.
LogicalResult inferMeshes(func::FuncOp func, TopologyAttr topology,
                          const MeshInferenceOptions &options, bool annotateOnly,
                          StringRef passArgument, const IoMemoryKinds &memoryKinds) {
  auto analysis = std::make_unique<MeshAssignmentAnalysis>(func, topology, options);
  if (failed(analysis->computeSources()))
    return failure();
  if (splitMixedBarriers(*analysis)) {
    analysis = std::make_unique<MeshAssignmentAnalysis>(func, topology, options);
    if (failed(analysis->computeSources()))
      return failure();
  }
  analysis->placeByUse();
  if (annotateOnly) {
    annotate(*analysis);
    return success();
  }
  if (failed(analysis->placeInputsAndFloating()) ||
      failed(MeshAssignmentRewriter(*analysis, passArgument).run()))
    return failure();
  applyIoMemoryKinds(func, memoryKinds);
  return success();
}

class InferMeshAssignmentPass : public impl::InferMeshAssignmentPassBase<InferMeshAssignmentPass> {
public:
  using InferMeshAssignmentPassBase::InferMeshAssignmentPassBase;
  /// The driver's pass: the partition's options and I/O assignment, typed.
  InferMeshAssignmentPass(const ::mpmd::PartitionOptions &options,
                          std::vector<::mpmd::IndexAssignment> inputs,
                          std::vector<::mpmd::IndexAssignment> outputs)
      : typedInputAssignment(std::move(inputs)), typedOutputAssignment(std::move(outputs)) {
    inferTransfers = options.infer_transfers;
    inferCrossMeshReductions = options.infer_cross_mesh_reductions;
  }

  /// Every MPMD function of the module: first the meshes of the callees'
  /// signatures, shared by their call sites (MeshInferenceAcrossCalls.h),
  /// then each function on its own.
  void runOnOperation() override {
    ModuleOp module = getOperation();
    llvm::DenseSet<Operation *> callees;
    module.walk([&](CallOp call) {
      if (auto callee =
              SymbolTable::lookupNearestSymbolFrom<func::FuncOp>(call, call.getCalleeAttr()))
        callees.insert(callee);
    });
    // Entry points get the input/output assignment, callees none; memory
    // kinds (`0@m#pinned_host`) are split off for the analysis, which places
    // on meshes, and applied after the rewrite.
    std::deque<std::optional<std::vector<::mpmd::IndexAssignment>>> assignments;
    std::vector<MeshInferenceTarget> targets;
    std::vector<IoMemoryKinds> memoryKinds;
    for (func::FuncOp func : module.getOps<func::FuncOp>()) {
      if (failed(verifyTopologyAndSignature(func)))
        return signalPassFailure();
      TopologyAttr topology = getMpmdFunctionTopology(func);
      if (!topology)
        continue;
      MeshInferenceTarget &target = targets.emplace_back();
      target.func = func;
      target.topology = topology;
      target.options.inferTransfers = inferTransfers;
      target.options.inferCrossMeshReductions = inferCrossMeshReductions;
      IoMemoryKinds &kinds = memoryKinds.emplace_back();
      auto &inputs = assignments.emplace_back(std::vector<::mpmd::IndexAssignment>());
      auto &outputs = assignments.emplace_back(std::vector<::mpmd::IndexAssignment>());
      if (!callees.contains(func) &&
          (failed(takeIoMemoryKinds(func, "input", typedInputAssignment, inputAssignment, inputs,
                                    kinds.inputs)) ||
           failed(takeIoMemoryKinds(func, "output", typedOutputAssignment, outputAssignment,
                                    outputs, kinds.outputs)) ||
           failed(checkMemoryKindAttributes(func, kinds))))
        return signalPassFailure();
      target.options.typedInputAssignment = &inputs;
      target.options.typedOutputAssignment = &outputs;
    }
    if (!annotateOnly && hasCalls(targets) &&
        failed(assignMeshesAcrossCalls(targets, inferTransfers)))
      return signalPassFailure();
    for (auto [target, kinds] : llvm::zip(targets, memoryKinds))
      if (failed(inferMeshes(target.func, target.topology, target.options, annotateOnly,
                             getArgument(), kinds)))
        signalPassFailure();
  }

  /// The entries of an I/O assignment (typed, else parsed from `text`) with
  /// their memory kinds moved to `kinds`.
  static LogicalResult takeIoMemoryKinds(
      func::FuncOp func, StringRef what,
      const std::optional<std::vector<::mpmd::IndexAssignment>> &typed,
      ArrayRef<std::string> text, std::optional<std::vector<::mpmd::IndexAssignment>> &entries,
      llvm::DenseMap<int64_t, std::string> &kinds) {
    auto parsed = typedOrParsed<std::vector<::mpmd::IndexAssignment>>(typed, [&] {
      return parseIndexAssignment(text, what, [&] { return func.emitError(); });
    });
    if (failed(parsed))
      return failure();
    entries = std::move(*parsed);
    return takeMemoryKinds(func, what, *entries, kinds);
  }

private:
  std::optional<std::vector<::mpmd::IndexAssignment>> typedInputAssignment, typedOutputAssignment;
};

} // namespace

std::unique_ptr<Pass> createInferMeshAssignmentPass(const ::mpmd::PartitionOptions &options,
                                                    std::vector<::mpmd::IndexAssignment> inputs,
                                                    std::vector<::mpmd::IndexAssignment> outputs) {
  return std::make_unique<InferMeshAssignmentPass>(options, std::move(inputs), std::move(outputs));
}

} // namespace mlir::mpmd
