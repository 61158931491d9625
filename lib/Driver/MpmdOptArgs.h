//===- MpmdOptArgs.h - a partition as mpmd-opt arguments ----------*- C++ -*-===//
#ifndef MPMD_LIB_DRIVER_MPMDOPTARGS_H
#define MPMD_LIB_DRIVER_MPMDOPTARGS_H

#include "mpmd/Pipeline.h"

#include <string>
#include <vector>

namespace mlir::mpmd {

/// The `mpmd-opt` arguments that run the import, optimize and export
/// pipelines as `importProgram(text, spec, importOptions)` and
/// `finish(schedule, options)` run them: `mpmd-opt <lowered module> <these>`
/// prints the exported module (`PartitionResult::exported_text`). Three
/// arguments, `-mpmd-<phase>-pipeline[=OPTIONS]`, each with the text options
/// of its pipeline (lib/Transforms/Passes.cpp) that differ from their
/// defaults: the request in the formats of Common/TextOptions.h and the
/// flags of `MPMD_PARTITION_FLAGS` (their phase's rows, by their spelling).
std::vector<std::string> mpmdOptArgs(const ::mpmd::ProgramSpec &spec,
                                     const ::mpmd::PartitionOptions &importOptions,
                                     const ::mpmd::Schedule &schedule,
                                     const ::mpmd::PartitionOptions &options);

} // namespace mlir::mpmd

#endif // MPMD_LIB_DRIVER_MPMDOPTARGS_H
