//===- Passes.h - the compatibility wing's passes -----------------*- C++ -*-===//
//
// The passes of include/mpmd/Compat/Passes.td (lib/Compat, library
// MpmdCompat): what only `mpmd-opt` runs, on files written for Shardy:MPMD.
//
//===----------------------------------------------------------------------===//

#ifndef MPMD_COMPAT_PASSES_H
#define MPMD_COMPAT_PASSES_H

#include "mpmd/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace mlir::mpmd {

#define GEN_PASS_DECL
#include "mpmd/Compat/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "mpmd/Compat/Passes.h.inc"

} // namespace mlir::mpmd

#endif // MPMD_COMPAT_PASSES_H
