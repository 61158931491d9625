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
};

/// One outlined fragment function, ready to compile on its mesh.
struct FragmentFunction {
  std::string name;
  /// A standalone module whose public `@main` is the fragment body (global
  /// view), in generic form with locations.
  std::string module_text;
  int64_t num_inputs = 0;
  int64_t num_outputs = 0;
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
};

/// The partitioned program.
struct PartitionResult {
  bool ok = false;
  /// Diagnostics (with source locations) when !ok.
  std::string error;
  std::vector<FragmentFunction> functions;
  std::vector<Instruction> program;
  /// Value ids and meshes of the entry function's inputs and outputs.
  std::vector<int64_t> input_ids;
  std::vector<std::string> input_meshes;
  std::vector<int64_t> output_ids;
  std::vector<std::string> output_meshes;
  /// The MPMD module after import (fragments on meshes) and after export.
  std::string imported_text;
  std::string exported_text;
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
