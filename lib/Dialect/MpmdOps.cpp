//===- MpmdOps.cpp - mpmd operations ----------------------------------------===//

#include "mpmd/Dialect/MemoryKinds.h"
#include "mpmd/Dialect/MpmdDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/OpImplementation.h"

using namespace mlir;
using namespace mlir::mpmd;

//===----------------------------------------------------------------------===//
// Shared parsing/printing helpers
//===----------------------------------------------------------------------===//

/// Parses `(%operands) {attrs} (%args: types) {region} : (ins) -> outs`, the
/// common tail of named computations and fragments.
static ParseResult parseOperandsBodyAndType(OpAsmParser &parser, OperationState &result) {
  SmallVector<OpAsmParser::UnresolvedOperand> operands;
  llvm::SMLoc operandsLoc = parser.getCurrentLocation();
  SmallVector<OpAsmParser::Argument> args;
  FunctionType type;
  if (parser.parseOperandList(operands, OpAsmParser::Delimiter::Paren) ||
      parser.parseOptionalAttrDict(result.attributes) ||
      parser.parseArgumentList(args, OpAsmParser::Delimiter::Paren, /*allowType=*/true) ||
      parser.parseRegion(*result.addRegion(), args) || parser.parseColonType(type) ||
      parser.resolveOperands(operands, type.getInputs(), operandsLoc, result.operands))
    return failure();
  result.addTypes(type.getResults());
  return success();
}

static void printOperandsBodyAndType(OpAsmPrinter &printer, Operation *op, Region &region) {
  printer << " (" << op->getOperands() << ")";
  printer.printOptionalAttrDict(op->getDiscardableAttrDictionary().getValue());
  printer << " (";
  llvm::interleaveComma(region.getArguments(), printer,
                        [&](BlockArgument arg) { printer.printRegionArgument(arg); });
  printer << ") ";
  printer.printRegion(region, /*printEntryBlockArgs=*/false, /*printBlockTerminators=*/true);
  printer << " : ";
  printer.printFunctionalType(op);
}

static ParseResult parseOriginList(OpAsmParser &parser, OperationState &result, StringAttr name) {
  SmallVector<Attribute> origins;
  if (parser.parseCommaSeparatedList(AsmParser::Delimiter::Square, [&]() -> ParseResult {
        FailureOr<UserOriginAttr> origin = parseShortUserOrigin(parser);
        if (failed(origin))
          return failure();
        origins.push_back(*origin);
        return success();
      }))
    return failure();
  result.addAttribute(name, parser.getBuilder().getArrayAttr(origins));
  return success();
}

static void printOriginList(OpAsmPrinter &printer, ArrayAttr origins) {
  printer << "[";
  llvm::interleaveComma(origins, printer, [&](Attribute origin) {
    printShortUserOrigin(printer, cast<UserOriginAttr>(origin));
  });
  printer << "]";
}

static constexpr StringLiteral kShardingPerValuePrefix = "sharding_per_value<";

/// Shardings on fragments are Shardy's `#sdy.sharding_per_value<[...]>`,
/// which we carry as an opaque attribute; the custom form prints the list.
static ParseResult parseShardingPerValue(OpAsmParser &parser, Attribute &attr) {
  if (failed(parser.parseOptionalLSquare()))
    return parser.parseAttribute(attr);
  std::string text = kShardingPerValuePrefix.str() + "[";
  if (failed(parser.parseOptionalRSquare())) {
    bool first = true;
    do {
      Attribute sharding = TensorShardingAttr::parse(parser, Type());
      if (!sharding)
        return failure();
      std::string printed;
      llvm::raw_string_ostream os(printed);
      sharding.print(os);
      StringRef body(printed);
      body.consume_front("#mpmd.sharding");
      text += (first ? "" : ", ") + body.str();
      first = false;
    } while (succeeded(parser.parseOptionalComma()));
    if (parser.parseRSquare())
      return failure();
  }
  text += "]>";
  MLIRContext *ctx = parser.getContext();
  attr = OpaqueAttr::get(StringAttr::get(ctx, "sdy"), text, NoneType::get(ctx));
  return success();
}

