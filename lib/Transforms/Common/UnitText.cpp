//===- UnitText.cpp - the text grammar of scheduling units -------------------===//

#include "mpmd/UnitText.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"

#include <algorithm>

using llvm::StringRef;

namespace mpmd {

std::optional<Unit> parseUnitToken(const std::string &token) {
  StringRef body = token;
  if (body.empty() || (body.front() != 'F' && body.front() != 'B' && body.front() != 'W'))
    return std::nullopt;
  Unit unit;
  unit.kind = std::string(1, body.front());
  body = body.drop_front();
  auto [mb, stage] = body.split(".s");
  auto isNumber = [](StringRef s) {
    return !s.empty() && llvm::all_of(s, [](char c) { return c >= '0' && c <= '9'; });
  };
  if (!isNumber(mb) || mb.getAsInteger(10, unit.microbatch))
    return std::nullopt;
  if (body.contains(".s") && (!isNumber(stage) || stage.getAsInteger(10, unit.stage)))
    return std::nullopt;
  return unit;
}

std::string formatUnitToken(const std::string &kind, int64_t microbatch, int64_t stage,
                                  int64_t meshIndex) {
  std::string s = kind + std::to_string(microbatch);
  if (stage >= 0 && stage != meshIndex)
    s += ".s" + std::to_string(stage);
  return s;
}

std::vector<UnitTextLine> splitUnitText(const std::string &text) {
  std::vector<UnitTextLine> lines;
  llvm::SmallVector<StringRef> rows;
  StringRef(text).split(rows, '\n', -1, /*KeepEmpty=*/true);
  for (auto [index, row] : llvm::enumerate(rows)) {
    llvm::SmallVector<StringRef> pieces;
    row.split('#').first.split(pieces, ';', -1, /*KeepEmpty=*/false);
    for (StringRef piece : pieces) {
      StringRef trimmed = piece.trim();
      if (trimmed.empty())
        continue;
      UnitTextLine line;
      line.line_number = static_cast<int64_t>(index) + 1;
      line.text = trimmed.str();
      if (trimmed.starts_with("@")) {
        line.directive = true;
      } else if (trimmed.contains(':')) {
        auto [mesh, rest] = trimmed.split(':');
        line.has_mesh = true;
        line.mesh = mesh.trim().str();
        for (StringRef r = rest.ltrim(); !r.empty(); r = r.ltrim()) {
          size_t end = std::min(r.find_first_of(" \t\n\v\f\r"), r.size());
          line.tokens.push_back(r.take_front(end).str());
          r = r.drop_front(end);
        }
      }
      lines.push_back(std::move(line));
    }
  }
  return lines;
}

} // namespace mpmd
