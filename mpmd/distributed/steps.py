"""Every process must call each program the same number of times: checked.

In a multi-process run, each call of an `mpmd.jit` program joins collectives
with the other processes that own its meshes. A process that calls a program
more often than another one waits for ever in its extra call (in a gloo or
NCCL collective), while the other one sits in JAX's shutdown barrier: both
would hang until JAX's barrier timeout, with no word of steps.

This module counts the calls each process makes of each multi-process program
(`StepCounter`, keyed by the program's fingerprint, the name every process
gives the same compile). When a process exits normally it publishes its
counts in JAX's coordination service; when it fails, it publishes that it
failed. A watchdog thread in every process that ran such a program reads
what its peers published (every `MPMD_STEP_CHECK_INTERVAL` seconds, default
1) and, when a peer exited after fewer calls of a program than this process
has started, ends this process with a message naming both processes and
their call counts (exit code 1): within about one interval of the peer's
exit, or at the start of the call when this process starts it after it read
that exit. The exiting process itself waits, before JAX's shutdown barrier, until
every peer of its programs has published its end, and fails with the same
message when one reports the mismatch.

The same watchdog ends this process (exit code 1) when a peer publishes that
it failed (an uncaught exception, e.g. a `FragmentRuntimeError` naming the
fragment and mesh where a step failed, or a SIGTERM; see
`mpmd.distributed.termination`), with a message naming that process and its
error: within about one interval, instead of waiting in a collective for a
process that is gone. It also publishes this process's progress (calls
started, whether one is running) and, while a call of a multi-process
program has been running for more than `MPMD_STALL_WARNING` seconds
(default 30; 0: never), says so every as many seconds, with what each peer
last published: which process is behind, on which call, for how long.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import threading
import time
from collections.abc import Sequence

import jax

from mpmd import knobs
from mpmd.distributed import coordination, failures
from mpmd.distributed.failures import FailureRecord

__all__ = ["ENV_CHECK_INTERVAL", "ENV_STALL_WARNING", "StepCounter", "call_finished", "counter",
           "failed_peers", "install", "let_peers_hear", "mismatches", "origin", "peer_failures",
           "publish_failure"]

#: Seconds between two looks at what the other processes published.
ENV_CHECK_INTERVAL = knobs.MPMD_STEP_CHECK_INTERVAL
#: Seconds a call may run before the watchdog reports it (0: never).
ENV_STALL_WARNING = knobs.MPMD_STALL_WARNING

_PREFIX = "mpmd/steps"
_lock = threading.Lock()
_counters: dict[str, StepCounter] = {}
_started = False
_ended = False
#: This process's index, once `install` ran.
_process = [0]
#: The call of a multi-process program running now: (counter, monotonic
#: start, wall-clock start, the calling thread's id), or None
#: (`StepCounter.begin` / `call_finished`).
_running: list = [None]
#: The call counts each peer that ended normally published (process -> fingerprint
#: -> calls): a call this process starts later is checked against them.
_exit_records: dict[int, dict[str, int]] = {}
#: Failures of other processes this process has read (process -> record):
#: the coordination service may refuse to answer once a failed process is
#: gone, and the error of a collective it broke needs them then.
_seen_failures: dict[int, FailureRecord] = {}
#: This process's own failure record, once published (the first one stands).
_own_failure: list[FailureRecord | None] = [None]
#: Each peer's identity (host namespace and pid; `failures.identity`).
_identities: dict[int, str] = {}
#: Since when (monotonic) each same-host peer has been seen stopped.
_stopped_since: dict[int, float] = {}
#: Seconds a peer must have been stopped before this process says so.
_STOPPED_REPORT = 3.0
#: Seconds between two looks at the peers' pids and the launcher's notices.
_TICK = 0.1
#: Wall-clock time the latest call returned.
_idle_since = [time.time()]


class StepCounter:
  """How many calls of one multi-process program this process has started.

  Attributes:
    fingerprint: the program's name in the coordination service (the same
      on every process).
    name: the function's name (for the messages).
    processes: the processes that own devices of the program's meshes.
    calls: calls started so far.
    site: `file:line` of the latest call (for the messages).
  """

  def __init__(self, fingerprint: str, name: str, processes: Sequence[int]):
    self.fingerprint = fingerprint
    self.name = name
    self.processes = tuple(sorted(set(processes)))
    self.calls = 0
    self.site = "?"

  def begin(self) -> None:
    """Records one more call (before anything of it is dispatched); ends this
    process at once when a peer of the program already ended after fewer
    calls (the call would wait for it for ever)."""
    with _lock:
      self.calls += 1
      ended = dict(_exit_records)
    self.site = _caller_site()
    _running[0] = (self, time.monotonic(), time.time(), threading.get_ident())
    problems = [p for peer, calls in ended.items()
                for p in mismatches(_process[0], peer, {"calls": calls})]
    if problems and not _ended:
      _fail("; ".join(problems))


def call_finished() -> None:
  """Records that the running call of a multi-process program returned (or
  failed); `mpmd.run.program.Program.run` calls it."""
  if _running[0] is not None:
    _running[0] = None
    _idle_since[0] = time.time()


def counter(fingerprint: str, name: str, processes: Sequence[int]) -> StepCounter:
  """The counter of a multi-process program; starts the checks on first use."""
  with _lock:
    found = _counters.get(fingerprint)
    if found is None:
      found = _counters[fingerprint] = StepCounter(fingerprint, name, processes)
    install()
  return found


def _interval() -> float:
  return knobs.number(ENV_CHECK_INTERVAL)  # (at least 0.05; malformed: 1)


def _key(process: int) -> str:
  return f"{_PREFIX}/end/{process}"


def _exit_key(process: int) -> str:
  return f"{_PREFIX}/exit/{process}"


def publish_exit() -> None:
  """Says this failed process is exiting now (right before `os._exit`): the
  others wait for it before they end themselves, so that the launcher sees
  the failed process end first (and the coordination service, which one of
  them may host, outlives it). Waits at most 0.5 s."""
  if not _started:
    return
  _bounded(lambda: _try_publish(_exit_key(_process[0]), "1"), "mpmd.steps-exit", 0.5)


def _bounded(target, name: str, timeout: float) -> None:
  """Runs `target` in a daemon thread, waiting for it at most `timeout`
  seconds; in this thread when none can start (during the interpreter's
  shutdown, e.g. a SIGTERM while its exit handlers wait: Python 3.12 starts
  no thread then), unbounded but not lost."""
  thread = threading.Thread(target=target, name=name, daemon=True)
  try:
    thread.start()
  except RuntimeError:  # "can't create new thread at interpreter shutdown"
    target()
    return
  thread.join(timeout)


def _try_publish(key: str, value: str) -> None:
  try:
    coordination.publish(key, value)
  except Exception:  # noqa: BLE001 -- on the way out; nothing to add
    pass


def _progress_key(process: int) -> str:
  return f"{_PREFIX}/progress/{process}"


def _stall_seconds() -> float:
  return knobs.number(ENV_STALL_WARNING)  # (at least 0; malformed: 30)


def _mismatch_key() -> str:
  return f"{_PREFIX}/mismatch"


def install() -> None:
  """Registers the exit record (before JAX's own shutdown: atexit runs in
  reverse order) and starts the watchdog, once per process (called by
  `initialize` and by the first multi-process program call)."""
  global _started
  if _started:
    return
  # Read here, in the caller's thread: the first device query initializes
  # the backend, which must not race with the caller's own first use.
  me, count = jax.process_index(), jax.process_count()
  if count < 2:
    return
  _started = True
  _process[0] = me
  try:
    coordination.publish(_identity_key(me), failures.identity())
  except Exception:  # noqa: BLE001 -- then only the launcher's notices tell of its death
    pass
  atexit.register(_at_exit, me)
  threading.Thread(target=_watch, args=(me, count), name="mpmd.steps-watchdog",
                   daemon=True).start()


def _caller_site() -> str:
  """`file:line` of the first frame outside the mpmd package."""
  frame = sys._getframe(2)
  package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(package):
    frame = frame.f_back
  if frame is None:
    return "?"
  return f"{frame.f_code.co_filename}:{frame.f_lineno}"


def _own_record() -> str:
  with _lock:
    return json.dumps({"calls": {fp: c.calls for fp, c in _counters.items()}})


def _identity_key(process: int) -> str:
  return f"{_PREFIX}/who/{process}"


#: Words of an error that a peer's end can cause (a collective or transfer
#: whose other end closed): such a failure waits a little for that peer's
#: record, or its death, before it claims to be the first.
_BROKEN_LINK = ("connection closed", "connection reset", "closed by peer", "broken pipe",
                "socketserver", "gloo", "unavailable", "end of file")
#: Seconds a failure that looks like a broken link waits for its cause.
_CAUSE_WAIT = 0.5


def looks_like_a_broken_link(reason: str) -> bool:
  """Whether error text `reason` may come from a peer's end."""
  text = reason.lower()
  return any(word in text for word in _BROKEN_LINK)


