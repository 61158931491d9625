//===- MpmdAttrs.cpp - mpmd attributes --------------------------------------===//

#include "mpmd/Dialect/MpmdDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::mpmd;

#include "mpmd/Dialect/MpmdEnums.cpp.inc"
#define GET_ATTRDEF_CLASSES
#include "mpmd/Dialect/MpmdAttrs.cpp.inc"

void MpmdDialect::registerAttributes() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "mpmd/Dialect/MpmdAttrs.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// Meshes
//===----------------------------------------------------------------------===//

Attribute MeshAxisAttr::parse(AsmParser &parser, Type) {
  std::string name;
  int64_t size;
  if (parser.parseString(&name) || parser.parseEqual() || parser.parseInteger(size))
    return {};
  return parser.getChecked<MeshAxisAttr>(parser.getContext(), name, size);
}

void MeshAxisAttr::print(AsmPrinter &printer) const {
  printer.printString(getName());
  printer << "=" << getSize();
}

LogicalResult MeshAxisAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                   StringRef name, int64_t size) {
  if (name.empty())
    return emitError() << "mesh axis name must not be empty";
  if (size <= 0)
    return emitError() << "mesh axis \"" << name << "\" must have a positive size, got " << size;
  return success();
}

Attribute MeshAttr::parse(AsmParser &parser, Type) {
  SmallVector<MeshAxisAttr> axes;
  SmallVector<int64_t> deviceIds;
  if (parser.parseLess() ||
      parser.parseCommaSeparatedList(AsmParser::Delimiter::Square, [&]() -> ParseResult {
        Attribute axis = MeshAxisAttr::parse(parser, Type());
        if (!axis)
          return failure();
        axes.push_back(cast<MeshAxisAttr>(axis));
        return success();
      }))
    return {};
  if (succeeded(parser.parseOptionalComma())) {
    if (parser.parseKeyword("device_ids") || parser.parseEqual() ||
        parser.parseCommaSeparatedList(AsmParser::Delimiter::Square, [&]() -> ParseResult {
          return parser.parseInteger(deviceIds.emplace_back());
        }))
      return {};
  }
  if (parser.parseGreater())
    return {};
  return parser.getChecked<MeshAttr>(parser.getContext(), axes, deviceIds);
}

void MeshAttr::print(AsmPrinter &printer) const {
  printer << "<[";
  llvm::interleaveComma(getAxes(), printer, [&](MeshAxisAttr axis) { axis.print(printer); });
  printer << "]";
  if (!getDeviceIds().empty()) {
    printer << ", device_ids=[";
    llvm::interleaveComma(getDeviceIds(), printer);
    printer << "]";
  }
  printer << ">";
}

LogicalResult MeshAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                               ArrayRef<MeshAxisAttr> axes, ArrayRef<int64_t> deviceIds) {
  llvm::StringSet<> seen;
  int64_t numDevices = 1;
  for (MeshAxisAttr axis : axes) {
    if (!seen.insert(axis.getName()).second)
      return emitError() << "mesh has duplicate axis \"" << axis.getName() << "\"";
    numDevices *= axis.getSize();
  }
  if (!deviceIds.empty() && static_cast<int64_t>(deviceIds.size()) != numDevices)
    return emitError() << "mesh has " << deviceIds.size() << " device ids but its axes hold "
                       << numDevices << " devices";
  return success();
}

int64_t MeshAttr::getNumDevices() const {
  int64_t n = 1;
  for (MeshAxisAttr axis : getAxes())
    n *= axis.getSize();
  return n;
}

std::optional<int64_t> MeshAttr::getAxisSize(StringRef name) const {
  for (MeshAxisAttr axis : getAxes())
    if (axis.getName() == name)
      return axis.getSize();
  return std::nullopt;
}

LogicalResult TopologyAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                   ArrayRef<NamedMeshAttr> meshes) {
  if (meshes.empty())
    return emitError() << "topology must have at least one mesh";
  llvm::StringSet<> seen;
  for (NamedMeshAttr mesh : meshes) {
    if (mesh.getName().empty())
      return emitError() << "topology mesh names must not be empty";
    if (!seen.insert(mesh.getName()).second)
      return emitError() << "topology has duplicate mesh \"" << mesh.getName() << "\"";
  }
  return success();
}

MeshAttr TopologyAttr::getMesh(StringRef name) const {
  for (NamedMeshAttr mesh : getMeshes())
    if (mesh.getName() == name)
      return mesh.getMesh();
  return {};
}

//===----------------------------------------------------------------------===//
// Origins
//===----------------------------------------------------------------------===//

FailureOr<UserOriginAttr> mlir::mpmd::parseShortUserOrigin(AsmParser &parser) {
  std::string name;
  int64_t transposeCount = 0;
  if (parser.parseString(&name))
    return failure();
  if (succeeded(parser.parseOptionalLParen())) {
    if (parser.parseInteger(transposeCount) || parser.parseRParen())
      return failure();
  }
  auto attr = parser.getChecked<UserOriginAttr>(parser.getContext(), name, transposeCount);
  if (!attr)
    return failure();
  return attr;
}

void mlir::mpmd::printShortUserOrigin(AsmPrinter &printer, UserOriginAttr origin) {
  printer.printString(origin.getUserName());
  if (origin.getTransposeCount() != 0)
    printer << "(" << origin.getTransposeCount() << ")";
}

Attribute UserOriginAttr::parse(AsmParser &parser, Type) {
  if (parser.parseLess())
    return {};
  FailureOr<UserOriginAttr> origin = parseShortUserOrigin(parser);
  if (failed(origin) || parser.parseGreater())
    return {};
  return *origin;
}

