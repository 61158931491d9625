//===- MpmdTypes.cpp - mpmd types -------------------------------------------===//

#include "mpmd/Dialect/MemoryKinds.h"
#include "mpmd/Dialect/MpmdDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::mpmd;

#define GET_TYPEDEF_CLASSES
#include "mpmd/Dialect/MpmdTypes.cpp.inc"

void MpmdDialect::registerTypes() {
  addTypes<
#define GET_TYPEDEF_LIST
#include "mpmd/Dialect/MpmdTypes.cpp.inc"
      >();
}

Type MeshTensorType::parse(AsmParser &parser) {
  std::string meshName;
  RankedTensorType tensorType;
  TensorShardingAttr sharding;
  StringAttr memoryKind;
  if (parser.parseLess() || parser.parseString(&meshName) || parser.parseComma() ||
      parser.parseType(tensorType))
    return {};
  // `, sharding=<...>` and `, memory_kind="..."`, each at most once, in
  // either order (printed sharding first).
  while (succeeded(parser.parseOptionalComma())) {
    llvm::SMLoc loc = parser.getCurrentLocation();
    StringRef keyword;
    bool known = succeeded(parser.parseOptionalKeyword(&keyword)) &&
                 ((keyword == "sharding" && !sharding) || (keyword == "memory_kind" && !memoryKind));
    if (!known) {
      InFlightDiagnostic diag = parser.emitError(loc);
      if (sharding && memoryKind)
        diag << "expected '>' after the sharding and the memory kind";
      else if (memoryKind)
        diag << "expected '>' or 'sharding' after the memory kind";
      else if (sharding)
        diag << "expected 'memory_kind' after the sharding";
      else
        diag << "expected 'sharding' or 'memory_kind'";
      if (!keyword.empty())
        diag << ", got '" << keyword << "'";
      return {};
    }
    if (parser.parseEqual())
      return {};
    if (keyword == "sharding") {
      Attribute attr = TensorShardingAttr::parse(parser, Type());
      if (!attr)
        return {};
      sharding = cast<TensorShardingAttr>(attr);
    } else {
      std::string kind;
      if (parser.parseString(&kind))
        return {};
      memoryKind = parser.getBuilder().getStringAttr(kind);
    }
  }
  if (parser.parseGreater())
    return {};
  return parser.getChecked<MeshTensorType>(parser.getContext(), meshName, tensorType, sharding,
                                           memoryKind);
}

void MeshTensorType::print(AsmPrinter &printer) const {
  printer << "<";
  printer.printString(getMeshName());
  printer << ", " << getRankedTensorType();
  if (getSharding()) {
    printer << ", sharding=";
    getSharding().print(printer);
  }
  if (getMemoryKind()) {
    printer << ", memory_kind=";
    printer.printString(getMemoryKind().getValue());
  }
  printer << ">";
}

// A mesh tensor type is checked where it is used, as Shardy's is: its
// sharding and memory kind by `verifyLayout` (and against the mesh by
// `verifyForMesh`), from the verifiers of the ops that carry it and, for a
// function's signature, from every pass (PassBase). So a program with a
// malformed type is rejected on the op that uses it, not on the line where
// the type is written (an alias, a signature).
LogicalResult MeshTensorType::verify(function_ref<InFlightDiagnostic()> emitError,
                                     StringRef meshName, RankedTensorType type,
                                     TensorShardingAttr sharding, StringAttr memoryKind) {
  if (meshName.empty())
    return emitError() << "mesh tensor must name a mesh";
  return success();
}

LogicalResult MeshTensorType::verifyLayout(function_ref<InFlightDiagnostic()> emitError) const {
  TensorShardingAttr sharding = getSharding();
  RankedTensorType type = getRankedTensorType();
  if (sharding && static_cast<int64_t>(sharding.getDims().size()) != type.getRank())
    return emitError() << "sharding doesn't match tensor rank: " << sharding.getDims().size()
                       << " != " << type.getRank() << " (the sharding of " << *this << " has "
                       << sharding.getDims().size() << " dimensions, its tensor has rank "
                       << type.getRank() << ")";
  if (StringAttr memoryKind = getMemoryKind(); memoryKind && !isTypeMemoryKind(memoryKind.getValue()))
    return emitError() << "memory kind must be either " << listMemoryKinds(kTypeMemoryKinds, '\'')
                       << ". Found '"
                       << memoryKind.getValue() << "' in " << *this;
  return success();
}

