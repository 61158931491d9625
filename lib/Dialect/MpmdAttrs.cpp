//===- MpmdAttrs.cpp - mpmd attributes --------------------------------------===//

#include "mpmd/Dialect/MpmdDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/TypeSwitch.h"

#include <map>
#include <set>

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

//===----------------------------------------------------------------------===//
// Standalone forms
//===----------------------------------------------------------------------===//
//
// Several attributes are printed without angle brackets inside the attribute
// that contains them (a mesh axis inside a mesh, an axis ref inside a dim
// sharding, an origin inside meshes-with-origins). MLIR only hands a `<...>`
// body that follows `#mpmd.<mnemonic>` to the dialect, so their standalone
// forms wrap that short form in angle brackets. The parsers accept both.

/// Parses `<body>` or `body`.
template <typename AttrT>
static Attribute parseOptionallyBracketed(AsmParser &parser,
                                          function_ref<AttrT(AsmParser &)> parseBody) {
  bool bracketed = succeeded(parser.parseOptionalLess());
  AttrT attr = parseBody(parser);
  if (!attr || (bracketed && parser.parseGreater()))
    return {};
  return attr;
}

//===----------------------------------------------------------------------===//
// Meshes
//===----------------------------------------------------------------------===//

/// `"x"=4`
static MeshAxisAttr parseMeshAxisBody(AsmParser &parser) {
  std::string name;
  int64_t size;
  if (parser.parseString(&name) || parser.parseEqual() || parser.parseInteger(size))
    return {};
  return parser.getChecked<MeshAxisAttr>(parser.getContext(), name, size);
}

static void printMeshAxisBody(AsmPrinter &printer, MeshAxisAttr axis) {
  printer.printString(axis.getName());
  printer << "=" << axis.getSize();
}

Attribute MeshAxisAttr::parse(AsmParser &parser, Type) {
  return parseOptionallyBracketed<MeshAxisAttr>(parser, parseMeshAxisBody);
}

void MeshAxisAttr::print(AsmPrinter &printer) const {
  printer << "<";
  printMeshAxisBody(printer, *this);
  printer << ">";
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
        MeshAxisAttr axis = parseMeshAxisBody(parser);
        if (!axis)
          return failure();
        axes.push_back(axis);
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
  llvm::interleaveComma(getAxes(), printer,
                        [&](MeshAxisAttr axis) { printMeshAxisBody(printer, axis); });
  printer << "]";
  if (!getDeviceIds().empty()) {
    printer << ", device_ids=[";
    llvm::interleaveComma(getDeviceIds(), printer);
    printer << "]";
  }
  printer << ">";
}

/// The most devices a mesh may have (so that device counts and ids fit the
/// 32-bit integers of XLA's device assignment).
static constexpr int64_t kMaxMeshDevices = int64_t(1) << 31;

