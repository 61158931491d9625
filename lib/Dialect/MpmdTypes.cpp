//===- MpmdTypes.cpp - mpmd types -------------------------------------------===//

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

static bool isValidMemoryKind(StringRef kind) {
  return kind == "device" || kind == "pinned_host" || kind == "unpinned_host";
}

Type MeshTensorType::parse(AsmParser &parser) {
  std::string meshName;
  RankedTensorType tensorType;
  TensorShardingAttr sharding;
  StringAttr memoryKind;
  if (parser.parseLess() || parser.parseString(&meshName) || parser.parseComma() ||
      parser.parseType(tensorType))
    return {};
  while (succeeded(parser.parseOptionalComma())) {
    StringRef keyword;
    llvm::SMLoc loc = parser.getCurrentLocation();
    if (parser.parseKeyword(&keyword) || parser.parseEqual())
      return {};
    if (keyword == "sharding") {
      Attribute attr = TensorShardingAttr::parse(parser, Type());
      if (!attr)
        return {};
      sharding = cast<TensorShardingAttr>(attr);
    } else if (keyword == "memory_kind") {
      std::string kind;
      if (parser.parseString(&kind))
        return {};
      memoryKind = parser.getBuilder().getStringAttr(kind);
    } else {
      parser.emitError(loc, "expected `sharding` or `memory_kind`, got `") << keyword << "`";
      return {};
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

LogicalResult MeshTensorType::verify(function_ref<InFlightDiagnostic()> emitError,
                                     StringRef meshName, RankedTensorType type,
                                     TensorShardingAttr sharding, StringAttr memoryKind) {
  if (meshName.empty())
    return emitError() << "mesh tensor must name a mesh";
  if (sharding && static_cast<int64_t>(sharding.getDims().size()) != type.getRank())
    return emitError() << "sharding of a mesh tensor on \"" << meshName << "\" has "
                       << sharding.getDims().size() << " dimensions but the tensor " << type
                       << " has rank " << type.getRank();
  if (memoryKind && !isValidMemoryKind(memoryKind.getValue()))
    return emitError() << "memory kind \"" << memoryKind.getValue()
                       << "\" is not one of \"device\", \"pinned_host\", \"unpinned_host\"";
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
  if (!sharding || sharding.isFullyReplicated())
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
  TensorShardingAttr sharding = getSharding();
  if (!sharding)
    return success();
  auto check = [&](AxisRefAttr axis) -> LogicalResult {
    if (!mesh.getAxisSize(axis.getName()))
      return emitError() << "sharding of " << *this << " uses axis \"" << axis.getName()
                         << "\" which mesh \"" << getMeshName() << "\" does not have";
    return success();
  };
  for (DimShardingAttr dim : sharding.getDims())
    for (AxisRefAttr axis : dim.getAxes())
      if (failed(check(axis)))
        return failure();
  for (AxisRefAttr axis : sharding.getReplicated())
    if (failed(check(axis)))
      return failure();
  for (AxisRefAttr axis : sharding.getUnreduced())
    if (failed(check(axis)))
      return failure();
  return success();
}