static void printShardingPerValue(OpAsmPrinter &printer, Attribute attr) {
  if (auto opaque = dyn_cast<OpaqueAttr>(attr)) {
    StringRef data = opaque.getAttrData();
    if (opaque.getDialectNamespace() == "sdy" && data.consume_front(kShardingPerValuePrefix) &&
        data.consume_back(">")) {
      printer << data;
      return;
    }
  }
  printer.printAttribute(attr);
}

/// Checks that `type` is a mesh tensor (or a non-tensor value such as a token)
/// of `meshName`, valid for `mesh`.
static LogicalResult verifyMeshValueType(Operation *op, Type type, StringRef meshName,
                                         MeshAttr mesh, StringRef what, unsigned index) {
  auto meshType = dyn_cast<MeshTensorType>(type);
  if (!meshType) {
    if (isa<TensorType>(type))
      return op->emitOpError() << what << " #" << index << " must be a !mpmd.mesh_tensor on mesh \""
                               << meshName << "\", got " << type;
    return success();
  }
  if (meshType.getMeshName() != meshName)
    return op->emitOpError() << what << " #" << index << " lives on mesh \""
                             << meshType.getMeshName() << "\" but the op runs on mesh \""
                             << meshName << "\"";
  return meshType.verifyForMesh(mesh, [&]() { return op->emitOpError(); });
}

/// Checks that `meshName` is in the topology and that every operand and
/// result of `op` is a value on that mesh.
static LogicalResult verifyValuesOnMesh(Operation *op, StringRef meshName) {
  FailureOr<MeshAttr> mesh = getMeshOrError(op, meshName);
  if (failed(mesh))
    return failure();
  for (auto [i, type] : llvm::enumerate(op->getOperandTypes()))
    if (failed(verifyMeshValueType(op, type, meshName, *mesh, "operand", i)))
      return failure();
  for (auto [i, type] : llvm::enumerate(op->getResultTypes()))
    if (failed(verifyMeshValueType(op, type, meshName, *mesh, "result", i)))
      return failure();
  return success();
}

static Type globalType(Type type) {
  if (auto meshType = dyn_cast<MeshTensorType>(type))
    return meshType.getGlobalTensorType();
  return type;
}

/// The `mpmd.return` that ends `block`, or an error on `op` (worded as
/// jaxlib's `SingleBlockImplicitTerminator<"ReturnOp">` reports it).
static FailureOr<ReturnOp> getReturnOrError(Operation *op, Block &block) {
  if (block.empty())
    return op->emitOpError() << "expects a non-empty block";
  if (auto ret = dyn_cast<ReturnOp>(block.back()))
    return ret;
  return op->emitOpError() << "expects regions to end with '" << ReturnOp::getOperationName()
                           << "', found '" << block.back().getName() << "'";
}

/// Checks the block arguments of `region` against `operandTypes` mapped
/// through `map`. Part of the op verifier.
static LogicalResult verifyBlockArguments(Operation *op, Region &region, TypeRange operandTypes,
                                          function_ref<Type(Type)> map) {
  Block &block = region.front();
  if (block.getNumArguments() != operandTypes.size())
    return op->emitOpError() << "has " << operandTypes.size() << " operands but its body takes "
                             << block.getNumArguments() << " arguments";
  for (auto [i, arg, type] : llvm::enumerate(block.getArguments(), operandTypes))
    if (arg.getType() != map(type))
      return op->emitOpError() << "body argument #" << i << " has type " << arg.getType()
                               << " but operand #" << i << " requires " << map(type);
  return success();
}

/// Checks that `region` ends with an `mpmd.return` of `resultTypes` mapped
/// through `map`. Part of the region verifier: it runs once the nested ops
/// (and the generic block checks: a terminator exists and is last) passed,
/// so the errors of the body come first, as in jaxlib.
static LogicalResult verifyReturnedValues(Operation *op, Region &region, TypeRange resultTypes,
                                          function_ref<Type(Type)> map) {
  FailureOr<ReturnOp> terminator = getReturnOrError(op, region.front());
  if (failed(terminator))
    return failure();
  if ((*terminator)->getNumOperands() != resultTypes.size())
    return op->emitOpError() << "has " << resultTypes.size() << " results but its body returns "
                             << (*terminator)->getNumOperands() << " values";
  for (auto [i, value, type] : llvm::enumerate((*terminator)->getOperands(), resultTypes))
    if (value.getType() != map(type))
      return op->emitOpError() << "body returns " << value.getType() << " as value #" << i
                               << " but result #" << i << " requires " << map(type);
  return success();
}