static int64_t axisSize(MeshAttr mesh, AxisRefAttr axis) {
  if (axis.isSubAxis())
    return axis.getSize();
  return mesh.getAxisSize(axis.getName()).value_or(1);
}

RankedTensorType MeshTensorType::getLocalTensorType(MeshAttr mesh) const {
  TensorShardingAttr sharding = getSharding();
  RankedTensorType global = getRankedTensorType();
  // (A sharding of another rank is an error `verifyLayout` reports.)
  if (!sharding || sharding.isFullyReplicated() ||
      static_cast<int64_t>(sharding.getDims().size()) != global.getRank())
    return global;
  SmallVector<int64_t> shape(global.getShape());
  for (auto [dim, dimSharding] : llvm::enumerate(sharding.getDims())) {
    if (ShapedType::isDynamic(shape[dim]))
      continue;
    int64_t parts = 1;
    for (AxisRefAttr axis : dimSharding.getAxes())
      parts *= axisSize(mesh, axis);
    shape[dim] = (shape[dim] + parts - 1) / parts;
  }
  return RankedTensorType::get(shape, global.getElementType());
}

LogicalResult MeshTensorType::verifyForMesh(MeshAttr mesh,
                                            function_ref<InFlightDiagnostic()> emitError) const {
  if (failed(verifyLayout(emitError)))
    return failure();
  TensorShardingAttr sharding = getSharding();
  if (!sharding)
    return success();
  auto check = [&](AxisRefAttr axis) -> LogicalResult {
    if (mesh.getAxisSize(axis.getName()))
      return success();
    InFlightDiagnostic diag = emitError() << "unknown axis name: \"" << axis.getName()
                                          << "\" in the sharding of " << *this << ": mesh \""
                                          << getMeshName() << "\" has ";
    if (mesh.getAxes().empty())
      diag << "no axes";
    else
      diag << "axes";
    for (MeshAxisAttr meshAxis : mesh.getAxes())
      diag << " \"" << meshAxis.getName() << "\"";
    return diag;
  };
  for (DimShardingAttr dim : sharding.getDims())
    for (AxisRefAttr axis : dim.getAxes())
      if (failed(check(axis)))
        return failure();
  // JAX takes and returns only evenly sharded arrays.
  ArrayRef<int64_t> shape = getRankedTensorType().getShape();
  for (auto [i, dim] : llvm::enumerate(sharding.getDims())) {
    if (dim.getAxes().empty() || ShapedType::isDynamic(shape[i]))
      continue;
    int64_t parts = 1;
    for (AxisRefAttr axis : dim.getAxes())
      parts *= axisSize(mesh, axis);
    if (shape[i] % parts == 0)
      continue;
    InFlightDiagnostic diag = emitError() << "dim " << i << " with size " << shape[i]
                                          << " is not divisible by its sharded size " << parts
                                          << " (the product of the sizes of its axes";
    for (AxisRefAttr axis : dim.getAxes()) {
      diag << " \"" << axis.getName() << "\"";
      if (axis.isSubAxis())
        diag << ":(" << axis.getPreSize() << ")" << axis.getSize();
    }
    diag << " in mesh \"" << getMeshName() << "\"), in " << *this
         << ": JAX shards a dimension evenly only; shard it over fewer axes or pad it";
    return diag;
  }
  for (AxisRefAttr axis : sharding.getReplicated())
    if (failed(check(axis)))
      return failure();
  for (AxisRefAttr axis : sharding.getUnreduced())
    if (failed(check(axis)))
      return failure();
  return success();
}
