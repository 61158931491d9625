//===- MapNamedOpsToMpmdOps.cpp - named ops to fragments --------------------===//

#include "Common/MemoryKinds.h"
#include "Common/PassBase.h"
#include "Common/TextOptions.h"
#include "mpmd/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/BitVector.h"
#include "llvm/ADT/StringSet.h"

namespace mlir::mpmd {
#define GEN_PASS_DEF_MAPNAMEDOPSTOMPMDOPSPASS
#include "mpmd/Transforms/Passes.h.inc"

namespace {

class MapNamedOpsToMpmdOpsPass
    : public MpmdPass<MapNamedOpsToMpmdOpsPass, impl::MapNamedOpsToMpmdOpsPassBase> {
public:
  using MpmdPass::MpmdPass;
  /// The driver's assignment describes one program: a name that no op uses
  /// is misspelt, and an error.
  explicit MapNamedOpsToMpmdOpsPass(std::vector<::mpmd::NameAssignment> assignment)
      : typedAssignment(std::move(assignment)), strictMemoryKinds(true) {
    failOnUnusedNames = true;
  }

  /// The assignment given typed (by the driver); else the text option is parsed.
  std::optional<std::vector<::mpmd::NameAssignment>> typedAssignment;
  /// Whether a memory kind on a named computation is an error (the driver's
  /// pass) rather than a warning that it is ignored (`mpmd-opt`, as Shardy).
  bool strictMemoryKinds = false;

  /// Name -> its assignment; an error when a name is assigned twice.
  FailureOr<llvm::StringMap<::mpmd::NameAssignment>> getAssignment(func::FuncOp func) {
    auto entries = typedOrParsed<std::vector<::mpmd::NameAssignment>>(typedAssignment, [&] {
      return parseNameAssignment(assignment, [&] { return func.emitError(); });
    });
    if (failed(entries))
      return failure();
    llvm::StringMap<::mpmd::NameAssignment> names;
    for (const ::mpmd::NameAssignment &entry : *entries)
      if (!names.try_emplace(entry.name, entry).second)
        return func.emitError() << "name \"" << entry.name << "\" is assigned more than once";
    return names;
  }

  /// One piece (over 80 lines): the names the function uses decide both
  /// which assignments are checked and which ops are mapped; the checks and
  /// the walk are marked by comments.
  void runOnFunction(func::FuncOp func, TopologyAttr topology) {
    FailureOr<llvm::StringMap<::mpmd::NameAssignment>> names = getAssignment(func);
    if (failed(names))
      return signalPassFailure();
    // Every name the function uses, nested ones included (a nest is one
    // error below, and must not also make its names look unused).
    llvm::StringSet<> used;
    func.walk([&](NamedComputationOp nc) { used.insert(nc.getOrigin().getUserName()); });
    func.walk([&](NamedTensorOp nt) { used.insert(nt.getName()); });
    // A name's mesh must be in the topology; without fail-on-unused-names
    // only for the names this function uses (the assignment may serve
    // functions of other topologies).
    bool failedAny = false;
    for (auto &entry : *names) {
      if (!failOnUnusedNames && !used.contains(entry.first()))
        continue;
      auto [mesh, kind] = splitMeshAndMemoryKind(entry.second.mesh);
      if (StringRef(entry.second.mesh).contains('#') && !isAssignableMemoryKind(kind)) {
        func.emitError() << "name \"" << entry.first() << "\" is assigned to memory kind \""
                         << kind << "\" of mesh \"" << mesh
                         << "\": expected " << listMemoryKinds(kAssignableMemoryKinds, '"') << " (e.g. "
                         << entry.first() << "@" << mesh << "#pinned_host)";
        failedAny = true;
        continue;
      }
      if (!topology.getMesh(mesh)) {
        InFlightDiagnostic diag = func.emitError()
                                  << "name \"" << entry.first() << "\" is assigned to mesh \""
                                  << mesh << "\" which is not in the topology (meshes:";
        for (NamedMeshAttr m : topology.getMeshes())
          diag << " \"" << m.getName() << "\"";
        diag << ")";
        failedAny = true;
      }
    }
    if (failedAny)
      return signalPassFailure();

    SmallVector<Operation *> named;
    // Top-level named ops, and the outermost named op nested in another op
    // (one error for a whole nest: nothing inside it is visited).
    func.walk<WalkOrder::PreOrder>([&](Operation *op) {
      if (!isa<NamedComputationOp, NamedTensorOp>(op))
        return WalkResult::advance();
      named.push_back(op);
      return op->getParentOp() == func.getOperation() ? WalkResult::advance()
                                                      : WalkResult::skip();
    });
    for (Operation *op : named) {
      if (op->getParentOp() != func.getOperation()) {
        op->emitError() << "named ops nested in other ops are not supported yet: move '"
                        << op->getName() << "' to the top level of @" << func.getSymName();
        failedAny = true;
        continue;
      }
      if (auto nc = dyn_cast<NamedComputationOp>(op)) {
        StringRef name = nc.getOrigin().getUserName();
        auto it = names->find(name);
        if (it == names->end()) {
          nc.emitError() << "named computation \"" << name
                         << "\" is not assigned to a mesh: add it to the name-to-mesh assignment";
          failedAny = true;
          continue;
        }
        if (failed(mapNamedComputation(nc, it->second)))
          failedAny = true;
      } else {
        auto nt = cast<NamedTensorOp>(op);
        auto it = names->find(nt.getName());
        if (it == names->end()) {
          nt.getResult().replaceAllUsesWith(nt.getTensor());
          nt.erase();
          continue;
        }
        if (failed(mapNamedTensor(nt, it->second.mesh)))
          failedAny = true;
      }
    }
    for (auto &entry : *names) {
      if (!failOnUnusedNames || used.contains(entry.first()))
        continue;
      InFlightDiagnostic diag = func.emitError()
                                << "name \"" << entry.first() << "\" is assigned to mesh \""
                                << entry.second.mesh
                                << "\" but no named computation or named tensor uses it";
      SmallVector<StringRef> usedNames(used.keys());
      llvm::sort(usedNames);
      if (usedNames.empty())
        diag << " (the function uses no names)";
      else {
        diag << " (names used:";
        for (StringRef n : usedNames)
          diag << " \"" << n << "\"";
        diag << ")";
      }
      failedAny = true;
    }
    if (failedAny)
      signalPassFailure();
  }

  /// `value` assigned to `mesh`, in memory kind `kind` of it ("": none).
  static FailureOr<Value> assignValue(OpBuilder &builder, Value value, StringRef mesh,
                                      StringRef origin, Operation *user, StringRef kind = "") {
    auto type = dyn_cast<RankedTensorType>(value.getType());
    if (!type)
      return user->emitError() << "operand of type " << value.getType()
                               << " cannot be placed on mesh \"" << mesh
                               << "\": only ranked tensors can be";
    auto meshType = withMemoryKind(MeshTensorType::get(builder.getContext(), mesh, type), kind);
    return AssignOp::create(builder, user->getLoc(), meshType, value, builder.getStringAttr(origin))
        .getResult();
  }

  /// Simplifies `op` in place before it becomes a fragment, so that values
  /// it does not compute do not travel to its mesh: a result that returns an
  /// argument unchanged is replaced by the argument's operand, a result that
  /// returns the same value as an earlier one by that result, and then each
  /// operand passed more than once or no longer used is dropped.
  static void simplify(NamedComputationOp &op) {
    Block &body = op.getRegion().front();
    Operation *terminator = body.getTerminator();
    llvm::BitVector dropResults(op.getNumResults());
    llvm::DenseMap<Value, unsigned> firstResult;
    for (auto [i, returned] : llvm::enumerate(terminator->getOperands())) {
      if (auto arg = dyn_cast<BlockArgument>(returned); arg && arg.getOwner() == &body) {
        op.getResult(i).replaceAllUsesWith(op.getOperand(arg.getArgNumber()));
        dropResults.set(i);
      } else if (auto [it, inserted] = firstResult.try_emplace(returned, i); !inserted) {
        op.getResult(i).replaceAllUsesWith(op.getResult(it->second));
        dropResults.set(i);
      }
    }
    llvm::DenseMap<Value, unsigned> firstArgument;
    for (auto [i, operand] : llvm::enumerate(op.getOperands()))
      if (auto [it, inserted] = firstArgument.try_emplace(operand, i); !inserted)
        body.getArgument(i).replaceAllUsesWith(body.getArgument(it->second));
    terminator->eraseOperands(dropResults);
    llvm::BitVector dropArguments(body.getNumArguments());
    for (BlockArgument arg : body.getArguments())
      if (arg.use_empty())
        dropArguments.set(arg.getArgNumber());
    if (dropResults.none() && dropArguments.none())
      return;
    body.eraseArguments(dropArguments);
    SmallVector<Value> operands;
    for (auto [i, operand] : llvm::enumerate(op.getOperands()))
      if (!dropArguments.test(i))
        operands.push_back(operand);
    SmallVector<Type> resultTypes;
    for (auto [i, type] : llvm::enumerate(op.getResultTypes()))
      if (!dropResults.test(i))
        resultTypes.push_back(type);
    OperationState state(op.getLoc(), op->getName());
    state.addOperands(operands);
    state.addTypes(resultTypes);
    state.propertiesAttr = op->getPropertiesAsAttribute();
    for (NamedAttribute attr : op->getDiscardableAttrs())
      state.addAttribute(attr.getName(), attr.getValue());
    state.addRegion();
    OpBuilder builder(op);
    auto simplified = cast<NamedComputationOp>(builder.create(state));
    simplified.getRegion().takeBody(op.getRegion());
    unsigned next = 0;
    for (auto [i, result] : llvm::enumerate(op.getResults()))
      if (!dropResults.test(i))
        result.replaceAllUsesWith(simplified.getResult(next++));
    op.erase();
    op = simplified;
  }

  LogicalResult mapNamedComputation(NamedComputationOp op, const ::mpmd::NameAssignment &target) {
    StringRef name = op.getOrigin().getUserName();
    auto [mesh, kind] = splitMeshAndMemoryKind(target.mesh);
    if (!kind.empty()) {
      // A computation runs in its mesh's device memory; what lives in host
      // memory is a value, labelled with a named tensor.
      InFlightDiagnostic diag = strictMemoryKinds ? op.emitError() : op.emitWarning();
      diag << "named computation \"" << name << "\" is assigned to memory kind \"" << kind
           << "\" of mesh \"" << mesh << "\"" << (strictMemoryKinds ? "" : ", which is ignored")
           << ": a computation runs in device memory; to keep a value in host memory, label it "
              "with a named tensor and assign that name to \""
           << mesh << "#" << kind << "\"";
      if (strictMemoryKinds)
        return failure();
    }
    simplify(op);
    OpBuilder builder(op);
    SmallVector<Value> operands;
    for (Value v : op.getOperands()) {
      FailureOr<Value> assigned = assignValue(builder, v, mesh, name, op);
      if (failed(assigned))
        return failure();
      operands.push_back(*assigned);
    }
    SmallVector<Type> resultTypes;
    for (Type t : op.getResultTypes()) {
      auto type = dyn_cast<RankedTensorType>(t);
      if (!type)
        return op.emitError() << "result of type " << t << " of named computation \"" << name
                              << "\" cannot be placed on a mesh: only ranked tensors can be";
      resultTypes.push_back(MeshTensorType::get(builder.getContext(), mesh, type));
    }
    auto fragment = FragmentOp::create(builder,
        op.getLoc(), resultTypes, operands, builder.getArrayAttr({op.getOrigin()}),
        builder.getStringAttr(mesh),
        target.stage >= 0 ? builder.getI64IntegerAttr(target.stage) : IntegerAttr(),
        /*in_shardings=*/nullptr, /*out_shardings=*/nullptr);
    for (NamedAttribute attr : op->getDiscardableAttrs())
      fragment->setAttr(attr.getName(), attr.getValue());
    fragment.getRegion().takeBody(op.getRegion());
    for (auto [result, fragmentResult] : llvm::zip(op.getResults(), fragment.getResults())) {
      auto unassign = UnassignOp::create(builder, op.getLoc(), result.getType(), fragmentResult,
                                         builder.getStringAttr(name));
      result.replaceAllUsesWith(unassign.getResult());
    }
    op.erase();
    return success();
  }

  /// `meshAndKind`: `mesh` or `mesh#kind` (the tensor in that memory kind).
  LogicalResult mapNamedTensor(NamedTensorOp op, StringRef meshAndKind) {
    OpBuilder builder(op);
    auto [mesh, kind] = splitMeshAndMemoryKind(meshAndKind);
    FailureOr<Value> assigned =
        assignValue(builder, op.getTensor(), mesh, op.getName(), op, kind);
    if (failed(assigned))
      return failure();
    auto unassign = UnassignOp::create(builder, op.getLoc(), op.getType(), *assigned,
                                       op.getNameAttr());
    op.getResult().replaceAllUsesWith(unassign.getResult());
    op.erase();
    return success();
  }
};

} // namespace

std::unique_ptr<Pass> createMapNamedOpsToMpmdOpsPass(std::vector<::mpmd::NameAssignment> assignment) {
  return std::make_unique<MapNamedOpsToMpmdOpsPass>(std::move(assignment));
}

} // namespace mlir::mpmd