def publish_failure(reason: str = "", timeout: float = 1.0,
                    cause: int | None = None) -> FailureRecord | None:
  """Says this process failed, and why (`reason`: the error, or the signal
  it got; the exit-on-error hook and the SIGTERM handler call it), before
  anything waits: the others end too, naming the process that failed first,
  instead of waiting for it. `cause`: the process whose failure this one
  follows; when None, a peer already known failed or gone is taken, and
  failing that this process claims the run's first failure. Returns the
  record (the first one published stands); never raises; waits at most
  `timeout` seconds for the coordination service."""
  if not _started:
    return None
  me = _process[0]
  with _lock:
    if _own_failure[0] is not None:
      return _own_failure[0]
  if cause is None:
    cause = _known_cause(me)
  if cause is None and looks_like_a_broken_link(reason):
    # (A peer that died closed this link: its kernel, or the launcher, says
    # so within a few polls; a peer that failed publishes first.)
    deadline = time.monotonic() + _CAUSE_WAIT
    while cause is None and time.monotonic() < deadline:
      time.sleep(0.02)
      cause = _known_cause(me, fetch=True)
  record = FailureRecord(process=me, reason=reason[:4000], time=time.time(), cause=cause)
  with _lock:
    _own_failure[0] = record
  failures.write_local(record)  # (the launcher's copy, should the service not answer)

  def publish() -> None:
    try:
      client = coordination._client()  # noqa: SLF001 -- this package's own client look-up
      if record.cause is None:
        holder = failures.claim_first(client, me)
        if holder is not None and holder != me:
          record.cause = holder
        record.first = holder == me
      coordination.publish(_key(me), record.to_json())
    except Exception:  # noqa: BLE001 -- on the way out; nothing to add
      pass
    failures.write_local(record)

  # Bounded: with the coordinator gone, the call could block for long.
  _bounded(publish, "mpmd.steps-failure", timeout)
  return record


