//===- ProgramSerialization.cpp - the exported program as plain structs ----===//

#include "Driver/ProgramSerialization.h"

#include "Common/Fragments.h"
#include "Driver/Diagnostics.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdio>

using namespace mlir;
using namespace mlir::mpmd;

std::string mlir::mpmd::printOp(Operation *op, bool generic, bool debugInfo) {
  std::string text;
  llvm::raw_string_ostream os(text);
  OpPrintingFlags flags;
  if (generic)
    flags.printGenericOpForm();
  if (debugInfo)
    flags.enableDebugInfo(/*enable=*/true, /*prettyForm=*/false);
  op->print(os, flags);
  return text;
}

namespace {

/// A standalone module whose public @main is `callee`, plus the module-level
/// non-function ops of `source` (e.g. Shardy mesh declarations).
std::string fragmentModuleText(ModuleOp source, func::FuncOp callee, int64_t numDevices) {
  OpBuilder builder(source.getContext());
  auto module = ModuleOp::create(source.getLoc(), callee.getSymName());
  module->setAttr(kNumPartitionsAttr, builder.getI32IntegerAttr(numDevices));
  module->setAttr(kNumReplicasAttr, builder.getI32IntegerAttr(1));
  builder.setInsertionPointToEnd(module.getBody());
  for (Operation &op : source.getBody()->getOperations())
    if (!isa<func::FuncOp>(op))
      builder.clone(op);
  auto main = cast<func::FuncOp>(builder.clone(*callee));
  main.setSymName("main");
  main.setPublic();
  main->removeAttr(kMeshShapeAttr);
  std::string text = printOp(module, /*generic=*/true, /*debugInfo=*/true);
  module->erase();
  return text;
}

std::string meshOf(Value v) { return cast<MeshTensorType>(v.getType()).getMeshName().str(); }

/// The memory kind of a value on a mesh ("" when its type names none).
std::string memoryKindOf(Value v) {
  StringAttr kind = cast<MeshTensorType>(v.getType()).getMemoryKind();
  return kind ? kind.getValue().str() : std::string();
}

/// Value ids in order of first appearance in the entry function.
class ValueIds {
public:
  int64_t operator()(Value v) {
    auto [it, inserted] = ids.try_emplace(v, static_cast<int64_t>(ids.size()));
    return it->second;
  }

private:
  llvm::DenseMap<Value, int64_t> ids;
};

/// NumPy's (or ml_dtypes') name of element type `element` (see `TensorSpec`).
std::string dtypeName(Type element) {
  if (auto integer = dyn_cast<IntegerType>(element)) {
    unsigned width = integer.getWidth();
    if (width == 1)
      return "bool";
    return (integer.isUnsigned() ? "uint" : "int") + std::to_string(width);
  }
  if (element.isF16())
    return "float16";
  if (element.isBF16())
    return "bfloat16";
  if (element.isF32())
    return "float32";
  if (element.isF64())
    return "float64";
  if (auto complex = dyn_cast<ComplexType>(element)) {
    Type part = complex.getElementType();
    return part.isF32() ? "complex64" : part.isF64() ? "complex128" : "";
  }
  if (isa<FloatType>(element)) {
    // The small floats: `f8E4M3FN` -> `float8_e4m3fn`, `f4E2M1FN` -> `float4_e2m1fn`.
    std::string text;
    llvm::raw_string_ostream os(text);
    element.print(os);
    StringRef name(text);
    size_t letters = name.find_first_of("EM");
    if (name.starts_with("f") && letters != StringRef::npos)
      return "float" + name.slice(1, letters).str() + "_" + name.drop_front(letters).lower();
  }
  return "";
}

/// `type` as a `TensorSpec` (dtype empty when it is not a static tensor).
::mpmd::TensorSpec tensorSpec(Type type) {
  ::mpmd::TensorSpec spec;
  if (auto tensor = dyn_cast<RankedTensorType>(type); tensor && tensor.hasStaticShape()) {
    spec.dtype = dtypeName(tensor.getElementType());
    llvm::append_range(spec.shape, tensor.getShape());
  }
  return spec;
}

/// Sets `function`'s `calls_host`, `has_side_effects` and `has_loops` from
/// the ops of `callee` (a fragment function holds all of its program: nothing
/// it calls is elsewhere).
void describeEffects(func::FuncOp callee, ::mpmd::FragmentFunction &function) {
  callee.walk([&](Operation *op) {
    StringRef name = op->getName().getStringRef();
    if (name == "stablehlo.while")
      function.has_loops = true;
    if (llvm::is_contained({"stablehlo.send", "stablehlo.recv", "stablehlo.infeed",
                            "stablehlo.outfeed"}, name))
      function.has_side_effects = true;
    if (auto effect = op->getAttrOfType<BoolAttr>("has_side_effect"); effect && effect.getValue())
      function.has_side_effects = true;
    if (name == "stablehlo.custom_call")
      if (auto target = op->getAttrOfType<StringAttr>("call_target_name");
          target && target.getValue().contains("callback"))
        function.calls_host = true;
  });
  function.has_side_effects |= function.calls_host;
}

::mpmd::FragmentFunction serializeFunction(ModuleOp module, func::FuncOp callee,
                                           int64_t numDevices) {
  ::mpmd::FragmentFunction function;
  function.name = callee.getSymName().str();
  function.num_inputs = callee.getNumArguments();
  function.num_outputs = callee.getNumResults();
  for (unsigned i = 0; i < callee.getNumArguments(); ++i)
    if (callee.getArgAttr(i, kBufferDonorAttr) || callee.getArgAttr(i, kAliasingOutputAttr))
      function.donated_args.push_back(i);
  function.module_text = fragmentModuleText(module, callee, numDevices);
  describeEffects(callee, function);
  for (Type type : callee.getArgumentTypes())
    function.input_types.push_back(tensorSpec(type));
  for (Type type : callee.getResultTypes())
    function.output_types.push_back(tensorSpec(type));
  function.accumulated = accumulatedArguments(callee);
  return function;
}

::mpmd::Instruction serializeCall(FragmentCallOp call, ValueIds &idOf) {
  ::mpmd::Instruction inst;
  inst.kind = ::mpmd::Instruction::Kind::kCall;
  inst.callee = call.getCallee().str();
  inst.mesh = call.getMeshName().str();
  for (Value v : call.getOperands())
    inst.operands.push_back(idOf(v));
  for (Value v : call.getResults())
    inst.results.push_back(idOf(v));
  for (Attribute a : call.getOrigin()) {
    auto origin = cast<UserOriginAttr>(a);
    std::string name = origin.getUserName().str();
    if (origin.getTransposeCount())
      name += "(" + std::to_string(origin.getTransposeCount()) + ")";
    inst.origins.push_back(name);
  }
  inst.location = formatLocation(call.getLoc());
  if (auto unit = call->getAttrOfType<StringAttr>(kUnitAttr))
    inst.unit = unit.getValue().str();
  auto partial = call->getAttrOfType<DenseI64ArrayAttr>(kPartialResultsAttr);
  auto sources = call->getAttrOfType<DenseI64ArrayAttr>(kPartialSourcesAttr);
  if (partial && sources)
    for (auto [j, k] : llvm::zip_equal(partial.asArrayRef(), sources.asArrayRef()))
      inst.partial_results.emplace_back(j, k);
  return inst;
}

::mpmd::Instruction serializeTransfer(TransferOp transfer, ValueIds &idOf) {
  ::mpmd::Instruction inst;
  inst.kind = ::mpmd::Instruction::Kind::kTransfer;
  inst.src_mesh = meshOf(transfer.getTensor());
  inst.mesh = meshOf(transfer.getResult());
  inst.operands.push_back(idOf(transfer.getTensor()));
  inst.results.push_back(idOf(transfer.getResult()));
  inst.location = formatLocation(transfer.getLoc());
  inst.donate = transfer->hasAttr(kDonateAttr);
  inst.src_memory_kind = memoryKindOf(transfer.getTensor());
  inst.memory_kind = memoryKindOf(transfer.getResult());
  llvm::raw_string_ostream typeText(inst.value_type);
  cast<MeshTensorType>(transfer.getResult().getType()).getRankedTensorType().print(typeText);
  return inst;
}

/// `value` (a splat integer or float constant) as a `ConstantInput`.
::mpmd::ConstantInput serializeConstant(int64_t id, std::string mesh, DenseElementsAttr value,
                                        bool donated) {
  ::mpmd::ConstantInput constant;
  constant.id = id;
  constant.mesh = std::move(mesh);
  constant.donated = donated;
  llvm::append_range(constant.shape, value.getType().getShape());
  Type element = value.getElementType();
  constant.dtype = dtypeName(element);
  if (auto integer = dyn_cast<IntegerType>(element)) {
    APInt bits = value.getSplatValue<APInt>();
    if (integer.getWidth() == 1)
      constant.value = bits.isZero() ? "0" : "1";
    else
      constant.value = integer.isUnsigned() ? std::to_string(bits.getZExtValue())
                                            : std::to_string(bits.getSExtValue());
  } else {
    char text[64];
    snprintf(text, sizeof(text), "%.17g", value.getSplatValue<APFloat>().convertToDouble());
    constant.value = text;
  }
  return constant;
}

} // namespace

