//===- BuiltinSchedules.cpp - the orders of the compiler's schedules ---------===//

#include "mpmd/BuiltinSchedules.h"

#include "llvm/ADT/StringRef.h"

#include <algorithm>
#include <numeric>

std::vector<std::string> mpmd::builtinScheduleNames() {
  return {"GPipe", "1F1B", "GPipeBut1F1BForLastMesh", "Circular", "CircularWithReversedBackward"};
}

std::optional<mpmd::BuiltinSchedule> mpmd::parseBuiltinSchedule(const std::string &name) {
  std::string lower = llvm::StringRef(name).trim().lower();
  if (lower == "none")
    return BuiltinSchedule::kNone;
  if (lower == "gpipe")
    return BuiltinSchedule::kGPipe;
  if (lower == "1f1b")
    return BuiltinSchedule::k1F1B;
  if (lower == "gpipebut1f1bforlastmesh")
    return BuiltinSchedule::kGPipeBut1F1BForLastMesh;
  if (lower == "circular")
    return BuiltinSchedule::kCircular;
  if (lower == "circularwithreversedbackward")
    return BuiltinSchedule::kCircularWithReversedBackward;
  return std::nullopt;
}

mpmd::BuiltinScheduleKey mpmd::builtinScheduleKey(BuiltinSchedule schedule, const Unit &unit,
                                                  int64_t meshIndex, int64_t numMeshes) {
  int64_t t = unit.kind == "F" ? 0 : 1, mb = unit.microbatch, s = unit.stage;
  bool last = meshIndex == numMeshes - 1;
  switch (schedule) {
  case BuiltinSchedule::kGPipeBut1F1BForLastMesh:
    if (!last)
      return {t, mb, 0, 0};
    [[fallthrough]];
  case BuiltinSchedule::k1F1B:
    return {mb + (numMeshes - meshIndex) * t, -t, 0, 0};
  case BuiltinSchedule::kCircular:
    return t == 0 ? BuiltinScheduleKey{0, mb / numMeshes, s, mb}
                  : BuiltinScheduleKey{1, mb / numMeshes, -s, mb};
  case BuiltinSchedule::kCircularWithReversedBackward:
    return t == 0 ? BuiltinScheduleKey{0, mb / numMeshes, s, mb}
                  : BuiltinScheduleKey{1, -(mb / numMeshes), -s, -mb};
  case BuiltinSchedule::kGPipe:
  case BuiltinSchedule::kNone:
    break;
  }
  return {t, mb, 0, 0};
}

std::vector<int64_t> mpmd::builtinScheduleOrder(const std::string &name,
                                                const std::vector<Unit> &units,
                                                int64_t meshIndex, int64_t numMeshes) {
  std::optional<BuiltinSchedule> schedule = parseBuiltinSchedule(name);
  if (!schedule || numMeshes <= 0)
    return {};
  std::vector<int64_t> order(units.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return builtinScheduleKey(*schedule, units[a], meshIndex, numMeshes) <
           builtinScheduleKey(*schedule, units[b], meshIndex, numMeshes);
  });
  return order;
}
