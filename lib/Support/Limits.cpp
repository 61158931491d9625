//===- Limits.cpp - limits that keep hostile input from crashing -----------===//

#include "mpmd/Support/Limits.h"

#include <pthread.h>

namespace mpmd {

std::string checkNestingDepth(std::string_view text, int64_t limit) {
  int64_t depth = 0;
  int64_t line = 1;
  bool inString = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '\n')
      ++line;
    if (inString) {
      if (c == '\\')
        ++i; // An escaped character (possibly a quote).
      else if (c == '"')
        inString = false;
      continue;
    }
    if (c == '"') {
      inString = true;
    } else if (c == '{') {
      if (++depth > limit)
        return "line " + std::to_string(line) + ": the module nests regions (or attribute "
               "dictionaries) more than " + std::to_string(limit) +
               " deep, the most mpmd accepts: flatten the program (e.g. fewer nested calls "
               "or loops)";
    } else if (c == '}') {
      --depth;
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
