//===- InferMeshAssignment.cpp - place unlabelled ops on meshes -------------===//
//
// Mesh sets are bit sets over the topology (bit i = mesh i). For every op not
// yet on a mesh ("meshless"):
//   src(op) = meshes its inputs are available on without a transfer
//             (intersection over its inputs; function inputs and constants:
//             every mesh; a reduction: the union of its operands' meshes);
//   use(op) = meshes its results are consumed on, from the consumers' own
//             placement (computed in reverse program order).
// Placement: input-only computations are cloned to every mesh that uses
// them; anything else runs where its inputs are (on a used mesh if possible),
// so values cross meshes at label boundaries. Every transfer is classified as
// implied (a labelled boundary, an input copied to another mesh, a broadcast,
// a reduction, a gradient summed for one labelled consumer) or inferred;
// inferred transfers are errors unless `infer-transfers` is set. With
// `infer-cross-mesh-reductions`, a value computed from cross-mesh reductions
// alone (a global norm) may go to every mesh that reads it.
//
//===----------------------------------------------------------------------===//

#include "Common/Fragments.h"
#include "Common/PassBase.h"
#include "Common/TextOptions.h"
#include "mpmd/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Transforms/RegionUtils.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringSwitch.h"

namespace mlir::mpmd {
#define GEN_PASS_DEF_INFERMESHASSIGNMENTPASS
#include "mpmd/Transforms/Passes.h.inc"

namespace {

using MeshSet = uint64_t;

bool isMeshless(Operation *op) {
  return !isa<AssignOp, UnassignOp, FragmentOp, TransferOp, func::ReturnOp>(op);
}

int lowestMesh(MeshSet set) { return llvm::countr_zero(set); }

/// How an op takes part in mesh inference.
enum class Role {
  kOrdinary,  // Placed by the rules; its operand transfers are inferred.
  kBroadcast, // `mpmd.broadcast`: an alias that may be moved to any mesh.
  kReduce,    // A cross-mesh reduction: runs once, operands moved to it.
  kFanInAdd,  // A gradient summed from several meshes for labelled consumers.
};

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

/// The reduction kind of an elementwise StableHLO op that can be inferred as a
/// cross-mesh reduction.
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

/// What one run of the pass asks for (its options), shared by every function
/// it visits.
struct InferenceOptions {
  bool inferTransfers = false;
  bool inferCrossMeshReductions = false;
  bool annotateOnly = false;
  /// The input and output assignment given typed (by the driver); else the
  /// text entries are parsed.
  const std::optional<std::vector<::mpmd::IndexAssignment>> *typedInputAssignment = nullptr;
  const std::optional<std::vector<::mpmd::IndexAssignment>> *typedOutputAssignment = nullptr;
  ArrayRef<std::string> inputAssignment, outputAssignment;
  /// The pass's command line name, recorded on the fragments it creates.
  StringRef passArgument;
};

/// Mesh inference on one function. Everything it learns (placements, the
/// values it moved to each mesh) lives here and is dropped with it, so no
/// value or op of one function is ever looked up while inferring the next.
class MeshInference {
public:
  MeshInference(func::FuncOp func, TopologyAttr topology, const InferenceOptions &options)
      : func(func), topology(topology), inferTransfers(options.inferTransfers),
        inferCrossMeshReductions(options.inferCrossMeshReductions),
        annotateOnly(options.annotateOnly),
        typedInputAssignment(*options.typedInputAssignment),
        typedOutputAssignment(*options.typedOutputAssignment),
        inputAssignment(options.inputAssignment), outputAssignment(options.outputAssignment),
        passArgument(options.passArgument) {}

private:
  func::FuncOp func;
  TopologyAttr topology;
  bool inferTransfers, inferCrossMeshReductions, annotateOnly;
  const std::optional<std::vector<::mpmd::IndexAssignment>> &typedInputAssignment,
      &typedOutputAssignment;
  ArrayRef<std::string> inputAssignment, outputAssignment;
  StringRef passArgument;

