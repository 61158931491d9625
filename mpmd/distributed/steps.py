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
exit. The exiting process itself waits, before JAX's shutdown barrier, until
every peer of its programs has published its end, and fails with the same
message when one reports the mismatch.
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

from mpmd.distributed import coordination

__all__ = ["ENV_CHECK_INTERVAL", "StepCounter", "counter", "install", "mismatches",
           "publish_failure"]

#: Seconds between two looks at what the other processes published.
ENV_CHECK_INTERVAL = "MPMD_STEP_CHECK_INTERVAL"

_PREFIX = "mpmd/steps"
_lock = threading.Lock()
_counters: dict[str, StepCounter] = {}
_started = False
_ended = False
#: This process's index, once `install` ran.
_process = [0]


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
    """Records one more call (before anything of it is dispatched)."""
    self.calls += 1
    self.site = _caller_site()


def counter(fingerprint: str, name: str, processes: Sequence[int]) -> StepCounter:
  """The counter of a multi-process program; starts the checks on first use."""
  with _lock:
    found = _counters.get(fingerprint)
    if found is None:
      found = _counters[fingerprint] = StepCounter(fingerprint, name, processes)
    install()
  return found


def _interval() -> float:
  try:
    return max(0.05, float(os.environ.get(ENV_CHECK_INTERVAL, "1")))
  except ValueError:
    return 1.0


def _key(process: int) -> str:
  return f"{_PREFIX}/end/{process}"


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


def publish_failure() -> None:
  """Says this process failed (the exit-on-error hook calls it), so that the
  others do not wait for its end record. Never raises."""
  if not _started:
    return

  def publish() -> None:
    try:
      coordination.publish(_key(_process[0]), json.dumps({"failed": True}))
    except Exception:  # noqa: BLE001 -- on the way out; nothing to add
      pass

  # Bounded: with the coordinator gone, the call could block for long.
  thread = threading.Thread(target=publish, name="mpmd.steps-failure", daemon=True)
  thread.start()
  thread.join(1.0)


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
  publish_failure()
  sys.stderr.write(f"[mpmd] {message}\n")
  sys.stderr.flush()
  sys.stdout.flush()
  os._exit(1)


def _watch(me: int, count: int) -> None:
  ended: set[int] = {me}
  while not _ended:
    time.sleep(_interval())
    for peer in range(count):
      if peer in ended:
        continue
      try:
        text = coordination.try_fetch(_key(peer))
      except Exception:  # noqa: BLE001 -- the service is gone: JAX reports that
        return
      if text is None:
        continue
      ended.add(peer)
      problems = mismatches(me, peer, json.loads(text))
      if problems and not _ended:
        _fail("; ".join(problems))


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
