//===- MpmdModule.cpp - the mpmd._mpmd Python extension ---------------------===//
//
// A thin binding of include/mpmd/Pipeline.h (and of AbortNote.h, the
// runtime's last word when JAX or XLA aborts the process). This translation
// unit is built with RTTI (nanobind needs it) and therefore includes no MLIR
// header.
//
//===----------------------------------------------------------------------===//

#include "AbortNote.h"
#include "mpmd/BuiltinSchedules.h"
#include "mpmd/Pipeline.h"
#include "mpmd/UnitText.h"

#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <tuple>

namespace nb = nanobind;
using namespace nb::literals;

namespace {

std::string unitRepr(const mpmd::Unit &u) {
  return "Unit(mesh='" + u.mesh + "', kind='" + u.kind + "', microbatch=" +
         std::to_string(u.microbatch) + ", stage=" + std::to_string(u.stage) + ")";
}

const char *phaseName(mpmd::Phase phase) {
  switch (phase) {
  case mpmd::Phase::Import:
    return "import";
  case mpmd::Phase::Optimize:
    return "optimize";
  case mpmd::Phase::Export:
    return "export";
  }
  return "";
}

} // namespace

// One piece (over 80 lines): the extension's table of bindings, one entry
// per name it exports.
NB_MODULE(_mpmd, m) {
  m.doc() = "mpmd's C++ partitioner (MLIR passes) behind a plain struct API: "
            "import_program(...) -> ImportedProgram, then ImportedProgram.finish(...).";

  nb::class_<mpmd::MeshSpec>(m, "MeshSpec")
      .def(nb::init<>())
      .def("__init__",
           [](mpmd::MeshSpec *self, std::string name,
              std::vector<std::pair<std::string, int64_t>> axes) {
             new (self) mpmd::MeshSpec{std::move(name), std::move(axes)};
           },
           "name"_a, "axes"_a)
      .def_rw("name", &mpmd::MeshSpec::name)
      .def_rw("axes", &mpmd::MeshSpec::axes);

  nb::class_<mpmd::NameAssignment>(m, "NameAssignment")
      .def("__init__",
           [](mpmd::NameAssignment *self, std::string name, std::string mesh, int64_t stage) {
             new (self) mpmd::NameAssignment{std::move(name), std::move(mesh), stage};
           },
           "name"_a, "mesh"_a, "stage"_a = -1)
      .def_rw("name", &mpmd::NameAssignment::name)
      .def_rw("mesh", &mpmd::NameAssignment::mesh)
      .def_rw("stage", &mpmd::NameAssignment::stage);

  nb::class_<mpmd::IndexAssignment>(m, "IndexAssignment")
      .def("__init__",
           [](mpmd::IndexAssignment *self, int64_t index, std::string mesh) {
             new (self) mpmd::IndexAssignment{index, std::move(mesh)};
           },
           "index"_a, "mesh"_a)
      .def_rw("index", &mpmd::IndexAssignment::index)
      .def_rw("mesh", &mpmd::IndexAssignment::mesh);

  nb::class_<mpmd::ProgramSpec>(m, "ProgramSpec")
      .def(nb::init<>())
      .def_rw("func_name", &mpmd::ProgramSpec::func_name)
      .def_rw("topology", &mpmd::ProgramSpec::topology)
      .def_rw("assignment", &mpmd::ProgramSpec::assignment)
      .def_rw("input_assignment", &mpmd::ProgramSpec::input_assignment)
      .def_rw("output_assignment", &mpmd::ProgramSpec::output_assignment);

  nb::class_<mpmd::Unit>(m, "Unit")
      .def("__init__",
           [](mpmd::Unit *self, std::string mesh, std::string kind, int64_t microbatch,
              int64_t stage) {
             new (self) mpmd::Unit{std::move(mesh), std::move(kind), microbatch, stage};
           },
           "mesh"_a, "kind"_a, "microbatch"_a, "stage"_a = -1)
      .def_ro("mesh", &mpmd::Unit::mesh)
      .def_ro("kind", &mpmd::Unit::kind)
      .def_ro("microbatch", &mpmd::Unit::microbatch)
      .def_ro("stage", &mpmd::Unit::stage)
      .def("__repr__", &unitRepr);

  using DispatchCost = mpmd::PartitionOptions::DispatchCost;
  nb::class_<DispatchCost>(m, "DispatchCost",
                           "What a program call costs (-mpmd-merge-back-to-back-units).")
      .def(nb::init<>())
      .def_rw("call_us", &DispatchCost::call_us)
      .def_rw("kernel_us", &DispatchCost::kernel_us)
      .def_rw("gflops", &DispatchCost::gflops);
  auto options = nb::class_<mpmd::PartitionOptions>(m, "PartitionOptions");
  options.def(nb::init<>())
      .def_rw("merge_rules", &mpmd::PartitionOptions::merge_rules)
      .def_rw("dispatch_cost", &mpmd::PartitionOptions::dispatch_cost);
  std::vector<std::tuple<std::string, bool, std::string, std::string, bool, std::string>> flags;
#define MPMD_BIND_FLAG(name, init, phase, text, user, doc)                                         \
  options.def_rw(#name, &mpmd::PartitionOptions::name, doc);                                       \
  flags.emplace_back(#name, init, phaseName(mpmd::Phase::phase), text, user, doc);
  MPMD_PARTITION_FLAGS(MPMD_BIND_FLAG)
#undef MPMD_BIND_FLAG
  // The table of boolean options (include/mpmd/Pipeline.h), one
  // (name, default, phase, text, user, doc) per row; mpmd/options.py reads it.
  m.attr("PARTITION_FLAGS") = nb::cast(flags);

  // The memory kinds values can be assigned to and transferred between
  // (include/mpmd/Dialect/MemoryKinds.h); mpmd/options.py reads them.
  m.attr("MEMORY_KINDS") = nb::cast(mpmd::assignableMemoryKinds());

  // The text grammar of units (include/mpmd/UnitText.h); mpmd/schedule/core.py reads
  // schedules and merge rules with it.
  m.attr("UNIT_SYNTAX") = mpmd::kUnitSyntax;
  m.def("parse_unit_token", &mpmd::parseUnitToken, "token"_a,
        "`F3`, `B0.s5` -> Unit (mesh empty; stage -1 when not written), or None.");
  m.def("format_unit_token", &mpmd::formatUnitToken, "kind"_a, "microbatch"_a, "stage"_a = -1,
        "mesh_index"_a = -1, "`F3`, or `F3.s5` when the stage is known and not mesh_index.");
  nb::class_<mpmd::UnitTextLine>(m, "UnitTextLine")
      .def_ro("line_number", &mpmd::UnitTextLine::line_number)
      .def_ro("text", &mpmd::UnitTextLine::text)
      .def_ro("directive", &mpmd::UnitTextLine::directive)
      .def_ro("has_mesh", &mpmd::UnitTextLine::has_mesh)
      .def_ro("mesh", &mpmd::UnitTextLine::mesh)
      .def_ro("tokens", &mpmd::UnitTextLine::tokens);
  // The compiler's built-in schedules (include/mpmd/BuiltinSchedules.h); mpmd/schedule/builtin.py
  // builds its schedules of the same names with them.
  m.attr("BUILTIN_SCHEDULES") = nb::cast(mpmd::builtinScheduleNames());
  m.def("builtin_schedule_order", &mpmd::builtinScheduleOrder, "name"_a, "units"_a,
        "mesh_index"_a, "num_meshes"_a,
        "The positions of one mesh's units in the order of the built-in schedule `name` "
        "(empty when it is not one).");
  m.def("split_unit_text", &mpmd::splitUnitText, "text"_a,
        "The lines of a unit text (newline or ';' separated; '#' comments and blank lines "
        "dropped).");

  // The runtime's last word when JAX or XLA aborts the process (AbortNote.h):
  // mpmd/distributed/abort_note.py sets it.
  m.def("set_abort_peers", &mpmd::setAbortPeers, "peers"_a, "otherwise"_a,
        "On SIGABRT, write each same-host peer's line for its state ((pid, if gone, if "
        "stopped)), or `otherwise` when none is gone or stopped.");
  m.def("set_abort_cause", &mpmd::setAbortCause, "text"_a,
        "On SIGABRT, write `text` first ('' removes it).");
  m.def(
      "process_state",
      [](long pid) -> std::optional<std::string> {
        const char *state = mpmd::processState(pid);
        return state ? std::optional<std::string>(state) : std::nullopt;
      },
      "pid"_a, "'gone' (no such process, or a zombie), 'stopped' (state T) or None (running).");
  m.def("abort_note_text", &mpmd::abortNoteText,
        "What the SIGABRT handler would write now.");

  nb::class_<mpmd::TensorSpec>(m, "TensorSpec")
      .def_ro("dtype", &mpmd::TensorSpec::dtype)
      .def_ro("shape", &mpmd::TensorSpec::shape);
  nb::class_<mpmd::FragmentFunction>(m, "FragmentFunction")
      .def_ro("name", &mpmd::FragmentFunction::name)
      .def_ro("module_text", &mpmd::FragmentFunction::module_text)
      .def_ro("num_inputs", &mpmd::FragmentFunction::num_inputs)
      .def_ro("num_outputs", &mpmd::FragmentFunction::num_outputs)
      .def_ro("donated_args", &mpmd::FragmentFunction::donated_args)
      .def_ro("calls_host", &mpmd::FragmentFunction::calls_host)
      .def_ro("has_side_effects", &mpmd::FragmentFunction::has_side_effects)
      .def_ro("has_loops", &mpmd::FragmentFunction::has_loops)
      .def_ro("accumulated", &mpmd::FragmentFunction::accumulated)
      .def_ro("input_types", &mpmd::FragmentFunction::input_types)
      .def_ro("output_types", &mpmd::FragmentFunction::output_types);

  nb::class_<mpmd::Instruction>(m, "Instruction")
      .def_prop_ro("kind",
                   [](const mpmd::Instruction &i) {
                     return i.kind == mpmd::Instruction::Kind::kCall ? "call" : "transfer";
                   })
      .def_ro("callee", &mpmd::Instruction::callee)
      .def_ro("mesh", &mpmd::Instruction::mesh)
      .def_ro("src_mesh", &mpmd::Instruction::src_mesh)
      .def_ro("operands", &mpmd::Instruction::operands)
      .def_ro("results", &mpmd::Instruction::results)
      .def_ro("origins", &mpmd::Instruction::origins)
      .def_ro("location", &mpmd::Instruction::location)
      .def_ro("unit", &mpmd::Instruction::unit)
      .def_ro("donate", &mpmd::Instruction::donate)
      .def_ro("value_type", &mpmd::Instruction::value_type)
      .def_ro("src_memory_kind", &mpmd::Instruction::src_memory_kind)
      .def_ro("memory_kind", &mpmd::Instruction::memory_kind)
      .def_ro("partial_results", &mpmd::Instruction::partial_results);

  nb::class_<mpmd::ConstantInput>(m, "ConstantInput")
      .def_ro("id", &mpmd::ConstantInput::id)
      .def_ro("mesh", &mpmd::ConstantInput::mesh)
      .def_ro("dtype", &mpmd::ConstantInput::dtype)
      .def_ro("value", &mpmd::ConstantInput::value)
      .def_ro("shape", &mpmd::ConstantInput::shape)
      .def_ro("donated", &mpmd::ConstantInput::donated)
      .def_ro("partial", &mpmd::ConstantInput::partial);

  nb::class_<mpmd::PartitionResult>(m, "PartitionResult")
      .def_ro("ok", &mpmd::PartitionResult::ok)
      .def_ro("error", &mpmd::PartitionResult::error)
      .def_ro("warnings", &mpmd::PartitionResult::warnings)
      .def_ro("functions", &mpmd::PartitionResult::functions)
      .def_ro("program", &mpmd::PartitionResult::program)
      .def_ro("input_ids", &mpmd::PartitionResult::input_ids)
      .def_ro("input_meshes", &mpmd::PartitionResult::input_meshes)
      .def_ro("output_ids", &mpmd::PartitionResult::output_ids)
      .def_ro("output_meshes", &mpmd::PartitionResult::output_meshes)
      .def_ro("input_memory_kinds", &mpmd::PartitionResult::input_memory_kinds)
      .def_ro("output_memory_kinds", &mpmd::PartitionResult::output_memory_kinds)
      .def_ro("mpmd_opt_args", &mpmd::PartitionResult::mpmd_opt_args)
      .def_ro("constants", &mpmd::PartitionResult::constants)
      .def_ro("exported_text", &mpmd::PartitionResult::exported_text)
      .def_ro("seconds", &mpmd::PartitionResult::seconds);

  nb::class_<mpmd::ImportedProgram>(m, "ImportedProgram",
                                    "A module after the import pipeline; owns its MLIR context.")
      .def_prop_ro("ok", &mpmd::ImportedProgram::ok)
      .def_prop_ro("error", &mpmd::ImportedProgram::error)
      .def_prop_ro("warnings", &mpmd::ImportedProgram::warnings)
      .def_prop_ro("units", &mpmd::ImportedProgram::units)
      .def_prop_ro("seconds", &mpmd::ImportedProgram::seconds)
      .def("text", &mpmd::ImportedProgram::text, nb::call_guard<nb::gil_scoped_release>(),
           "The imported module (fragments on meshes), in readable form.")
      .def("finish", &mpmd::ImportedProgram::finish, "schedule"_a, "options"_a,
           nb::call_guard<nb::gil_scoped_release>(),
           "Runs the optimize and export pipelines on a copy of the imported module. "
           "`schedule`: per mesh, a list of Units in order (empty: program order).");

  m.def("import_program", &mpmd::importProgram, "module_text"_a, "spec"_a, "options"_a,
        nb::call_guard<nb::gil_scoped_release>(),
        "Parses a JAX-lowered module and runs the import pipeline.");
  m.def("run_pipeline", &mpmd::runPipeline, "text"_a, "pipeline"_a = "", "generic"_a = false,
        nb::call_guard<nb::gil_scoped_release>(),
        "Parses `text`, runs an mlir-opt style pass pipeline, verifies and prints. "
        "Returns (ok, text or diagnostics).");
}