static Type identityType(Type type) { return type; }

//===----------------------------------------------------------------------===//
// NamedComputationOp
//===----------------------------------------------------------------------===//

ParseResult NamedComputationOp::parse(OpAsmParser &parser, OperationState &result) {
  if (parser.parseLess())
    return failure();
  FailureOr<UserOriginAttr> origin = parseShortUserOrigin(parser);
  if (failed(origin) || parser.parseGreater())
    return failure();
  result.addAttribute(getOriginAttrName(result.name), *origin);
  return parseOperandsBodyAndType(parser, result);
}

void NamedComputationOp::print(OpAsmPrinter &printer) {
  printer << "<";
  printShortUserOrigin(printer, getOrigin());
  printer << ">";
  printOperandsBodyAndType(printer, getOperation(), getRegion());
}

LogicalResult NamedComputationOp::verify() {
  for (Type t : llvm::concat<const Type>(getOperandTypes(), getResultTypes()))
    if (isa<MeshTensorType>(t))
      return emitOpError() << "takes and returns local values, not mesh tensors: got " << t;
  return verifyBlockArguments(*this, getRegion(), getOperandTypes(), identityType);
}

LogicalResult NamedComputationOp::verifyRegions() {
  return verifyReturnedValues(*this, getRegion(), getResultTypes(), identityType);
}

//===----------------------------------------------------------------------===//
// NamedTensorOp, ReduceOp
//===----------------------------------------------------------------------===//

LogicalResult NamedTensorOp::verify() {
  if (getName().empty())
    return emitOpError() << "name must not be empty";
  return success();
}

LogicalResult ReduceOp::verify() {
  if (getTensors().empty())
    return emitOpError() << "needs at least one operand";
  if (getReduction().getReductionType() == ReductionType::kNone && getTensors().size() != 1)
    return emitOpError() << "with reduction `none` takes exactly one operand, got "
                         << getTensors().size();
  for (auto [i, type] : llvm::enumerate(getTensors().getTypes()))
    if (type != getType())
      return emitOpError() << "operand #" << i << " has type " << type
                           << " but the result has type " << getType();
  return success();
}

//===----------------------------------------------------------------------===//
// CallOp
//===----------------------------------------------------------------------===//

LogicalResult CallOp::verify() {
  for (Type t : llvm::concat<const Type>(getOperandTypes(), getResultTypes()))
    if (!isa<TensorType, MeshTensorType>(t))
      return emitOpError() << "passes tensors and mesh tensors only, got " << t;
  if (Attribute counter = (*this)->getAttr(kCallCounterAttr)) {
    auto intAttr = dyn_cast<IntegerAttr>(counter);
    if (!intAttr || !intAttr.getType().isUnsignedInteger(32))
      return emitOpError() << "attribute `call_counter` must be a ui32 integer, got " << counter;
  }
  // Calls are inlined where they are: inside another op's region (a loop of
  // another dialect) the microbatch would run in that op, which no mesh holds.
  Operation *parent = (*this)->getParentOp();
  if (!isa<func::FuncOp, ForOp>(parent))
    return emitOpError() << "calls @" << getCallee() << " from inside '" << parent->getName()
                         << "': an mpmd.call can only be made in a function or an mpmd.for "
                            "body (loop over microbatches with mpmd.fori_loop, not lax "
                            "control flow)";
  // In a function with a topology, only the entry point calls: a program's
  // calls are one level deep, under the function whose meshes they use.
  auto func = (*this)->getParentOfType<func::FuncOp>();
  if (func && func->hasAttr(kTopologyAttr) && !func.isPublic())
    return emitOpError() << "calls @" << getCallee() << " from @" << func.getSymName()
                         << ", a function with a topology that is not the entry point: in a "
                            "function with a topology only the entry point (the public, main "
                            "function) makes mpmd.calls; call @"
                         << getCallee() << " from the entry point, or drop the topology of @"
                         << func.getSymName();
  return success();
}

