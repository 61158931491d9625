//===- RuleBasedMerge.cpp - merge the fragments of given units --------------===//

#include "Common/Fragments.h"
#include "Common/MergeFragments.h"
#include "Common/PassBase.h"
#include "Common/TextOptions.h"
#include "mpmd/Transforms/Passes.h"


namespace mlir::mpmd {
#define GEN_PASS_DEF_RULEBASEDMERGEPASS
#include "mpmd/Transforms/Passes.h.inc"

namespace {

class RuleBasedMergePass
    : public MpmdPass<RuleBasedMergePass, impl::RuleBasedMergePassBase> {
public:
  using MpmdPass::MpmdPass;
  explicit RuleBasedMergePass(::mpmd::MergeRules rules) : typedRules(std::move(rules)) {}

  /// The rules given typed (by the driver); else the text option is parsed.
  std::optional<::mpmd::MergeRules> typedRules;

  void runOnFunction(func::FuncOp func, TopologyAttr topology) {
    FailureOr<::mpmd::MergeRules> parsed = typedOrParsed<::mpmd::MergeRules>(typedRules, [&] {
      return parseUnitLines(rules, "merge rule", [&] { return func.emitError(); },
                            /*allowEmptyLines=*/false);
    });
    if (failed(parsed))
      return signalPassFailure();
    for (const std::vector<::mpmd::Unit> &rule : *parsed)
      if (failed(applyRule(func, topology, rule)))
        return signalPassFailure();
  }

private:
  LogicalResult applyRule(func::FuncOp func, TopologyAttr topology,
                          ArrayRef<::mpmd::Unit> rule) {
    std::string line = formatUnitLine(rule);
    StringRef mesh = rule.empty() ? StringRef() : StringRef(rule.front().mesh);
    int64_t meshIndex = getMeshIndex(topology, mesh);
    if (meshIndex < 0 ||
        llvm::any_of(rule, [&](const ::mpmd::Unit &unit) { return unit.mesh != mesh; }))
      return func.emitError() << "merge rule '" << line
                              << "': expected 'MESH: UNIT UNIT ...' with a mesh of the topology";
    if (rule.size() < 2)
      return func.emitError() << "merge rule '" << line << "' must name at least two units";
    // The fragments of the rule's units, in program order.
    SmallVector<FragmentOp> fragments;
    for (const ::mpmd::Unit &wanted : rule) {
      size_t before = fragments.size();
      ::mpmd::Unit key = wanted;
      if (key.stage < 0)
        key.stage = meshIndex; // The stage numbered like the mesh.
      for (FragmentOp fragment : func.getBody().front().getOps<FragmentOp>())
        if (getSchedulingUnit(fragment, topology) == key)
          fragments.push_back(fragment);
      if (fragments.size() == before)
        return func.emitError() << "merge rule '" << line << "': the program has no unit "
                                << formatUnit(wanted) << " on mesh \"" << mesh << "\"";
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

std::unique_ptr<Pass> createRuleBasedMergePass(::mpmd::MergeRules rules) {
  return std::make_unique<RuleBasedMergePass>(std::move(rules));
}

} // namespace mlir::mpmd
