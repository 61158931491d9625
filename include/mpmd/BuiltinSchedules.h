//===- BuiltinSchedules.h - the orders of the compiler's schedules -*- C++ -*-===//
//
// The one definition of the pipeline schedules built into the compiler under
// Shardy:MPMD's names. Each is a sort key over one mesh's scheduling units
// (t: 0 forward, 1 backward; mb: microbatch; s: stage; N: meshes of the
// topology; i: the mesh's index in it):
//
//   GPipe                         (t, mb): every forward, then every backward
//   1F1B                          (mb + (N - i) t, -t): N - i forwards first,
//                                 then one backward, one forward, ...
//   GPipeBut1F1BForLastMesh       1F1B on the last mesh, GPipe elsewhere
//   Circular                      forward (0, mb / N, s, mb), backward
//                                 (1, mb / N, -s, mb): microbatches in rounds
//                                 of N, each round through the stages
//   CircularWithReversedBackward  backward (1, -(mb / N), -s, -mb): the
//                                 reverse of the forward order
//
// Readers: `-mpmd-builtin-schedule` (lib/Transforms/Optimize/BuiltinSchedule.cpp)
// orders a program's fragments by the key, under their data dependencies;
// Python's `mpmd.schedule` builders of the same names order their units by it
// (`_mpmd.builtin_schedule_order`).
//
// Plain C++ (no MLIR): the Python binding includes it.
//
//===----------------------------------------------------------------------===//

#ifndef MPMD_BUILTINSCHEDULES_H
#define MPMD_BUILTINSCHEDULES_H

#include "mpmd/Pipeline.h"

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mpmd {

enum class BuiltinSchedule {
  kNone,
  kGPipe,
  k1F1B,
  kGPipeBut1F1BForLastMesh,
  kCircular,
  kCircularWithReversedBackward
};

/// The schedules' names (without "none", which keeps the program's order).
std::vector<std::string> builtinScheduleNames();

/// The schedule named `name` (any case; "none" too), if it is built in.
std::optional<BuiltinSchedule> parseBuiltinSchedule(const std::string &name);

using BuiltinScheduleKey = std::array<int64_t, 4>;

/// The key of `unit` (kind "F": forward, else backward) on the mesh of index
/// `meshIndex` of `numMeshes`: a mesh runs its units in key order.
BuiltinScheduleKey builtinScheduleKey(BuiltinSchedule schedule, const Unit &unit,
                                      int64_t meshIndex, int64_t numMeshes);

/// The positions of `units` (one mesh's) in the order of schedule `name`
/// (stable between equal keys); empty when `name` is not built in.
std::vector<int64_t> builtinScheduleOrder(const std::string &name, const std::vector<Unit> &units,
                                          int64_t meshIndex, int64_t numMeshes);

} // namespace mpmd

#endif // MPMD_BUILTINSCHEDULES_H
