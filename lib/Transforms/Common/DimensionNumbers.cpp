//===- DimensionNumbers.cpp - StableHLO dimension numbers as lists -------===//
//
// See DimensionNumbers.h.
//
//===----------------------------------------------------------------------===//

#include "Common/DimensionNumbers.h"

#include "llvm/Support/raw_ostream.h"

namespace mlir::mpmd {

DimensionNumbers::DimensionNumbers(Attribute attr) {
  if (!attr)
    return;
  llvm::raw_string_ostream os(text);
  attr.print(os);
}

SmallVector<int64_t> DimensionNumbers::list(StringRef field) const {
  SmallVector<int64_t> values;
  StringRef rest = StringRef(text);
  // The field's name starts the text, or follows '<' or ' '.
  size_t at = 0;
  while (true) {
    at = rest.find(field, at);
    if (at == StringRef::npos)
      return values;
    bool starts = at == 0 || rest[at - 1] == '<' || rest[at - 1] == ' ';
    if (starts && rest.drop_front(at + field.size()).starts_with(" = "))
      break;
    at += field.size();
  }
  rest = rest.drop_front(at + field.size() + 3);
  if (rest.consume_front("[")) {
    rest = rest.take_until([](char c) { return c == ']'; });
  } else {
    rest = rest.take_while([](char c) { return c == '-' || (c >= '0' && c <= '9'); });
  }
  SmallVector<StringRef> parts;
  rest.split(parts, ',', /*MaxSplit=*/-1, /*KeepEmpty=*/false);
  for (StringRef part : parts) {
    int64_t d;
    if (!part.trim().getAsInteger(10, d))
      values.push_back(d);
  }
  return values;
}

int64_t DimensionNumbers::scalar(StringRef field, int64_t fallback) const {
  SmallVector<int64_t> values = list(field);
  return values.size() == 1 ? values.front() : fallback;
}

} // namespace mlir::mpmd