LogicalResult CallOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  auto callee = symbolTable.lookupNearestSymbolFrom<func::FuncOp>(*this, getCalleeAttr());
  if (!callee)
    return emitOpError() << "calls @" << getCallee() << " which is not a func.func in the module";
  FunctionType type = callee.getFunctionType();
  if (TypeRange(type.getInputs()) != TypeRange(getOperandTypes()) ||
      TypeRange(type.getResults()) != TypeRange(getResultTypes()))
    return emitOpError() << "has type " << FunctionType::get(getContext(), getOperandTypes(),
                                                             getResultTypes())
                         << " but callee @" << getCallee() << " has type " << type;
  return success();
}

//===----------------------------------------------------------------------===//
// ForOp
//===----------------------------------------------------------------------===//

ParseResult ForOp::parse(OpAsmParser &parser, OperationState &result) {
  SmallVector<OpAsmParser::UnresolvedOperand> operands;
  llvm::SMLoc operandsLoc = parser.getCurrentLocation();
  SmallVector<OpAsmParser::Argument> args;
  SmallVector<Type> types;
  if (parser.parseOperandList(operands, OpAsmParser::Delimiter::Paren) ||
      parser.parseOptionalAttrDict(result.attributes) ||
      parser.parseArgumentList(args, OpAsmParser::Delimiter::Paren, /*allowType=*/true) ||
      parser.parseRegion(*result.addRegion(), args) || parser.parseOptionalColonTypeList(types) ||
      parser.resolveOperands(operands, types, operandsLoc, result.operands))
    return failure();
  result.addTypes(types);
  return success();
}

void ForOp::print(OpAsmPrinter &printer) {
  printer << " (" << getTensors() << ")";
  SmallVector<NamedAttribute> attrs((*this)->getDiscardableAttrs());
  attrs.push_back(NamedAttribute(getIterationsAttrName(), getIterationsAttr()));
  if (getUnrollFactorAttr())
    attrs.push_back(NamedAttribute(getUnrollFactorAttrName(), getUnrollFactorAttr()));
  printer.printOptionalAttrDict(DictionaryAttr::get(getContext(), attrs).getValue());
  printer << " (";
  llvm::interleaveComma(getRegion().getArguments(), printer,
                        [&](BlockArgument arg) { printer.printRegionArgument(arg); });
  printer << ") ";
  printer.printRegion(getRegion(), /*printEntryBlockArgs=*/false, /*printBlockTerminators=*/true);
  if (getNumResults() != 0)
    printer << " : " << getResultTypes();
}

void ForOp::getAsmBlockArgumentNames(Region &region, OpAsmSetValueNameFn setNameFn) {
  if (!region.empty() && region.front().getNumArguments() > 0)
    setNameFn(region.front().getArguments().back(), "index");
}

LogicalResult ForOp::verify() {
  uint32_t iterations = getIterations();
  if (iterations == 0)
    return emitOpError() << "must have at least one iteration";
  if (std::optional<uint32_t> unroll = getUnrollFactor()) {
    if (*unroll == 0 || iterations % *unroll != 0)
      return emitOpError() << "unroll_factor " << *unroll << " must divide iterations "
                           << iterations;
  }
  if (getResultTypes() != getTensors().getTypes())
    return emitOpError() << "result types must equal the carried operand types";
  if (!getTensors().empty() && !llvm::all_of(getTensors().getTypes(), [&](Type t) {
        return t.getTypeID() == getTensors().front().getType().getTypeID();
      }))
    return emitOpError() << "carried values must be all mesh tensors or all local tensors";
  Block &block = getRegion().front();
  if (block.getNumArguments() != getTensors().size() + 1)
    return emitOpError() << "body must take the " << getTensors().size()
                         << " carried values and a trailing tensor<ui32> index, got "
                         << block.getNumArguments() << " arguments";
  auto indexType = dyn_cast<RankedTensorType>(block.getArguments().back().getType());
  if (!indexType || indexType.getRank() != 0 || !indexType.getElementType().isUnsignedInteger(32))
    return emitOpError() << "last body argument must be the index of type tensor<ui32>, got "
                         << block.getArguments().back().getType();
  for (auto [i, arg, type] : llvm::enumerate(block.getArguments().drop_back(), getTensors().getTypes()))
    if (arg.getType() != type)
      return emitOpError() << "body argument #" << i << " has type " << arg.getType()
                           << " but operand #" << i << " has type " << type;
  return success();
}