def _known_cause(me: int, fetch: bool = False) -> int | None:
  """A peer this process already knows failed (the origin of its failure)
  or is gone, or None; `fetch`: read the peers' records first."""
  if fetch:
    for peer in range(jax.process_count()):
      if peer != me:
        _fetch_failure(peer)
  with _lock:
    seen = dict(_seen_failures)
  if seen:
    return origin(min(seen.values(), key=lambda r: r.time).process)
  for peer in range(jax.process_count()):
    if peer != me and _gone(peer) is not None:
      return peer
  return None


def origin(process: int) -> int:
  """The process whose failure started the chain `process`'s failure is in
  (following each known record's cause)."""
  with _lock:
    seen = dict(_seen_failures)
  if _own_failure[0] is not None:
    seen[_process[0]] = _own_failure[0]
  visited = set()
  while process in seen and seen[process].cause is not None and process not in visited:
    visited.add(process)
    process = seen[process].cause
  return process


def _gone(peer: int) -> str | None:
  """How peer `peer` ended without a failure record ("was killed by signal
  SIGKILL (says the launcher)"), or None while nothing says it did."""
  state = failures.peer_state(_identity(peer))
  return failures.describe_gone(peer, state)


def _identity(peer: int) -> str | None:
  if peer not in _identities:
    try:
      text = coordination.try_fetch(_identity_key(peer))
    except Exception:  # noqa: BLE001 -- the service is gone
      text = None
    if text is None:
      return None
    _identities[peer] = text
  return _identities[peer]


def _describe_failure(peer: int) -> str:
  """"process <j> failed: <reason>" for the origin of `peer`'s failure."""
  first = origin(peer)
  with _lock:
    record = _seen_failures.get(first)
  if record is not None:
    return f"process {first} failed: {record.reason}"
  gone = _gone(first)
  return f"process {first} {gone or 'failed (see its output)'}"


