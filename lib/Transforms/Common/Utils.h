//===- Utils.h - helpers shared by mpmd passes -------------------*- C++ -*-===//
#ifndef MPMD_LIB_TRANSFORMS_COMMON_UTILS_H
#define MPMD_LIB_TRANSFORMS_COMMON_UTILS_H

#include "mpmd/Dialect/MpmdDialect.h"

#include "llvm/ADT/StringMap.h"
#include <optional>

namespace mlir::mpmd {

/// A mesh (and optional stage) a user name is assigned to.
struct MeshAndStage {
  std::string mesh;
  std::optional<int64_t> stage;
};

/// Parses `name@mesh[/stage]` entries. Errors are reported on `anchor`.
FailureOr<llvm::StringMap<MeshAndStage>> parseNameAssignment(ArrayRef<std::string> entries,
                                                             Operation *anchor);

/// Parses `index@mesh` entries. Errors are reported on `anchor`.
FailureOr<llvm::DenseMap<int64_t, std::string>> parseIndexAssignment(ArrayRef<std::string> entries,
                                                                      StringRef what,
                                                                      Operation *anchor);

/// The index of mesh `name` in `topology`, or -1.
int64_t getMeshIndex(TopologyAttr topology, StringRef name);

/// Merges fragment `first` (which precedes `second` in the block) and
/// `second` into one fragment inserted before `insertionPoint`: the body of
/// `first` runs before that of `second`, uses of `first`'s results by `second`
/// become internal, and results still used elsewhere are kept. Origins are
/// united. Both fragments are erased; the merged fragment is returned.
FragmentOp mergeFragments(FragmentOp first, FragmentOp second, Operation *insertionPoint);

//===----------------------------------------------------------------------===//
// Fragment classification (split / remat / forward-backward merge)
//===----------------------------------------------------------------------===//

/// Unit attribute on the activation-gradient part of a split backward fragment
/// (the part that computes what is transferred to other meshes).
inline constexpr llvm::StringLiteral kSplitKeepTransferredAttr = "split_keep_transferred";
/// Unit attribute on the weight-gradient part of a split backward fragment.
inline constexpr llvm::StringLiteral kSplitDropTransferredAttr = "split_drop_transferred";
/// Unit attribute on a rematerialized (cloned) forward fragment, or on a
/// backward fragment a rematerialized forward was merged into.
inline constexpr llvm::StringLiteral kRematAttr = "remat";

/// A user fragment all of whose origins have transpose count 0.
bool isForwardFragment(FragmentOp fragment);
/// A user fragment all of whose origins have transpose count >= 1.
bool isBackwardFragment(FragmentOp fragment);

/// The `call_counter` (microbatch index) of `fragment`: std::nullopt when the
/// attribute is absent; failure, with an error on the fragment, when it is not
/// an unsigned 32-bit integer.
FailureOr<std::optional<uint32_t>> getCallCounter(FragmentOp fragment);

/// Checks the `call_counter` of every fragment nested in `root`, with an error
/// on each one that is not a ui32; afterwards `*getCallCounter(f)` is safe.
LogicalResult verifyCallCounters(Operation *root);

/// The next fragment on the mesh of `fragment` in its block (program order,
/// skipping fragments of other meshes and any other op), or null.
FragmentOp getNextFragmentOnMesh(FragmentOp fragment);

/// `fragment ["stage0"(1)] (microbatch 2, stage 0) on mesh "m0"`: how
/// diagnostics name a fragment.
std::string describeFragment(FragmentOp fragment);

/// Donation marks (see -mpmd-mark-aliasing-and-donation): operand indices a
/// fragment may consume; unit attribute on a transfer that may consume its
/// source; the argument attributes JAX writes for `donate_argnums`.
inline constexpr llvm::StringLiteral kDonatedOperandsAttr = "mpmd.donated_operands";
inline constexpr llvm::StringLiteral kDonateAttr = "mpmd.donate";
inline constexpr llvm::StringLiteral kBufferDonorAttr = "jax.buffer_donor";
inline constexpr llvm::StringLiteral kAliasingOutputAttr = "tf.aliasing_output";

/// Attribute on fragment calls naming their scheduling unit (e.g. "B3.s1").
inline constexpr llvm::StringLiteral kUnitAttr = "mpmd.unit";

/// The scheduling unit a fragment belongs to: kind 'F' (forward), 'B'
/// (backward, or its activation-gradient part) or 'W' (weight-gradient part),
/// microbatch (`call_counter`), stage (`stage` attribute, else the mesh index)
/// and mesh index.
struct SchedulingUnit {
  char kind;
  int64_t microbatch;
  int64_t stage;
  int64_t mesh;
  bool operator==(const SchedulingUnit &o) const {
    return kind == o.kind && microbatch == o.microbatch && stage == o.stage && mesh == o.mesh;
  }
  /// `F3`, or `F3.s5` when the stage is not the mesh index.
  std::string str() const;
};

/// The unit of `fragment`, or std::nullopt if it is not a scheduling unit (an
/// inferred fragment, no `call_counter`, or forward and backward merged).
std::optional<SchedulingUnit> getSchedulingUnit(FragmentOp fragment, TopologyAttr topology);

/// The lines of a multi-line pass option (separated by newlines or `;`),
/// without `#` comments and surrounding blanks; empty lines dropped.
SmallVector<std::string> splitOptionLines(StringRef text);

/// Merges fragment `first` with the later fragment `second` where that is
/// legal: at `second`'s position when every other use of `first`'s results
/// comes after `second`, else at `first`'s position when every operand of
/// `second` is available there. Returns the merged fragment, or null when
/// neither position works (then nothing changed).
FragmentOp mergeIfLegal(FragmentOp first, FragmentOp second);

/// Inlines calls of single-block `func.func`s (named by the call's `callee`
/// attribute) until none is left: `collect` returns the calls still in the
/// module, so calls inside callees are inlined too. `onClone(call, clone)`
/// sees every op cloned into a call site. Private functions left without
/// uses are erased. `kind` names the call in errors ("call to",
/// "mpmd.call of"); recursion is an error.
LogicalResult inlineAllCalls(ModuleOp module, StringRef kind,
                             function_ref<SmallVector<Operation *>()> collect,
                             function_ref<void(Operation *, Operation *)> onClone);

} // namespace mlir::mpmd

#endif // MPMD_LIB_TRANSFORMS_COMMON_UTILS_H
