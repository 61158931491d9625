//===- ReadableInput.h - readable StableHLO/Shardy input for mpmd-opt -*- C++ -*-===//
//
// mpmd-opt registers only the mpmd, func and builtin dialects and carries every
// other op (StableHLO, CHLO, Shardy, ...) as an unregistered op, which MLIR
// parses only in generic form. Text as JAX and Shardy print it has those ops in
// their readable syntax. For such input mpmd-opt hands its whole command line
// to `python -m mpmd.opt` (the Python package's front end), which converts the
// text to generic form with jaxlib, keeping every op's location in the input,
// and runs this binary on it (MPMD_OPT names it; MPMD_OPT_NO_FRONT=1 stops a
// second hand-over).
//
//===----------------------------------------------------------------------===//

#ifndef MPMD_TOOLS_MPMD_OPT_READABLEINPUT_H
#define MPMD_TOOLS_MPMD_OPT_READABLEINPUT_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/MemoryBuffer.h"

#include <optional>
#include <string>

namespace mpmd {

/// An op in custom syntax of a dialect this binary does not register.
struct ReadableOp {
  unsigned line; // 1-based
  std::string name;
};

/// The first op of `text` written in custom syntax whose dialect is not one of
/// mpmd, func, builtin (e.g. `%0 = stablehlo.add ...`), if any.
std::optional<ReadableOp> findReadableOp(llvm::StringRef text);

/// Runs `python -m mpmd.opt` with this binary's arguments (`argv`) on `input`
/// (the text read from `inputFilename`, given again on stdin when that is
/// `-`) and returns its exit status. Readable input (`op`, its first readable
/// op) gets readable output where possible, unless the arguments ask for
/// generic output. 1, with a message, when no Python with the mpmd package
/// is found.
int runPythonFrontEnd(int argc, char **argv, llvm::StringRef inputFilename,
                      const llvm::MemoryBuffer &input, const std::optional<ReadableOp> &op);

} // namespace mpmd

#endif // MPMD_TOOLS_MPMD_OPT_READABLEINPUT_H