def mismatches(me: int, peer: int, record: dict) -> list[str]:
  """What is wrong when `peer` ended with `record` while this process (`me`)
  has started its own calls: one sentence per program that `peer` takes part
  in and this process called more often."""
  if record.get("failed"):
    return []
  theirs = record.get("calls", {})
  found = []
  with _lock:
    counters = list(_counters.values())
  for c in counters:
    if peer not in c.processes or c.calls <= theirs.get(c.fingerprint, 0):
      continue
    found.append(
        f"process {peer} finished (is exiting) after {theirs.get(c.fingerprint, 0)} call(s) of "
        f"mpmd.jit program {c.name!r} ({c.fingerprint}), but process {me} started call "
        f"{c.calls} of it (at {c.site}), which needs process {peer}: every process must call "
        "each mpmd.jit program the same number of times (give every process the same step "
        "count)")
  return found


def _fail(message: str) -> None:
  """Ends this process: its main thread may be blocked in a collective."""
  try:
    coordination.publish(_mismatch_key(), message)
  except Exception:  # noqa: BLE001
    pass
  publish_failure(message)
  sys.stderr.write(f"[mpmd] {message}\n")
  _end()


def _end() -> None:
  """Exits this failed process (code 1), once the others could hear of it."""
  sys.stderr.flush()
  sys.stdout.flush()
  let_peers_hear()
  publish_exit()
  os._exit(1)


def let_peers_hear(seconds: float | None = None) -> None:
  """In process 0, which hosts JAX's coordination service (its end aborts
  every other process at once, before they can say why, or finish their
  on_termination hooks): waits until every other process has published its
  exit or is gone, at most `seconds` (default: the SIGTERM grace period +
  2 s). Other processes do not wait."""
  if not _started or _process[0] != 0:
    return
  if seconds is None:
    from mpmd.distributed import termination  # noqa: PLC0415 -- (imports this module)
    seconds = termination.grace_seconds() + 2
  waiting = set(range(1, jax.process_count()))
  deadline = time.monotonic() + seconds
  while waiting and time.monotonic() < deadline:
    for peer in list(waiting):
      try:
        exited = coordination.try_fetch(_exit_key(peer)) is not None
      except Exception:  # noqa: BLE001
        exited = False
      if exited or _gone(peer) is not None:
        waiting.discard(peer)
    if waiting:
      time.sleep(0.02)


def peer_failures(timeout: float = 1.0, wait: float = 0.0) -> list[str]:
  """"process <j> failed: <reason>" (or "process <j> was killed by signal
  SIGKILL (says the launcher)") for each other process that published its
  failure or is gone (for the error of a step that failed because a peer
  is). Looks again until one is found or `wait` seconds have passed (a peer
  whose failure reached this process through a transfer publishes it right
  after); waits at most `timeout` + `wait` seconds in all."""
  return [f"process {peer} {what}" for peer, what in failed_peers(timeout, wait).items()]


def failed_peers(timeout: float = 1.0, wait: float = 0.0) -> dict[int, str]:
  """The other processes that failed or are gone, each with what happened
  ("failed: <reason>", "was killed by signal SIGKILL (says the launcher)"):
  `peer_failures`, by process index. A gone peer is never waited for."""
  if not _started:
    return {}
  with _lock:
    me = _process[0]
    found = {p: f"failed: {r.reason}" for p, r in _seen_failures.items()}
  deadline = time.monotonic() + wait

  def read() -> None:
    while True:
      for peer in range(jax.process_count()):
        if peer == me or peer in found:
          continue
        record = _fetch_failure(peer)
        if record is not None:
          found[peer] = f"failed: {record.reason}"
          continue
        gone = _gone(peer)
        if gone is not None and not _ended_normally(peer):
          found[peer] = gone
      if found or time.monotonic() >= deadline:
        return
      time.sleep(0.05)

  _bounded(read, "mpmd.steps-peers", timeout + wait)
  return dict(found)


def _fetch_failure(peer: int) -> FailureRecord | None:
  """`peer`'s failure record (remembered once read), or None."""
  with _lock:
    if peer in _seen_failures:
      return _seen_failures[peer]
  try:
    text = coordination.try_fetch(_key(peer))
  except Exception:  # noqa: BLE001 -- the service refuses (a process is gone)
    return None
  record = FailureRecord.from_json(peer, text) if text else None
  if record is not None:
    with _lock:
      _seen_failures[peer] = record
  return record


