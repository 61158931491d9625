//===- TextOptions.h - parsers and printers of textual pass options -*- C++ -*-===//
//
// `mpmd-opt` users give the assignment, schedule and merge rules as text;
// the Python driver gives the same values typed (the structs of
// mpmd/Pipeline.h) and never goes through text. These parsers turn the text
// into those structs, and the printers (`format*`) write the structs back as
// the text their parser reads (the driver's replay arguments); each format is
// parsed and printed here and nowhere else.
//
//===----------------------------------------------------------------------===//

#ifndef MPMD_LIB_TRANSFORMS_COMMON_TEXTOPTIONS_H
#define MPMD_LIB_TRANSFORMS_COMMON_TEXTOPTIONS_H

#include "mpmd/Dialect/MpmdDialect.h"
#include "mpmd/Pipeline.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/Support/LLVM.h"

#include <optional>

namespace mlir::mpmd {

/// Emits an error at the place the option is used (e.g. the function).
using EmitErrorFn = function_ref<InFlightDiagnostic()>;

/// Parses `name@mesh` / `name@mesh/stage` entries.
FailureOr<std::vector<::mpmd::NameAssignment>>
parseNameAssignment(ArrayRef<std::string> entries, EmitErrorFn emitError);

/// Parses `index@mesh` entries; `what` ("input", "output") names them in errors.
FailureOr<std::vector<::mpmd::IndexAssignment>>
parseIndexAssignment(ArrayRef<std::string> entries, StringRef what, EmitErrorFn emitError);

/// Parses lines `MESH: UNIT UNIT ...` (mpmd/UnitText.h: units `F3`, `B3`, `W3`, `F3.s5` for
/// stage 5; `.` is an idle slot and skipped), separated by newlines or `;`,
/// with `#` comments; lines starting with `@` (a schedule's name) are
/// skipped. Returns one list of units per line; a unit without `.s` has
/// stage -1 ("numbered like its mesh"). `what` ("schedule", "merge rule")
/// names the text in errors. A line without units (`m1:`) is skipped, or an
/// error when `allowEmptyLines` is false.
FailureOr<std::vector<std::vector<::mpmd::Unit>>> parseUnitLines(StringRef text, StringRef what,
                                                                 EmitErrorFn emitError,
                                                                 bool allowEmptyLines = true);

/// Parses a topology `name:axis=size,axis=size;name:...` (a mesh without
/// axes is `name:`).
FailureOr<std::vector<::mpmd::MeshSpec>> parseTopology(StringRef text, EmitErrorFn emitError);

/// The `#mpmd.topology` of `meshes`, or null after an error (the verifier's).
TopologyAttr buildTopology(MLIRContext *ctx, ArrayRef<::mpmd::MeshSpec> meshes,
                           EmitErrorFn emitError);

/// The value the driver gave a pass (`typed`), else what `parse` makes of the
/// pass's text option.
template <typename T>
FailureOr<T> typedOrParsed(const std::optional<T> &typed, function_ref<FailureOr<T>()> parse) {
  return typed ? FailureOr<T>(*typed) : parse();
}

/// `name@mesh,name@mesh/stage`: what `parseNameAssignment` reads (the
/// entries of one list option, comma-separated).
std::string formatNameAssignment(ArrayRef<::mpmd::NameAssignment> entries);

/// `index@mesh,index@mesh`: what `parseIndexAssignment` reads.
std::string formatIndexAssignment(ArrayRef<::mpmd::IndexAssignment> entries);

/// `m0:x=4,y=2;m1:x=4,y=2`: what `parseTopology` reads.
std::string formatTopology(ArrayRef<::mpmd::MeshSpec> meshes);

/// `F3`, `B0.s5`: the one printer of units in C++. The stage is written
/// when it is known (>= 0) and is not `meshIndex`, the index of the unit's
/// mesh in the topology (-1: unknown), as Python's
/// `mpmd.schedule.core.format_unit` writes it.
std::string formatUnit(const ::mpmd::Unit &unit, int64_t meshIndex = -1);
/// `m1: F0 B0`: a line of units of one mesh (by its name), as Python's
/// `format_line` writes it.
std::string formatUnitLine(ArrayRef<::mpmd::Unit> units, int64_t meshIndex = -1);
/// `m0: F0 B0; m1: F0 B0`: what `parseUnitLines` reads, one line per list
/// (a list without units is left out). A line's `meshIndex` is the index of
/// its mesh in `topology` (-1 when `topology` does not name it: every known
/// stage is written).
std::string formatUnitLines(ArrayRef<std::vector<::mpmd::Unit>> lines,
                            ArrayRef<::mpmd::MeshSpec> topology = {});

} // namespace mlir::mpmd

#endif // MPMD_LIB_TRANSFORMS_COMMON_TEXTOPTIONS_H
