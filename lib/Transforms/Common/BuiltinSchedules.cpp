//===- BuiltinSchedules.cpp - the orders of the compiler's schedules ---------===//

#include "mpmd/BuiltinSchedules.h"

#include "llvm/ADT/StringRef.h"

#include <algorithm>
#include <numeric>
#include <utility>

namespace {
/// The built-in schedules by name: the one list both functions below read.
constexpr std::pair<llvm::StringLiteral, mpmd::BuiltinSchedule> kSchedules[] = {
    {"GPipe", mpmd::BuiltinSchedule::kGPipe},
    {"1F1B", mpmd::BuiltinSchedule::k1F1B},
    {"GPipeBut1F1BForLastMesh", mpmd::BuiltinSchedule::kGPipeBut1F1BForLastMesh},
    {"Circular", mpmd::BuiltinSchedule::kCircular},
    {"CircularWithReversedBackward", mpmd::BuiltinSchedule::kCircularWithReversedBackward},
};
} // namespace

std::vector<std::string> mpmd::builtinScheduleNames() {
  std::vector<std::string> names;
  for (const auto &[name, schedule] : kSchedules)
    names.push_back(name.str());
  return names;
}

std::optional<mpmd::BuiltinSchedule> mpmd::parseBuiltinSchedule(const std::string &name) {
  llvm::StringRef wanted = llvm::StringRef(name).trim();
  if (wanted.equals_insensitive("none"))
    return BuiltinSchedule::kNone;
  for (const auto &[known, schedule] : kSchedules)
    if (wanted.equals_insensitive(known))
      return schedule;
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