def _ended_normally(peer: int) -> bool:
  """Whether `peer` published its call counts on a normal exit."""
  try:
    text = coordination.try_fetch(_key(peer))
  except Exception:  # noqa: BLE001 -- the service is gone: nothing says so
    return False
  return text is not None and not json.loads(text).get("failed")


def _peer_failed(me: int, peer: int) -> None:
  """Ends this process because `peer` failed or is gone (its main thread may
  be blocked in a collective with it, which would wait until a timeout),
  naming the process that failed first."""
  from mpmd.distributed import termination  # noqa: PLC0415 -- (imports this module)
  if termination.termination_requested() or _own_failure[0] is not None:
    # This process got SIGTERM and is running its on_termination hooks (a
    # last checkpoint), or failed itself and is saying so: it exits when done.
    return
  what = _describe_failure(peer)
  first = origin(peer)
  publish_failure(f"ended because {what}", cause=first)
  hosted = (" (it hosted JAX's coordination service)"
            if first == 0 and peer not in _seen_failures else "")
  sys.stderr.write(f"[mpmd] process {me}: {what}{hosted}\n"
                   f"[mpmd] process {me}: ending this process too (the run cannot go on "
                   f"without process {first})\n")
  _end()


def _progress() -> dict:
  """What this process publishes about its calls (for the others' stall reports)."""
  running = _running[0]
  with _lock:
    calls = {c.name: c.calls for c in _counters.values()}
  return {"calls": calls, "running": running is not None,
          "since": running[2] if running else _idle_since[0]}


def _describe_peer(peer: int, text: str | None) -> str:
  if text is None:
    return f"process {peer} has published no progress yet"
  info = json.loads(text)
  calls = ", ".join(f"call {n} of {name!r}" for name, n in info.get("calls", {}).items())
  ago = max(0.0, time.time() - info.get("since", time.time()))
  state = (f"in {calls or 'a call'} for {ago:.0f} s" if info.get("running")
           else f"not in a call for {ago:.0f} s (last started: {calls or 'none'})")
  return f"process {peer} is {state}"


def _report_stall(me: int, count: int, seconds: float) -> None:
  running = _running[0]
  if running is None:
    return
  counter_ = running[0]
  peers = []
  for peer in range(count):
    if peer == me:
      continue
    try:
      peers.append(_describe_peer(peer, coordination.try_fetch(_progress_key(peer))))
    except Exception:  # noqa: BLE001
      peers.append(f"process {peer}: unknown (the coordination service did not answer)")
  sys.stderr.write(
      f"[mpmd] process {me}: call {counter_.calls} of mpmd.jit program {counter_.name!r} "
      f"(at {counter_.site}) has been running for {seconds:.0f} s{_waiting_in(running[3])}; "
      + "; ".join(peers) + f" ({ENV_STALL_WARNING}={_stall_seconds():g})\n")
  sys.stderr.flush()


def _waiting_in(thread_id: int) -> str:
  """Where the thread running the call is now, for the stall report: the
  program's instruction it is at (its `describe()`), and the innermost
  functions of mpmd it is in (a hang names the transfer or wait it is in).
  Empty if that thread is not found."""
  frame = sys._current_frames().get(thread_id)  # (CPython's, documented in sys)
  functions: list[str] = []
  index, instructions = None, None  # the innermost instruction index, the program's
  while frame is not None:
    module = frame.f_globals.get("__name__", "")
    if module.startswith("mpmd.") and module != __name__:
      if len(functions) < 3:
        functions.append(f"{frame.f_code.co_qualname} ({module}, line {frame.f_lineno})")
      if module == "mpmd.run.program":
        found = frame.f_locals.get("index")
        if index is None and isinstance(found, int):
          index = found
        owner = frame.f_locals.get("self")
        if instructions is None and isinstance(getattr(owner, "instructions", None), list):
          instructions = owner.instructions
    frame = frame.f_back
  if not functions:
    return ""
  at = ""
  if index is not None and instructions is not None and 0 <= index < len(instructions):
    at = f", at instruction {index}: {instructions[index].describe()}"
  return at + " (in " + " < ".join(functions) + ")"


