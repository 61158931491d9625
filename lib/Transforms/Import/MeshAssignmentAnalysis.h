//===- MeshAssignmentAnalysis.h - where unlabelled ops run --------*- C++ -*-===//
//
// The analysis half of mesh inference (-mpmd-infer-mesh-assignment): for one
// function, which meshes each op not yet on a mesh ("meshless") runs on and
// where each function input lives. It reads the IR and changes nothing; the
// pass (InferMeshAssignment.cpp) applies the result. One analysis is built per
// function and dropped with it, so nothing learnt about one function is ever
// looked up while inferring another.
//
// Mesh sets are bit sets over the topology (bit i = mesh i). For every
// meshless op:
//   src(op) = meshes its inputs are available on without a transfer
//             (intersection over its inputs; function inputs and constants:
//             every mesh; a reduction: the union of its operands' meshes);
//   use(op) = meshes its results are consumed on, from the consumers' own
//             placement (computed in reverse program order).
// Placement: input-only computations are cloned to every mesh that uses
// them; anything else runs where its inputs are (on a used mesh if possible),
// so values cross meshes at label boundaries. An optimization barrier whose
// results only labelled computations read (`jax.checkpoint`'s barrier over
// what a recomputation reads) runs where it is read instead: it computes
// nothing, and on its operands' mesh each value would cross a second time.
//
//===----------------------------------------------------------------------===//

#ifndef MPMD_LIB_TRANSFORMS_IMPORT_MESHASSIGNMENTANALYSIS_H
#define MPMD_LIB_TRANSFORMS_IMPORT_MESHASSIGNMENTANALYSIS_H

#include "mpmd/Dialect/MpmdDialect.h"
#include "mpmd/Pipeline.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SetVector.h"

#include <optional>
#include <vector>

namespace mlir::mpmd {

/// A set of meshes of a topology: bit i is mesh i (at most 64 meshes).
using MeshSet = uint64_t;

/// The first mesh (lowest index) of a non-empty `set`.
inline int64_t lowestMesh(MeshSet set) { return llvm::countr_zero(set); }

/// How a meshless op takes part in mesh inference.
enum class MeshRole {
  kOrdinary,  // Placed by the rules; its operand transfers are inferred.
  kBroadcast, // `mpmd.broadcast`: an alias that may be moved to any mesh.
  kReduce,    // A cross-mesh reduction: runs once, operands moved to it.
  kFanInAdd,  // A gradient summed from several meshes for labelled consumers.
  kBarrier,   // An optimization barrier read by labelled consumers only: an
              // alias placed where it is read, its operands moved there.
};

/// Whether mesh inference places `op` (it is not already on a mesh).
bool isMeshless(Operation *op);

/// The reduction kind of an elementwise StableHLO op that can be inferred as
/// a cross-mesh reduction.
std::optional<ReductionType> reductionKindOf(Operation *op);

/// Checks one entry of an input or output assignment (`what`: "input",
/// "output") of `func`, which has `count` of them: its mesh is in `topology`
/// and its index in range; fails after an error on `func`.
LogicalResult checkIndexAssignmentEntry(func::FuncOp func, TopologyAttr topology,
                                        const ::mpmd::IndexAssignment &entry, StringRef what,
                                        int64_t count);

/// What one run of the pass asks for (its options), shared by every function
/// it visits.
struct MeshInferenceOptions {
  bool inferTransfers = false;
  bool inferCrossMeshReductions = false;
  /// The input and output assignment given typed (by the driver); else the
  /// text entries are parsed.
  const std::optional<std::vector<::mpmd::IndexAssignment>> *typedInputAssignment = nullptr;
  const std::optional<std::vector<::mpmd::IndexAssignment>> *typedOutputAssignment = nullptr;
  ArrayRef<std::string> inputAssignment, outputAssignment;
  /// Whether `mpmd.call`s may still pass local tensors (while their callees'
  /// signatures are being chosen: they are then opaque, used on no mesh and
  /// computing on any).
  bool allowLocalCalls = false;
};

/// The mesh assignment of one function, computed in three steps, each run
/// once and in order (a step that fails has reported its errors):
///   computeSources()          roles and source sets;
///   placeByUse()              placements from the uses (what annotate-only
///                             shows);
///   placeInputsAndFloating()  input homes, slices of inputs, ops used on no
///                             mesh: the complete assignment.
class MeshAssignmentAnalysis {
public:
  MeshAssignmentAnalysis(func::FuncOp func, TopologyAttr topology,
                         const MeshInferenceOptions &options);

  /// Reads the input/output assignment, rejects calls of local tensors
  /// (unless allowed), collects the meshless ops and their inputs and
  /// computes each one's role and source set.
  LogicalResult computeSources();
  /// Places every meshless op where its results are used, in reverse program
  /// order.
  void placeByUse();
  /// Chooses the home mesh of each function input (its assigned mesh, else
  /// the first mesh using it), then runs slices of inputs where the input
  /// lives and places the ops that are used on no mesh.
  LogicalResult placeInputsAndFloating();

