//===- TextOptions.cpp - parsers and printers of textual pass options ------===//

#include "Common/TextOptions.h"

#include "mpmd/UnitText.h"

#include "llvm/ADT/StringExtras.h"

using namespace mlir;
using namespace mlir::mpmd;

FailureOr<std::vector<::mpmd::NameAssignment>>
mlir::mpmd::parseNameAssignment(ArrayRef<std::string> entries, EmitErrorFn emitError) {
  std::vector<::mpmd::NameAssignment> result;
  for (StringRef entry : entries) {
    auto [name, rest] = entry.rsplit('@');
    if (name.empty() || rest.empty() || !entry.contains('@'))
      return emitError() << "malformed assignment entry '" << entry
                         << "': expected name@mesh or name@mesh/stage";
    ::mpmd::NameAssignment value;
    value.name = name.str();
    auto [mesh, stage] = rest.split('/');
    value.mesh = mesh.str();
    if (rest.contains('/') && (stage.getAsInteger(10, value.stage) || value.stage < 0))
      return emitError() << "assignment entry '" << entry
                         << "' has an invalid stage: expected a non-negative integer";
    result.push_back(std::move(value));
  }
  return result;
}

FailureOr<std::vector<::mpmd::IndexAssignment>>
mlir::mpmd::parseIndexAssignment(ArrayRef<std::string> entries, StringRef what,
                                 EmitErrorFn emitError) {
  std::vector<::mpmd::IndexAssignment> result;
  for (StringRef entry : entries) {
    auto [index, mesh] = entry.split('@');
    ::mpmd::IndexAssignment value;
    if (index.getAsInteger(10, value.index) || value.index < 0 || mesh.empty())
      return emitError() << "malformed " << what << " assignment entry '" << entry
                         << "': expected index@mesh";
    value.mesh = mesh.str();
    result.push_back(std::move(value));
  }
  return result;
}

FailureOr<std::vector<std::vector<::mpmd::Unit>>>
mlir::mpmd::parseUnitLines(StringRef text, StringRef what, EmitErrorFn emitError,
                           bool allowEmptyLines) {
  std::vector<std::vector<::mpmd::Unit>> lines;
  for (const ::mpmd::UnitTextLine &line : ::mpmd::splitUnitText(text.str())) {
    if (line.directive)
      continue;
    if (!line.has_mesh || line.mesh.empty())
      return emitError() << "malformed " << what << " line '" << line.text
                         << "': expected 'MESH: UNIT UNIT ...' (e.g. 'm0: F0 F1 B0 B1')";
    std::vector<::mpmd::Unit> units;
    for (const std::string &token : line.tokens) {
      if (token == ".")
        continue; // An idle slot.
      std::optional<::mpmd::Unit> unit = ::mpmd::parseUnitToken(token);
      if (!unit)
        return emitError() << "malformed unit '" << token << "' in the " << what << " of mesh \""
                           << line.mesh << "\": expected " << ::mpmd::kUnitSyntax;
      unit->mesh = line.mesh;
      units.push_back(std::move(*unit));
    }
    if (units.empty() && !allowEmptyLines)
      return emitError() << what << " '" << line.text << "' names no unit";
    if (!units.empty()) // A mesh line without units says nothing.
      lines.push_back(std::move(units));
  }
  return lines;
}

FailureOr<std::vector<::mpmd::MeshSpec>> mlir::mpmd::parseTopology(StringRef text,
                                                                   EmitErrorFn emitError) {
  std::vector<::mpmd::MeshSpec> meshes;
  SmallVector<StringRef> parts;
  text.split(parts, ';', -1, /*KeepEmpty=*/false);
  for (StringRef part : parts) {
    part = part.trim();
    auto [name, axes] = part.split(':');
    name = name.trim();
    if (!part.contains(':') || name.empty())
      return emitError() << "malformed topology entry '" << part
                         << "': expected 'name:axis=size,...' (e.g. 'm0:data=4;m1:data=4')";
    ::mpmd::MeshSpec mesh;
    mesh.name = name.str();
    SmallVector<StringRef> items;
    axes.split(items, ',', -1, /*KeepEmpty=*/false);
    for (StringRef item : items) {
      auto [axis, size] = item.trim().split('=');
      int64_t value;
      if (axis.trim().empty() || size.trim().getAsInteger(10, value))
        return emitError() << "malformed axis '" << item.trim() << "' of mesh \"" << name
                           << "\" in the topology: expected axis=size";
      mesh.axes.push_back({axis.trim().str(), value});
    }
    meshes.push_back(std::move(mesh));
  }
  return meshes;
}

