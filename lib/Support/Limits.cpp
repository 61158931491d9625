//===- Limits.cpp - limits that keep hostile input from crashing -----------===//

#include "mpmd/Support/Limits.h"

#include <pthread.h>

namespace mpmd {

std::string checkNestingDepth(std::string_view text, int64_t limit) {
  // One depth per kind of bracket: regions and dictionaries `{`, arrays `[`,
  // operand and region lists `(`, types and attributes `<` (the `>` of `->`
  // closes nothing). A closer without an opener does not go below zero, so
  // stray closers cannot hide nesting that follows them.
  constexpr std::string_view kOpen = "{[(<", kClose = "}])>";
  int64_t depth[4] = {0, 0, 0, 0};
  int64_t line = 1, column = 0;
  bool inString = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    ++column;
    if (c == '\n') {
      ++line;
      column = 0;
      continue;
    }
    if (inString) {
      if (c == '\\') {
        ++i; // An escaped character (possibly a quote).
        ++column;
      } else if (c == '"') {
        inString = false;
      }
      continue;
    }
    if (c == '"') {
      inString = true;
    } else if (c == '/' && i + 1 < text.size() && text[i + 1] == '/') {
      // A comment: up to the end of the line.
      while (i + 1 < text.size() && text[i + 1] != '\n')
        ++i;
    } else if (size_t k = kOpen.find(c); k != std::string_view::npos) {
      if (++depth[k] > limit)
        return std::to_string(line) + ":" + std::to_string(column) +
               ": error: the module nests regions, attributes or types more than " +
               std::to_string(limit) +
               " deep, the most mpmd accepts: flatten the program (e.g. fewer nested calls "
               "or loops)";
    } else if (size_t k = kClose.find(c); k != std::string_view::npos) {
      if (c == '>' && i > 0 && text[i - 1] == '-')
        continue; // `->`
      if (depth[k] > 0)
        --depth[k];
    }
  }
  return "";
}

namespace {
void *trampoline(void *arg) {
  (*static_cast<const std::function<void()> *>(arg))();
  return nullptr;
}
} // namespace

void runWithLargeStack(const std::function<void()> &fn, size_t stackBytes) {
  pthread_attr_t attr;
  pthread_t thread;
  bool started = pthread_attr_init(&attr) == 0 &&
                 pthread_attr_setstacksize(&attr, stackBytes) == 0 &&
                 pthread_create(&thread, &attr, trampoline,
                                const_cast<std::function<void()> *>(&fn)) == 0;
  pthread_attr_destroy(&attr);
  if (!started) {
    fn();
    return;
  }
  pthread_join(thread, nullptr);
}

} // namespace mpmd
