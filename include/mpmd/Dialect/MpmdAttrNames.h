//===- MpmdAttrNames.h - every IR attribute name mpmd uses -------*- C++ -*-===//
//
// The names of the discardable attributes mpmd reads or writes on functions,
// fragments, calls and transfers, in one place. (Inherent attributes of mpmd
// ops are declared in ODS and have generated accessors.)
//
//===----------------------------------------------------------------------===//

#ifndef MPMD_DIALECT_MPMDATTRNAMES_H
#define MPMD_DIALECT_MPMDATTRNAMES_H

#include "llvm/ADT/StringRef.h"

namespace mlir::mpmd {

//===----------------------------------------------------------------------===//
// Functions
//===----------------------------------------------------------------------===//

/// Marks an MPMD function and lists its meshes (`#mpmd.topology<...>`).
inline constexpr llvm::StringLiteral kTopologyAttr = "topology";
/// Gives an exported fragment function its mesh.
inline constexpr llvm::StringLiteral kMeshShapeAttr = "mesh_shape";
/// Argument attributes JAX writes for `donate_argnums` and for outputs that
/// alias an input.
inline constexpr llvm::StringLiteral kBufferDonorAttr = "jax.buffer_donor";
inline constexpr llvm::StringLiteral kAliasingOutputAttr = "tf.aliasing_output";
/// On an argument of an MPMD function made by
/// -mpmd-parameterize-fragment-constants: the scalar value the runtime passes.
inline constexpr llvm::StringLiteral kConstantArgAttr = "mpmd.constant";
/// Module attributes of a fragment program compiled through PJRT.
inline constexpr llvm::StringLiteral kNumPartitionsAttr = "mhlo.num_partitions";
inline constexpr llvm::StringLiteral kNumReplicasAttr = "mhlo.num_replicas";
/// JAX's memory kind of a function argument or result (an attribute of its
/// dictionary); mesh tensors carry theirs in their type instead.
inline constexpr llvm::StringLiteral kMhloMemoryKindAttr = "mhlo.memory_kind";

//===----------------------------------------------------------------------===//
// Fragments
//===----------------------------------------------------------------------===//

/// The microbatch index (ui32) of a fragment, a named computation or a call.
inline constexpr llvm::StringLiteral kCallCounterAttr = "call_counter";
/// On fragments the compiler created (mesh inference).
inline constexpr llvm::StringLiteral kInferredByAttr = "mpmd.inferred_by";
/// Unit attribute on a transfer of several values packed into one buffer
/// (-mpmd-merge-transfers; Shardy's name).
inline constexpr llvm::StringLiteral kConcatTransferAttr = "concat_transfer";
/// Unit attribute on the activation-gradient part of a split backward fragment
/// (the part that computes what is transferred to other meshes).
inline constexpr llvm::StringLiteral kSplitKeepTransferredAttr = "split_keep_transferred";
/// Unit attribute on the weight-gradient part of a split backward fragment.
inline constexpr llvm::StringLiteral kSplitDropTransferredAttr = "split_drop_transferred";
/// Unit attribute on a rematerialized (cloned) forward fragment, or on a
/// backward fragment a rematerialized forward was merged into.
inline constexpr llvm::StringLiteral kRematAttr = "remat";

//===----------------------------------------------------------------------===//
// Exported program (fragment calls and transfers)
//===----------------------------------------------------------------------===//

/// Operand indices a fragment call may consume (-mpmd-mark-aliasing-and-donation).
inline constexpr llvm::StringLiteral kDonatedOperandsAttr = "mpmd.donated_operands";
/// Unit attribute on a transfer that may consume its source.
inline constexpr llvm::StringLiteral kDonateAttr = "mpmd.donate";
/// The scheduling unit of a fragment call (e.g. "B3.s1").
inline constexpr llvm::StringLiteral kUnitAttr = "mpmd.unit";
/// On a fragment call: the result indices it holds as unreduced partial sums
/// and, for each, the operand index it adds a term to (-1: the call starts
/// the chain); on an argument of the MPMD function (a constant, an
/// accumulator's zeros): a chain starts there (-mpmd-mark-partial-sums).
inline constexpr llvm::StringLiteral kPartialResultsAttr = "mpmd.partial_results";
inline constexpr llvm::StringLiteral kPartialSourcesAttr = "mpmd.partial_sources";
inline constexpr llvm::StringLiteral kPartialSumAttr = "mpmd.partial_sum";
/// Bytes (per device) of the other arrays live on a fragment's mesh while it
/// runs (-mpmd-mark-fragment-reserved-memory); on a fragment, then on its
/// function (-mpmd-lower-to-fragment-calls).
inline constexpr llvm::StringLiteral kReservedHbmBytesAttr = "reserved_hbm_bytes";
/// Per-argument and per-result attribute dictionaries of a fragment, which
/// become those of its function (Shardy's spelling, as on `func.func`).
inline constexpr llvm::StringLiteral kFragmentArgAttrsAttr = "arg_attrs";
inline constexpr llvm::StringLiteral kFragmentResAttrsAttr = "res_attrs";

//===----------------------------------------------------------------------===//
// Debugging output of -mpmd-infer-mesh-assignment{annotate-only}
//===----------------------------------------------------------------------===//

inline constexpr llvm::StringLiteral kSrcSetAttr = "mpmd.src_set";
inline constexpr llvm::StringLiteral kUseSetAttr = "mpmd.use_set";
inline constexpr llvm::StringLiteral kPlacementAttr = "mpmd.placement";

} // namespace mlir::mpmd

#endif // MPMD_DIALECT_MPMDATTRNAMES_H