  //===--------------------------------------------------------------------===//
  // Results
  //===--------------------------------------------------------------------===//

  func::FuncOp getFunc() const { return func; }
  const MeshInferenceOptions &getOptions() const { return options; }
  int64_t getNumMeshes() const { return numMeshes; }
  /// Every mesh of the topology (what an input or a constant is available on).
  MeshSet getAllMeshes() const { return allMeshes; }
  StringRef meshName(int64_t mesh) const;
  /// The mesh index of a `!mpmd.mesh_tensor` type.
  int64_t meshIndexOf(Type meshTensorType) const;
  /// The names of the meshes in `set`, in topology order.
  SmallVector<StringRef> meshNames(MeshSet set) const;

  /// The meshless ops, in program order.
  ArrayRef<Operation *> getMeshless() const { return meshless; }
  /// The values a meshless op reads: its operands and the values its regions
  /// capture, each once.
  ArrayRef<Value> getInputs(Operation *op) const;
  MeshRole getRole(Operation *op) const;
  /// Whether `op` is a meshless op with role `role`.
  bool hasRole(Operation *op, MeshRole role) const;
  ReductionType getReductionKind(Operation *op) const { return reductionKinds.lookup(op); }
  MeshSet getSource(Operation *op) const { return src.lookup(op); }
  /// The meshes `op` runs on (0 for an op that is not meshless).
  MeshSet getPlacement(Operation *op) const { return placement.lookup(op); }
  /// The meshes `v` is available on without a transfer.
  MeshSet srcOf(Value v) const;
  /// The meshes `v` is consumed on.
  MeshSet useOf(Value v) const;
  /// The mesh output `index` is assigned to, if any.
  std::optional<int64_t> getOutputMesh(int64_t index) const;
  /// The home mesh of a function input (after placeInputsAndFloating).
  int64_t getInputHome(BlockArgument arg) const { return inputHome.lookup(arg.getArgNumber()); }
  /// Whether `op` computes from cross-mesh reductions (and input-only
  /// values) alone.
  bool isReductionDerived(Operation *op) const { return reductionDerived.contains(op); }
  /// Whether `v` is a slice of a function input that runs where the input
  /// lives: moving it is implied, as moving the input is.
  bool isSliceOfInput(Value v) const { return slicesOfInputs.contains(v); }
  /// Whether `op` is an unlabelled `stablehlo.add` of values on different
  /// meshes that `infer-cross-mesh-reductions` would make one reduction.
  bool sumsAcrossMeshes(Operation *op) const;

private:
  MeshSet meshBit(Type meshTensorType) const { return MeshSet(1) << meshIndexOf(meshTensorType); }
  LogicalResult parseIo(const std::optional<std::vector<::mpmd::IndexAssignment>> &typed,
                        ArrayRef<std::string> entries, StringRef what, int64_t count,
                        llvm::DenseMap<int64_t, int64_t> &out);
  LogicalResult rejectLocalCalls();
  bool extendsReduction(Operation *op, ReductionType kind) const;
  void computeRoleAndSource(Operation *op);
  void decide(Operation *op, MeshSet use);
  int64_t firstOperandMesh(Operation *op) const;
  LogicalResult placeInputs();
  void sliceWhereInputsLive();
  void replaceInputOnly(Value v);
  void placeFloating();

  func::FuncOp func;
  Block &block;
  TopologyAttr topology;
  MeshInferenceOptions options;

  int64_t numMeshes = 0;
  MeshSet allMeshes = 0;
  llvm::DenseMap<int64_t, int64_t> inputMesh, outputMesh; // index -> assigned mesh
  llvm::DenseMap<int64_t, int64_t> inputHome;             // input index -> home mesh
  SmallVector<Operation *> meshless;
  llvm::DenseMap<Operation *, llvm::SetVector<Value>> inputs;
  llvm::DenseMap<Operation *, MeshRole> roles;
  llvm::DenseMap<Operation *, ReductionType> reductionKinds;
  llvm::DenseMap<Operation *, MeshSet> src, placement;
  /// Ops computing from cross-mesh reductions' results (and input-only
  /// values) alone: with `infer-cross-mesh-reductions` their results go to
  /// every mesh that reads them, as an all-reduce's would (a global norm).
  llvm::DenseSet<Operation *> reductionDerived;
  /// Slices of function inputs that run where the input lives (see
  /// sliceWhereInputsLive).
  llvm::DenseSet<Value> slicesOfInputs;
};

} // namespace mlir::mpmd

#endif // MPMD_LIB_TRANSFORMS_IMPORT_MESHASSIGNMENTANALYSIS_H
