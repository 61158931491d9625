//===- ReadableInput.cpp - readable StableHLO/Shardy input for mpmd-opt ---===//

#include "ReadableInput.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdlib>
#include <vector>

extern char **environ;

namespace mpmd {
namespace {

bool isIdentifierStart(char c) { return llvm::isAlpha(c) || c == '_'; }
bool isIdentifierChar(char c) { return llvm::isAlnum(c) || c == '_' || c == '$'; }

/// The dialects this binary parses in custom syntax (see mpmd-opt.cpp).
bool isRegisteredDialect(llvm::StringRef name) {
  return name == "mpmd" || name == "func" || name == "builtin";
}

/// The op name a line starts with in custom syntax (after its results, if
/// any), or empty: `%0:2 = stablehlo.foo`, `stablehlo.return %x`,
/// `sdy.mesh @m = ...`. Generic ops are quoted, attributes, types and
/// comments start with `#`, `!` and `//`, so none of them has one.
llvm::StringRef customOpName(llvm::StringRef line) {
  line = line.ltrim(" \t");
  if (line.starts_with("%")) {
    size_t eq = line.find_first_of("=\"");
    if (eq == llvm::StringRef::npos || line[eq] != '=')
      return {};
    line = line.drop_front(eq + 1).ltrim(" \t");
  }
  if (line.empty() || !isIdentifierStart(line.front()))
    return {};
  size_t i = 1;
  while (i < line.size() && isIdentifierChar(line[i]))
    ++i;
  if (i + 1 >= line.size() || line[i] != '.' || !isIdentifierStart(line[i + 1]))
    return {};
  size_t end = i + 2;
  while (end < line.size() && (isIdentifierChar(line[end]) || line[end] == '.'))
    ++end;
  return line.take_front(end);
}

/// The environment of the front end: this one, plus MPMD_OPT (this binary)
/// and MPMD_OPT_NO_FRONT=1.
std::vector<std::string> frontEndEnvironment(llvm::StringRef self) {
  std::vector<std::string> env;
  for (char **e = environ; e && *e; ++e) {
    llvm::StringRef entry(*e);
    if (!entry.starts_with("MPMD_OPT=") && !entry.starts_with("MPMD_OPT_NO_FRONT="))
      env.push_back(entry.str());
  }
  env.push_back(("MPMD_OPT=" + self).str());
  env.push_back("MPMD_OPT_NO_FRONT=1");
  return env;
}

/// Whether `python` runs and can import the mpmd package (without importing
/// it: that would import JAX).
bool hasMpmdPackage(llvm::StringRef python) {
  llvm::StringRef args[] = {python, "-c",
                            "import importlib.util, sys; "
                            "sys.exit(importlib.util.find_spec('mpmd') is None)"};
  std::optional<llvm::StringRef> quiet[] = {llvm::StringRef(""), llvm::StringRef(""),
                                            llvm::StringRef("")};
  return llvm::sys::ExecuteAndWait(python, args, std::nullopt, quiet) == 0;
}

/// The Pythons to try, in order: $MPMD_PYTHON, the one installed next to this
/// binary (a venv's or an interpreter's bin/), the one this binary was built
/// for (developer builds), python3 on PATH.
std::vector<std::string> pythonCandidates(llvm::StringRef self) {
  std::vector<std::string> out;
  if (const char *env = std::getenv("MPMD_PYTHON"); env && *env)
    out.push_back(env);
  llvm::StringRef dir = llvm::sys::path::parent_path(self);
  for (const char *name : {"python3", "python"}) {
    llvm::SmallString<256> path(dir);
    llvm::sys::path::append(path, name);
    out.push_back(std::string(path));
  }
#ifdef MPMD_OPT_BUILD_PYTHON
  out.push_back(MPMD_OPT_BUILD_PYTHON);
#endif
  if (auto onPath = llvm::sys::findProgramByName("python3"))
    out.push_back(*onPath);
  return out;
}

} // namespace

std::optional<ReadableOp> findReadableOp(llvm::StringRef text) {
  unsigned number = 0;
  while (!text.empty()) {
    auto [line, rest] = text.split('\n');
    text = rest;
    ++number;
    llvm::StringRef name = customOpName(line);
    if (!name.empty() && !isRegisteredDialect(name.split('.').first))
      return ReadableOp{number, name.str()};
  }
  return std::nullopt;
}

int runPythonFrontEnd(int argc, char **argv, llvm::StringRef inputFilename,
                      const llvm::MemoryBuffer &input, const std::optional<ReadableOp> &op) {
  std::string self =
      llvm::sys::fs::getMainExecutable(argv[0], reinterpret_cast<void *>(&findReadableOp));
  std::vector<std::string> tried;
  std::string python;
  for (const std::string &candidate : pythonCandidates(self)) {
    if (llvm::is_contained(tried, candidate))
      continue;
    tried.push_back(candidate);
    if (llvm::sys::fs::can_execute(candidate) && hasMpmdPackage(candidate)) {
      python = candidate;
      break;
    }
  }
  if (python.empty()) {
    llvm::errs() << "mpmd-opt: error: ";
    if (op)
      llvm::errs() << inputFilename << " has ops in readable form (first: '" << op->name
                   << "' on line " << op->line
                   << "), which mpmd-opt reads only in generic form; converting them";
    else
      llvm::errs() << "--print-readable";
    llvm::errs() << " needs a Python with the mpmd package (and jax), and none was found (tried: "
                 << llvm::join(tried, ", ")
                 << "). Set MPMD_PYTHON to one, or give the text in generic form "
                    "(--mlir-print-op-generic of a tool that knows those dialects).\n";
    return 1;
  }

  // The input was read already: when it came from stdin, it goes to the front
  // end's stdin again from a file.
  llvm::SmallString<128> stdinCopy;
  std::optional<llvm::StringRef> redirects[] = {std::nullopt, std::nullopt, std::nullopt};
  if (inputFilename == "-") {
    int fd;
    if (std::error_code ec =
            llvm::sys::fs::createTemporaryFile("mpmd-opt-stdin", "mlir", fd, stdinCopy)) {
      llvm::errs() << "mpmd-opt: error: cannot keep the input for the Python front end: "
                   << ec.message() << "\n";
      return 1;
    }
    {
      llvm::raw_fd_ostream os(fd, /*shouldClose=*/true);
      os << input.getBuffer();
    }
    redirects[0] = llvm::StringRef(stdinCopy);
  }
  std::vector<std::string> argStorage = {python, "-m", "mpmd.opt"};
  bool generic = false, readable = false;
  for (int i = 1; i < argc; ++i) {
    llvm::StringRef arg = llvm::StringRef(argv[i]).ltrim('-');
    generic |= arg == "mlir-print-op-generic";
    readable |= arg.starts_with("print-readable");
    argStorage.push_back(argv[i]);
  }
  if (op && !generic && !readable)
    argStorage.push_back("--print-readable=auto");
  llvm::SmallVector<llvm::StringRef> args(argStorage.begin(), argStorage.end());
  std::vector<std::string> envStorage = frontEndEnvironment(self);
  llvm::SmallVector<llvm::StringRef> env(envStorage.begin(), envStorage.end());
  std::string error;
  int status = llvm::sys::ExecuteAndWait(python, args, llvm::ArrayRef<llvm::StringRef>(env),
                                         redirects, /*SecondsToWait=*/0, /*MemoryLimit=*/0,
                                         &error);
  if (!stdinCopy.empty())
    llvm::sys::fs::remove(stdinCopy);
  if (status < 0) {
    llvm::errs() << "mpmd-opt: error: running " << python << " -m mpmd.opt failed: " << error
                 << "\n";
    return 1;
  }
  return status;
}

} // namespace mpmd
