//===- PipelineSchedule.cpp - order fragments by a per-mesh schedule --------===//

#include "Common/Utils.h"
#include "mpmd/Transforms/Passes.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/StringSet.h"
#include <algorithm>
#include <map>
#include <set>
#include <queue>

namespace mlir::mpmd {
#define GEN_PASS_DEF_PIPELINESCHEDULEPASS
#include "mpmd/Transforms/Passes.h.inc"

namespace {

using UnitKey = std::tuple<char, int64_t, int64_t>; // kind, microbatch, stage

/// Parses one line `m0: F0 F1.s4 B0 W0 .` into the mesh name and its units.
LogicalResult parseLine(StringRef line, Operation *anchor, std::string &mesh,
                        SmallVectorImpl<UnitKey> &units, TopologyAttr topology) {
  line = line.split('#').first.trim();
  auto [name, rest] = line.split(':');
  name = name.trim();
  if (!line.contains(':') || name.empty())
    return anchor->emitError() << "malformed schedule line '" << line
                               << "': expected 'MESH: UNIT UNIT ...' (e.g. 'm0: F0 F1 B0 B1')";
  int64_t meshIndex = getMeshIndex(topology, name);
  if (meshIndex < 0)
    return anchor->emitError() << "schedule line for mesh \"" << name
                               << "\" names a mesh that is not in the topology";
  mesh = name.str();
  SmallVector<StringRef> tokens;
  rest.split(tokens, ' ', -1, /*KeepEmpty=*/false);
  for (StringRef token : tokens) {
    if (token == ".")
      continue; // An idle slot.
    StringRef body = token;
    char kind = body.empty() ? 0 : body.front();
    body = body.drop_front();
    auto [mb, stagePart] = body.split(".s");
    int64_t microbatch, stage = meshIndex;
    if ((kind != 'F' && kind != 'B' && kind != 'W') || mb.getAsInteger(10, microbatch) ||
        (body.contains(".s") && stagePart.getAsInteger(10, stage)))
      return anchor->emitError() << "malformed unit '" << token << "' in the schedule of mesh \""
                                 << name << "\": expected F<mb>, B<mb> or W<mb>, optionally "
                                            "followed by .s<stage>";
    units.push_back({kind, microbatch, stage});
  }
  return success();
}

std::string unitName(const UnitKey &key, int64_t mesh) {
  SchedulingUnit unit{std::get<0>(key), std::get<1>(key), std::get<2>(key), mesh};
  return unit.str();
}

std::string describeKind(char kind) {
  return kind == 'F' ? "forward" : kind == 'B' ? "backward" : "weight-gradient";
}

class PipelineSchedulePass : public impl::PipelineSchedulePassBase<PipelineSchedulePass> {
  using PipelineSchedulePassBase::PipelineSchedulePassBase;

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    auto topology = func->getAttrOfType<TopologyAttr>(kTopologyAttr);
    if (!topology || func.isExternal() || order.empty())
      return;
    Block &block = func.getBody().front();

    // The program's units: (mesh, unit) -> fragments in program order.
    std::map<std::pair<int64_t, UnitKey>, SmallVector<Operation *>> program;
    for (FragmentOp fragment : block.getOps<FragmentOp>())
      if (std::optional<SchedulingUnit> unit = getSchedulingUnit(fragment, topology))
        program[{unit->mesh, {unit->kind, unit->microbatch, unit->stage}}].push_back(fragment);

