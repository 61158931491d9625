//===- AbortNote.cpp - a last word when JAX or XLA aborts the process ------===//
//
// See AbortNote.h. The handler reads one immutable snapshot (an atomic
// pointer); a setter builds a new one and swaps it in. Old snapshots are never
// freed: a handler may be reading one on another thread, and there are a few
// per run.
//
//===----------------------------------------------------------------------===//

#include "AbortNote.h"

#include <atomic>
#include <cerrno>
#include <csignal>
#include <fcntl.h>
#include <mutex>
#include <unistd.h>

namespace mpmd {
namespace {

struct Snapshot {
  std::vector<AbortPeer> peers;
  std::string otherwise;
  std::string cause;
};

std::atomic<const Snapshot *> current{nullptr};
std::atomic<bool> spoken{false};
std::mutex setting;
struct sigaction previous;
bool installed = false;

enum class PeerState { Running, Gone, Stopped };

void writeAll(const std::string &text) {
  const char *p = text.data();
  size_t left = text.size();
  while (left > 0) {
    ssize_t n = ::write(STDERR_FILENO, p, left);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return;
    p += n;
    left -= static_cast<size_t>(n);
  }
}

/// What /proc/<pid>/stat's state letter says, read with async-signal-safe
/// calls: gone (no such process, unreadable, or a zombie), stopped (T or t),
/// else running.
PeerState stateOf(long pid) {
  char path[32] = "/proc/";
  char digits[24];
  int count = 0;
  for (long v = pid; v > 0 && count < 20; v /= 10)
    digits[count++] = static_cast<char>('0' + v % 10);
  int at = 6;
  while (count > 0)
    path[at++] = digits[--count];
  for (const char *tail = "/stat"; *tail; ++tail)
    path[at++] = *tail;
  path[at] = '\0';
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return PeerState::Gone;
  char buffer[1024];
  ssize_t n = ::read(fd, buffer, sizeof(buffer));
  ::close(fd);
  if (n <= 0)
    return PeerState::Gone;
  // "pid (comm) S ...": the state follows the last ')'.
  ssize_t close = n - 1;
  while (close >= 0 && buffer[close] != ')')
    --close;
  ssize_t i = close + 1;
  while (i < n && buffer[i] == ' ')
    ++i;
  if (close < 0 || i >= n)
    return PeerState::Gone;
  switch (buffer[i]) {
  case 'Z':
  case 'X':
  case 'x':
    return PeerState::Gone;
  case 'T':
  case 't':
    return PeerState::Stopped;
  default:
    return PeerState::Running;
  }
}

/// Says `note`'s lines through `say` (a write in the handler, an append
/// for abortNoteText): the cause, then each peer gone or stopped, else
/// `otherwise`.
template <typename Say>
void speak(const Snapshot &note, Say say) {
  say(note.cause);
  bool named = false;
  for (const AbortPeer &peer : note.peers) {
    PeerState state = stateOf(std::get<0>(peer));
    if (state == PeerState::Gone)
      say(std::get<1>(peer));
    else if (state == PeerState::Stopped)
      say(std::get<2>(peer));
    named |= state != PeerState::Running;
  }
  if (!named)
    say(note.otherwise);
}

void onAbort(int signal, siginfo_t *info, void *context) {
  const Snapshot *note = current.load(std::memory_order_acquire);
  if (note && !spoken.exchange(true))
    speak(*note, writeAll); // (writes only: nothing allocates here)
  if (previous.sa_flags & SA_SIGINFO) {
    if (previous.sa_sigaction)
      previous.sa_sigaction(signal, info, context);
  } else if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN) {
    previous.sa_handler(signal);
  }
  // Returning from a SIGABRT handler lets abort() go on: it restores the
  // default action and ends the process.
}

void install() {
  if (installed)
    return;
  struct sigaction action = {};
  action.sa_sigaction = onAbort;
  action.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&action.sa_mask);
  if (::sigaction(SIGABRT, &action, &previous) == 0)
    installed = true;
}

void publish(Snapshot next) {
  current.store(new Snapshot(std::move(next)), std::memory_order_release);
  install();
}

} // namespace

const char *processState(long pid) {
  switch (stateOf(pid)) {
  case PeerState::Gone:
    return "gone";
  case PeerState::Stopped:
    return "stopped";
  case PeerState::Running:
    break;
  }
  return nullptr;
}

void setAbortPeers(std::vector<AbortPeer> peers, std::string otherwise) {
  std::lock_guard<std::mutex> lock(setting);
  const Snapshot *old = current.load();
  publish(Snapshot{std::move(peers), std::move(otherwise), old ? old->cause : ""});
}

void setAbortCause(std::string text) {
  std::lock_guard<std::mutex> lock(setting);
  const Snapshot *old = current.load();
  Snapshot next = old ? *old : Snapshot{};
  next.cause = std::move(text);
  publish(std::move(next));
}

std::string abortNoteText() {
  const Snapshot *note = current.load(std::memory_order_acquire);
  std::string text;
  if (note)
    speak(*note, [&text](const std::string &line) { text += line; });
  return text;
}

} // namespace mpmd