def _watch_local(me: int, count: int, ended: set[int]) -> None:
  """The checks that need no coordination service: a peer gone without a
  failure record (the launcher's notice, its pid), or stopped (state T)."""
  for peer in range(count):
    if peer in ended or _ended:
      continue
    state = failures.peer_state(_identities.get(peer))
    stopped = failures.stopped_for(_stopped_since, peer, state == "stopped")
    if stopped >= _STOPPED_REPORT and peer not in _stop_reported:
      _stop_reported.add(peer)
      _report_stopped(me, peer, stopped)
    elif not stopped:
      _stop_reported.discard(peer)
    if failures.describe_gone(peer, state) is None:
      continue
    ended.add(peer)
    if _fetch_failure(peer) is None and _ended_normally(peer):
      continue
    _peer_failed(me, peer)


_stop_reported: set[int] = set()


def _report_stopped(me: int, peer: int, seconds: float) -> None:
  """Says that same-host peer `peer` has been stopped for `seconds`."""
  heartbeat = knobs.raw(knobs.MPMD_HEARTBEAT_TIMEOUT) or "JAX's default"
  sys.stderr.write(
      f"[mpmd] process {me}: process {peer} has been stopped for {seconds:.0f} s (state T: "
      "SIGSTOP, or a debugger): this process waits for it; the run goes on once it is "
      f"continued (SIGCONT), unless it misses JAX's heartbeats for the heartbeat timeout "
      f"({heartbeat} s), after which JAX's coordination service ends the run\n")
  sys.stderr.flush()


def _watch(me: int, count: int) -> None:
  ended: set[int] = {me}
  armed = 0
  reported_at = 0.0
  published = None
  next_read = 0.0
  while not _ended:
    time.sleep(min(_TICK, _interval()))
    for peer in range(count):
      if peer != me and peer not in _identities:
        _identity(peer)
    if len(_identities) != armed:  # (what this process says if JAX aborts it)
      armed = len(_identities)
      failures.arm_abort_note(me, dict(_identities))
    _watch_local(me, count, ended)
    if time.monotonic() < next_read:
      continue
    next_read = time.monotonic() + _interval()
    for peer in range(count):
      if peer in ended:
        continue
      try:
        text = coordination.try_fetch(_key(peer))
      except Exception:  # noqa: BLE001 -- the service is gone: the local checks go on
        break
      if text is None:
        continue
      ended.add(peer)
      record = FailureRecord.from_json(peer, text)
      if record is not None:
        with _lock:
          _seen_failures[peer] = record
        if not _ended:
          _peer_failed(me, peer)
      ended_with = json.loads(text)
      if not ended_with.get("failed"):
        # Kept before they are compared (under the lock `StepCounter.begin`
        # counts in): a call started after this look is checked at its start.
        with _lock:
          _exit_records[peer] = dict(ended_with.get("calls", {}))
      problems = mismatches(me, peer, ended_with)
      if problems and not _ended:
        _fail("; ".join(problems))
    progress = _progress()
    if progress != published:
      try:
        coordination.publish(_progress_key(me), json.dumps(progress))
        published = progress
      except Exception:  # noqa: BLE001
        continue
    running, limit = _running[0], _stall_seconds()
    if running is None or not limit:
      reported_at = 0.0
      continue
    seconds = time.monotonic() - running[1]
    if seconds >= limit and seconds - reported_at >= limit:
      reported_at = seconds
      _report_stall(me, count, seconds)


def _at_exit(me: int) -> None:
  """Publishes this process's call counts, then waits (before JAX's shutdown
  barrier, which would wait anyway) until every peer of its programs has
  ended or one has reported a mismatch."""
  global _ended
  _ended = True
  try:
    coordination.publish(_key(me), _own_record())
    with _lock:
      waiting = {p for c in _counters.values() for p in c.processes} - {me}
    deadline = time.monotonic() + coordination.timeout_seconds()
    while waiting and time.monotonic() < deadline:
      message = coordination.try_fetch(_mismatch_key())
      if message is not None:
        sys.stderr.write(f"[mpmd] process {me}: another process reports: {message}\n")
        sys.stderr.flush()
        os._exit(1)
      waiting = {p for p in waiting if coordination.try_fetch(_key(p)) is None}
      if waiting:
        time.sleep(min(_interval(), 0.2))
  except Exception:  # noqa: BLE001 -- the service is gone: JAX's shutdown reports it
    pass
