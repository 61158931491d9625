//===- RuleBasedSchedule.cpp - order given fragments one after another -----===//
//
// Rules in Shardy's notation, each a chain of fragments to run in that order:
//
//   FragmentScheduleRule(ordered_fragments=[
//       FragmentInfo(origins=["f"],mesh_name="m1",call_counter=0)->
//       FragmentInfo(origins=["g"(1)],mesh_name="m1")])
//
// A FragmentInfo names one fragment of the function by its origins (in
// order, with transpose counts), mesh and, when given, call counter and
// stage. Fragments a rule names that the program does not have are left
// out of its chain (a rule may be written for several programs). The
// function's ops are then put in an order that keeps every data dependency
// and every chain, otherwise as close to the order they had as possible. A
// chain link that contradicts the data (the later fragment computes what the
// earlier one reads) is not applied: a warning names both fragments.
//
//===----------------------------------------------------------------------===//

#include "Common/BlockOrder.h"
#include "Common/Fragments.h"
#include "Common/PassBase.h"
#include "mpmd/Compat/Passes.h"


namespace mlir::mpmd {
#define GEN_PASS_DEF_RULEBASEDSCHEDULEPASS
#include "mpmd/Compat/Passes.h.inc"

namespace {

/// One FragmentInfo of a rule.
struct FragmentInfo {
  SmallVector<std::pair<std::string, int64_t>> origins; // (name, transpose count)
  std::string mesh;
  std::optional<int64_t> callCounter, stageId;
  std::string text; // As written, for messages.
};

/// One FragmentScheduleRule: its chain and its text.
struct ScheduleRule {
  SmallVector<FragmentInfo> chain;
  std::string text;
};

/// Reads the `rules` option; reports the first thing it cannot read.
class RuleParser {
public:
  RuleParser(StringRef text, function_ref<InFlightDiagnostic()> emitError)
      : text(text), emitError(emitError) {}

  FailureOr<SmallVector<ScheduleRule>> parse() {
    SmallVector<ScheduleRule> rules;
    skipSpace();
    while (pos < text.size()) {
      size_t start = pos;
      ScheduleRule rule;
      if (failed(keyword("FragmentScheduleRule")) || failed(expect("(")) ||
          failed(keyword("ordered_fragments")) || failed(expect("=")) || failed(expect("[")))
        return failure();
      do {
        FailureOr<FragmentInfo> info = parseInfo();
        if (failed(info))
          return failure();
        rule.chain.push_back(std::move(*info));
      } while (consume("->"));
      if (failed(expect("]")) || failed(expect(")")))
        return failure();
      rule.text = text.slice(start, pos).str();
      rules.push_back(std::move(rule));
      if (!consume(","))
        break;
    }
    skipSpace();
    if (pos != text.size())
      return fail("expected ',' and another FragmentScheduleRule(...) or the end");
    return rules;
  }

private:
  FailureOr<FragmentInfo> parseInfo() {
    size_t start = pos;
    FragmentInfo info;
    bool hasMesh = false;
    if (failed(keyword("FragmentInfo")) || failed(expect("(")))
      return failure();
    do {
      FailureOr<std::string> field = identifier();
      if (failed(field) || failed(expect("=")))
        return failure();
      if (*field == "origins") {
        if (failed(expect("[")))
          return failure();
        if (!consume("]")) {
          do {
            FailureOr<std::string> name = string();
            if (failed(name))
              return failure();
            int64_t transposes = 0;
            if (consume("(")) {
              FailureOr<int64_t> n = integer();
              if (failed(n) || failed(expect(")")))
                return failure();
              transposes = *n;
            }
            info.origins.push_back({*name, transposes});
          } while (consume(","));
          if (failed(expect("]")))
            return failure();
        }
      } else if (*field == "mesh_name") {
        FailureOr<std::string> mesh = string();
        if (failed(mesh))
          return failure();
        info.mesh = *mesh;
        hasMesh = true;
      } else if (*field == "call_counter" || *field == "stage_id") {
        FailureOr<int64_t> n = integer();
        if (failed(n))
          return failure();
        (*field == "call_counter" ? info.callCounter : info.stageId) = *n;
      } else {
        return fail("unknown FragmentInfo field '" + *field +
                    "' (known: origins, mesh_name, call_counter, stage_id)");
      }
    } while (consume(","));
    if (failed(expect(")")))
      return failure();
    if (!hasMesh)
      return fail("FragmentInfo without mesh_name");
    info.text = text.slice(start, pos).str();
    return info;
  }

