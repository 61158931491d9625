//===- MeshInferenceAcrossCalls.h - meshes of callee signatures ---*- C++ -*-===//
//
// Mesh inference through `mpmd.call`, for programs that keep their calls
// (Shardy's form: one function per microbatch or layer, called many times)
// instead of inlining them first as -mpmd-import-pipeline does.
//
// Every call of a function runs the same body, so each argument and each
// result of a callee gets one mesh, shared by all its call sites. The meshes
// are chosen from both sides of the boundary, with the per-function analysis
// (MeshAssignmentAnalysis) of the callee and of its callers:
//   result j: where the callee computes it (its source set), preferring a
//             mesh its call sites use it on; else the first mesh they use it
//             on;
//   arg i:    where the callee uses it, preferring a mesh every call site has
//             the operand on; else the mesh the call sites share.
// A choice is written into the IR at once (the callee's argument or result
// gets the mesh type, each call site an `mpmd.assign` of the operand or an
// `mpmd.unassign` of the result), so the next round of analyses sees it: a
// result that feeds another call takes that call's argument mesh, and so
// on. What nothing decides goes to the first mesh that something names.
//
// A value that must cross meshes at a call boundary (call sites passing an
// argument from different meshes, or a call passing a result of the same
// callee to an argument on another mesh) is an inferred transfer: an error on
// the callee, with a note at each call, unless `infer-transfers` is set.
// After this, each function is inferred on its own: a call's operands and
// results are mesh tensors like a fragment's.
//
//===----------------------------------------------------------------------===//

#ifndef MPMD_LIB_TRANSFORMS_IMPORT_MESHINFERENCEACROSSCALLS_H
#define MPMD_LIB_TRANSFORMS_IMPORT_MESHINFERENCEACROSSCALLS_H

#include "MeshAssignmentAnalysis.h"

namespace mlir::mpmd {

/// An MPMD function mesh inference visits, with the options it is inferred
/// with (an entry point has the pass's input/output assignment, a callee
/// none).
struct MeshInferenceTarget {
  func::FuncOp func;
  TopologyAttr topology;
  MeshInferenceOptions options;
};

/// Whether some function of `targets` makes an `mpmd.call`.
bool hasCalls(ArrayRef<MeshInferenceTarget> targets);

/// Gives each argument and result of every function that `targets` call by
/// `mpmd.call` a mesh, as described above, and checks that no call boundary
/// needs a transfer no label implies (unless `inferTransfers`). The callees
/// must be among `targets`. Fails after reporting errors.
LogicalResult assignMeshesAcrossCalls(ArrayRef<MeshInferenceTarget> targets, bool inferTransfers);

} // namespace mlir::mpmd

#endif // MPMD_LIB_TRANSFORMS_IMPORT_MESHINFERENCEACROSSCALLS_H
