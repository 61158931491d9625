//===- MeshInferenceAcrossCalls.cpp - meshes of callee signatures ----------===//
//
// See MeshInferenceAcrossCalls.h.
//
//===----------------------------------------------------------------------===//

#include "MeshInferenceAcrossCalls.h"

#include "Common/Fragments.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/MapVector.h"

#include <memory>

namespace mlir::mpmd {

namespace {


/// `file:line:col` of `loc` (its first file position; `line:col` in the
/// file of `near`), for a message that names several ops.
std::string position(Location loc, Location near) {
  std::string text;
  llvm::raw_string_ostream os(text);
  auto file = loc->findInstanceOf<FileLineColLoc>();
  if (!file) {
    os << loc;
    return text;
  }
  auto nearFile = near->findInstanceOf<FileLineColLoc>();
  if (!nearFile || nearFile.getFilename() != file.getFilename())
    os << file.getFilename().getValue() << ":";
  os << file.getLine() << ":" << file.getColumn();
  return text;
}

/// A function called by `mpmd.call`, its call sites and the mesh chosen for
/// each argument and result so far.
struct Callee {
  func::FuncOp func;
  const MeshInferenceTarget *target = nullptr;
  SmallVector<CallOp> calls;
  SmallVector<std::optional<int64_t>> argMesh, resultMesh;
  /// The arguments that were local tensors (their call sites now pass an
  /// `mpmd.assign` this code made).
  SmallVector<bool> argWasLocal;
};

class CallSignatures {
public:
  explicit CallSignatures(ArrayRef<MeshInferenceTarget> targets) : targets(targets) {}

  /// Finds the callees and their call sites; fails after reporting what
  /// mesh inference cannot place (a call nested in another op, a callee
  /// without a body or topology, an argument that is no tensor, ...).
  LogicalResult collect();
  /// Chooses a mesh for every argument and result, writing each choice into
  /// the IR.
  LogicalResult decide();
  /// Reports the call boundaries that need a transfer no label implies.
  LogicalResult checkBoundaries();

private:
  LogicalResult analyze();
  MeshAssignmentAnalysis &analysisOf(Operation *op) {
    return *analyses.find(op->getParentOfType<func::FuncOp>())->second;
  }
  bool decideRound(bool force);
  void setArgMesh(Callee &callee, unsigned index, int64_t mesh);
  void setResultMesh(Callee &callee, unsigned index, int64_t mesh);
  MeshTensorType meshType(Callee &callee, int64_t mesh, Type local) const;
  StringRef meshName(const Callee &callee, int64_t mesh) const {
    return callee.target->topology.getMeshes()[mesh].getName();
  }
  void updateSignature(Callee &callee);