LogicalResult MeshAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                               ArrayRef<MeshAxisAttr> axes, ArrayRef<int64_t> deviceIds) {
  llvm::StringSet<> seen;
  int64_t numDevices = 1;
  for (MeshAxisAttr axis : axes) {
    if (!seen.insert(axis.getName()).second)
      return emitError() << "mesh has duplicate axis \"" << axis.getName() << "\"";
    if (axis.getSize() > kMaxMeshDevices / numDevices)
      return emitError() << "mesh axes hold more than " << kMaxMeshDevices
                         << " devices (axis \"" << axis.getName() << "\" of size "
                         << axis.getSize() << " after " << numDevices << " devices)";
    numDevices *= axis.getSize();
  }
  if (!deviceIds.empty() && static_cast<int64_t>(deviceIds.size()) != numDevices)
    return emitError() << "mesh has " << deviceIds.size() << " device ids but its axes hold "
                       << numDevices << " devices";
  // std::set, not a DenseSet: those reserve INT64_MAX as their empty key.
  std::set<int64_t> ids;
  for (int64_t id : deviceIds) {
    if (id < 0)
      return emitError() << "mesh device id " << id << " is negative";
    if (!ids.insert(id).second)
      return emitError() << "mesh lists device id " << id << " twice";
  }
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
  std::map<int64_t, StringRef> deviceOwner; // (DenseMap reserves INT64_MAX)
  for (NamedMeshAttr mesh : meshes) {
    if (mesh.getName().empty())
      return emitError() << "topology mesh names must not be empty";
    if (!seen.insert(mesh.getName()).second)
      return emitError() << "topology has duplicate mesh \"" << mesh.getName() << "\"";
    for (int64_t id : mesh.getMesh().getDeviceIds()) {
      auto [it, inserted] = deviceOwner.try_emplace(id, mesh.getName());
      if (!inserted)
        return emitError() << "device id " << id << " is in both mesh \"" << it->second
                           << "\" and mesh \"" << mesh.getName()
                           << "\": meshes of a topology use disjoint devices";
    }
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
// Mesh-assignment origins and meshes with origins
//===----------------------------------------------------------------------===//

/// An origin inside meshes-with-origins: its bare label string.
static OriginAttr parseOriginBody(AsmParser &parser) {
  std::string label;
  if (parser.parseString(&label))
    return {};
  return OriginAttr::get(parser.getContext(), label);
}

Attribute OriginAttr::parse(AsmParser &parser, Type) {
  return parseOptionallyBracketed<OriginAttr>(parser, parseOriginBody);
}

void OriginAttr::print(AsmPrinter &printer) const {
  printer << "<";
  printer.printString(getOriginLabel());
  printer << ">";
}

MeshWithOriginsAttr MeshWithOriginsAttr::parseShort(AsmParser &parser) {
  std::string meshName;
  if (parser.parseString(&meshName))
    return {};
  SmallVector<OriginAttr> origins;
  if (succeeded(parser.parseOptionalLSquare())) {
    // As in jaxlib, the list is only written when it is not empty.
    do {
      OriginAttr origin = parseOriginBody(parser);
      if (!origin)
        return {};
      origins.push_back(origin);
    } while (succeeded(parser.parseOptionalComma()));
    if (parser.parseRSquare())
      return {};
  }
  return MeshWithOriginsAttr::get(parser.getContext(), meshName, origins);
}

void MeshWithOriginsAttr::printShort(AsmPrinter &printer) const {
  printer.printString(getMeshName());
  if (getOrigins().empty())
    return;
  printer << "[";
  llvm::interleaveComma(getOrigins(), printer,
                        [&](OriginAttr origin) { printer.printString(origin.getOriginLabel()); });
  printer << "]";
}

Attribute MeshWithOriginsAttr::parse(AsmParser &parser, Type) {
  return parseOptionallyBracketed<MeshWithOriginsAttr>(parser, MeshWithOriginsAttr::parseShort);
}

void MeshWithOriginsAttr::print(AsmPrinter &printer) const {
  printer << "<";
  printShort(printer);
  printer << ">";
}

Attribute MeshesWithOriginsAttr::parse(AsmParser &parser, Type) {
  SmallVector<MeshWithOriginsAttr> meshes;
  if (parser.parseLess())
    return {};
  if (failed(parser.parseOptionalGreater())) {
    do {
      MeshWithOriginsAttr mesh = MeshWithOriginsAttr::parseShort(parser);
      if (!mesh)
        return {};
      meshes.push_back(mesh);
    } while (succeeded(parser.parseOptionalComma()));
    if (parser.parseGreater())
      return {};
  }
  return MeshesWithOriginsAttr::get(parser.getContext(), meshes);
}

void MeshesWithOriginsAttr::print(AsmPrinter &printer) const {
  printer << "<";
  llvm::interleaveComma(getValue(), printer,
                        [&](MeshWithOriginsAttr mesh) { mesh.printShort(printer); });
  printer << ">";
}

bool MeshesWithOriginsAttr::containsMesh(StringRef meshName) const {
  return llvm::any_of(getValue(), [&](MeshWithOriginsAttr mesh) {
    return mesh.isWildcard() || mesh.getMeshName() == meshName;
  });
}

//===----------------------------------------------------------------------===//
// Shardings
//===----------------------------------------------------------------------===//

/// `"x"` or `"x":(pre)size`
static AxisRefAttr parseAxisRefBody(AsmParser &parser) {
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

static void printAxisRefBody(AsmPrinter &printer, AxisRefAttr axis) {
  printer.printString(axis.getName());
  if (axis.isSubAxis())
    printer << ":(" << axis.getPreSize() << ")" << axis.getSize();
}

Attribute AxisRefAttr::parse(AsmParser &parser, Type) {
  return parseOptionallyBracketed<AxisRefAttr>(parser, parseAxisRefBody);
}

void AxisRefAttr::print(AsmPrinter &printer) const {
  printer << "<";
  printAxisRefBody(printer, *this);
  printer << ">";
}

static ParseResult parseAxisList(AsmParser &parser, SmallVectorImpl<AxisRefAttr> &axes) {
  return parser.parseCommaSeparatedList(AsmParser::Delimiter::Braces, [&]() -> ParseResult {
    AxisRefAttr axis = parseAxisRefBody(parser);
    if (!axis)
      return failure();
    axes.push_back(axis);
    return success();
  });
}

static void printAxisList(AsmPrinter &printer, ArrayRef<AxisRefAttr> axes) {
  printer << "{";
  llvm::interleaveComma(axes, printer, [&](AxisRefAttr axis) { printAxisRefBody(printer, axis); });
  printer << "}";
}

/// `{"x", ?}p1`
static DimShardingAttr parseDimShardingBody(AsmParser &parser) {
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
      AxisRefAttr axis = parseAxisRefBody(parser);
      if (!axis)
        return {};
      axes.push_back(axis);
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

static void printDimShardingBody(AsmPrinter &printer, DimShardingAttr dim) {
  printer << "{";
  llvm::interleaveComma(dim.getAxes(), printer,
                        [&](AxisRefAttr axis) { printAxisRefBody(printer, axis); });
  if (!dim.getIsClosed())
    printer << (dim.getAxes().empty() ? "?" : ", ?");
  printer << "}";
  if (dim.getPriority() >= 0)
    printer << "p" << dim.getPriority();
}

Attribute DimShardingAttr::parse(AsmParser &parser, Type) {
  return parseOptionallyBracketed<DimShardingAttr>(parser, parseDimShardingBody);
}

void DimShardingAttr::print(AsmPrinter &printer) const {
  printer << "<";
  printDimShardingBody(printer, *this);
  printer << ">";
}

Attribute TensorShardingAttr::parse(AsmParser &parser, Type) {
  StringAttr meshName;
  SmallVector<DimShardingAttr> dims;
  SmallVector<AxisRefAttr> replicated, unreduced;
  if (parser.parseLess() || parser.parseSymbolName(meshName) || parser.parseComma() ||
      parser.parseCommaSeparatedList(AsmParser::Delimiter::Square, [&]() -> ParseResult {
        DimShardingAttr dim = parseDimShardingBody(parser);
        if (!dim)
          return failure();
        dims.push_back(dim);
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
  llvm::interleaveComma(getDims(), printer,
                        [&](DimShardingAttr dim) { printDimShardingBody(printer, dim); });
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