TopologyAttr mlir::mpmd::buildTopology(MLIRContext *ctx, ArrayRef<::mpmd::MeshSpec> meshes,
                                       EmitErrorFn emitError) {
  SmallVector<NamedMeshAttr> named;
  for (const ::mpmd::MeshSpec &mesh : meshes) {
    SmallVector<MeshAxisAttr> axes;
    for (const auto &[name, size] : mesh.axes) {
      auto axis = MeshAxisAttr::getChecked(emitError, ctx, StringRef(name), size);
      if (!axis)
        return {};
      axes.push_back(axis);
    }
    auto shape = MeshAttr::getChecked(emitError, ctx, ArrayRef<MeshAxisAttr>(axes),
                                      ArrayRef<int64_t>());
    if (!shape)
      return {};
    named.push_back(NamedMeshAttr::get(ctx, StringRef(mesh.name), shape));
  }
  return TopologyAttr::getChecked(emitError, ctx, ArrayRef<NamedMeshAttr>(named));
}

std::string mlir::mpmd::formatUnit(const ::mpmd::Unit &unit, int64_t meshIndex) {
  return ::mpmd::formatUnitToken(unit.kind, unit.microbatch, unit.stage, meshIndex);
}

std::string mlir::mpmd::formatUnitLine(ArrayRef<::mpmd::Unit> units, int64_t meshIndex) {
  std::string s = units.empty() ? std::string() : units.front().mesh + ":";
  for (const ::mpmd::Unit &unit : units)
    s += " " + formatUnit(unit, meshIndex);
  return s;
}

std::string mlir::mpmd::formatUnitLines(ArrayRef<std::vector<::mpmd::Unit>> lines,
                                        ArrayRef<::mpmd::MeshSpec> topology) {
  std::string s;
  for (const std::vector<::mpmd::Unit> &units : lines) {
    if (units.empty())
      continue;
    const auto *mesh = llvm::find_if(
        topology, [&](const ::mpmd::MeshSpec &m) { return m.name == units.front().mesh; });
    int64_t meshIndex = mesh == topology.end() ? -1 : mesh - topology.begin();
    s += (s.empty() ? "" : "; ") + formatUnitLine(units, meshIndex);
  }
  return s;
}

std::string mlir::mpmd::formatNameAssignment(ArrayRef<::mpmd::NameAssignment> entries) {
  std::string s;
  for (const ::mpmd::NameAssignment &entry : entries) {
    s += (s.empty() ? "" : ",") + entry.name + "@" + entry.mesh;
    if (entry.stage >= 0)
      s += "/" + std::to_string(entry.stage);
  }
  return s;
}

std::string mlir::mpmd::formatIndexAssignment(ArrayRef<::mpmd::IndexAssignment> entries) {
  std::string s;
  for (const ::mpmd::IndexAssignment &entry : entries)
    s += (s.empty() ? "" : ",") + std::to_string(entry.index) + "@" + entry.mesh;
  return s;
}

std::string mlir::mpmd::formatTopology(ArrayRef<::mpmd::MeshSpec> meshes) {
  std::string s;
  for (const ::mpmd::MeshSpec &mesh : meshes) {
    s += (s.empty() ? "" : ";") + mesh.name + ":";
    for (size_t i = 0; i < mesh.axes.size(); ++i)
      s += (i ? "," : "") + mesh.axes[i].first + "=" + std::to_string(mesh.axes[i].second);
  }
  return s;
}