LogicalResult ForOp::verifyRegions() {
  FailureOr<ReturnOp> terminator = getReturnOrError(*this, getRegion().front());
  if (failed(terminator))
    return failure();
  if (TypeRange((*terminator)->getOperandTypes()) != getResultTypes())
    return emitOpError() << "body must return the carried types " << getResultTypes();
  return success();
}

//===----------------------------------------------------------------------===//
// FragmentOp
//===----------------------------------------------------------------------===//

ParseResult FragmentOp::parse(OpAsmParser &parser, OperationState &result) {
  std::string meshName;
  if (parser.parseLess() || parser.parseKeyword("mesh") || parser.parseEqual() ||
      parser.parseString(&meshName) || parser.parseComma() || parser.parseKeyword("origin") ||
      parser.parseEqual() || parseOriginList(parser, result, getOriginAttrName(result.name)))
    return failure();
  result.addAttribute(getMeshNameAttrName(result.name), parser.getBuilder().getStringAttr(meshName));
  while (succeeded(parser.parseOptionalComma())) {
    StringRef keyword;
    llvm::SMLoc loc = parser.getCurrentLocation();
    if (parser.parseKeyword(&keyword) || parser.parseEqual())
      return failure();
    if (keyword == "stage") {
      int64_t stage;
      if (parser.parseInteger(stage))
        return failure();
      result.addAttribute(getStageIdAttrName(result.name), parser.getBuilder().getI64IntegerAttr(stage));
    } else if (keyword == "in_shardings" || keyword == "out_shardings") {
      Attribute attr;
      if (parseShardingPerValue(parser, attr))
        return failure();
      result.addAttribute(keyword == "in_shardings" ? getInShardingsAttrName(result.name)
                                                    : getOutShardingsAttrName(result.name),
                          attr);
    } else {
      return parser.emitError(loc, "expected `stage`, `in_shardings` or `out_shardings`, got `")
             << keyword << "`";
    }
  }
  if (parser.parseGreater())
    return failure();
  return parseOperandsBodyAndType(parser, result);
}

void FragmentOp::print(OpAsmPrinter &printer) {
  printer << "<mesh=";
  printer.printString(getMeshName());
  printer << ", origin=";
  printOriginList(printer, getOrigin());
  if (std::optional<int64_t> stage = getStageId())
    printer << ", stage=" << *stage;
  if (Attribute in = getInShardingsAttr()) {
    printer << ", in_shardings=";
    printShardingPerValue(printer, in);
  }
  if (Attribute out = getOutShardingsAttr()) {
    printer << ", out_shardings=";
    printShardingPerValue(printer, out);
  }
  printer << ">";
  printOperandsBodyAndType(printer, getOperation(), getRegion());
}

LogicalResult FragmentOp::verify() {
  if (failed(verifyValuesOnMesh(*this, getMeshName())))
    return failure();
  if (std::optional<int64_t> stage = getStageId(); stage && *stage < 0)
    return emitOpError() << "stage id must be >= 0, got " << *stage;
  for (auto [name, attr] : {std::pair<StringRef, Attribute>{"in_shardings", getInShardingsAttr()},
                            {"out_shardings", getOutShardingsAttr()}}) {
    auto opaque = dyn_cast_or_null<OpaqueAttr>(attr);
    if (attr && !(opaque && opaque.getDialectNamespace() == "sdy" &&
                  opaque.getAttrData().starts_with(kShardingPerValuePrefix)))
      return emitOpError() << name << " must be a #sdy.sharding_per_value<[...]> list, got " << attr;
  }
  return verifyBlockArguments(*this, getRegion(), getOperandTypes(), globalType);
}

LogicalResult FragmentOp::verifyRegions() {
  return verifyReturnedValues(*this, getRegion(), getResultTypes(), globalType);
}

//===----------------------------------------------------------------------===//
// FragmentCallOp
//===----------------------------------------------------------------------===//