    // Per mesh, the chain of fragments the schedule imposes.
    llvm::DenseMap<Operation *, Operation *> next; // schedule successor
    llvm::DenseMap<Operation *, std::string> label;
    std::set<std::pair<int64_t, UnitKey>> scheduled;
    llvm::StringSet<> meshesSeen;
    for (const std::string &lineText : splitOptionLines(order)) {
      StringRef line = lineText;
      if (line.starts_with("@"))
        continue; // A `@name` header of the text form.
      std::string mesh;
      SmallVector<UnitKey> units;
      if (failed(parseLine(line, func, mesh, units, topology)))
        return signalPassFailure();
      if (!meshesSeen.insert(mesh).second) {
        func.emitError() << "the schedule has two lines for mesh \"" << mesh << "\"";
        return signalPassFailure();
      }
      int64_t meshIndex = getMeshIndex(topology, mesh);
      Operation *previous = nullptr;
      for (const UnitKey &key : units) {
        auto it = program.find({meshIndex, key});
        if (it == program.end()) {
          func.emitError() << "the schedule runs " << unitName(key, meshIndex) << " on mesh \""
                           << mesh << "\" but the program has no " << describeKind(std::get<0>(key))
                           << " fragment of microbatch " << std::get<1>(key) << " for stage "
                           << std::get<2>(key) << " on that mesh";
          return signalPassFailure();
        }
        if (!scheduled.insert({meshIndex, key}).second) {
          func.emitError() << "the schedule of mesh \"" << mesh << "\" runs "
                           << unitName(key, meshIndex) << " twice";
          return signalPassFailure();
        }
        for (Operation *op : it->second) {
          label[op] = unitName(key, meshIndex) + " on mesh \"" + mesh + "\"";
          if (previous)
            next[previous] = op;
          previous = op;
        }
      }
    }
    for (auto &[key, ops] : program) {
      if (scheduled.count(key))
        continue;
      InFlightDiagnostic diag = ops.front()->emitError()
                                << describeKind(std::get<0>(key.second)) << " fragment of microbatch "
                                << std::get<1>(key.second) << " (unit " << unitName(key.second, key.first)
                                << ") on mesh \"" << topology.getMeshes()[key.first].getName()
                                << "\" is not in the schedule";
      return signalPassFailure();
    }

    // Stable topological sort over data and schedule edges.
    SmallVector<Operation *> ops;
    llvm::DenseMap<Operation *, int64_t> index;
    for (Operation &op : block.without_terminator()) {
      index[&op] = ops.size();
      ops.push_back(&op);
    }
    std::vector<SmallVector<int64_t>> succ(ops.size());
    std::set<std::pair<int64_t, int64_t>> dataEdges;
    std::vector<int64_t> indegree(ops.size(), 0);
    auto addEdge = [&](int64_t from, int64_t to) {
      succ[from].push_back(to);
      ++indegree[to];
    };
    for (auto [i, op] : llvm::enumerate(ops)) {
      llvm::DenseSet<int64_t> preds;
      op->walk([&](Operation *inner) {
        for (Value v : inner->getOperands())
          if (Operation *def = v.getDefiningOp())
            if (Operation *anc = block.findAncestorOpInBlock(*def); anc && anc != op &&
                                                                    index.count(anc))
              preds.insert(index[anc]);
      });
      for (int64_t p : preds) {
        addEdge(p, i);
        dataEdges.insert({p, i});
      }
      if (auto it = next.find(op); it != next.end())
        addEdge(i, index[it->second]);
    }
    std::priority_queue<int64_t, std::vector<int64_t>, std::greater<int64_t>> ready;
    for (int64_t i = 0; i < static_cast<int64_t>(ops.size()); ++i)
      if (indegree[i] == 0)
        ready.push(i);
    SmallVector<int64_t> sorted;
    while (!ready.empty()) {
      int64_t i = ready.top();
      ready.pop();
      sorted.push_back(i);
      for (int64_t s : succ[i])
        if (--indegree[s] == 0)
          ready.push(s);
    }
    if (sorted.size() != ops.size()) {
      reportDeadlock(func, ops, succ, indegree, dataEdges, next, label);
      return signalPassFailure();
    }
    Operation *terminator = block.getTerminator();
    for (int64_t i : sorted)
      ops[i]->moveBefore(terminator);
  }

  /// Finds a cycle among the ops the sort could not emit and reports the
  /// schedule edge in it: the two units that wait on each other.
  void reportDeadlock(func::FuncOp func, ArrayRef<Operation *> ops,
                      const std::vector<SmallVector<int64_t>> &succ, ArrayRef<int64_t> indegree,
                      const std::set<std::pair<int64_t, int64_t>> &dataEdges,
                      llvm::DenseMap<Operation *, Operation *> &next,
                      llvm::DenseMap<Operation *, std::string> &label) {
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
                                << "the pipeline schedule deadlocks: it runs " << label[ops[u]]
                                << " before " << label[ops[v]] << ", but " << label[ops[u]]
                                << " needs a result that only exists after " << label[ops[v]];
      for (size_t j = 1; j < cycle.size(); ++j) {
        Operation *op = ops[cycle[(k + 1 + j) % cycle.size()]];
        auto l = label.find(op);
        diag.attachNote(op->getLoc())
            << "then " << (l != label.end() ? l->second : "'" + op->getName().getStringRef().str() + "'");
      }
      return;
    }
    func.emitError() << "the pipeline schedule deadlocks (cycle through "
                     << cycle.size() << " ops)";
  }
};

} // namespace
} // namespace mlir::mpmd
