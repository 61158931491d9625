//===- Diagnostics.h - diagnostics as the Python user reads them -*- C++ -*-===//
#ifndef MPMD_LIB_DRIVER_DIAGNOSTICS_H
#define MPMD_LIB_DRIVER_DIAGNOSTICS_H

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Location.h"
#include "mlir/IR/MLIRContext.h"

#include <set>
#include <string>

namespace mlir::mpmd {

/// `file:line:col` of the innermost frame of a JAX source location, then the
/// Python call chain: `models.py:43:8 (in mlp_loss, called from sgd_step at
/// models.py:49:16)`. Empty for unknown locations.
std::string formatLocation(Location loc);

/// Collects the diagnostics of a context, while it lives, as
/// `location: severity: message` lines with their notes (exact repeats, e.g.
/// a forward op and its transpose at one source line, once).
class DiagnosticCollector {
public:
  explicit DiagnosticCollector(MLIRContext *ctx);
  /// The lines collected since the last call.
  std::string take() { return std::move(text); }

private:
  void record(Diagnostic &diag);
  std::string text;
  std::set<std::string> seen;
  ScopedDiagnosticHandler handler;
};

} // namespace mlir::mpmd

#endif // MPMD_LIB_DRIVER_DIAGNOSTICS_H
