//===- Diagnostics.cpp - diagnostics as the Python user reads them ---------===//

#include "Driver/Diagnostics.h"

#include "mlir/IR/BuiltinAttributes.h"

#include "llvm/Support/raw_ostream.h"

#include <vector>

using namespace mlir;
using namespace mlir::mpmd;

namespace {

/// A frame of a JAX source location: the Python function (if known) and
/// `file:line:col`.
struct Frame {
  std::string function;
  std::string position;
};

void collectFrames(Location loc, std::vector<Frame> &frames) {
  if (auto name = dyn_cast<NameLoc>(loc)) {
    if (auto file = dyn_cast<FileLineColLoc>(name.getChildLoc())) {
      frames.push_back({name.getName().str(), (file.getFilename().str() + ":" +
                                               std::to_string(file.getLine()) + ":" +
                                               std::to_string(file.getColumn()))});
      return;
    }
    collectFrames(name.getChildLoc(), frames);
  } else if (auto call = dyn_cast<CallSiteLoc>(loc)) {
    collectFrames(call.getCallee(), frames);
    collectFrames(call.getCaller(), frames);
  } else if (auto file = dyn_cast<FileLineColLoc>(loc)) {
    frames.push_back({"", file.getFilename().str() + ":" + std::to_string(file.getLine()) + ":" +
                              std::to_string(file.getColumn())});
  } else if (auto fused = dyn_cast<FusedLoc>(loc)) {
    if (!fused.getLocations().empty())
      collectFrames(fused.getLocations().front(), frames);
  }
}

} // namespace

/// Most callers a location names after its own frame: JAX 0.12 writes up to
/// 100 frames (`jax_traceback_in_locations_limit`; 10 before), most of them
/// the test runner's or the framework's around the user's code.
static constexpr size_t kMaxCallers = 8;

std::string mlir::mpmd::formatLocation(Location loc) {
  std::vector<Frame> frames;
  collectFrames(loc, frames);
  if (frames.empty())
    return "";
  std::string text = frames.front().position;
  std::string chain;
  size_t named = 0, left = 0;
  for (size_t i = 0; i < frames.size(); ++i) {
    if (frames[i].function.empty())
      continue;
    if (named == kMaxCallers + 1) {
      ++left;
      continue;
    }
    chain += chain.empty() ? " (in " + frames[i].function
                           : ", called from " + frames[i].function + " at " + frames[i].position;
    ++named;
  }
  if (left)
    chain += ", and " + std::to_string(left) + " more caller" + (left == 1 ? "" : "s");
  return chain.empty() ? text : text + chain + ")";
}

DiagnosticCollector::DiagnosticCollector(MLIRContext *ctx)
    : handler(ctx, [this](Diagnostic &diag) { record(diag); }) {}

void DiagnosticCollector::record(Diagnostic &diag) {
  std::string line;
  llvm::raw_string_ostream os(line);
  std::string where = formatLocation(diag.getLocation());
  if (!where.empty())
    os << where << ": ";
  switch (diag.getSeverity()) {
  case DiagnosticSeverity::Error: os << "error: "; break;
  case DiagnosticSeverity::Warning: os << "warning: "; break;
  default: os << "note: "; break;
  }
  os << diag << "\n";
  for (Diagnostic &note : diag.getNotes()) {
    std::string noteWhere = formatLocation(note.getLocation());
    os << "  " << (noteWhere.empty() ? "" : noteWhere + ": ") << "note: " << note << "\n";
  }
  if (seen.insert(line).second)
    text += line;
}
