//===- MpmdModule.cpp - the mpmd._mpmd Python extension ---------------------===//
//
// A thin binding of include/mpmd/Pipeline.h. This translation unit is built
// with RTTI (nanobind needs it) and therefore includes no MLIR header.
//
//===----------------------------------------------------------------------===//

#include "mpmd/Pipeline.h"

#include <nanobind/nanobind.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

namespace nb = nanobind;

NB_MODULE(_mpmd, m) {
  m.doc() = "mpmd's C++ partitioner (MLIR passes) behind a plain string/struct API.";

  nb::class_<mpmd::MeshSpec>(m, "MeshSpec")
      .def(nb::init<>())
      .def_rw("name", &mpmd::MeshSpec::name)
      .def_rw("axes", &mpmd::MeshSpec::axes);

  nb::class_<mpmd::PartitionRequest>(m, "PartitionRequest")
      .def(nb::init<>())
      .def_rw("module_text", &mpmd::PartitionRequest::module_text)
      .def_rw("func_name", &mpmd::PartitionRequest::func_name)
      .def_rw("topology", &mpmd::PartitionRequest::topology)
      .def_rw("assignment", &mpmd::PartitionRequest::assignment)
      .def_rw("input_assignment", &mpmd::PartitionRequest::input_assignment)
      .def_rw("output_assignment", &mpmd::PartitionRequest::output_assignment)
      .def_rw("infer_transfers", &mpmd::PartitionRequest::infer_transfers)
      .def_rw("infer_cross_mesh_reductions", &mpmd::PartitionRequest::infer_cross_mesh_reductions)
      .def_rw("stop_after_import", &mpmd::PartitionRequest::stop_after_import)
      .def_rw("skip_import", &mpmd::PartitionRequest::skip_import)
      .def_rw("schedule", &mpmd::PartitionRequest::schedule)
      .def_rw("split_bwd_fragments", &mpmd::PartitionRequest::split_bwd_fragments)
      .def_rw("fragment_remat", &mpmd::PartitionRequest::fragment_remat)
      .def_rw("merge_remat_fragments", &mpmd::PartitionRequest::merge_remat_fragments)
      .def_rw("merge_forward_with_backward", &mpmd::PartitionRequest::merge_forward_with_backward)
      .def_rw("merge_inferred_after_scheduling",
              &mpmd::PartitionRequest::merge_inferred_after_scheduling)
      .def_rw("merge_rules", &mpmd::PartitionRequest::merge_rules)
      .def_rw("validate_no_backward_deps", &mpmd::PartitionRequest::validate_no_backward_deps)
      .def_rw("fail_on_backward_deps", &mpmd::PartitionRequest::fail_on_backward_deps)
      .def_rw("keep_handoff", &mpmd::PartitionRequest::keep_handoff)
      .def_rw("handoff_token", &mpmd::PartitionRequest::handoff_token);

  nb::class_<mpmd::Unit>(m, "Unit")
      .def_ro("mesh", &mpmd::Unit::mesh)
      .def_ro("kind", &mpmd::Unit::kind)
      .def_ro("microbatch", &mpmd::Unit::microbatch)
      .def_ro("stage", &mpmd::Unit::stage);

  nb::class_<mpmd::FragmentFunction>(m, "FragmentFunction")
      .def_ro("name", &mpmd::FragmentFunction::name)
      .def_ro("module_text", &mpmd::FragmentFunction::module_text)
      .def_ro("num_inputs", &mpmd::FragmentFunction::num_inputs)
      .def_ro("num_outputs", &mpmd::FragmentFunction::num_outputs)
      .def_ro("donated_args", &mpmd::FragmentFunction::donated_args);

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
      .def_ro("value_type", &mpmd::Instruction::value_type);

  nb::class_<mpmd::PartitionResult>(m, "PartitionResult")
      .def_ro("ok", &mpmd::PartitionResult::ok)
      .def_ro("error", &mpmd::PartitionResult::error)
      .def_ro("warnings", &mpmd::PartitionResult::warnings)
      .def_ro("handoff_token", &mpmd::PartitionResult::handoff_token)
      .def_ro("functions", &mpmd::PartitionResult::functions)
      .def_ro("program", &mpmd::PartitionResult::program)
      .def_ro("input_ids", &mpmd::PartitionResult::input_ids)
      .def_ro("input_meshes", &mpmd::PartitionResult::input_meshes)
      .def_ro("output_ids", &mpmd::PartitionResult::output_ids)
      .def_ro("output_meshes", &mpmd::PartitionResult::output_meshes)
      .def_ro("imported_text", &mpmd::PartitionResult::imported_text)
      .def_ro("exported_text", &mpmd::PartitionResult::exported_text)
      .def_ro("handoff_text", &mpmd::PartitionResult::handoff_text)
      .def_ro("units", &mpmd::PartitionResult::units)
      .def_ro("import_seconds", &mpmd::PartitionResult::import_seconds)
      .def_ro("export_seconds", &mpmd::PartitionResult::export_seconds);

  m.def("partition", &mpmd::partition, nb::arg("request"),
        nb::call_guard<nb::gil_scoped_release>(),
        "Runs the import and export pipelines on a JAX-lowered module.");
  m.def("run_pipeline", &mpmd::runPipeline, nb::arg("text"), nb::arg("pipeline") = "",
        nb::arg("generic") = false, nb::call_guard<nb::gil_scoped_release>(),
        "Parses `text`, runs an mlir-opt style pass pipeline, verifies and prints. "
        "Returns (ok, text or diagnostics).");
}
