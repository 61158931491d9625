//===- MpmdOptArgs.cpp - a partition as mpmd-opt arguments ------------------===//

#include "Driver/MpmdOptArgs.h"

#include "Common/TextOptions.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace mlir::mpmd;

namespace {

/// `text=true|false` for each flag of `phase` whose value in `options`
/// differs from its default.
void appendFlags(std::vector<std::string> &parts, const ::mpmd::PartitionOptions &options,
                 ::mpmd::Phase phase) {
#define MPMD_FLAG_TEXT(name, init, ph, text, user, doc)                                             \
  if (::mpmd::Phase::ph == phase && options.name != init)                                          \
    parts.push_back(std::string(text) + (options.name ? "=true" : "=false"));
  MPMD_PARTITION_FLAGS(MPMD_FLAG_TEXT)
#undef MPMD_FLAG_TEXT
}

/// `-mpmd-<phase>-pipeline`, with `=` and the options when there are any.
std::string pipeline(const char *phase, const std::vector<std::string> &parts) {
  std::string arg = std::string("-mpmd-") + phase + "-pipeline";
  for (size_t i = 0; i < parts.size(); ++i)
    arg += (i ? " " : "=") + parts[i];
  return arg;
}

} // namespace

std::vector<std::string> mlir::mpmd::mpmdOptArgs(const ::mpmd::ProgramSpec &spec,
                                                 const ::mpmd::PartitionOptions &importOptions,
                                                 const ::mpmd::Schedule &schedule,
                                                 const ::mpmd::PartitionOptions &options) {
  std::vector<std::string> imports{"topology=" + formatTopology(spec.topology)};
  if (spec.func_name != "main")
    imports.push_back("func=" + spec.func_name);
  if (!spec.assignment.empty())
    imports.push_back("assignment=" + formatNameAssignment(spec.assignment));
  if (!spec.input_assignment.empty())
    imports.push_back("input-assignment=" + formatIndexAssignment(spec.input_assignment));
  if (!spec.output_assignment.empty())
    imports.push_back("output-assignment=" + formatIndexAssignment(spec.output_assignment));
  appendFlags(imports, importOptions, ::mpmd::Phase::Import);
  // The import pipeline's own `merge-inferred` (merge now) is the opposite
  // of the table's flag (merge after scheduling, an optimize option).
  if (importOptions.merge_inferred_after_scheduling)
    imports.push_back("merge-inferred=false");

  std::vector<std::string> optimize;
  if (std::string order = formatUnitLines(schedule, spec.topology); !order.empty())
    optimize.push_back("schedule=\"" + order + "\"");
  if (std::string rules = formatUnitLines(options.merge_rules); !rules.empty())
    optimize.push_back("merge-rules=\"" + rules + "\"");
  appendFlags(optimize, options, ::mpmd::Phase::Optimize);
  if (const auto &cost = options.dispatch_cost; cost.call_us > 0) {
    std::string text;
    llvm::raw_string_ostream os(text);
    os << "dispatch-cost=" << llvm::format("%.9g", cost.call_us) << ","
       << llvm::format("%.9g", cost.kernel_us) << "," << llvm::format("%.9g", cost.gflops);
    optimize.push_back(text);
  }

  std::vector<std::string> exports;
  appendFlags(exports, options, ::mpmd::Phase::Export);
  // All three run, as the driver runs them (the optimize pipeline merges each
  // unit's fragments even without options).
  return {pipeline("import", imports), pipeline("optimize", optimize),
          pipeline("export", exports)};
}
