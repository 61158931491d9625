//===- BuiltinSchedule.cpp - order fragments by a schedule given by name ---===//
//
// The schedules and their orders are defined once, as sort keys over a mesh's
// scheduling units, in include/mpmd/BuiltinSchedules.h (Python's builders of
// the same names read them too). Between units that depend on each other (a
// merge tied two microbatches together), the data flow wins: each mesh's
// order is the list schedule of its units by the key under their
// dependencies. The orders are handed to -mpmd-pipeline-schedule, which
// checks them across meshes and reorders the block.
//
//===----------------------------------------------------------------------===//

#include "Common/Fragments.h"
#include "Common/PassBase.h"
#include "mpmd/BuiltinSchedules.h"
#include "mpmd/Transforms/Passes.h"

#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"

#include <algorithm>
#include <set>
#include <map>
#include <tuple>

namespace mlir::mpmd {
#define GEN_PASS_DEF_BUILTINSCHEDULEPASS
#include "mpmd/Transforms/Passes.h.inc"

namespace {

class BuiltinSchedulePass : public MpmdPass<BuiltinSchedulePass, impl::BuiltinSchedulePassBase> {
public:
  using MpmdPass::MpmdPass;

  /// One piece (over 80 lines): reading the schedule name, collecting each
  /// mesh's units and placing their fragments in the builtin's order share
  /// the per-mesh unit tables; the steps are marked by comments.
  void runOnFunction(func::FuncOp func, TopologyAttr topology) {
    std::optional<::mpmd::BuiltinSchedule> builtin = ::mpmd::parseBuiltinSchedule(schedule);
    if (!builtin) {
      func.emitError() << "schedule \"" << schedule
                       << "\" is not built into -mpmd-builtin-schedule ("
                       << llvm::join(::mpmd::builtinScheduleNames(), ", ")
                       << ", none): give the order of each mesh's units with "
                          "-mpmd-pipeline-schedule=order=\"m0: F0 F1 B0 B1; ...\"";
      return signalPassFailure();
    }
    if (*builtin == ::mpmd::BuiltinSchedule::kNone)
      return;

    // The distinct units of each mesh (by mesh index), and their fragments.
    std::map<int64_t, SmallVector<::mpmd::Unit>> units;
    std::map<std::pair<int64_t, size_t>, SmallVector<Operation *>> fragmentsOf;
    llvm::DenseMap<Operation *, size_t> unitOf; // fragment -> index in its mesh's list
    bool failed = false;
    func.walk([&](FragmentOp fragment) {
      std::optional<::mpmd::Unit> unit = getSchedulingUnit(fragment, topology);
      if (!unit)
        return;
      if (unit->kind == "W") {
        fragment.emitError() << "schedule \"" << schedule
                             << "\" has no place for weight-gradient units (split backward "
                                "fragments): use a zero-bubble schedule through mpmd.jit, or "
                                "give the order with -mpmd-pipeline-schedule";
        failed = true;
        return;
      }
      int64_t mesh = getMeshIndex(topology, unit->mesh);
      SmallVector<::mpmd::Unit> &list = units[mesh];
      size_t index = llvm::find(list, *unit) - list.begin();
      if (index == list.size())
        list.push_back(*unit);
      fragmentsOf[{mesh, index}].push_back(fragment);
      unitOf[fragment] = index;
    });
    if (failed)
      return signalPassFailure();
    if (units.empty())
      return;

    int64_t numMeshes = topology.getMeshes().size();
    ::mpmd::Schedule order;
    for (auto &[mesh, list] : units) {
      // The schedule's order decides between units that do not depend on
      // each other; a unit always comes after the units it needs (as when a
      // merge ties microbatches together): list scheduling by the key.
      size_t n = list.size();
      std::vector<std::vector<size_t>> after(n); // u -> units that need u
      std::vector<size_t> waiting(n, 0);
      for (size_t u = 0; u < n; ++u) {
        llvm::DenseSet<Operation *> seen;
        SmallVector<Operation *> stack(fragmentsOf[{mesh, u}]);
        std::set<size_t> reached;
        while (!stack.empty()) {
          Operation *op = stack.pop_back_val();
          for (Operation *user : op->getUsers()) {
            Operation *top = func.getBody().front().findAncestorOpInBlock(*user);
            if (!top || !seen.insert(top).second)
              continue;
            stack.push_back(top);
            auto fragment = dyn_cast<FragmentOp>(top);
            if (fragment && getMeshIndex(topology, fragment.getMeshName()) == mesh &&
                unitOf.count(top) && unitOf[top] != u)
              reached.insert(unitOf[top]);
          }
        }
        for (size_t v : reached) {
          after[u].push_back(v);
          ++waiting[v];
        }
      }
      std::vector<size_t> ready, sorted;
      auto keyOf = [&](size_t u) {
        return ::mpmd::builtinScheduleKey(*builtin, list[u], mesh, numMeshes);
      };
      for (size_t u = 0; u < n; ++u)
        if (!waiting[u])
          ready.push_back(u);
      while (!ready.empty()) {
        auto best = std::min_element(ready.begin(), ready.end(),
                                     [&](size_t a, size_t b) { return keyOf(a) < keyOf(b); });
        size_t u = *best;
        ready.erase(best);
        sorted.push_back(u);
        for (size_t v : after[u])
          if (--waiting[v] == 0)
            ready.push_back(v);
      }
      std::vector<::mpmd::Unit> line;
      for (size_t u : sorted)
        line.push_back(list[u]);
      // Units on a dependency cycle (impossible in SSA order) are left to the
      // schedule pass, which reports units missing from the order.
      order.push_back(std::move(line));
    }
    OpPassManager pm(func::FuncOp::getOperationName());
    pm.addPass(createPipelineSchedulePass(std::move(order)));
    if (mlir::failed(runPipeline(pm, func)))
      return signalPassFailure();
  }
};

} // namespace
} // namespace mlir::mpmd
