//===- CheckInlinable.cpp - ops MLIR's inliner cannot look into -----------===//
//
// MLIR's symbol-use analysis, which its inliner runs on the whole module,
// gives up on an op of no loaded dialect with one region (it may be a
// symbol table of its own), and the inliner then dereferences the missing
// result. mpmd-opt carries StableHLO unregistered, so a `stablehlo.reduce`
// anywhere would crash `-inline`: this pass, which mpmd-opt's `-inline`
// runs first, turns that into an error naming the op.
//
//===----------------------------------------------------------------------===//

#include "mpmd/Compat/Passes.h"

namespace mlir::mpmd {
#define GEN_PASS_DEF_CHECKINLINABLEPASS
#include "mpmd/Compat/Passes.h.inc"

namespace {

/// The ops MLIR's symbol-use walk cannot look into (its "potentially unknown
/// symbol table"): no loaded dialect, one region.
bool hidesSymbolUses(Operation *op) { return !op->getDialect() && op->getNumRegions() == 1; }

class CheckInlinablePass : public impl::CheckInlinablePassBase<CheckInlinablePass> {
public:
  using CheckInlinablePassBase::CheckInlinablePassBase;

  void runOnOperation() override {
    Operation *first = nullptr;
    unsigned count = 0;
    getOperation().walk<WalkOrder::PreOrder>([&](Operation *op) {
      if (!hidesSymbolUses(op))
        return;
      if (!first)
        first = op;
      ++count;
    });
    if (!first)
      return;
    InFlightDiagnostic diag =
        first->emitError() << "'" << first->getName()
                           << "' is unregistered in mpmd-opt and has a region, which MLIR's "
                              "symbol-use analysis cannot look into, and MLIR's inliner "
                              "(-inline) needs it for the whole module";
    if (count > 1)
      diag << " (the module has " << count - 1 << " more such ops)";
    diag << ": inline func.calls with -mpmd-inline-func-calls, which does not need it";
    signalPassFailure();
  }
};

} // namespace
} // namespace mlir::mpmd