ParseResult FragmentCallOp::parse(OpAsmParser &parser, OperationState &result) {
  std::string meshName;
  FlatSymbolRefAttr callee;
  SmallVector<OpAsmParser::UnresolvedOperand> operands;
  FunctionType type;
  if (parser.parseLess() || parser.parseKeyword("mesh") || parser.parseEqual() ||
      parser.parseString(&meshName) || parser.parseComma() || parser.parseKeyword("origin") ||
      parser.parseEqual() || parseOriginList(parser, result, getOriginAttrName(result.name)) ||
      parser.parseGreater() || parser.parseAttribute(callee))
    return failure();
  llvm::SMLoc operandsLoc = parser.getCurrentLocation();
  if (parser.parseOperandList(operands, OpAsmParser::Delimiter::Paren) ||
      parser.parseOptionalAttrDict(result.attributes) || parser.parseColonType(type) ||
      parser.resolveOperands(operands, type.getInputs(), operandsLoc, result.operands))
    return failure();
  result.addAttribute(getMeshNameAttrName(result.name), parser.getBuilder().getStringAttr(meshName));
  result.addAttribute(getCalleeAttrName(result.name), callee);
  result.addTypes(type.getResults());
  return success();
}

void FragmentCallOp::print(OpAsmPrinter &printer) {
  printer << "<mesh=";
  printer.printString(getMeshName());
  printer << ", origin=";
  printOriginList(printer, getOrigin());
  printer << "> ";
  printer.printAttributeWithoutType(getCalleeAttr());
  printer << "(" << getTensors() << ")";
  printer.printOptionalAttrDict((*this)->getDiscardableAttrDictionary().getValue());
  printer << " : ";
  printer.printFunctionalType(getOperation());
}

LogicalResult FragmentCallOp::verify() {
  for (Type t : llvm::concat<const Type>(getOperandTypes(), getResultTypes()))
    if (!isa<MeshTensorType>(t))
      return emitOpError() << "passes mesh tensors only, got " << t;
  return verifyValuesOnMesh(*this, getMeshName());
}

LogicalResult FragmentCallOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  auto callee = symbolTable.lookupNearestSymbolFrom<func::FuncOp>(*this, getCalleeAttr());
  if (!callee)
    return emitOpError() << "calls @" << getCallee() << " which is not a func.func in the module";
  if (!callee->hasAttr(kMeshShapeAttr))
    return emitOpError() << "callee @" << getCallee() << " has no `mesh_shape` attribute";
  TopologyAttr topology = getTopology(*this);
  MeshAttr mesh = topology ? topology.getMesh(getMeshName()) : MeshAttr();
  if (!mesh)
    return success(); // Reported by the op verifier.
  // The callee is the fragment body in the global view (XLA partitions it
  // over the mesh), so it takes and returns the global tensor types.
  FunctionType type = callee.getFunctionType();
  if (type.getNumInputs() != getNumOperands() || type.getNumResults() != getNumResults())
    return emitOpError() << "passes " << getNumOperands() << " operands and expects "
                         << getNumResults() << " results but callee @" << getCallee()
                         << " has type " << type;
  for (auto [i, operand, input] : llvm::enumerate(getOperandTypes(), type.getInputs()))
    if (globalType(operand) != input)
      return emitOpError() << "operand #" << i << " has global type " << globalType(operand)
                           << " but callee @" << getCallee() << " takes " << input;
  for (auto [i, result, output] : llvm::enumerate(getResultTypes(), type.getResults()))
    if (globalType(result) != output)
      return emitOpError() << "result #" << i << " has global type " << globalType(result)
                           << " but callee @" << getCallee() << " returns " << output;
  return success();
}

//===----------------------------------------------------------------------===//
// TransferOp, AssignOp, UnassignOp
//===----------------------------------------------------------------------===//

static LogicalResult verifyOnMesh(Operation *op, MeshTensorType type) {
  FailureOr<MeshAttr> mesh = getMeshOrError(op, type.getMeshName());
  if (failed(mesh))
    return failure();
  return type.verifyForMesh(*mesh, [&]() { return op->emitOpError(); });
}

static LogicalResult verifyNoMemoryKindAttributes(TransferOp op);

