//===- ProgramSerialization.h - the exported program as plain structs -*- C++ -*-===//
#ifndef MPMD_LIB_DRIVER_PROGRAMSERIALIZATION_H
#define MPMD_LIB_DRIVER_PROGRAMSERIALIZATION_H

#include "mpmd/Dialect/MpmdDialect.h"
#include "mpmd/Pipeline.h"

#include "mlir/IR/BuiltinOps.h"

namespace mlir::mpmd {

/// `op` as text: generic form or readable, with debug locations or without.
std::string printOp(Operation *op, bool generic, bool debugInfo);

/// Reads the exported program of `main` (fragment calls and transfers, in
/// order) into `result`: the instruction list with value ids, one
/// `FragmentFunction` (a standalone module) per called function, and the
/// meshes of the inputs and outputs. Fails, with an error on the op, on an op
/// the runtime cannot run.
LogicalResult serializeProgram(ModuleOp module, func::FuncOp main, TopologyAttr topology,
                               ::mpmd::PartitionResult &result);

} // namespace mlir::mpmd

#endif // MPMD_LIB_DRIVER_PROGRAMSERIALIZATION_H
