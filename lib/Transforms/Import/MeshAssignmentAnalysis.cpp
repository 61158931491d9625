//===- MeshAssignmentAnalysis.cpp - where unlabelled ops run ---------------===//
//
// See MeshAssignmentAnalysis.h. Nothing here changes the IR.
//
//===----------------------------------------------------------------------===//

#include "MeshAssignmentAnalysis.h"

#include "Common/Fragments.h"
#include "Common/TextOptions.h"

#include "mlir/Transforms/RegionUtils.h"
#include "llvm/ADT/StringSwitch.h"

namespace mlir::mpmd {

namespace {
/// The tensor type of a function input, on a mesh or not yet (null when it
/// is neither).
RankedTensorType localTensorType(Type type) {
  if (auto meshType = dyn_cast<MeshTensorType>(type))
    return meshType.getGlobalTensorType();
  return dyn_cast<RankedTensorType>(type);
}
} // namespace

bool isMeshless(Operation *op) {
  return !isa<AssignOp, UnassignOp, FragmentOp, TransferOp, CallOp, func::ReturnOp>(op);
}

std::optional<ReductionType> reductionKindOf(Operation *op) {
  if (op->getNumOperands() != 2 || op->getNumResults() != 1 || op->getNumRegions() != 0)
    return std::nullopt;
  return llvm::StringSwitch<std::optional<ReductionType>>(op->getName().getStringRef())
      .Case("stablehlo.add", ReductionType::kAdd)
      .Case("stablehlo.maximum", ReductionType::kMax)
      .Case("stablehlo.minimum", ReductionType::kMin)
      .Case("stablehlo.multiply", ReductionType::kMul)
      .Case("stablehlo.or", ReductionType::kOr)
      .Case("stablehlo.and", ReductionType::kAnd)
      .Default(std::nullopt);
}

MeshAssignmentAnalysis::MeshAssignmentAnalysis(func::FuncOp func, TopologyAttr topology,
                                               const MeshInferenceOptions &options)
    : func(func), block(func.getBody().front()), topology(topology), options(options),
      numMeshes(topology.getMeshes().size()) {
  allMeshes = numMeshes >= 64 ? ~MeshSet(0) : (MeshSet(1) << numMeshes) - 1;
}

//===----------------------------------------------------------------------===//
// Queries
//===----------------------------------------------------------------------===//

StringRef MeshAssignmentAnalysis::meshName(int64_t mesh) const {
  return topology.getMeshes()[mesh].getName();
}

int64_t MeshAssignmentAnalysis::meshIndexOf(Type meshTensorType) const {
  return getMeshIndex(topology, cast<MeshTensorType>(meshTensorType).getMeshName());
}

SmallVector<StringRef> MeshAssignmentAnalysis::meshNames(MeshSet set) const {
  SmallVector<StringRef> out;
  for (int64_t i = 0; i < numMeshes; ++i)
    if (set & (MeshSet(1) << i))
      out.push_back(meshName(i));
  return out;
}

ArrayRef<Value> MeshAssignmentAnalysis::getInputs(Operation *op) const {
  auto it = inputs.find(op);
  return it == inputs.end() ? ArrayRef<Value>() : it->second.getArrayRef();
}

MeshRole MeshAssignmentAnalysis::getRole(Operation *op) const {
  return roles.lookup(op); // kOrdinary for an op that is not meshless
}

bool MeshAssignmentAnalysis::hasRole(Operation *op, MeshRole role) const {
  auto it = roles.find(op);
  return it != roles.end() && it->second == role;
}

std::optional<int64_t> MeshAssignmentAnalysis::getOutputMesh(int64_t index) const {
  auto it = outputMesh.find(index);
  return it == outputMesh.end() ? std::nullopt : std::optional<int64_t>(it->second);
}

MeshSet MeshAssignmentAnalysis::srcOf(Value v) const {
  if (auto arg = dyn_cast<BlockArgument>(v)) {
    auto it = inputMesh.find(arg.getArgNumber());
    return it == inputMesh.end() ? allMeshes : MeshSet(1) << it->second;
  }
  if (auto unassign = v.getDefiningOp<UnassignOp>())
    return meshBit(unassign.getTensor().getType());
  auto it = src.find(v.getDefiningOp());
  return it == src.end() ? allMeshes : it->second;
}

MeshSet MeshAssignmentAnalysis::useOf(Value v) const {
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

bool MeshAssignmentAnalysis::sumsAcrossMeshes(Operation *op) const {
  return hasRole(op, MeshRole::kOrdinary) && reductionKindOf(op) == ReductionType::kAdd &&
         src.lookup(op) == 0;
}

//===----------------------------------------------------------------------===//
// Step 1: roles and source sets
//===----------------------------------------------------------------------===//

LogicalResult
MeshAssignmentAnalysis::parseIo(const std::optional<std::vector<::mpmd::IndexAssignment>> &typed,
                                ArrayRef<std::string> entries, StringRef what, int64_t count,
                                llvm::DenseMap<int64_t, int64_t> &out) {
  auto parsed = typedOrParsed<std::vector<::mpmd::IndexAssignment>>(typed, [&] {
    return parseIndexAssignment(entries, what, [&] { return func.emitError(); });
  });
  if (failed(parsed))
    return failure();
  for (const ::mpmd::IndexAssignment &entry : *parsed) {
    if (failed(checkIndexAssignmentEntry(func, topology, entry, what, count)))
      return failure();
    out[entry.index] = getMeshIndex(topology, entry.mesh);
  }
  return success();
}

LogicalResult checkIndexAssignmentEntry(func::FuncOp func, TopologyAttr topology,
                                        const ::mpmd::IndexAssignment &entry, StringRef what,
                                        int64_t count) {
  if (getMeshIndex(topology, entry.mesh) < 0)
    return func.emitError() << what << " " << entry.index << " is assigned to mesh \""
                            << entry.mesh << "\" which is not in the topology";
  if (entry.index >= count)
    return func.emitError() << what << " assignment names index " << entry.index << " but @"
                            << func.getSymName() << " has only " << count << " " << what << "s";
  return success();
}

/// An `mpmd.call` is placed with its callee (MeshInferenceAcrossCalls.h):
/// by the time a function is inferred, its calls take and return mesh
/// tensors, as fragments do. One that still passes local tensors (with
/// `annotate-only`, which changes no signature) is an error unless
/// `allowLocalCalls`.
LogicalResult MeshAssignmentAnalysis::rejectLocalCalls() {
  if (options.allowLocalCalls)
    return success();
  bool calls = false;
  for (CallOp call : block.getOps<CallOp>()) {
    auto local = [](Type t) { return !isa<MeshTensorType>(t); };
    if (llvm::none_of(call->getOperandTypes(), local) &&
        llvm::none_of(call->getResultTypes(), local))
      continue;
    call.emitError() << "'mpmd.call' to @" << call.getCallee()
                     << " passes tensors that are not on a mesh: annotate-only does not place "
                        "calls (it changes no signature); run mesh inference without it, or "
                        "inline the calls first (-mpmd-call-inline)";
    calls = true;
  }
  return failure(calls);
}

/// Whether an operand of `op` is a cross-mesh reduction of the same kind
/// (`((a + b) + c)` with a, b and c on different meshes is one sum).
bool MeshAssignmentAnalysis::extendsReduction(Operation *op, ReductionType kind) const {
  return llvm::any_of(op->getOperands(), [&](Value v) {
    Operation *def = v.getDefiningOp();
    return def && hasRole(def, MeshRole::kReduce) && reductionKinds.lookup(def) == kind;
  });
}

LogicalResult MeshAssignmentAnalysis::computeSources() {
  if (numMeshes > 64)
    return func.emitError() << "at most 64 meshes are supported, the topology has " << numMeshes;
  auto returnOp = cast<func::ReturnOp>(block.getTerminator());
  if (failed(parseIo(*options.typedInputAssignment, options.inputAssignment, "input",
                     block.getNumArguments(), inputMesh)) ||
      failed(parseIo(*options.typedOutputAssignment, options.outputAssignment, "output",
                     returnOp.getNumOperands(), outputMesh)) ||
      failed(rejectLocalCalls()))
    return failure();
  for (Operation &op : block) {
    if (!isMeshless(&op))
      continue;
    meshless.push_back(&op);
    // Its inputs: operands and values captured by its regions.
    llvm::SetVector<Value> &in = inputs[&op];
    in.insert(op.getOperands().begin(), op.getOperands().end());
    getUsedValuesDefinedAbove(op.getRegions(), in);
    computeRoleAndSource(&op);
  }
  return success();
}

/// Whether `op` is an optimization barrier whose results only ops already on
/// a mesh read (labelled computations, through `mpmd.assign`): the barrier
/// `jax.checkpoint` puts over the inputs of a recomputation.
static bool isLabelledBarrier(Operation *op) {
  return isOptimizationBarrier(op) && !op->use_empty() &&
         llvm::all_of(op->getUsers(), [](Operation *user) { return isa<AssignOp>(user); });
}

void MeshAssignmentAnalysis::computeRoleAndSource(Operation *op) {
  bool inferReductions = options.inferCrossMeshReductions || options.inferTransfers;
  MeshSet all = allMeshes, any = 0;
  for (Value v : inputs[op]) {
    all &= srcOf(v);
    any |= srcOf(v);
  }
  MeshRole role = MeshRole::kOrdinary;
  if (isa<BroadcastOp>(op)) {
    role = MeshRole::kBroadcast;
  } else if (isLabelledBarrier(op)) {
    role = MeshRole::kBarrier;
  } else if (auto reduce = dyn_cast<ReduceOp>(op)) {
    role = MeshRole::kReduce;
    reductionKinds[op] = reduce.getReduction().getReductionType();
  } else if (std::optional<ReductionType> kind = reductionKindOf(op);
             kind && op->getOperand(0) != op->getOperand(1) &&
             (all == 0 || (options.inferCrossMeshReductions && extendsReduction(op, *kind)))) {
    // (`x * x` combines one value, not values from several meshes; a sum
    // that adds one more term to a cross-mesh sum is part of it.)
    if (inferReductions) {
      role = MeshRole::kReduce;
      reductionKinds[op] = *kind;
    } else if (*kind == ReductionType::kAdd &&
               llvm::all_of(op->getUsers(), [](Operation *u) { return isa<AssignOp>(u); })) {
      role = MeshRole::kFanInAdd;
    }
  }
  roles[op] = role;
  if (role == MeshRole::kReduce) {
    reductionDerived.insert(op);
  } else if (role == MeshRole::kOrdinary) {
    bool derived = false, only = true;
    for (Value v : inputs[op]) {
      Operation *def = v.getDefiningOp();
      if (def && reductionDerived.contains(def))
        derived = true;
      else if (srcOf(v) != allMeshes)
        only = false;
    }
    if (derived && only)
      reductionDerived.insert(op);
  }
  switch (role) {
  case MeshRole::kBroadcast: src[op] = allMeshes; break;
  case MeshRole::kReduce: src[op] = any; break;
  default: src[op] = all; break;
  }
}

//===----------------------------------------------------------------------===//
// Step 2: placement by use
//===----------------------------------------------------------------------===//

void MeshAssignmentAnalysis::placeByUse() {
  for (Operation *op : llvm::reverse(meshless)) {
    MeshSet use = 0;
    for (Value r : op->getResults())
      use |= useOf(r);
    decide(op, use);
  }
}

void MeshAssignmentAnalysis::decide(Operation *op, MeshSet use) {
  MeshSet from = src[op];
  MeshSet chosen;
  switch (roles[op]) {
  case MeshRole::kBroadcast:
    chosen = use; // An alias: its operand is moved to every user.
    break;
  case MeshRole::kReduce: {
    MeshSet both = use & from;
    chosen = MeshSet(1) << (both ? lowestMesh(both)
                            : use ? lowestMesh(use)
                            : (from && from != allMeshes) ? lowestMesh(from) : 0);
    break;
  }
  case MeshRole::kBarrier:
    if (use) {
      chosen = use; // An alias: its operands are moved to its readers.
      break;
    }
    [[fallthrough]];
  default:
    if (from == allMeshes)
      // Input-only: cloned to every user. Used nowhere (only returned), it
      // floats (0) until the inputs have their homes: see placeFloating.
      chosen = use;
    else if (from != 0)
      chosen = (use & from) ? (use & from) : MeshSet(1) << lowestMesh(from);
    else if (llvm::popcount(use) >= 1)
      chosen = MeshSet(1) << lowestMesh(use);
    else
      chosen = MeshSet(1) << firstOperandMesh(op);
    break;
  }
  placement[op] = chosen;
}

/// The lowest mesh any operand of `op` lives on (0 if none does).
int64_t MeshAssignmentAnalysis::firstOperandMesh(Operation *op) const {
  MeshSet any = 0;
  for (Value v : getInputs(op))
    if (srcOf(v) != allMeshes)
      any |= srcOf(v);
  return any ? lowestMesh(any) : 0;
}

//===----------------------------------------------------------------------===//
// Step 3: inputs, slices of inputs, floating ops
//===----------------------------------------------------------------------===//

LogicalResult MeshAssignmentAnalysis::placeInputsAndFloating() {
  if (failed(placeInputs()))
    return failure();
  sliceWhereInputsLive();
  placeFloating();
  return success();
}

/// Function inputs live on their assigned mesh, else on the first mesh (in
/// topology order) using them.
LogicalResult MeshAssignmentAnalysis::placeInputs() {
  for (BlockArgument arg : block.getArguments()) {
    if (isa<MeshTensorType>(arg.getType())) {
      inputHome[arg.getArgNumber()] = meshIndexOf(arg.getType()); // Already placed.
      continue;
    }
    if (!isa<RankedTensorType>(arg.getType()))
      return func.emitError() << "input #" << arg.getArgNumber() << " of type " << arg.getType()
                              << " cannot be placed on a mesh: only ranked tensors can be";
    auto it = inputMesh.find(arg.getArgNumber());
    MeshSet use = useOf(arg);
    inputHome[arg.getArgNumber()] =
        it != inputMesh.end() ? it->second : (use ? lowestMesh(use) : 0);
  }
  return success();
}

/// A slice (`stablehlo.slice`, `stablehlo.dynamic_slice`) of a function
/// input, used on meshes other than the one the input lives on, runs where
/// the input lives instead (the input-only ops it takes, e.g. its offsets,
/// are cloned there too): only the slice crosses to the meshes that use it,
/// not the whole input (e.g. a stacked batch of which the first mesh uses
/// the inputs and the last the labels).
void MeshAssignmentAnalysis::sliceWhereInputsLive() {
  for (Operation *op : meshless) {
    StringRef name = op->getName().getStringRef();
    if (roles[op] != MeshRole::kOrdinary || src[op] != allMeshes || op->getNumResults() != 1 ||
        op->getNumOperands() == 0 ||
        (name != "stablehlo.slice" && name != "stablehlo.dynamic_slice"))
      continue;
    auto arg = dyn_cast<BlockArgument>(op->getOperand(0));
    auto result = dyn_cast<RankedTensorType>(op->getResult(0).getType());
    if (!arg || arg.getOwner() != op->getBlock() || !result || !result.hasStaticShape())
      continue;
    RankedTensorType input = localTensorType(arg.getType());
    MeshSet home = MeshSet(1) << getInputHome(arg);
    if (!input || !input.hasStaticShape() || result.getNumElements() >= input.getNumElements() ||
        placement[op] == 0 || placement[op] == home)
      continue;
    placement[op] = home;
    slicesOfInputs.insert(op->getResult(0));
    for (Value v : op->getOperands().drop_front())
      replaceInputOnly(v);
  }
}

/// Places the input-only computation of `v` again where its results are
/// used (after a user moved).
void MeshAssignmentAnalysis::replaceInputOnly(Value v) {
  Operation *def = v.getDefiningOp();
  if (!def || !hasRole(def, MeshRole::kOrdinary) || src[def] != allMeshes)
    return;
  MeshSet use = 0;
  for (Value r : def->getResults())
    use |= useOf(r);
  if (use == placement[def])
    return;
  placement[def] = use;
  for (Value in : inputs[def])
    replaceInputOnly(in);
}

/// Input-only ops used on no mesh (e.g. the update of a parameter that gets
/// no gradient) run on the mesh of their inputs, once inputs have homes;
/// they did not count as uses when the homes were chosen. Forward, they take
/// the mesh of inputs that have one; backward, the rest (e.g. constants)
/// follow their users; mesh 0 if nothing says otherwise.
void MeshAssignmentAnalysis::placeFloating() {
  llvm::DenseSet<Operation *> floating;
  for (Operation *op : meshless)
    if (placement[op] == 0)
      floating.insert(op);
  for (Operation *op : meshless) {
    if (!floating.contains(op))
      continue;
    MeshSet homes = 0;
    for (Value v : inputs[op]) {
      if (auto arg = dyn_cast<BlockArgument>(v))
        homes |= MeshSet(1) << getInputHome(arg);
      else if (Operation *def = v.getDefiningOp(); def && placement.count(def))
        homes |= placement[def];
    }
    if (homes)
      placement[op] = MeshSet(1) << lowestMesh(homes);
  }
  for (Operation *op : llvm::reverse(meshless)) {
    if (!floating.contains(op) || placement[op] != 0)
      continue;
    MeshSet use = 0;
    for (Value r : op->getResults())
      use |= useOf(r);
    placement[op] = use ? use : MeshSet(1);
  }
}

} // namespace mlir::mpmd
