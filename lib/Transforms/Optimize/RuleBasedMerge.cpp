//===- RuleBasedMerge.cpp - merge the fragments of given units --------------===//

#include "Common/Utils.h"
#include "mpmd/Transforms/Passes.h"


namespace mlir::mpmd {
#define GEN_PASS_DEF_RULEBASEDMERGEPASS
#include "mpmd/Transforms/Passes.h.inc"

namespace {

/// A unit name with its stage explicit: `F3` on mesh 2 is `F3.s2`.
std::string canonical(StringRef name, int64_t mesh) {
  return name.contains(".s") ? name.str() : (name + ".s" + std::to_string(mesh)).str();
}

class RuleBasedMergePass : public impl::RuleBasedMergePassBase<RuleBasedMergePass> {
  using RuleBasedMergePassBase::RuleBasedMergePassBase;

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    auto topology = func->getAttrOfType<TopologyAttr>(kTopologyAttr);
    if (!topology || func.isExternal() || rules.empty())
      return;
    for (const std::string &line : splitOptionLines(rules))
      if (failed(applyRule(func, topology, line)))
        return signalPassFailure();
  }

  LogicalResult applyRule(func::FuncOp func, TopologyAttr topology, StringRef line) {
    auto [meshPart, unitPart] = line.split(':');
    StringRef mesh = meshPart.trim();
    int64_t meshIndex = getMeshIndex(topology, mesh);
    if (!line.contains(':') || meshIndex < 0)
      return func.emitError() << "merge rule '" << line
                              << "': expected 'MESH: UNIT UNIT ...' with a mesh of the topology";
    SmallVector<StringRef> names;
    unitPart.split(names, ' ', -1, /*KeepEmpty=*/false);
    if (names.size() < 2)
      return func.emitError() << "merge rule '" << line << "' must name at least two units";
    // The fragments of the rule's units, in program order.
    SmallVector<FragmentOp> fragments;
    for (StringRef name : names) {
      size_t before = fragments.size();
      for (FragmentOp fragment : func.getBody().front().getOps<FragmentOp>()) {
        std::optional<SchedulingUnit> unit = getSchedulingUnit(fragment, topology);
        if (unit && unit->mesh == meshIndex &&
            canonical(unit->str(), meshIndex) == canonical(name, meshIndex))
          fragments.push_back(fragment);
      }
      if (fragments.size() == before)
        return func.emitError() << "merge rule '" << line << "': the program has no unit " << name
                                << " on mesh \"" << mesh << "\"";
    }
    llvm::sort(fragments, [](FragmentOp a, FragmentOp b) { return a->isBeforeInBlock(b); });
    FragmentOp merged = fragments.front();
    for (FragmentOp next : ArrayRef(fragments).drop_front()) {
      FragmentOp result = mergeIfLegal(merged, next);
      if (!result) {
        InFlightDiagnostic diag = func.emitError()
                                  << "merge rule '" << line << "': cannot merge "
                                  << describeFragment(merged) << " with " << describeFragment(next)
                                  << " without reordering other work: a result of the first is "
                                     "used before the second, which needs a value computed after "
                                     "the first";
        diag.attachNote(merged.getLoc()) << "first fragment";
        diag.attachNote(next.getLoc()) << "second fragment";
        return diag;
      }
      merged = result;
    }
    return success();
  }
};

} // namespace
} // namespace mlir::mpmd