  int64_t numMeshes = 0;
  MeshSet allMeshes = 0;
  llvm::DenseMap<int64_t, int64_t> inputMesh, outputMesh; // index -> mesh index
  llvm::DenseMap<Operation *, llvm::SetVector<Value>> inputs;
  llvm::DenseMap<Operation *, Role> roles;
  llvm::DenseMap<Operation *, ReductionType> reductionKinds;
  llvm::DenseMap<Operation *, MeshSet> src, placement;
  /// Ops computing from cross-mesh reductions' results (and input-only
  /// values) alone: with `infer-cross-mesh-reductions` their results go to
  /// every mesh that reads them, as an all-reduce's would (a global norm).
  llvm::DenseSet<Operation *> reductionDerived;
  llvm::DenseMap<Value, SmallVector<Value>> onMesh; // local value -> per-mesh value
  // Inferred transfers already reported, as (value, mesh).
  llvm::DenseSet<std::pair<Value, int64_t>> reported;
  // Slices of function inputs that run where the input lives (see
  // sliceWhereInputsLive): moving them is implied, as moving the input is.
  llvm::DenseSet<Value> slicesOfInputs;
  bool failedTransfers = false;

  StringRef meshName(int64_t i) { return topology.getMeshes()[i].getName(); }

  std::string describeSet(MeshSet set) {
    std::string s;
    for (int64_t i = 0; i < numMeshes; ++i)
      if (set & (MeshSet(1) << i))
        s += (s.empty() ? "\"" : ", \"") + meshName(i).str() + "\"";
    return s.empty() ? "none" : s;
  }

  int64_t meshIndexOf(Type meshTensorType) {
    return getMeshIndex(topology, cast<MeshTensorType>(meshTensorType).getMeshName());
  }
  MeshSet meshBit(Type meshTensorType) { return MeshSet(1) << meshIndexOf(meshTensorType); }

