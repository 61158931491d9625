//===- MpmdDialect.h - mpmd dialect ------------------------------*- C++ -*-===//
#ifndef MPMD_DIALECT_MPMDDIALECT_H
#define MPMD_DIALECT_MPMDDIALECT_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/ControlFlowInterfaces.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "mpmd/Dialect/MpmdAttrNames.h"
#include "mpmd/Dialect/MpmdDialect.h.inc"
#include "mpmd/Dialect/MpmdEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "mpmd/Dialect/MpmdAttrs.h.inc"
#define GET_TYPEDEF_CLASSES
#include "mpmd/Dialect/MpmdTypes.h.inc"
#define GET_OP_CLASSES
#include "mpmd/Dialect/MpmdOps.h.inc"

namespace mlir::mpmd {

/// The topology of the function enclosing `op`, or null.
TopologyAttr getTopology(Operation *op);

/// The mesh `meshName` of the topology enclosing `op`; emits an error naming
/// the mesh and the known meshes on `op` when it does not exist.
FailureOr<MeshAttr> getMeshOrError(Operation *op, StringRef meshName);

/// Prints an origin in the short form used inside fragments: `"name"(k)`.
void printShortUserOrigin(AsmPrinter &printer, UserOriginAttr origin);
/// Parses `"name"` or `"name"(k)`.
FailureOr<UserOriginAttr> parseShortUserOrigin(AsmParser &parser);

} // namespace mlir::mpmd

#endif // MPMD_DIALECT_MPMDDIALECT_H