LogicalResult mlir::mpmd::serializeProgram(ModuleOp module, func::FuncOp main,
                                           TopologyAttr topology,
                                           ::mpmd::PartitionResult &result) {
  ValueIds idOf;
  for (BlockArgument arg : main.getArguments()) {
    if (auto value = main.getArgAttrOfType<DenseElementsAttr>(arg.getArgNumber(),
                                                               kConstantArgAttr)) {
      result.constants.push_back(serializeConstant(
          idOf(arg), meshOf(arg), value,
          static_cast<bool>(main.getArgAttr(arg.getArgNumber(), kBufferDonorAttr))));
      result.constants.back().partial =
          static_cast<bool>(main.getArgAttr(arg.getArgNumber(), kPartialSumAttr));
      continue;
    }
    result.input_ids.push_back(idOf(arg));
    result.input_meshes.push_back(meshOf(arg));
    result.input_memory_kinds.push_back(memoryKindOf(arg));
  }
  llvm::StringSet<> serialized;
  for (Operation &op : main.getBody().front()) {
    if (auto call = dyn_cast<FragmentCallOp>(op)) {
      result.program.push_back(serializeCall(call, idOf));
      if (serialized.insert(call.getCallee()).second)
        result.functions.push_back(serializeFunction(
            module, module.lookupSymbol<func::FuncOp>(call.getCallee()),
            topology.getMesh(call.getMeshName()).getNumDevices()));
    } else if (auto transfer = dyn_cast<TransferOp>(op)) {
      result.program.push_back(serializeTransfer(transfer, idOf));
    } else if (auto ret = dyn_cast<func::ReturnOp>(op)) {
      for (Value v : ret.getOperands()) {
        result.output_ids.push_back(idOf(v));
        result.output_meshes.push_back(meshOf(v));
        result.output_memory_kinds.push_back(memoryKindOf(v));
      }
    } else {
      return op.emitError() << "unexpected op left in the partitioned program";
    }
  }
  return success();
}