  void skipSpace() {
    while (pos < text.size() && isspace(static_cast<unsigned char>(text[pos])))
      ++pos;
  }
  bool consume(StringRef token) {
    skipSpace();
    if (!text.substr(pos).starts_with(token))
      return false;
    pos += token.size();
    return true;
  }
  LogicalResult expect(StringRef token) {
    return consume(token) ? success() : fail("expected '" + token.str() + "'");
  }
  LogicalResult keyword(StringRef word) {
    FailureOr<std::string> id = identifier();
    if (failed(id))
      return failure();
    return *id == word ? success() : fail("expected '" + word.str() + "', got '" + *id + "'");
  }
  FailureOr<std::string> identifier() {
    skipSpace();
    size_t start = pos;
    while (pos < text.size() && (isalnum(static_cast<unsigned char>(text[pos])) || text[pos] == '_'))
      ++pos;
    if (pos == start)
      return fail("expected a name");
    return text.slice(start, pos).str();
  }
  FailureOr<std::string> string() {
    if (failed(expect("\"")))
      return failure();
    size_t end = text.find('"', pos);
    if (end == StringRef::npos)
      return fail("unterminated string");
    std::string value = text.slice(pos, end).str();
    pos = end + 1;
    return value;
  }
  FailureOr<int64_t> integer() {
    skipSpace();
    size_t start = pos;
    while (pos < text.size() && isdigit(static_cast<unsigned char>(text[pos])))
      ++pos;
    int64_t value;
    if (pos == start || text.slice(start, pos).getAsInteger(10, value))
      return fail("expected a non-negative integer");
    return value;
  }
  LogicalResult fail(const Twine &what) {
    emitError() << "-mpmd-rule-based-schedule: cannot read `rules` at offset " << pos << ": "
                << what << " (rules are FragmentScheduleRule(ordered_fragments=[FragmentInfo("
                << "origins=[\"f\"],mesh_name=\"m1\",call_counter=0)->FragmentInfo(...)]), "
                   "separated by ',')";
    return failure();
  }

  StringRef text;
  size_t pos = 0;
  function_ref<InFlightDiagnostic()> emitError;
};

/// Whether `fragment` is the one `info` names.
bool matches(FragmentOp fragment, const FragmentInfo &info) {
  if (fragment.getMeshName() != info.mesh || fragment.getOrigin().size() != info.origins.size())
    return false;
  for (auto [attr, wanted] : llvm::zip(fragment.getOrigin(), info.origins)) {
    auto origin = cast<UserOriginAttr>(attr);
    if (origin.getUserName() != wanted.first || origin.getTransposeCount() != wanted.second)
      return false;
  }
  if (info.stageId && (!fragment.getStageIdAttr() || *fragment.getStageId() != *info.stageId))
    return false;
  if (info.callCounter) {
    auto counter = fragment->getAttrOfType<IntegerAttr>(kCallCounterAttr);
    if (!counter || counter.getValue().getZExtValue() != static_cast<uint64_t>(*info.callCounter))
      return false;
  }
  return true;
}

class RuleBasedSchedulePass
    : public MpmdPass<RuleBasedSchedulePass, impl::RuleBasedSchedulePassBase> {
public:
  using MpmdPass::MpmdPass;

  void runOnFunction(func::FuncOp func, TopologyAttr) {
    FailureOr<SmallVector<ScheduleRule>> parsed =
        RuleParser(rules, [&] { return func.emitError(); }).parse();
    if (failed(parsed))
      return signalPassFailure();
    Block &block = func.getBody().front();
    BlockDependences deps(block);
    // The links the rules add: for each op, the ops it must follow.
    std::vector<SmallVector<int64_t>> links(deps.ops.size());
    for (const ScheduleRule &rule : *parsed) {
      SmallVector<FragmentOp> chain;
      for (const FragmentInfo &info : rule.chain) {
        SmallVector<FragmentOp> found;
        for (FragmentOp fragment : block.getOps<FragmentOp>())
          if (matches(fragment, info))
            found.push_back(fragment);
        if (found.size() > 1) {
          func.emitError() << "-mpmd-rule-based-schedule: " << info.text << " of rule "
                           << rule.text << " names " << found.size()
                           << " fragments of @" << func.getSymName()
                           << "; give call_counter or stage_id to tell them apart";
          return signalPassFailure();
        }
        if (!found.empty())
          chain.push_back(found.front());
      }
      for (auto [first, second] : llvm::zip(chain, llvm::drop_begin(chain))) {
        int64_t a = deps.index[first], b = deps.index[second];
        if (deps.dependsOn(a, b, links)) {
          InFlightDiagnostic diag =
              first.emitWarning() << "-mpmd-rule-based-schedule: rule " << rule.text
                                  << " puts this fragment before one that computes what it "
                                     "reads; the data order is kept";
          diag.attachNote(second.getLoc()) << "the fragment the rule puts after it";
          continue;
        }
        links[b].push_back(a);
      }
    }
    std::vector<SmallVector<int64_t>> succ(deps.ops.size());
    for (int64_t i = 0; i < static_cast<int64_t>(deps.ops.size()); ++i) {
      for (int64_t p : deps.preds[i])
        succ[p].push_back(i);
      for (int64_t p : links[i])
        succ[p].push_back(i);
    }
    std::vector<int64_t> indegree;
    // No cycle: each link was added only where the data allowed it.
    reorderBlock(block, deps.ops, stableTopologicalOrder(succ, indegree));
  }
};

} // namespace
} // namespace mlir::mpmd