  ArrayRef<MeshInferenceTarget> targets;
  llvm::DenseMap<Operation *, const MeshInferenceTarget *> targetOf;
  std::vector<Callee> callees;
  llvm::DenseMap<Operation *, unsigned> calleeIndex;
  llvm::DenseMap<Operation *, std::unique_ptr<MeshAssignmentAnalysis>> analyses;
};

/// Whether two topologies name the same meshes in the same order (mesh
/// indices, which the analyses use, then agree).
bool sameMeshNames(TopologyAttr a, TopologyAttr b) {
  return llvm::equal(a.getMeshes(), b.getMeshes(), [](NamedMeshAttr x, NamedMeshAttr y) {
    return x.getName() == y.getName();
  });
}

/// Whether `type` can be given a mesh (a local ranked tensor) or has one.
bool isPlaceable(Type type) { return isa<RankedTensorType, MeshTensorType>(type); }

LogicalResult CallSignatures::collect() {
  for (const MeshInferenceTarget &target : targets)
    targetOf[target.func] = &target;
  bool ok = true;
  llvm::DenseSet<Operation *> reported; // Callees whose callers' topology differs.
  for (const MeshInferenceTarget &target : targets) {
    func::FuncOp caller = target.func;
    caller.walk([&](CallOp call) {
      if (call->getParentOp() != caller.getOperation()) {
        call.emitError() << "mesh inference places an 'mpmd.call' made directly in a function "
                            "body; this one is inside '"
                         << call->getParentOp()->getName()
                         << "': unroll the loop first (-mpmd-unroll-for-loops) or inline the "
                            "calls (-mpmd-call-inline)";
        ok = false;
        return;
      }
      auto func = SymbolTable::lookupNearestSymbolFrom<func::FuncOp>(call, call.getCalleeAttr());
      if (!func || func.isExternal()) {
        call.emitError() << "calls @" << call.getCallee()
                         << ", which has no body: mesh inference places a callee's arguments "
                            "and results from its body";
        ok = false;
        return;
      }
      auto [it, inserted] = calleeIndex.try_emplace(func, callees.size());
      if (inserted) {
        Callee callee;
        callee.func = func;
        callee.target = targetOf.lookup(func);
        callees.push_back(std::move(callee));
      }
      Callee &callee = callees[it->second];
      if (!callee.target) {
        if (inserted) {
          InFlightDiagnostic diag = func.emitError()
                                    << "@" << func.getSymName()
                                    << " is called by 'mpmd.call' but has no topology: give it "
                                       "its caller's (`topology = "
                                    << target.topology
                                    << "`, or run -mpmd-copy-topology-from-main first) so that "
                                       "mesh inference places its body";
          diag.attachNote(call.getLoc()) << "called here, from @" << caller.getSymName();
        }
        ok = false;
        return;
      }
      if (!sameMeshNames(callee.target->topology, target.topology)) {
        ok = false;
        if (!reported.insert(func).second)
          return;
        InFlightDiagnostic diag = func.emitError()
                                  << "@" << func.getSymName() << " has topology "
                                  << callee.target->topology << " but its caller @"
                                  << caller.getSymName() << " has " << target.topology
                                  << ": a callee runs on its callers' meshes, so both name the "
                                     "same meshes in the same order";
        diag.attachNote(call.getLoc()) << "called here";
        return;
      }
      callee.calls.push_back(call);
    });
  }
  if (!ok)
    return failure();
  for (Callee &callee : callees) {
    func::FuncOp func = callee.func;
    if (func.isPublic()) {
      InFlightDiagnostic diag =
          func.emitError() << "@" << func.getSymName()
                           << " is called by 'mpmd.call' and is public: mesh inference gives a "
                              "callee's arguments and results mesh types, so it must be private "
                              "(an entry point keeps the signature its users call)";
      diag.attachNote(callee.calls.front().getLoc()) << "called here";
      ok = false;
      continue;
    }
    auto module = func->getParentOfType<ModuleOp>();
    if (std::optional<SymbolTable::UseRange> uses = SymbolTable::getSymbolUses(func, module)) {
      for (const SymbolTable::SymbolUse &use : *uses) {
        Operation *user = use.getUser();
        if (!isa<CallOp>(user)) {
          user->emitError() << "refers to @" << func.getSymName()
                            << ", which 'mpmd.call' also calls: mesh inference changes a "
                               "callee's signature, so only 'mpmd.call' may refer to it";
          ok = false;
        } else if (auto from = user->getParentOfType<func::FuncOp>(); !targetOf.count(from)) {
          user->emitError() << "calls @" << func.getSymName() << " from @" << from.getSymName()
                            << ", which has no topology: mesh inference gives @"
                            << func.getSymName()
                            << " mesh types for the calls of functions with a topology; call a "
                               "copy of it here, or inline the calls first (-mpmd-call-inline)";
          ok = false;
        }
      }
    }
    FunctionType type = func.getFunctionType();
    auto checkPlaceable = [&](TypeRange types, StringRef what, StringRef how) {
      for (auto [i, t] : llvm::enumerate(types))
        if (!isPlaceable(t)) {
          func.emitError() << what << " #" << i << " of @" << func.getSymName() << " has type "
                           << t << ", which cannot be placed on a mesh: 'mpmd.call' " << how
                           << " ranked tensors only";
          ok = false;
        }
    };
    checkPlaceable(type.getInputs(), "argument", "passes");
    checkPlaceable(type.getResults(), "result", "returns");
    auto known = [&](Type t) -> std::optional<int64_t> {
      if (auto meshTensor = dyn_cast<MeshTensorType>(t))
        return getMeshIndex(callee.target->topology, meshTensor.getMeshName());
      return std::nullopt;
    };
    for (Type t : type.getInputs()) {
      callee.argMesh.push_back(known(t));
      callee.argWasLocal.push_back(isa<RankedTensorType>(t));
    }
    for (Type t : type.getResults())
      callee.resultMesh.push_back(known(t));
  }
  return success(ok);
}

/// The analysis (sources and placement by use) of every function taking
/// part in a call, with the choices made so far.
LogicalResult CallSignatures::analyze() {
  analyses.clear();
  auto add = [&](func::FuncOp func) -> LogicalResult {
    if (analyses.count(func))
      return success();
    const MeshInferenceTarget *target = targetOf.lookup(func);
    MeshInferenceOptions options = target->options;
    options.allowLocalCalls = true;
    auto analysis = std::make_unique<MeshAssignmentAnalysis>(func, target->topology, options);
    if (failed(analysis->computeSources()))
      return failure();
    analysis->placeByUse();
    analyses[func] = std::move(analysis);
    return success();
  };
  for (Callee &callee : callees) {
    if (failed(add(callee.func)))
      return failure();
    for (CallOp call : callee.calls)
      if (failed(add(call->getParentOfType<func::FuncOp>())))
        return failure();
  }
  return success();
}

LogicalResult CallSignatures::decide() {
  // Each round decides at least one argument or result (a forced round the
  // first one left), so the rounds end.
  while (true) {
    if (failed(analyze()))
      return failure();
    if (decideRound(/*force=*/false))
      continue;
    if (failed(analyze()))
      return failure();
    if (!decideRound(/*force=*/true))
      return success();
  }
}

/// Decides every argument and result whose mesh the analyses tell; with
/// `force`, the first one left undecided, from whatever names a mesh (else
/// the first mesh). Returns whether anything was decided.
bool CallSignatures::decideRound(bool force) {
  SmallVector<std::tuple<Callee *, unsigned, int64_t>> args, results;
  for (Callee &callee : callees) {
    MeshAssignmentAnalysis &body = *analyses.find(callee.func)->second;
    MeshSet all = body.getAllMeshes();
    Operation *terminator = callee.func.getBody().front().getTerminator();
    for (auto [j, mesh] : llvm::enumerate(callee.resultMesh)) {
      if (mesh || (force && !(args.empty() && results.empty())))
        continue;
      MeshSet src = body.srcOf(terminator->getOperand(j)), use = 0;
      for (CallOp call : callee.calls)
        use |= analysisOf(call).useOf(call->getResult(j));
      bool computed = src != all && src != 0;
      if (computed)
        results.push_back({&callee, j, lowestMesh((src & use) ? (src & use) : src)});
      else if (use)
        results.push_back({&callee, j, lowestMesh(use)});
      else if (force)
        results.push_back({&callee, j, 0});
    }
    for (auto [i, mesh] : llvm::enumerate(callee.argMesh)) {
      if (mesh || (force && !(args.empty() && results.empty())))
        continue;
      MeshSet use = body.useOf(callee.func.getArgument(i)), shared = all, any = 0;
      for (CallOp call : callee.calls) {
        MeshSet src = analysisOf(call).srcOf(call->getOperand(i));
        shared &= src;
        if (src != all)
          any |= src;
      }
      bool restricted = shared != all && shared != 0;
      if (use)
        args.push_back({&callee, i,
                        lowestMesh((use & shared) ? (use & shared) : restricted ? shared : use)});
      else if (restricted)
        args.push_back({&callee, i, lowestMesh(shared)});
      else if (force)
        args.push_back({&callee, i, any ? lowestMesh(any) : 0});
    }
  }
  for (auto [callee, index, mesh] : results)
    setResultMesh(*callee, index, mesh);
  for (auto [callee, index, mesh] : args)
    setArgMesh(*callee, index, mesh);
  llvm::SmallPtrSet<Callee *, 4> changed;
  for (auto &decision : llvm::concat<std::tuple<Callee *, unsigned, int64_t>>(results, args))
    changed.insert(std::get<0>(decision));
  for (Callee *callee : changed)
    updateSignature(*callee);
  return !changed.empty();
}

MeshTensorType CallSignatures::meshType(Callee &callee, int64_t mesh, Type local) const {
  return MeshTensorType::get(callee.func.getContext(), meshName(callee, mesh),
                             cast<RankedTensorType>(local));
}

/// Argument `index` of the callee on `mesh`: the callee takes it there and
/// unassigns it for its body; each call assigns its operand to the mesh.
void CallSignatures::setArgMesh(Callee &callee, unsigned index, int64_t mesh) {
  callee.argMesh[index] = mesh;
  BlockArgument arg = callee.func.getArgument(index);
  Type local = arg.getType();
  MeshTensorType type = meshType(callee, mesh, local);
  arg.setType(type);
  OpBuilder builder = OpBuilder::atBlockBegin(arg.getOwner());
  auto unassign = UnassignOp::create(builder, arg.getLoc(), local, arg, StringAttr());
  arg.replaceAllUsesExcept(unassign, unassign);
  for (CallOp call : callee.calls) {
    builder.setInsertionPoint(call);
    Value operand = call->getOperand(index);
    call->setOperand(index,
                     AssignOp::create(builder, call.getLoc(), type, operand, StringAttr()));
  }
}

/// Result `index` of the callee on `mesh`: the callee assigns it there
/// before returning; each call unassigns it for its users.
void CallSignatures::setResultMesh(Callee &callee, unsigned index, int64_t mesh) {
  callee.resultMesh[index] = mesh;
  Operation *terminator = callee.func.getBody().front().getTerminator();
  Value returned = terminator->getOperand(index);
  Type local = returned.getType();
  MeshTensorType type = meshType(callee, mesh, local);
  OpBuilder builder(terminator);
  terminator->setOperand(
      index, AssignOp::create(builder, terminator->getLoc(), type, returned, StringAttr()));
  for (CallOp call : callee.calls) {
    Value result = call->getResult(index);
    result.setType(type);
    builder.setInsertionPointAfter(call);
    auto unassign = UnassignOp::create(builder, call.getLoc(), local, result, StringAttr());
    result.replaceAllUsesExcept(unassign, unassign);
  }
}

void CallSignatures::updateSignature(Callee &callee) {
  Block &body = callee.func.getBody().front();
  callee.func.setFunctionType(FunctionType::get(callee.func.getContext(), body.getArgumentTypes(),
                                                body.getTerminator()->getOperandTypes()));
}

/// Which call of the same callee, if any, computed what `operand` (an
/// operand of a call to `callee`, before the assign this code made) reads:
/// the call and its result number.
std::optional<std::pair<CallOp, unsigned>> sameCalleeResult(Value local, func::FuncOp callee) {
  auto unassign = local.getDefiningOp<UnassignOp>();
  if (!unassign)
    return std::nullopt;
  auto result = dyn_cast<OpResult>(unassign.getTensor());
  auto call = result ? dyn_cast<CallOp>(result.getOwner()) : CallOp();
  if (!call || call.getCallee() != callee.getSymName())
    return std::nullopt;
  return std::make_pair(call, result.getResultNumber());
}

LogicalResult CallSignatures::checkBoundaries() {
  if (failed(analyze()))
    return failure();
  bool ok = true;
  for (Callee &callee : callees) {
    StringRef name = callee.func.getSymName();
    // A call passing a result of the callee to an argument of the callee
    // (a value carried from one call to the next, as in a loop) that is not
    // used where it arrives: on another mesh, or used on others in the body.
    struct Chain {
      CallOp call;
      unsigned result, arg;
      MeshSet argUse;
    };
    SmallVector<Chain> chains;
    // Per argument passed from meshes without the argument's: those calls,
    // with the meshes the operand is on there, and the meshes every call
    // that restricts it has it on (none: the calls conflict).
    struct Off {
      SmallVector<std::pair<CallOp, MeshSet>, 2> calls;
      MeshSet shared;
    };
    llvm::MapVector<unsigned, Off> off;
    Block &body = callee.func.getBody().front();
    for (auto [i, wasLocal] : llvm::enumerate(callee.argWasLocal)) {
      if (!wasLocal)
        continue;
      MeshSet bit = MeshSet(1) << *callee.argMesh[i];
      // The body reads the argument through the unassign setArgMesh made.
      auto entry = cast<UnassignOp>(*body.getArgument(i).getUsers().begin());
      MeshSet argUse = analyses.find(callee.func)->second->useOf(entry.getResult());
      Off passed{{}, ~MeshSet(0)};
      for (CallOp call : callee.calls) {
        Value local = call->getOperand(i).getDefiningOp<AssignOp>().getTensor();
        MeshAssignmentAnalysis &caller = analysisOf(call);
        MeshSet all = caller.getAllMeshes(), src = caller.srcOf(local);
        if (src != 0 && src != all)
          passed.shared &= src;
        if (auto from = sameCalleeResult(local, callee.func)) {
          if (*callee.resultMesh[from->second] != *callee.argMesh[i] || (argUse & ~bit))
            chains.push_back({call, from->second, static_cast<unsigned>(i), argUse});
          continue;
        }
        // On every mesh (an input, a constant): copied; on none: the op
        // computing it is placed, and reported, by the caller's inference.
        if (src == all || src == 0 || (src & bit))
          continue;
        passed.calls.push_back({call, src});
      }
      if (!passed.calls.empty())
        off[i] = std::move(passed);
    }
    if (!chains.empty()) {
      ok = false;
      MeshAssignmentAnalysis &analysis = *analyses.find(callee.func)->second;
      auto describe = [&](Diagnostic &diag, const Chain &chain) {
        diag << "result " << chain.result << " on \""
             << meshName(callee, *callee.resultMesh[chain.result]) << "\", arg " << chain.arg
             << " on \"" << meshName(callee, *callee.argMesh[chain.arg]) << "\" used on ";
        SmallVector<StringRef> names = analysis.meshNames(chain.argUse);
        llvm::interleave(
            names, [&](StringRef n) { diag << "\"" << n << "\""; }, [&] { diag << ", "; });
      };
      // Shardy's tests expect one error on the callee and no notes: the
      // calls are named in the message.
      InFlightDiagnostic diag = callee.func.emitError();
      Chain &first = chains.front();
      diag << "Mesh assignment is not possible for mpmd.call \"" << name
           << "\" as it passes result " << first.result << " to arg " << first.arg
           << " but they are placed differently: a value one call of @" << name
           << " passes to the next must be used where it arrives, or it would cross meshes on "
              "every call; add an explicit transfer, or set infer-transfers (the partitioning "
              "option mpmd_infer_transfers). Passed: ";
      llvm::interleave(
          chains,
          [&](const Chain &chain) {
            diag << "result " << chain.result << " to arg " << chain.arg << " at "
                 << position(chain.call->getLoc(), callee.func.getLoc()) << " (";
            describe(*diag.getUnderlyingDiagnostic(), chain);
            diag << ")";
          },
          [&] { diag << "; "; });
    }
    for (auto &[i, passed] : off) {
      ok = false;
      MeshSet shared = passed.shared;
      StringRef argMeshName = meshName(callee, *callee.argMesh[i]);
      InFlightDiagnostic diag = callee.func.emitError()
                                << "Mesh assignment is not possible for arg" << i
                                << " of mpmd.call \"" << name << "\" as ";
      if (shared == 0)
        diag << "its caller operands are on conflicting meshes: every call of @" << name
             << " takes the argument on one mesh (\"" << argMeshName
             << "\"), so some calls would need a transfer; ";
      else
        diag << "it is used on \"" << argMeshName
             << "\" in the callee but some calls pass it from another mesh; ";
      diag << "add an explicit transfer before those calls, or set infer-transfers (the "
              "partitioning option mpmd_infer_transfers). Passed from another mesh: ";
      llvm::interleave(
          passed.calls,
          [&](const std::pair<CallOp, MeshSet> &entry) {
            CallOp call = entry.first;
            diag << "operand " << i << " at " << position(call.getLoc(), callee.func.getLoc())
                 << " from ";
            SmallVector<StringRef> names = analysisOf(call).meshNames(entry.second);
            llvm::interleave(
                names, [&](StringRef n) { diag << "\"" << n << "\""; }, [&] { diag << ", "; });
          },
          [&] { diag << "; "; });
    }
  }
  return success(ok);
}

} // namespace

bool hasCalls(ArrayRef<MeshInferenceTarget> targets) {
  return llvm::any_of(targets, [](const MeshInferenceTarget &target) {
    func::FuncOp func = target.func;
    return func.walk([](CallOp) { return WalkResult::interrupt(); }).wasInterrupted();
  });
}

LogicalResult assignMeshesAcrossCalls(ArrayRef<MeshInferenceTarget> targets, bool inferTransfers) {
  CallSignatures signatures(targets);
  if (failed(signatures.collect()) || failed(signatures.decide()))
    return failure();
  return inferTransfers ? success() : signatures.checkBoundaries();
}

} // namespace mlir::mpmd
