//===- BuiltinSchedule.cpp - order fragments by a schedule given by name ---===//
//
// Each built-in schedule is a sort key over a mesh's scheduling units
// (t: 0 forward, 1 backward; mb: microbatch; s: stage; N: meshes of the
// topology; i: this mesh's index in it):
//
//   GPipe                         (t, mb): every forward, then every backward
//   1F1B                          (mb + (N - i) t, -t): N - i forwards first,
//                                 then one backward, one forward, ...
//   GPipeBut1F1BForLastMesh       1F1B on the last mesh, GPipe elsewhere
//   Circular                      forward (0, mb / N, s, mb), backward
//                                 (1, mb / N, -s, mb): microbatches in rounds
//                                 of N, each round through the stages
//   CircularWithReversedBackward  backward in the reverse of the forward order
//
// The orders are handed to -mpmd-pipeline-schedule, which checks them against
// the data flow and reorders the block.
//
//===----------------------------------------------------------------------===//

#include "Common/Fragments.h"
#include "Common/PassBase.h"
#include "mpmd/Transforms/Passes.h"

#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"

#include <algorithm>
#include <map>
#include <tuple>

namespace mlir::mpmd {
#define GEN_PASS_DEF_BUILTINSCHEDULEPASS
#include "mpmd/Transforms/Passes.h.inc"

namespace {

enum class Builtin { kNone, kGPipe, k1F1B, kGPipeBut1F1BForLastMesh, kCircular, kCircularReversed };

/// The schedule named `name` (case-insensitive), if it is built in.
std::optional<Builtin> parseBuiltin(StringRef name) {
  std::string lower = name.trim().lower();
  if (lower == "none")
    return Builtin::kNone;
  if (lower == "gpipe")
    return Builtin::kGPipe;
  if (lower == "1f1b")
    return Builtin::k1F1B;
  if (lower == "gpipebut1f1bforlastmesh")
    return Builtin::kGPipeBut1F1BForLastMesh;
  if (lower == "circular")
    return Builtin::kCircular;
  if (lower == "circularwithreversedbackward")
    return Builtin::kCircularReversed;
  return std::nullopt;
}

using Key = std::tuple<int64_t, int64_t, int64_t, int64_t>;

Key sortKey(Builtin schedule, const SchedulingUnit &unit, int64_t position, int64_t numMeshes) {
  int64_t t = unit.kind == 'F' ? 0 : 1, mb = unit.microbatch, s = unit.stage;
  bool last = position == numMeshes - 1;
  switch (schedule) {
  case Builtin::kGPipeBut1F1BForLastMesh:
    if (!last)
      return {t, mb, 0, 0};
    [[fallthrough]];
  case Builtin::k1F1B:
    return {mb + (numMeshes - position) * t, -t, 0, 0};
  case Builtin::kCircular:
    return t == 0 ? Key{0, mb / numMeshes, s, mb} : Key{1, mb / numMeshes, -s, mb};
  case Builtin::kCircularReversed:
    return t == 0 ? Key{0, mb / numMeshes, s, mb} : Key{1, -(mb / numMeshes), -s, -mb};
  case Builtin::kGPipe:
  case Builtin::kNone:
    break;
  }
  return {t, mb, 0, 0};
}

class BuiltinSchedulePass : public MpmdPass<BuiltinSchedulePass, impl::BuiltinSchedulePassBase> {
public:
  using MpmdPass::MpmdPass;

  void runOnFunction(func::FuncOp func, TopologyAttr topology) {
    std::optional<Builtin> builtin = parseBuiltin(schedule);
    if (!builtin) {
      func.emitError() << "schedule \"" << schedule
                       << "\" is not built into -mpmd-builtin-schedule (GPipe, 1F1B, "
                          "GPipeBut1F1BForLastMesh, Circular, CircularWithReversedBackward, "
                          "none): give the order of each mesh's units with "
                          "-mpmd-pipeline-schedule=order=\"m0: F0 F1 B0 B1; ...\"";
      return signalPassFailure();
    }
    if (*builtin == Builtin::kNone)
      return;

    // The distinct units of each mesh, by mesh index.
    std::map<int64_t, SmallVector<SchedulingUnit>> units;
    bool failed = false;
    func.walk([&](FragmentOp fragment) {
      std::optional<SchedulingUnit> unit = getSchedulingUnit(fragment, topology);
      if (!unit)
        return;
      if (unit->kind == 'W') {
        fragment.emitError() << "schedule \"" << schedule
                             << "\" has no place for weight-gradient units (split backward "
                                "fragments): use a zero-bubble schedule through mpmd.jit, or "
                                "give the order with -mpmd-pipeline-schedule";
        failed = true;
        return;
      }
      SmallVector<SchedulingUnit> &list = units[unit->mesh];
      if (!llvm::is_contained(list, *unit))
        list.push_back(*unit);
    });
    if (failed)
      return signalPassFailure();
    if (units.empty())
      return;

    int64_t numMeshes = topology.getMeshes().size();
    ::mpmd::Schedule order;
    for (auto &[mesh, list] : units) {
      llvm::stable_sort(list, [&](const SchedulingUnit &a, const SchedulingUnit &b) {
        return sortKey(*builtin, a, mesh, numMeshes) < sortKey(*builtin, b, mesh, numMeshes);
      });
      std::vector<::mpmd::Unit> line;
      for (const SchedulingUnit &unit : list)
        line.push_back({topology.getMeshes()[mesh].getName().str(), std::string(1, unit.kind),
                        unit.microbatch, unit.stage});
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
