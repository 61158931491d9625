//===- InlineSingleBlockCallees.h - clone callee bodies into calls -*- C++ -*-===//
#ifndef MPMD_LIB_TRANSFORMS_COMMON_INLINESINGLEBLOCKCALLEES_H
#define MPMD_LIB_TRANSFORMS_COMMON_INLINESINGLEBLOCKCALLEES_H

#include "mpmd/Dialect/MpmdDialect.h"

#include "mlir/IR/BuiltinOps.h"

namespace mlir::mpmd {

/// Inlines calls of single-block `func.func`s (named by the call's `callee`
/// attribute) until none is left: `collect` returns the calls still in the
/// module, so calls inside callees are inlined too. `onClone(call, clone)`
/// sees every op cloned into a call site. Private functions left without
/// uses are erased. `kind` names the call in errors ("call to",
/// "mpmd.call of"); recursion is an error.
LogicalResult inlineSingleBlockCallees(ModuleOp module, StringRef kind,
                             function_ref<SmallVector<Operation *>()> collect,
                             function_ref<void(Operation *, Operation *)> onClone);

/// Fails, naming the function, when a function of `module` would have more
/// than `maxOps` ops (nested ones included) once every call that `isCall`
/// accepts is replaced by its callee's body, recursively (saturating; a
/// recursive call counts once: recursion is reported when inlining). `kind`
/// and `option` name the calls and the pass option in the message.
LogicalResult checkInlinedSize(ModuleOp module, StringRef kind, StringRef option,
                               function_ref<bool(Operation *)> isCall, uint64_t maxOps);

} // namespace mlir::mpmd

#endif // MPMD_LIB_TRANSFORMS_COMMON_INLINESINGLEBLOCKCALLEES_H