void UserOriginAttr::print(AsmPrinter &printer) const {
  printer << "<";
  printShortUserOrigin(printer, *this);
  printer << ">";
}

LogicalResult UserOriginAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                     StringRef userName, int64_t transposeCount) {
  if (userName.empty())
    return emitError() << "user origin name must not be empty";
  if (transposeCount < 0)
    return emitError() << "transpose count of \"" << userName << "\" must be >= 0, got "
                       << transposeCount;
  return success();
}

//===----------------------------------------------------------------------===//
// Shardings
//===----------------------------------------------------------------------===//

Attribute AxisRefAttr::parse(AsmParser &parser, Type) {
  std::string name;
  int64_t preSize = 0, size = 0;
  if (parser.parseString(&name))
    return {};
  if (succeeded(parser.parseOptionalColon())) {
    if (parser.parseLParen() || parser.parseInteger(preSize) || parser.parseRParen() ||
        parser.parseInteger(size))
      return {};
    if (preSize <= 0 || size <= 0) {
      parser.emitError(parser.getCurrentLocation(), "sub-axis of \"")
          << name << "\" must have positive pre-size and size";
      return {};
    }
  }
  return AxisRefAttr::get(parser.getContext(), name, preSize, size);
}

void AxisRefAttr::print(AsmPrinter &printer) const {
  printer.printString(getName());
  if (isSubAxis())
    printer << ":(" << getPreSize() << ")" << getSize();
}

static ParseResult parseAxisList(AsmParser &parser, SmallVectorImpl<AxisRefAttr> &axes) {
  return parser.parseCommaSeparatedList(AsmParser::Delimiter::Braces, [&]() -> ParseResult {
    Attribute axis = AxisRefAttr::parse(parser, Type());
    if (!axis)
      return failure();
    axes.push_back(cast<AxisRefAttr>(axis));
    return success();
  });
}

static void printAxisList(AsmPrinter &printer, ArrayRef<AxisRefAttr> axes) {
  printer << "{";
  llvm::interleaveComma(axes, printer, [&](AxisRefAttr axis) { axis.print(printer); });
  printer << "}";
}

Attribute DimShardingAttr::parse(AsmParser &parser, Type) {
  SmallVector<AxisRefAttr> axes;
  bool isClosed = true;
  if (parser.parseLBrace())
    return {};
  if (failed(parser.parseOptionalRBrace())) {
    while (true) {
      if (succeeded(parser.parseOptionalQuestion())) {
        isClosed = false;
        if (parser.parseRBrace())
          return {};
        break;
      }
      Attribute axis = AxisRefAttr::parse(parser, Type());
      if (!axis)
        return {};
      axes.push_back(cast<AxisRefAttr>(axis));
      if (succeeded(parser.parseOptionalRBrace()))
        break;
      if (parser.parseComma())
        return {};
    }
  }
  int64_t priority = -1;
  StringRef keyword;
  llvm::SMLoc loc = parser.getCurrentLocation();
  if (succeeded(parser.parseOptionalKeyword(&keyword))) {
    if (!keyword.consume_front("p") || keyword.getAsInteger(10, priority) || priority < 0) {
      parser.emitError(loc, "expected a dimension priority of the form `p<N>`");
      return {};
    }
  }
  return DimShardingAttr::get(parser.getContext(), axes, isClosed, priority);
}

void DimShardingAttr::print(AsmPrinter &printer) const {
  printer << "{";
  llvm::interleaveComma(getAxes(), printer, [&](AxisRefAttr axis) { axis.print(printer); });
  if (!getIsClosed())
    printer << (getAxes().empty() ? "?" : ", ?");
  printer << "}";
  if (getPriority() >= 0)
    printer << "p" << getPriority();
}

Attribute TensorShardingAttr::parse(AsmParser &parser, Type) {
  StringAttr meshName;
  SmallVector<DimShardingAttr> dims;
  SmallVector<AxisRefAttr> replicated, unreduced;
  if (parser.parseLess() || parser.parseSymbolName(meshName) || parser.parseComma() ||
      parser.parseCommaSeparatedList(AsmParser::Delimiter::Square, [&]() -> ParseResult {
        Attribute dim = DimShardingAttr::parse(parser, Type());
        if (!dim)
          return failure();
        dims.push_back(cast<DimShardingAttr>(dim));
        return success();
      }))
    return {};
  while (succeeded(parser.parseOptionalComma())) {
    StringRef keyword;
    llvm::SMLoc loc = parser.getCurrentLocation();
    if (parser.parseKeyword(&keyword) || parser.parseEqual())
      return {};
    if (keyword == "replicated") {
      if (parseAxisList(parser, replicated))
        return {};
    } else if (keyword == "unreduced") {
      if (parseAxisList(parser, unreduced))
        return {};
    } else {
      parser.emitError(loc, "expected `replicated` or `unreduced`, got `") << keyword << "`";
      return {};
    }
  }
  if (parser.parseGreater())
    return {};
  return TensorShardingAttr::get(parser.getContext(), meshName.getValue(), dims, replicated,
                                 unreduced);
}

void TensorShardingAttr::print(AsmPrinter &printer) const {
  printer << "<";
  printer.printSymbolName(getMeshName());
  printer << ", [";
  llvm::interleaveComma(getDims(), printer, [&](DimShardingAttr dim) { dim.print(printer); });
  printer << "]";
  if (!getReplicated().empty()) {
    printer << ", replicated=";
    printAxisList(printer, getReplicated());
  }
  if (!getUnreduced().empty()) {
    printer << ", unreduced=";
    printAxisList(printer, getUnreduced());
  }
  printer << ">";
}

bool TensorShardingAttr::isFullyReplicated() const {
  return llvm::all_of(getDims(), [](DimShardingAttr d) { return d.getAxes().empty(); });
}
