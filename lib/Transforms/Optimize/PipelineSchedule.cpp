//===- PipelineSchedule.cpp - order fragments by a per-mesh schedule --------===//

#include "Common/BlockOrder.h"
#include "Common/Fragments.h"
#include "Common/PassBase.h"
#include "Common/TextOptions.h"
#include "mpmd/Transforms/Passes.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/StringSet.h"
#include <algorithm>
#include <map>
#include <set>

namespace mlir::mpmd {
#define GEN_PASS_DEF_PIPELINESCHEDULEPASS
#include "mpmd/Transforms/Passes.h.inc"

namespace {

/// The units of one line of a schedule (all of one mesh, the mesh of the
/// topology at `meshIndex`) as the program names them: the default stage
/// filled in.
LogicalResult withStages(ArrayRef<::mpmd::Unit> line, Operation *anchor, TopologyAttr topology,
                         int64_t &meshIndex, SmallVectorImpl<::mpmd::Unit> &keys) {
  StringRef mesh = line.front().mesh;
  meshIndex = getMeshIndex(topology, mesh);
  if (meshIndex < 0)
    return anchor->emitError() << "schedule line for mesh \"" << mesh
                               << "\" names a mesh that is not in the topology";
  for (const ::mpmd::Unit &unit : line) {
    if (unit.mesh != mesh)
      return anchor->emitError() << "the schedule of mesh \"" << mesh << "\" lists unit "
                                 << formatUnit(unit) << " of mesh \"" << unit.mesh
                                 << "\": give each mesh its own list";
    ::mpmd::Unit key = unit;
    if (key.stage < 0)
      key.stage = meshIndex; // The stage numbered like the mesh.
    keys.push_back(std::move(key));
  }
  return success();
}

std::string describeKind(StringRef kind) {
  return kind == "F" ? "forward" : kind == "B" ? "backward" : "weight-gradient";
}

/// The program's scheduling units -> their fragments in program order.
using ProgramUnits = std::map<::mpmd::Unit, SmallVector<Operation *>>;

ProgramUnits programUnits(Block &block, TopologyAttr topology) {
  ProgramUnits program;
  for (FragmentOp fragment : block.getOps<FragmentOp>())
    if (std::optional<::mpmd::Unit> unit = getSchedulingUnit(fragment, topology))
      program[*unit].push_back(fragment);
  return program;
}

/// Per mesh, the chain of fragments the schedule imposes.
struct ScheduleChains {
  /// Each fragment's successor on its mesh by the schedule.
  llvm::DenseMap<Operation *, Operation *> next;
  /// How diagnostics name each scheduled fragment (`F0 on mesh "m0"`).
  llvm::DenseMap<Operation *, std::string> label;
};

/// Chains the fragments of `program` in the order of the schedule `lines`;
/// fails, with an error, when a line names an unknown mesh or unit, a mesh
/// has two lines, a unit runs twice or a unit of the program is not
/// scheduled.
FailureOr<ScheduleChains> chainSchedule(func::FuncOp func, TopologyAttr topology,
                                        const ::mpmd::Schedule &lines,
                                        const ProgramUnits &program) {
  ScheduleChains chains;
  std::set<::mpmd::Unit> scheduled;
  llvm::StringSet<> meshesSeen;
  for (const std::vector<::mpmd::Unit> &line : lines) {
    if (line.empty())
      continue;
    const std::string &mesh = line.front().mesh;
    int64_t meshIndex;
    SmallVector<::mpmd::Unit> units;
    if (failed(withStages(line, func, topology, meshIndex, units)))
      return failure();
    if (!meshesSeen.insert(mesh).second)
      return func.emitError() << "the schedule has two lines for mesh \"" << mesh << "\"";
    Operation *previous = nullptr;
    for (const ::mpmd::Unit &key : units) {
      auto it = program.find(key);
      if (it == program.end())
        return func.emitError() << "the schedule runs " << formatUnit(key, meshIndex)
                                << " on mesh \"" << mesh << "\" but the program has no "
                                << describeKind(key.kind) << " fragment of microbatch "
                                << key.microbatch << " for stage " << key.stage
                                << " on that mesh";
      if (!scheduled.insert(key).second)
        return func.emitError() << "the schedule of mesh \"" << mesh << "\" runs "
                                << formatUnit(key, meshIndex) << " twice";
      for (Operation *op : it->second) {
        chains.label[op] = formatUnit(key, meshIndex) + " on mesh \"" + mesh + "\"";
        if (previous)
          chains.next[previous] = op;
        previous = op;
      }
    }
  }
  for (auto &[key, ops] : program)
    if (!scheduled.count(key))
      return ops.front()->emitError()
             << describeKind(key.kind) << " fragment of microbatch " << key.microbatch
             << " (unit " << formatUnit(key, topology) << ") on mesh \"" << key.mesh
             << "\" is not in the schedule";
  return chains;
}

/// Finds a cycle among the ops the sort could not emit and reports the
/// schedule edge in it: the two units that wait on each other.
void reportDeadlock(func::FuncOp func, ArrayRef<Operation *> ops,
                    const std::vector<SmallVector<int64_t>> &succ, ArrayRef<int64_t> indegree,
                    const std::set<std::pair<int64_t, int64_t>> &dataEdges,
                    const ScheduleChains &chains) {
  const llvm::DenseMap<Operation *, Operation *> &next = chains.next;
  auto label = [&](Operation *op) { return chains.label.lookup(op); };
  // Every blocked node has a blocked predecessor (that is why it was never
  // emitted): walking predecessors must come back to a node, closing a cycle.
  std::vector<SmallVector<int64_t>> pred(ops.size());
  for (int64_t i = 0; i < static_cast<int64_t>(ops.size()); ++i)
    for (int64_t s : succ[i])
      pred[s].push_back(i);
  int64_t start = -1;
  for (int64_t i = 0; i < static_cast<int64_t>(ops.size()); ++i)
    if (indegree[i] > 0) {
      start = i;
      break;
    }
  SmallVector<int64_t> path;
  llvm::DenseMap<int64_t, int64_t> position;
  int64_t node = start;
  while (!position.count(node)) {
    position[node] = path.size();
    path.push_back(node);
    for (int64_t p : pred[node])
      if (indegree[p] > 0) {
        node = p;
        break;
      }
  }
  // The path runs against the edges; the cycle in edge order is its reverse.
  SmallVector<int64_t> cycle(path.begin() + position[node], path.end());
  std::reverse(cycle.begin(), cycle.end());
  // The schedule edge u -> v in the cycle: v waits for u by the schedule,
  // and u waits for v through the rest of the cycle.
  for (auto [k, u] : llvm::enumerate(cycle)) {
    int64_t v = cycle[(k + 1) % cycle.size()];
    // The culprit is an order the schedule imposes that the data does not.
    auto it = next.find(ops[u]);
    if (it == next.end() || it->second != ops[v] || dataEdges.count({u, v}))
      continue;
    InFlightDiagnostic diag = func.emitError()
                              << "the pipeline schedule deadlocks: it runs " << label(ops[u])
                              << " before " << label(ops[v]) << ", but " << label(ops[u])
                              << " needs a result that only exists after " << label(ops[v]);
    for (size_t j = 1; j < cycle.size(); ++j) {
      Operation *op = ops[cycle[(k + 1 + j) % cycle.size()]];
      auto l = chains.label.find(op);
      diag.attachNote(op->getLoc())
          << "then "
          << (l != chains.label.end() ? l->second
                                      : "'" + op->getName().getStringRef().str() + "'");
    }
    return;
  }
  func.emitError() << "the pipeline schedule deadlocks (cycle through "
                   << cycle.size() << " ops)";
}

/// Reorders the ops of `func`'s body by a stable topological sort over data
/// edges and the schedule's chains; fails, naming the schedule edge at
/// fault, when they form a cycle.
LogicalResult sortBySchedule(func::FuncOp func, const ScheduleChains &chains) {
  Block &block = func.getBody().front();
  BlockDependences deps(block);
  std::vector<SmallVector<int64_t>> succ(deps.ops.size());
  std::set<std::pair<int64_t, int64_t>> dataEdges;
  for (auto [i, op] : llvm::enumerate(deps.ops)) {
    for (int64_t p : deps.preds[i]) {
      succ[p].push_back(i);
      dataEdges.insert({p, static_cast<int64_t>(i)});
    }
    if (auto it = chains.next.find(op); it != chains.next.end())
      succ[i].push_back(deps.index[it->second]);
  }
  std::vector<int64_t> indegree;
  SmallVector<int64_t> sorted = stableTopologicalOrder(succ, indegree);
  if (sorted.size() != deps.ops.size()) {
    reportDeadlock(func, deps.ops, succ, indegree, dataEdges, chains);
    return failure();
  }
  reorderBlock(block, deps.ops, sorted);
  return success();
}

class PipelineSchedulePass
    : public MpmdPass<PipelineSchedulePass, impl::PipelineSchedulePassBase> {
public:
  using MpmdPass::MpmdPass;
  explicit PipelineSchedulePass(::mpmd::Schedule schedule) : typedOrder(std::move(schedule)) {}

  /// The order given typed (by the driver); else the text option is parsed.
  std::optional<::mpmd::Schedule> typedOrder;

  void runOnFunction(func::FuncOp func, TopologyAttr topology) {
    FailureOr<::mpmd::Schedule> lines = typedOrParsed<::mpmd::Schedule>(typedOrder, [&] {
      return parseUnitLines(order, "schedule", [&] { return func.emitError(); });
    });
    if (failed(lines))
      return signalPassFailure();
    if (lines->empty())
      return; // No schedule: the program order stays.
    ProgramUnits program = programUnits(func.getBody().front(), topology);
    FailureOr<ScheduleChains> chains = chainSchedule(func, topology, *lines, program);
    if (failed(chains) || failed(sortBySchedule(func, *chains)))
      signalPassFailure();
  }
};

} // namespace

std::unique_ptr<Pass> createPipelineSchedulePass(::mpmd::Schedule schedule) {
  return std::make_unique<PipelineSchedulePass>(std::move(schedule));
}

} // namespace mlir::mpmd
