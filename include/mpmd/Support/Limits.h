//===- Limits.h - limits that keep hostile input from crashing ---*- C++ -*-===//
//
// MLIR's parser, verifier and walks recurse once per nested region, so a
// deeply nested module exhausts the stack and kills the process (a Python
// user would lose the interpreter). mpmd rejects nesting deeper than
// kMaxNestingDepth before parsing, and parses and runs passes on a thread
// whose stack holds that depth with room to spare.
//
// No MLIR header: used by the driver and by mpmd-opt.
//
//===----------------------------------------------------------------------===//

#ifndef MPMD_SUPPORT_LIMITS_H
#define MPMD_SUPPORT_LIMITS_H

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace mpmd {

/// Most nested brackets of one kind in a module: `{` (regions, attribute
/// dictionaries), `[` (arrays), `(` (operand and region lists), `<` (types,
/// attributes).
inline constexpr int64_t kMaxNestingDepth = 4096;

/// Stack of the thread that parses and runs passes (reserved, not committed).
inline constexpr size_t kLargeStackBytes = size_t(1) << 30;

/// An error message "LINE:COL: error: ..." when `text` nests brackets of one
/// kind deeper than `limit` (string literals and `//` comments are skipped),
/// at the bracket that crosses the limit; empty otherwise.
std::string checkNestingDepth(std::string_view text, int64_t limit = kMaxNestingDepth);

/// Sizes of expanded programs (loops unrolled, calls inlined), counted in
/// ops and saturating at UINT64_MAX, so that a bomb's size cannot wrap.
inline uint64_t saturatingAdd(uint64_t a, uint64_t b) {
  return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}
inline uint64_t saturatingMul(uint64_t a, uint64_t b) {
  return b && a > UINT64_MAX / b ? UINT64_MAX : a * b;
}
/// A size for messages: the number, or "more than 2^64" once saturated.
inline std::string describeSize(uint64_t ops) {
  return ops == UINT64_MAX ? std::string("more than 2^64") : std::to_string(ops);
}

/// Runs `fn` on a new thread with a stack of `stackBytes` and waits for it;
/// runs it on the calling thread if no such thread can be created.
void runWithLargeStack(const std::function<void()> &fn, size_t stackBytes = kLargeStackBytes);

} // namespace mpmd

#endif // MPMD_SUPPORT_LIMITS_H
