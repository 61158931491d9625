//===- Pipeline.h - the partitioner's plain C++ API ---------------*- C++ -*-===//
//
// The boundary between Python and the C++ compiler: strings and plain structs
// in, strings and plain structs out. No MLIR header is included here, so the
// nanobind translation unit (built with RTTI) can use it.
//
//===----------------------------------------------------------------------===//

#ifndef MPMD_PIPELINE_H
#define MPMD_PIPELINE_H

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace mpmd {

/// A named mesh of the topology: its axes in order, with sizes.
struct MeshSpec {
  std::string name;
  std::vector<std::pair<std::string, int64_t>> axes;
};

/// What to partition and how.
struct PartitionRequest {
  /// The StableHLO module JAX lowered, with mpmd ops (any textual form).
  std::string module_text;
  /// Name of the entry function.
  std::string func_name = "main";
  std::vector<MeshSpec> topology;
  /// `name@mesh` or `name@mesh/stage`.
  std::vector<std::string> assignment;
  /// `index@mesh` for function inputs and outputs.
  std::vector<std::string> input_assignment;
  std::vector<std::string> output_assignment;
  /// Partitioning options (see docs): create transfers no label implies;
  /// infer cross-mesh reductions.
  bool infer_transfers = false;
  bool infer_cross_mesh_reductions = false;

  /// Two-phase use: `stop_after_import` returns the imported program (with its
  /// scheduling units) in `handoff_text`; a second request with that text as
  /// `module_text` and `skip_import` runs optimize and export.
  bool stop_after_import = false;
  bool skip_import = false;
  /// With `stop_after_import`: keep the imported module in memory and return
  /// a `handoff_token` instead of `handoff_text`; phase 2 passes the token
  /// (and `skip_import`) instead of the text. Each token is used once.
  bool keep_handoff = false;
  int64_t handoff_token = 0;
  /// Per-mesh unit order, one line per mesh (`m0: F0 F1 B0 B1`); empty: the
  /// program runs in the order JAX emitted it.
  std::string schedule;
  bool split_bwd_fragments = false;
  bool fragment_remat = false;
  bool merge_remat_fragments = false;
  bool merge_forward_with_backward = false;
  /// Keep inferred fragments apart during import and merge them after
  /// scheduling (set when a schedule is given, in both phases).
  bool merge_inferred_after_scheduling = false;
  /// Units to merge into one program, one rule per line: `m3: F0 B0`.
  std::string merge_rules;
  /// Export validation of forward-only programs (see ExportOptions): off for
  /// wrap-around pipelines; errors instead of warnings.
  bool validate_no_backward_deps = true;
  bool fail_on_backward_deps = false;
};

/// A scheduling unit of the imported program (see -mpmd-pipeline-schedule).
struct Unit {
  std::string mesh;
  std::string kind; // "F", "B" or "W"
  int64_t microbatch = 0;
  int64_t stage = 0;
};

/// One outlined fragment function, ready to compile on its mesh.
struct FragmentFunction {
  std::string name;
  /// A standalone module whose public `@main` is the fragment body (global
  /// view), in generic form with locations.
  std::string module_text;
  int64_t num_inputs = 0;
  int64_t num_outputs = 0;
  /// Arguments the function may consume (`jax.buffer_donor`).
  std::vector<int64_t> donated_args;
};

/// One step of the program, in execution order.
struct Instruction {
  enum class Kind { kCall, kTransfer };
  Kind kind = Kind::kCall;
  /// kCall: the fragment function; kTransfer: empty.
  std::string callee;
  /// kCall: the mesh it runs on; kTransfer: the destination mesh.
  std::string mesh;
  /// kTransfer: the source mesh.
  std::string src_mesh;
  std::vector<int64_t> operands;
  std::vector<int64_t> results;
  /// Origins of the fragment, as `name` or `name(k)`.
  std::vector<std::string> origins;
  /// Source location of the op, for error messages.
  std::string location;
  /// kCall of a scheduling unit: its name, e.g. "F3" or "B2.s5"; else empty.
  std::string unit;
  /// kTransfer: the transfer is the last use of its operand, which may be
  /// freed once copied (`mpmd.donate`).
  bool donate = false;
  /// kTransfer: the tensor type of the value moved (e.g. `tensor<4x8xf32>`),
  /// which a process that does not produce the value needs to receive it.
  std::string value_type;
};

/// The partitioned program.
struct PartitionResult {
  bool ok = false;
  /// Diagnostics (with source locations) when !ok.
  std::string error;
  /// Warnings of a successful run, one per line, with source locations.
  std::string warnings;
  std::vector<FragmentFunction> functions;
  std::vector<Instruction> program;
  /// Value ids and meshes of the entry function's inputs and outputs.
  std::vector<int64_t> input_ids;
  std::vector<std::string> input_meshes;
  std::vector<int64_t> output_ids;
  std::vector<std::string> output_meshes;
  /// The MPMD module after import (fragments on meshes; empty with
  /// `skip_import`) and after export.
  std::string imported_text;
  std::string exported_text;
  /// After import: the program in generic form with locations, for phase 2
  /// (or, with `keep_handoff`, the token of the module kept in memory).
  std::string handoff_text;
  int64_t handoff_token = 0;
  /// After import: the scheduling units of the program.
  std::vector<Unit> units;
  double import_seconds = 0;
  double export_seconds = 0;
};

/// Runs import and export on `request.module_text`.
PartitionResult partition(const PartitionRequest &request);

/// Parses `text`, optionally runs `pipeline` (mlir-opt pass pipeline syntax,
/// e.g. "builtin.module(mpmd-import-pipeline)"), verifies and prints it.
/// Returns {ok, text or diagnostics}.
std::pair<bool, std::string> runPipeline(const std::string &text, const std::string &pipeline,
                                         bool generic);

} // namespace mpmd

#endif // MPMD_PIPELINE_H
