//===- AbortNote.h - a last word when JAX or XLA aborts the process --------===//
//
// JAX's distributed client and XLA's collectives end a process with abort()
// (SIGABRT) when they give up: the coordination service is gone, a peer
// missed its heartbeats, a collective's rendezvous timed out. Their message
// says what they saw, not why. The runtime knows more (which peer on this
// host is dead or stopped, which fragment's host callback failed), and keeps
// it here, already worded; a SIGABRT handler writes it to stderr with
// async-signal-safe calls only (open, read, write), then hands the signal to
// the handler that was there before.
//
//===----------------------------------------------------------------------===//

#ifndef MPMD_PYTHON_ABORTNOTE_H
#define MPMD_PYTHON_ABORTNOTE_H

#include <string>
#include <tuple>
#include <vector>

namespace mpmd {

/// A peer process on this host: its pid, what to write when that pid is
/// gone (or a zombie), and what to write when it is stopped (state T).
using AbortPeer = std::tuple<long, std::string, std::string>;

/// Sets what the handler says about the run's other processes: each peer's
/// line for its state, and `otherwise` when no peer is gone or stopped.
/// Installs the handler on first use.
void setAbortPeers(std::vector<AbortPeer> peers, std::string otherwise);

/// Sets a line the handler writes first, whatever the peers' states (the
/// runtime's own finding, e.g. a fragment stuck behind a failed device);
/// an empty text removes it. Installs the handler on first use.
void setAbortCause(std::string text);

/// What process `pid`'s /proc/<pid>/stat says: "gone" (no such process, or
/// a zombie), "stopped" (state T or t), or nullptr (running). The handler
/// reads peers this way; mpmd.distributed.failures.peer_state too.
const char *processState(long pid);

/// The lines the handler would write now (for tests), without a signal.
std::string abortNoteText();

} // namespace mpmd

#endif // MPMD_PYTHON_ABORTNOTE_H
