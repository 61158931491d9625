//===- UnitText.h - the text grammar of scheduling units ----------*- C++ -*-===//
//
// The one definition of how scheduling units are written, for every reader
// and writer in either language: `mpmd-opt`'s `schedule` and `merge-rules`
// options (lib/Transforms/Common/TextOptions.cpp) and Python's
// `mpmd.schedule.core` (`Schedule.from_text`, `split_token`, `format_unit`,
// merge rules), which calls these through the extension (`mpmd._mpmd`).
//
//   text      := line (('\n' | ';') line)*      '#' to the end of a line: a comment
//   line      := '@' directive | MESH ':' token*
//   token     := unit | '.'                      '.' is an idle slot (skipped)
//   unit      := ('F' | 'B' | 'W') microbatch ('.s' stage)?
//
// `F` is a forward, `B` a backward (or its activation part when split), `W`
// the weight part of a split backward; without `.s` a unit belongs to the
// stage numbered like its mesh (stage -1 here). The printer writes `.s`
// exactly when the stage is known and is not its mesh's index.
//
// Plain C++ (no MLIR): the Python binding includes it.
//
//===----------------------------------------------------------------------===//

#ifndef MPMD_UNITTEXT_H
#define MPMD_UNITTEXT_H

#include "mpmd/Pipeline.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mpmd {

/// How a unit is written, for error messages.
inline constexpr const char *kUnitSyntax =
    "F<mb>, B<mb> or W<mb>, optionally followed by .s<stage>";

/// One unit token (`F3`, `B0.s5`): its kind, microbatch and stage (-1 when
/// not written); the mesh is left empty. nullopt when `token` is not a unit
/// (an idle slot `.` is not one).
std::optional<Unit> parseUnitToken(const std::string &token);

/// `F3`, or `F3.s5` when `stage` is known (>= 0) and is not `meshIndex`.
std::string formatUnitToken(const std::string &kind, int64_t microbatch, int64_t stage = -1,
                            int64_t meshIndex = -1);

/// One line of a unit text, comment and blanks removed.
struct UnitTextLine {
  int64_t line_number = 0; ///< 1-based, counting the text's '\n'-separated lines
  std::string text;        ///< the line (a ';'-separated piece of it), trimmed
  bool directive = false;  ///< starts with '@' (text holds it; nothing else is set)
  bool has_mesh = false;   ///< has `MESH:`; false for a malformed line
  std::string mesh;        ///< before the ':', trimmed
  std::vector<std::string> tokens; ///< after the ':', split on whitespace (idle slots kept)
};

/// The lines of a unit text in order: empty lines and comments dropped.
std::vector<UnitTextLine> splitUnitText(const std::string &text);

} // namespace mpmd

#endif // MPMD_UNITTEXT_H