LogicalResult TransferOp::verify() {
  auto in = dyn_cast<MeshTensorType>(getTensor().getType());
  auto out = dyn_cast<MeshTensorType>(getType());
  if (!in || !out)
    return emitOpError() << "transfers a !mpmd.mesh_tensor to a !mpmd.mesh_tensor, got "
                         << getTensor().getType() << " -> " << getType();
  if (in.getGlobalTensorType() != out.getGlobalTensorType())
    return emitOpError() << "must keep the global type, got " << in.getGlobalTensorType()
                         << " -> " << out.getGlobalTensorType();
  if (failed(verifyOnMesh(*this, in)) || failed(verifyOnMesh(*this, out)))
    return failure();
  for (MeshTensorType t : {in, out})
    if (StringAttr kind = t.getMemoryKind();
        kind && !isAssignableMemoryKind(kind.getValue()))
      return emitOpError() << "transfers into and out of memory kinds "
                           << listMemoryKinds(kAssignableMemoryKinds, '"') << " only, got \""
                           << kind.getValue() << "\"";
  return verifyNoMemoryKindAttributes(*this);
}

/// The memory kind `attrs` (an argument's or result's attribute dictionary)
/// gives with `mhlo.memory_kind`, if any.
static StringAttr memoryKindIn(DictionaryAttr attrs) {
  return attrs ? attrs.getAs<StringAttr>(kMhloMemoryKindAttr) : StringAttr();
}

/// A transfer reads and writes the memory its types name: a memory kind
/// other than "device" given by attribute (on the transfer, or on the
/// function argument or fragment result it reads) would be ignored, so it is
/// an error.
static LogicalResult verifyNoMemoryKindAttributes(TransferOp op) {
  if (auto kind = op->getAttrOfType<StringAttr>(kMhloMemoryKindAttr))
    return op.emitOpError() << "has " << kMhloMemoryKindAttr << " = \"" << kind.getValue()
                            << "\", which transfers do not read (transfers to host with "
                               "attributes are not supported): give the memory kind in the "
                               "result type, !mpmd.mesh_tensor<..., memory_kind=\""
                            << kind.getValue() << "\">";
  Value source = op.getTensor();
  StringAttr kind;
  std::string what;
  if (auto arg = dyn_cast<BlockArgument>(source)) {
    if (auto func = dyn_cast<FunctionOpInterface>(arg.getOwner()->getParentOp());
        func && arg.getOwner()->isEntryBlock()) {
      kind = memoryKindIn(func.getArgAttrDict(arg.getArgNumber()));
      what = "argument #" + std::to_string(arg.getArgNumber()) + " of the function";
    }
  } else if (auto fragment = source.getDefiningOp<FragmentOp>()) {
    unsigned i = cast<OpResult>(source).getResultNumber();
    if (auto resAttrs = fragment->getAttrOfType<ArrayAttr>("res_attrs");
        resAttrs && i < resAttrs.size())
      kind = memoryKindIn(dyn_cast<DictionaryAttr>(resAttrs[i]));
    what = "result #" + std::to_string(i) + " of a fragment";
  }
  if (!kind || kind.getValue() == kDeviceMemoryKind)
    return success();
  return op.emitOpError() << "reads " << what << ", which is marked " << kMhloMemoryKindAttr
                          << " = \"" << kind.getValue()
                          << "\", but transfers from host with attributes are not supported: "
                             "the transfer would read it as device memory; give the memory "
                             "kind in its type, !mpmd.mesh_tensor<..., memory_kind=\""
                          << kind.getValue() << "\">";
}

LogicalResult AssignOp::verify() {
  auto out = dyn_cast<MeshTensorType>(getType());
  if (!out)
    return emitOpError() << "result must be a !mpmd.mesh_tensor, got " << getType();
  if (out.getGlobalTensorType() != getTensor().getType())
    return emitOpError() << "assigns " << getTensor().getType() << " to a mesh tensor of "
                         << out.getGlobalTensorType();
  return verifyOnMesh(*this, out);
}

LogicalResult UnassignOp::verify() {
  auto in = dyn_cast<MeshTensorType>(getTensor().getType());
  if (!in)
    return emitOpError() << "operand must be a !mpmd.mesh_tensor, got " << getTensor().getType();
  if (in.getGlobalTensorType() != getType())
    return emitOpError() << "unassigns a mesh tensor of " << in.getGlobalTensorType() << " to "
                         << getType();
  return verifyOnMesh(*this, in);
}

#define GET_OP_CLASSES
#include "mpmd/Dialect/MpmdOps.cpp.inc"