  LogicalResult parseIo(const std::optional<std::vector<::mpmd::IndexAssignment>> &typed,
                        ArrayRef<std::string> entries, StringRef what, int64_t count,
                        llvm::DenseMap<int64_t, int64_t> &out) {
    auto parsed = typedOrParsed<std::vector<::mpmd::IndexAssignment>>(typed, [&] {
      return parseIndexAssignment(entries, what, [&] { return func.emitError(); });
    });
    if (failed(parsed))
      return failure();
    for (const auto &[index, mesh] : *parsed) {
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

  //===--------------------------------------------------------------------===//
  // Analysis
  //===--------------------------------------------------------------------===//

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

  /// Whether an operand of `op` is a cross-mesh reduction of the same kind
  /// (`((a + b) + c)` with a, b and c on different meshes is one sum).
  bool extendsReduction(Operation *op, ReductionType kind) {
    return llvm::any_of(op->getOperands(), [&](Value v) {
      Operation *def = v.getDefiningOp();
      auto role = def ? roles.find(def) : roles.end();
      return role != roles.end() && role->second == Role::kReduce &&
             reductionKinds.lookup(def) == kind;
    });
  }

  /// Splits every unlabelled `stablehlo.optimization_barrier` whose operands
  /// come from different meshes into one barrier per source set. Each result
  /// is its operand, and programs of different meshes share no schedule that
  /// a joint barrier could order: `jax.checkpoint` (prevent_cse) puts such a
  /// barrier over a labelled stage's residuals and the cotangent from the
  /// next mesh. Returns whether anything was split.
  bool splitBarriers(ArrayRef<Operation *> meshless) {
    bool changed = false;
    for (Operation *op : meshless) {
      if (op->getName().getStringRef() != "stablehlo.optimization_barrier" ||
          op->getNumOperands() < 2 || op->getNumRegions() != 0)
        continue;
      llvm::MapVector<MeshSet, SmallVector<unsigned>> groups;
      for (auto [i, v] : llvm::enumerate(op->getOperands()))
        groups[srcOf(v)].push_back(i);
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

  void computeSources(ArrayRef<Operation *> meshless) {
    bool inferReductions = inferCrossMeshReductions || inferTransfers;
    for (Operation *op : meshless) {
      MeshSet all = allMeshes, any = 0;
      for (Value v : inputs[op]) {
        all &= srcOf(v);
        any |= srcOf(v);
      }
      Role role = Role::kOrdinary;
      if (isa<BroadcastOp>(op)) {
        role = Role::kBroadcast;
      } else if (auto reduce = dyn_cast<ReduceOp>(op)) {
        role = Role::kReduce;
        reductionKinds[op] = reduce.getReduction().getReductionType();
      } else if (std::optional<ReductionType> kind = reductionKindOf(op);
                 kind && op->getOperand(0) != op->getOperand(1) &&
                 (all == 0 || (inferCrossMeshReductions && extendsReduction(op, *kind)))) {
        // (`x * x` combines one value, not values from several meshes; a
        // sum that adds one more term to a cross-mesh sum is part of it.)
        if (inferReductions) {
          role = Role::kReduce;
          reductionKinds[op] = *kind;
        } else if (*kind == ReductionType::kAdd && llvm::all_of(op->getUsers(), [](Operation *u) {
                     return isa<AssignOp>(u);
                   })) {
          role = Role::kFanInAdd;
        }
      }
      roles[op] = role;
      if (role == Role::kReduce) {
        reductionDerived.insert(op);
      } else if (role == Role::kOrdinary) {
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
      case Role::kBroadcast: src[op] = allMeshes; break;
      case Role::kReduce: src[op] = any; break;
      default: src[op] = all; break;
      }
    }
  }

  void decide(Operation *op, MeshSet use) {
    MeshSet from = src[op];
    MeshSet chosen;
    switch (roles[op]) {
    case Role::kBroadcast:
      chosen = use; // An alias: its operand is moved to every user.
      break;
    case Role::kReduce: {
      MeshSet both = use & from;
      chosen = MeshSet(1) << (both ? lowestMesh(both)
                              : use ? lowestMesh(use)
                              : (from && from != allMeshes) ? lowestMesh(from) : 0);
      break;
    }
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

  /// A slice (`stablehlo.slice`, `stablehlo.dynamic_slice`) of a function
  /// input, used on meshes other than the one the input lives on, runs where
  /// the input lives instead (the input-only ops it takes, e.g. its offsets,
  /// are cloned there too): only the slice crosses to the meshes that use it,
  /// not the whole input (e.g. a stacked batch of which the first mesh uses
  /// the inputs and the last the labels).
  void sliceWhereInputsLive(ArrayRef<Operation *> meshless) {
    for (Operation *op : meshless) {
      StringRef name = op->getName().getStringRef();
      if (roles[op] != Role::kOrdinary || src[op] != allMeshes || op->getNumResults() != 1 ||
          op->getNumOperands() == 0 ||
          (name != "stablehlo.slice" && name != "stablehlo.dynamic_slice"))
        continue;
      auto arg = dyn_cast<BlockArgument>(op->getOperand(0));
      auto result = dyn_cast<RankedTensorType>(op->getResult(0).getType());
      if (!arg || arg.getOwner() != op->getBlock() || !isa<MeshTensorType>(arg.getType()) ||
          !result || !result.hasStaticShape())
        continue;
      RankedTensorType input = cast<MeshTensorType>(arg.getType()).getGlobalTensorType();
      MeshSet home = meshBit(arg.getType());
      if (!input.hasStaticShape() || result.getNumElements() >= input.getNumElements() ||
          placement[op] == 0 || placement[op] == home)
        continue;
      placement[op] = home;
      slicesOfInputs.insert(op->getResult(0));
      for (Value v : op->getOperands().drop_front())
        replaceInputOnly(v, *op->getBlock());
    }
  }

  /// Places the input-only computation of `v` again where its results are
  /// used (after a user moved).
  void replaceInputOnly(Value v, Block &block) {
    Operation *def = v.getDefiningOp();
    if (!def || !roles.count(def) || roles[def] != Role::kOrdinary || src[def] != allMeshes)
      return;
    MeshSet use = 0;
    for (Value r : def->getResults())
      use |= useOf(r, block);
    if (use == placement[def])
      return;
    placement[def] = use;
    for (Value in : inputs[def])
      replaceInputOnly(in, block);
  }

  /// The lowest mesh any operand of `op` lives on (0 if none does).
  int firstOperandMesh(Operation *op) {
    MeshSet any = 0;
    for (Value v : inputs[op])
      if (srcOf(v) != allMeshes)
        any |= srcOf(v);
    return any ? lowestMesh(any) : 0;
  }

  /// Input-only ops used on no mesh (e.g. the update of a parameter that gets
  /// no gradient) run on the mesh of their inputs, once inputs have homes;
  /// they did not count as uses when the homes were chosen. Forward, they take
  /// the mesh of inputs that have one; backward, the rest (e.g. constants)
  /// follow their users; mesh 0 if nothing says otherwise.
  void placeFloating(ArrayRef<Operation *> meshless, Block &block) {
    llvm::DenseSet<Operation *> floating;
    for (Operation *op : meshless)
      if (placement[op] == 0)
        floating.insert(op);
    for (Operation *op : meshless) {
      if (!floating.contains(op))
        continue;
      MeshSet homes = 0;
      for (Value v : inputs[op]) {
        if (isa<BlockArgument>(v))
          homes |= MeshSet(1) << homeOf(v);
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
        use |= useOf(r, block);
      placement[op] = use ? use : MeshSet(1);
    }
  }

  //===--------------------------------------------------------------------===//
  // Rewrite
  //===--------------------------------------------------------------------===//

  /// A description of where `v` comes from, for diagnostics.
  std::string describeValue(Value v) {
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

  /// `v` on mesh `mesh`, transferring it there if needed. `consumer` is the op
  /// that needs it (for diagnostics); `implied` says whether a transfer is
  /// implied by the labels (else it is inferred).
  Value getOnMesh(Value v, int64_t mesh, Operation *consumer, bool implied) {
    SmallVector<Value> &slots = onMesh[v];
    if (slots.empty())
      slots.resize(numMeshes);
    if (slots[mesh])
      return slots[mesh];
    // Broadcasts are aliases of their operand that may go anywhere.
    if (auto broadcast = v.getDefiningOp<BroadcastOp>())
      return slots[mesh] = getOnMesh(broadcast.getTensor(), mesh, consumer, /*implied=*/true);
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
      slots[sourceMesh] = source;
      if (sourceMesh == mesh)
        return source;
    }
    bool fromReduction = inferCrossMeshReductions && v.getDefiningOp() &&
                         reductionDerived.contains(v.getDefiningOp());
    if (!implied && !fromReduction && !isa<BlockArgument>(v) && !slicesOfInputs.contains(v) &&
        !inferTransfers && reported.insert({v, mesh}).second) {
      failedTransfers = true;
      InFlightDiagnostic diag = consumer->emitError()
                                << "'" << consumer->getName() << "' on mesh \"" << meshName(mesh)
                                << "\" needs " << describeValue(v) << ", which is on mesh \""
                                << meshName(sourceMesh) << "\": no label implies this transfer; ";
      if (sumsAcrossMeshes(consumer))
        // The gradient of a weight used on two meshes (a tied embedding):
        // a cross-mesh reduction, not a transfer, is what it needs.
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
    OpBuilder builder(func.getContext());
    builder.setInsertionPointAfterValue(source);
    auto type = MeshTensorType::get(func.getContext(), meshName(mesh),
                                    cast<MeshTensorType>(source.getType()).getGlobalTensorType());
    return slots[mesh] = builder.create<TransferOp>(source.getLoc(), type, source).getResult();
  }

  /// Whether `op` is an unlabelled `stablehlo.add` of values on different
  /// meshes that `infer-cross-mesh-reductions` would make one reduction.
  bool sumsAcrossMeshes(Operation *op) {
    auto role = roles.find(op);
    return role != roles.end() && role->second == Role::kOrdinary &&
           reductionKindOf(op) == ReductionType::kAdd && src.lookup(op) == 0;
  }

  /// The mesh an existing local value already lives on (first one found).
  int64_t homeOf(Value v) {
    if (isa<MeshTensorType>(v.getType()))
      return meshIndexOf(v.getType());
    if (auto unassign = v.getDefiningOp<UnassignOp>())
      return meshIndexOf(unassign.getTensor().getType());
    if (auto broadcast = v.getDefiningOp<BroadcastOp>())
      return homeOf(broadcast.getTensor());
    for (auto [i, s] : llvm::enumerate(onMesh[v]))
      if (s)
        return i;
    return lowestMesh(placement.lookup(v.getDefiningOp()));
  }

  /// Creates an inferred fragment on `mesh` taking `operands` (values on the
  /// mesh); `build` fills its body from the block arguments and returns the
  /// values to return.
  FragmentOp createFragment(Operation *anchor, int64_t mesh, ValueRange operands,
                            TypeRange localResultTypes,
                            function_ref<SmallVector<Value>(OpBuilder &, ValueRange)> build) {
    MLIRContext *ctx = func.getContext();
    SmallVector<Type> resultTypes;
    for (Type t : localResultTypes)
      resultTypes.push_back(MeshTensorType::get(ctx, meshName(mesh), cast<RankedTensorType>(t)));
    OpBuilder builder(anchor);
    auto fragment = builder.create<FragmentOp>(anchor->getLoc(), resultTypes, operands,
                                               builder.getArrayAttr({}),
                                               builder.getStringAttr(meshName(mesh)),
                                               IntegerAttr(), nullptr, nullptr);
    fragment->setAttr(kInferredByAttr, builder.getStrArrayAttr({passArgument}));
    Block *block = builder.createBlock(&fragment.getRegion());
    for (Value v : operands)
      block->addArgument(cast<MeshTensorType>(v.getType()).getGlobalTensorType(), v.getLoc());
    SmallVector<Value> returned = build(builder, block->getArguments());
    builder.create<ReturnOp>(anchor->getLoc(), returned);
    return fragment;
  }

  void setOnMesh(Operation *op, int64_t mesh, ValueRange values) {
    for (auto [r, v] : llvm::zip(op->getResults(), values)) {
      SmallVector<Value> &slots = onMesh[r];
      slots.resize(numMeshes);
      slots[mesh] = v;
    }
  }

  LogicalResult checkTypes(Operation *op) {
    for (Value r : op->getResults())
      if (!isa<RankedTensorType>(r.getType()))
        return op->emitError() << "cannot place '" << op->getName() << "' on a mesh: its result of type "
                               << r.getType() << " is not a ranked tensor";
    for (Value v : inputs[op])
      if (!isa<RankedTensorType, MeshTensorType>(v.getType()))
        return op->emitError() << "cannot place '" << op->getName() << "' on a mesh: its operand of type "
                               << v.getType() << " is not a ranked tensor";
    return success();
  }

  LogicalResult rewrite(Operation *op) {
    Role role = roles[op];
    if (role == Role::kBroadcast)
      return success(); // Resolved by its users through getOnMesh.
    if (failed(checkTypes(op)))
      return failure();
    for (int64_t mesh = 0; mesh < numMeshes; ++mesh) {
      if (!(placement[op] & (MeshSet(1) << mesh)))
        continue;
      SmallVector<Value> operands;
      for (Value v : inputs[op])
        operands.push_back(getOnMesh(v, mesh, op, /*implied=*/role != Role::kOrdinary));
      FragmentOp fragment;
      if (role == Role::kReduce) {
        std::optional<StringRef> combiner = combinerOp(reductionKinds[op]);
        fragment = createFragment(op, mesh, operands, op->getResultTypes(),
                                  [&](OpBuilder &b, ValueRange args) -> SmallVector<Value> {
          // Combine the op's operands in order (`inputs[op]` holds each value once).
          IRMapping mapping;
          for (auto [v, arg] : llvm::zip(inputs[op], args))
            mapping.map(v, arg);
          SmallVector<Value> combined = llvm::map_to_vector(
              op->getOperands(), [&](Value v) { return mapping.lookup(v); });
          Value acc = combined.front();
          for (Value next : ArrayRef<Value>(combined).drop_front()) {
            OperationState state(op->getLoc(), *combiner, ValueRange{acc, next},
                                 TypeRange{acc.getType()}, {});
            acc = b.create(state)->getResult(0);
          }
          return {acc};
        });
      } else {
        fragment = createFragment(op, mesh, operands, op->getResultTypes(),
                                  [&](OpBuilder &b, ValueRange args) -> SmallVector<Value> {
          IRMapping mapping;
          for (auto [v, arg] : llvm::zip(inputs[op], args))
            mapping.map(v, arg);
          return llvm::to_vector_of<Value>(b.clone(*op, mapping)->getResults());
        });
      }
      setOnMesh(op, mesh, fragment.getResults());
    }
    return success();
  }

public:
  /// Infers the meshes of `func`; fails after reporting errors.
  LogicalResult run() {
    numMeshes = topology.getMeshes().size();
    if (numMeshes > 64) {
      func.emitError() << "at most 64 meshes are supported, the topology has " << numMeshes;
      return failure();
    }
    allMeshes = numMeshes == 64 ? ~MeshSet(0) : (MeshSet(1) << numMeshes) - 1;
    Block &block = func.getBody().front();
    auto returnOp = cast<func::ReturnOp>(block.getTerminator());
    if (failed(parseIo(typedInputAssignment, inputAssignment, "input", block.getNumArguments(),
                       inputMesh)) ||
        failed(parseIo(typedOutputAssignment, outputAssignment, "output",
                       returnOp.getNumOperands(), outputMesh)))
      return failure();

    // An `mpmd.call` would need its callee's signature changed together with
    // every call site; this pass places ops of one function, so calls must be
    // inlined first (the import pipeline does it before mesh inference).
    bool calls = false;
    for (CallOp call : block.getOps<CallOp>()) {
      call.emitError() << "'mpmd.call' to @" << call.getCallee()
                       << " is not supported by mesh inference: inline the calls first "
                          "(-mpmd-call-inline, as -mpmd-import-pipeline does before it)";
      calls = true;
    }
    if (calls)
      return failure();

    // Inputs of every meshless op: operands and values captured by its regions.
    SmallVector<Operation *> meshless;
    auto analyse = [&] {
      meshless.clear();
      inputs.clear();
      roles.clear();
      reductionKinds.clear();
      src.clear();
      reductionDerived.clear();
      for (Operation &op : block)
        if (isMeshless(&op)) {
          meshless.push_back(&op);
          llvm::SetVector<Value> &in = inputs[&op];
          in.insert(op.getOperands().begin(), op.getOperands().end());
          getUsedValuesDefinedAbove(op.getRegions(), in);
        }
      computeSources(meshless);
    };
    analyse();
    if (splitBarriers(meshless))
      analyse();
    for (Operation *op : llvm::reverse(meshless)) {
      MeshSet use = 0;
      for (Value r : op->getResults())
        use |= useOf(r, block);
      decide(op, use);
    }
    if (annotateOnly) {
      Builder b(func.getContext());
      auto names = [&](MeshSet set) {
        SmallVector<StringRef> out;
        for (int64_t i = 0; i < numMeshes; ++i)
          if (set & (MeshSet(1) << i))
            out.push_back(meshName(i));
        return b.getStrArrayAttr(out);
      };
      for (Operation *op : meshless) {
        MeshSet use = 0;
        for (Value r : op->getResults())
          use |= useOf(r, block);
        op->setAttr(kSrcSetAttr, names(src[op]));
        op->setAttr(kUseSetAttr, names(use));
        op->setAttr(kPlacementAttr, names(placement[op]));
      }
      return success();
    }

    // Function inputs live on the first mesh (in topology order) using them.
    MLIRContext *ctx = func.getContext();
    for (BlockArgument arg : block.getArguments()) {
      if (isa<MeshTensorType>(arg.getType()))
        continue; // Already placed.
      auto type = dyn_cast<RankedTensorType>(arg.getType());
      if (!type) {
        func.emitError() << "input #" << arg.getArgNumber() << " of type " << arg.getType()
                         << " cannot be placed on a mesh: only ranked tensors can be";
        return failure();
      }
      auto it = inputMesh.find(arg.getArgNumber());
      MeshSet use = useOf(arg, block);
      int64_t home = it != inputMesh.end() ? it->second : (use ? lowestMesh(use) : 0);
      arg.setType(MeshTensorType::get(ctx, meshName(home), type));
      onMesh[arg].resize(numMeshes);
      onMesh[arg][home] = arg;
    }

    sliceWhereInputsLive(meshless);
    placeFloating(meshless, block);
    for (Operation *op : meshless)
      if (failed(rewrite(op)))
        return failure();
    // Values consumed by labelled computations and outputs the user placed:
    // those transfers are implied.
    for (AssignOp assign : llvm::make_early_inc_range(block.getOps<AssignOp>())) {
      assign.getResult().replaceAllUsesWith(
          getOnMesh(assign.getTensor(), meshIndexOf(assign.getType()), assign, /*implied=*/true));
      assign.erase();
    }
    for (OpOperand &operand : returnOp->getOpOperands()) {
      Value v = operand.get();
      auto it = outputMesh.find(operand.getOperandNumber());
      operand.set(getOnMesh(v, it != outputMesh.end() ? it->second : homeOf(v), returnOp,
                            /*implied=*/true));
    }
    if (failedTransfers)
      return failure();
    for (Operation *op : llvm::reverse(meshless)) {
      assert(op->use_empty() && "placed op still used");
      op->erase();
    }
    for (UnassignOp unassign : llvm::make_early_inc_range(block.getOps<UnassignOp>())) {
      if (!unassign.use_empty()) {
        unassign.emitError() << "value still used off its mesh after mesh inference";
        return failure();
      }
      unassign.erase();
    }
    func.setFunctionType(FunctionType::get(ctx, block.getArgumentTypes(), returnOp.getOperandTypes()));
    return success();
  }
};

class InferMeshAssignmentPass
    : public MpmdPass<InferMeshAssignmentPass, impl::InferMeshAssignmentPassBase> {
public:
  using MpmdPass::MpmdPass;
  /// The driver's pass: the partition's options and I/O assignment, typed.
  InferMeshAssignmentPass(const ::mpmd::PartitionOptions &options,
                          std::vector<::mpmd::IndexAssignment> inputs,
                          std::vector<::mpmd::IndexAssignment> outputs)
      : typedInputAssignment(std::move(inputs)), typedOutputAssignment(std::move(outputs)) {
    inferTransfers = options.infer_transfers;
    inferCrossMeshReductions = options.infer_cross_mesh_reductions;
  }

  void runOnFunction(func::FuncOp func, TopologyAttr topology) {
    InferenceOptions options;
    options.inferTransfers = inferTransfers;
    options.inferCrossMeshReductions = inferCrossMeshReductions;
    options.annotateOnly = annotateOnly;
    options.typedInputAssignment = &typedInputAssignment;
    options.typedOutputAssignment = &typedOutputAssignment;
    options.inputAssignment = inputAssignment;
    options.outputAssignment = outputAssignment;
    options.passArgument = getArgument();
    if (failed(MeshInference(func, topology, options).run()))
      signalPassFailure();
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
