//===- LowerToFragmentCalls.cpp - outline fragments into functions ----------===//

#include "Common/PassBase.h"
#include "Common/Fragments.h"
#include "Common/StructuralKey.h"
#include "mpmd/Dialect/MpmdAttrNames.h"
#include "mpmd/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"

namespace mlir::mpmd {
#define GEN_PASS_DEF_LOWERTOFRAGMENTCALLSPASS
#include "mpmd/Transforms/Passes.h.inc"

namespace {

Type globalType(Type t) {
  if (auto meshType = dyn_cast<MeshTensorType>(t))
    return meshType.getGlobalTensorType();
  return t;
}

/// `#sdy.mesh<...>` for `mesh`: the form Shardy and XLA read.
Attribute meshShapeAttr(MeshAttr mesh) {
  std::string text;
  llvm::raw_string_ostream os(text);
  Attribute(mesh).print(os);
  StringRef body(text);
  body.consume_front("#mpmd.");
  MLIRContext *ctx = mesh.getContext();
  return OpaqueAttr::get(StringAttr::get(ctx, "sdy"), body, NoneType::get(ctx));
}

/// Whether `fragment` computes part of a backward pass (an origin with a
/// transpose count above 0).
bool hasBackwardOrigin(FragmentOp fragment) {
  return llvm::any_of(fragment.getOrigin(), [](Attribute a) {
    return cast<UserOriginAttr>(a).getTransposeCount() > 0;
  });
}

/// `text` with every character but letters, digits and `_` replaced by `_`.
std::string sanitized(StringRef text) {
  std::string name = text.str();
  for (char &c : name)
    if (!llvm::isAlnum(c) && c != '_')
      c = '_';
  return name;
}

/// A readable base name for the function of `fragment`: its origins' names
/// (at most three), followed by `_fwd`, `_bwd` or `_fwd_bwd` when `directions`
/// (the program has a backward pass); `inferred` for an inferred fragment.
std::string baseName(FragmentOp fragment, bool directions) {
  if (!fragment.isUserFragment())
    return "inferred";
  llvm::SetVector<StringRef> names;
  bool fwd = false, bwd = false;
  for (Attribute a : fragment.getOrigin()) {
    auto origin = cast<UserOriginAttr>(a);
    names.insert(origin.getUserName());
    (origin.getTransposeCount() == 0 ? fwd : bwd) = true;
  }
  std::string name;
  for (auto [i, n] : llvm::enumerate(names)) {
    if (i == 3) {
      name += "_etc";
      break;
    }
    name += (i ? "_" : "") + n.str();
  }
  name = sanitized(name);
  if (!directions)
    return name;
  return name + (fwd && bwd ? "_fwd_bwd" : bwd ? "_bwd" : "_fwd");
}

/// The program's name, which every fragment function's name ends with: the
/// module's name without JAX's `jit_` prefix (`module @jit_step` -> `step`),
/// `main` for a module without a name.
std::string programName(ModuleOp module) {
  std::optional<StringRef> name = module.getName();
  if (!name || name->empty())
    return "main";
  StringRef text = *name;
  if (text.starts_with("jit_") && text.size() > 4)
    text = text.drop_front(4);
  return sanitized(text);
}

/// The origins of `fragment` for the log: `[foo, bar]`, or with directions
/// `[foo(fwd), bar(bwd)]`.
std::string describeOrigins(FragmentOp fragment, bool directions) {
  std::string text = "[";
  for (auto [i, a] : llvm::enumerate(fragment.getOrigin())) {
    auto origin = cast<UserOriginAttr>(a);
    text += (i ? ", " : "") + origin.getUserName().str();
    if (directions)
      text += origin.getTransposeCount() > 0 ? "(bwd)" : "(fwd)";
  }
  return text + "]";
}

/// The `arg_attrs` or `res_attrs` array of `fragment` (named `name`) as
/// dictionaries, one per operand or result (`count`); empty when it has none.
FailureOr<SmallVector<DictionaryAttr>> attrDictionaries(FragmentOp fragment, StringRef name,
                                                        unsigned count) {
  SmallVector<DictionaryAttr> dicts;
  Attribute attr = fragment->getAttr(name);
  if (!attr)
    return dicts;
  auto array = dyn_cast<ArrayAttr>(attr);
  if (!array || array.size() != count ||
      !llvm::all_of(array, [](Attribute a) { return isa<DictionaryAttr>(a); })) {
    fragment.emitOpError() << "has `" << name << "` that is not an array of " << count
                           << " dictionaries (one per "
                           << (name == kFragmentArgAttrsAttr ? "operand" : "result")
                           << "); fix or remove it";
    return failure();
  }
  for (Attribute a : array)
    dicts.push_back(cast<DictionaryAttr>(a));
  return dicts;
}

/// Whether `op` is an elementwise StableHLO op (StableHLO is not registered
/// here: its ops are known by name).
bool isElementwise(Operation *op) {
  static const llvm::StringSet<> names = {
      "stablehlo.add",      "stablehlo.subtract", "stablehlo.multiply", "stablehlo.divide",
      "stablehlo.maximum",  "stablehlo.minimum",  "stablehlo.negate",   "stablehlo.abs",
      "stablehlo.select",   "stablehlo.clamp",    "stablehlo.sqrt",     "stablehlo.rsqrt",
      "stablehlo.power",    "stablehlo.remainder", "stablehlo.exponential", "stablehlo.log",
      "stablehlo.tanh",     "stablehlo.logistic", "stablehlo.sign",     "stablehlo.and",
      "stablehlo.or",       "stablehlo.xor",      "stablehlo.not",      "stablehlo.convert"};
  return names.contains(op->getName().getStringRef());
}

/// The results an argument -> result pairing gives a donor.
llvm::DenseSet<unsigned> pairedResults(const llvm::DenseMap<unsigned, unsigned> &aliasOf) {
  llvm::DenseSet<unsigned> paired;
  for (auto [arg, j] : aliasOf)
    paired.insert(j);
  return paired;
}

/// The first step of `aliasByDataflow`: each result takes the nearest donated
/// argument of its type (among `free`, which loses it) that it is computed
/// from by elementwise ops (an accumulator `acc + g`, an update `p - lr * g`).
void aliasElementwiseUpdates(Block &entry, llvm::DenseSet<unsigned> &free,
                             llvm::DenseMap<unsigned, unsigned> &aliasOf) {
  Operation *terminator = entry.getTerminator();
  for (auto [j, result] : llvm::enumerate(terminator->getOperands())) {
    Type type = result.getType();
    // Breadth first, through ops whose operands of this type flow into the
    // result elementwise; a few levels suffice for an accumulation or update.
    SmallVector<Value> level{result};
    llvm::DenseSet<Value> seen{result};
    std::optional<unsigned> found;
    for (int depth = 0; depth < 6 && !level.empty() && !found; ++depth) {
      SmallVector<Value> next;
      for (Value v : level) {
        if (auto arg = dyn_cast<BlockArgument>(v)) {
          if (arg.getOwner() == &entry && free.contains(arg.getArgNumber()) &&
              (!found || arg.getArgNumber() < *found))
            found = arg.getArgNumber();
          continue;
        }
        Operation *def = v.getDefiningOp();
        if (!def || !isElementwise(def))
          continue;
        for (Value operand : def->getOperands())
          if (operand.getType() == type && seen.insert(operand).second)
            next.push_back(operand);
      }
      level = std::move(next);
    }
    if (found) {
      free.erase(*found);
      aliasOf[*found] = j;
    }
  }
}

/// The second step of `aliasByDataflow`: results still without a buffer
/// take donated arguments whose every use comes before them.
void aliasStashedArguments(Block &entry, ArrayRef<int64_t> donated,
                           llvm::DenseSet<unsigned> &free,
                           llvm::DenseMap<unsigned, unsigned> &aliasOf) {
  Operation *terminator = entry.getTerminator();
  // Each result not paired yet takes, among the donated arguments of its type
  // left, the one whose last use comes first, if every use of it is an op
  // the result is computed from (a stashed activation the backward pass read
  // early): its buffer is free by then in any order XLA schedules the body.
  // (Program order is not enough: a use the result does not depend on may
  // run after the result is written, and XLA copies to keep both.)
  llvm::DenseMap<Operation *, unsigned> position;
  for (auto [k, op] : llvm::enumerate(entry.without_terminator()))
    position[&op] = k;
  // Donated argument left -> the position of its last use (none for one
  // returned as it is: its buffer is a result already).
  llvm::DenseMap<unsigned, unsigned> lastUse;
  for (unsigned index : free) {
    unsigned last = 0;
    bool returned = false;
    for (Operation *user : entry.getArgument(index).getUsers()) {
      Operation *top = entry.findAncestorOpInBlock(*user);
      returned |= !top || top == terminator;
      if (top && top != terminator)
        last = std::max(last, position.lookup(top));
    }
    if (!returned)
      lastUse[index] = last;
  }
  llvm::DenseSet<unsigned> paired = pairedResults(aliasOf);
  // The ops of the block `def` is computed from (itself included).
  auto sliceOf = [&](Operation *def) {
    llvm::DenseSet<Operation *> slice;
    SmallVector<Operation *> work{def};
    while (!work.empty()) {
      Operation *op = work.pop_back_val();
      if (!slice.insert(op).second)
        continue;
      op->walk([&](Operation *inner) {
        for (Value operand : inner->getOperands())
          if (Operation *producer = operand.getDefiningOp())
            if (Operation *top = entry.findAncestorOpInBlock(*producer))
              work.push_back(top);
      });
    }
    return slice;
  };
  for (auto [j, result] : llvm::enumerate(terminator->getOperands())) {
    Operation *def = result.getDefiningOp();
    // XLA fuses a concatenation with the ops that compute its pieces (a
    // packed buffer's, -mpmd-pack-fragment-values): a donor they read would
    // be read while the result is written, and XLA copies to keep both.
    if (paired.contains(j) || !def || def->getBlock() != &entry ||
        def->getName().getStringRef() == "stablehlo.concatenate")
      continue;
    std::optional<llvm::DenseSet<Operation *>> slice; // computed once, if needed
    auto feedsResult = [&](unsigned index) {
      if (!slice)
        slice = sliceOf(def);
      return llvm::all_of(entry.getArgument(index).getUsers(), [&](Operation *user) {
        Operation *top = entry.findAncestorOpInBlock(*user);
        return top && slice->contains(top);
      });
    };
    std::optional<std::pair<unsigned, unsigned>> best;  // (last use, argument)
    for (unsigned index : donated) {
      auto last = lastUse.find(index);
      if (!free.contains(index) || last == lastUse.end() ||
          entry.getArgument(index).getType() != result.getType())
        continue;
      if (last->second < position.lookup(def) &&
          (!best || std::make_pair(last->second, index) < *best) && feedsResult(index))
        best = std::make_pair(last->second, index);
    }
    if (best) {
      free.erase(best->second);
      aliasOf[best->second] = j;
    }
  }
}

/// Pairs the donated arguments of `callee` with the results they become:
/// result j aliases the nearest donated argument of its type it is computed
/// from by elementwise ops (an accumulator `acc + g`, an update
/// `p - lr * g`), else one of its type no longer used when it is computed.
/// Returns argument -> result. Without it XLA pairs buffer
/// donors with results by position, and when a body returns its
/// accumulators in another order than it takes them, it copies every one of
/// them twice per call (once out of the way, once into place).
llvm::DenseMap<unsigned, unsigned> aliasByDataflow(func::FuncOp callee,
                                                   ArrayRef<int64_t> donated) {
  llvm::DenseMap<unsigned, unsigned> aliasOf;
  if (donated.empty())
    return aliasOf;
  Block &entry = callee.getBody().front();
  llvm::DenseSet<unsigned> free(donated.begin(), donated.end());
  aliasElementwiseUpdates(entry, free, aliasOf);
  aliasStashedArguments(entry, donated, free, aliasOf);
  return aliasOf;
}

/// The attributes of a fragment that its function takes rather than its call.
bool belongsToFunction(StringRef name) {
  return name == kDonatedOperandsAttr || name == kReservedHbmBytesAttr ||
         name == kFragmentArgAttrsAttr || name == kFragmentResAttrsAttr;
}

class LowerToFragmentCallsPass
    : public CheckedPass<LowerToFragmentCallsPass, impl::LowerToFragmentCallsPassBase> {
public:
  using CheckedPass::CheckedPass;

private:
  /// Marks the operands of `callee` the fragment may consume (its
  /// `mpmd.donated_operands`): `tf.aliasing_output` naming the result that
  /// reuses their buffer (`aliasByDataflow`), else `jax.buffer_donor` (XLA
  /// chooses). Arguments the fragment's `arg_attrs` already mark are kept.
  void markDonatedArguments(FragmentOp fragment, func::FuncOp callee, OpBuilder &builder) {
    auto donatedAttr = fragment->getAttrOfType<DenseI64ArrayAttr>(kDonatedOperandsAttr);
    if (!donatedAttr)
      return;
    SmallVector<int64_t> donated;
    for (int64_t index : donatedAttr.asArrayRef())
      if (!callee.getArgAttr(index, kAliasingOutputAttr) &&
          !callee.getArgAttr(index, kBufferDonorAttr))
        donated.push_back(index);
    llvm::DenseMap<unsigned, unsigned> aliasOf = aliasByDataflow(callee, donated);
    llvm::DenseSet<unsigned> paired = pairedResults(aliasOf);
    llvm::DenseSet<Type> unpairedResultTypes;
    for (auto [j, type] : llvm::enumerate(callee.getResultTypes()))
      if (!paired.contains(j))
        unpairedResultTypes.insert(type);
    Block &entry = callee.getBody().front();
    for (int64_t index : donated) {
      auto it = aliasOf.find(index);
      BlockArgument arg = entry.getArgument(index);
      if (it != aliasOf.end())
        callee.setArgAttr(index, kAliasingOutputAttr, builder.getI32IntegerAttr(it->second));
      // XLA pairs a donor with a result of its type by position, and copies
      // when the result is written while the donor is still read: a donor
      // left over where `aliasByDataflow` found no safe result of its type
      // stays undonated (the runtime frees it at its last use), unless it is
      // returned as it is (its own result).
      else if (!unpairedResultTypes.contains(arg.getType()) ||
               llvm::is_contained(entry.getTerminator()->getOperands(), arg))
        callee.setArgAttr(index, kBufferDonorAttr, builder.getBoolAttr(true));
    }
  }

  /// The function `fragment` becomes (not yet named nor in the module).
  FailureOr<func::FuncOp> outline(FragmentOp fragment, MeshAttr mesh, OpBuilder &builder) {
    FailureOr<SmallVector<DictionaryAttr>> argAttrs =
        attrDictionaries(fragment, kFragmentArgAttrsAttr, fragment.getNumOperands());
    FailureOr<SmallVector<DictionaryAttr>> resAttrs =
        attrDictionaries(fragment, kFragmentResAttrsAttr, fragment.getNumResults());
    if (failed(argAttrs) || failed(resAttrs))
      return failure();
    SmallVector<Type> ins, outs;
    for (Type t : fragment.getOperandTypes())
      ins.push_back(globalType(t));
    for (Type t : fragment.getResultTypes())
      outs.push_back(globalType(t));
    auto callee = func::FuncOp::create(builder, fragment.getLoc(), "__outlined",
                                       builder.getFunctionType(ins, outs));
    callee->setAttr(kMeshShapeAttr, meshShapeAttr(mesh));
    if (!argAttrs->empty())
      callee.setAllArgAttrs(*argAttrs);
    if (!resAttrs->empty())
      callee.setAllResultAttrs(*resAttrs);
    callee.getBody().takeBody(fragment.getRegion());
    Operation *terminator = callee.getBody().front().getTerminator();
    builder.setInsertionPoint(terminator);
    func::ReturnOp::create(builder, terminator->getLoc(), terminator->getOperands());
    terminator->erase();
    // Calls that donate differently get different functions (the marks are
    // part of the body's key).
    markDonatedArguments(fragment, callee, builder);
    return callee;
  }

  /// Prints, for each mesh of `func`, the fragment functions it calls in
  /// program order and the origins each call runs (`verbose-logging`).
  void logCalls(func::FuncOp func, TopologyAttr topology, StringRef program,
                ArrayRef<std::tuple<std::string, std::string, std::string>> calls) {
    for (NamedMeshAttr named : topology.getMeshes()) {
      StringRef mesh = named.getName();
      unsigned count = llvm::count_if(calls, [&](auto &c) { return std::get<0>(c) == mesh; });
      if (!count)
        continue;
      llvm::errs() << "Module " << program << " on mesh " << mesh << " will execute " << count
                   << " fragment call(s) of @" << func.getSymName() << ":\n";
      for (auto &[callMesh, callee, origins] : calls)
        if (callMesh == mesh)
          llvm::errs() << "  @" << callee << " from program with origins " << origins << "\n";
    }
  }

public:
  void runOnCheckedOperation() {
    ModuleOp module = getOperation();
    SymbolTable symbols(module);
    llvm::StringMap<func::FuncOp> byBody;
    int64_t counter = 0;
    std::string program = programName(module);
    SmallVector<func::FuncOp> mpmdFuncs;
    // (The functions this pass creates are not visited.)
    for (func::FuncOp func : module.getOps<func::FuncOp>())
      if (getMpmdFunctionTopology(func))
        mpmdFuncs.push_back(func);
    for (func::FuncOp func : mpmdFuncs) {
      TopologyAttr topology = getMpmdFunctionTopology(func);
      SmallVector<FragmentOp> fragments;
      func.walk([&](FragmentOp f) { fragments.push_back(f); });
      // Names say forward or backward only in a program with a backward pass.
      bool directions = llvm::any_of(fragments, hasBackwardOrigin);
      // (mesh, callee, origins) of each call, for `verbose-logging`.
      SmallVector<std::tuple<std::string, std::string, std::string>> calls;
      for (FragmentOp fragment : fragments) {
        MeshAttr mesh = topology.getMesh(fragment.getMeshName());
        OpBuilder builder(module.getBodyRegion());
        builder.setInsertionPointToEnd(module.getBody());
        FailureOr<func::FuncOp> outlined = outline(fragment, mesh, builder);
        if (failed(outlined))
          return signalPassFailure();
        func::FuncOp callee = *outlined;

        // Identical bodies on meshes of the same shape share one function.
        auto [it, inserted] = byBody.try_emplace(opKey(callee), callee);
        if (!inserted) {
          callee.erase();
          callee = it->second;
        } else {
          callee.setSymName(("p" + llvm::Twine(counter++) + "_" +
                             baseName(fragment, directions) + "." + program)
                                .str());
          symbols.insert(callee);
        }
        // The function reserves what the most demanding of its calls needs.
        if (auto reserved = fragment->getAttrOfType<IntegerAttr>(kReservedHbmBytesAttr)) {
          auto current = callee->getAttrOfType<IntegerAttr>(kReservedHbmBytesAttr);
          if (!current || current.getInt() < reserved.getInt())
            callee->setAttr(kReservedHbmBytesAttr, reserved);
        }

        builder.setInsertionPoint(fragment);
        auto call = FragmentCallOp::create(builder,
            fragment.getLoc(), fragment.getResultTypes(), fragment.getOperands(),
            fragment.getOriginAttr(), fragment.getMeshNameAttr(),
            FlatSymbolRefAttr::get(callee.getSymNameAttr()));
        for (NamedAttribute attr : fragment->getDiscardableAttrs())
          if (!belongsToFunction(attr.getName()))
            call->setAttr(attr.getName(), attr.getValue());
        if (std::optional<::mpmd::Unit> unit = getSchedulingUnit(fragment, topology))
          call->setAttr(kUnitAttr, builder.getStringAttr(formatUnit(*unit, topology)));
        if (verboseLogging)
          calls.emplace_back(fragment.getMeshName().str(), callee.getSymName().str(),
                             describeOrigins(fragment, directions));
        fragment.replaceAllUsesWith(call.getResults());
        fragment.erase();
      }
      if (verboseLogging)
        logCalls(func, topology, program, calls);
    }
  }
};

} // namespace
} // namespace mlir::mpmd
