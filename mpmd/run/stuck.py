"""A fragment stuck behind one failed device, named before XLA aborts.

A host callback that raises (`jax.pure_callback`, `io_callback`) inside a
fragment on a mesh of several devices fails that fragment on the one device
that ran it; the mesh's other devices wait for it in one of XLA's
collectives, whose rendezvous nothing can release, and XLA ends the process
about 60 s later (`jax.jit`'s program of the same computation does the
same). The runtime cannot undo that, so it says so at once: `watch` is given
one result of each call of a fragment with host callbacks on a multi-device
mesh; a daemon thread looks at its per-device pieces every 0.1 s, and once
one has failed while the others have stayed unfinished for 2 s, it writes
what happened to stderr, leaves the same words with the extension's
SIGABRT handler (`_mpmd.set_abort_cause`, said again when XLA aborts), and
a call waiting for the stuck fragment (`wait`), or the process's next call
(`raise_if_stuck`), raises `FragmentRuntimeError` with them instead of
waiting or queueing behind the stuck devices. Should the other devices
finish after all (slow, not stuck), the report is taken back.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable

import jax

from mpmd import _mpmd
from mpmd.errors import FragmentRuntimeError

__all__ = ["forget_done", "is_stuck", "raise_if_stuck", "wait", "watch", "watched_execute",
           "watching"]

#: Seconds between two looks at the watched results.
_TICK = 0.1
#: Seconds the other devices may stay unfinished after one failed before the
#: fragment counts as stuck (they finish at once when no collective waits;
#: if they finish later, the report is taken back).
_GRACE = 2.0
#: Seconds a result must have been unfinished before its pieces are looked at.
_PIECES_AFTER = 0.5

_cond = threading.Condition()
_watched: list[_Entry] = []
_thread: list[threading.Thread | None] = [None]
#: The messages of the fragments found stuck now.
_found: list[str] = []
#: Non-empty while some result is watched (`Program`'s waits then poll).
watching = _watched


class _Entry:
  """A watched result: how its call is named, the result, when one of its
  pieces was seen failed, and the message once it was reported stuck."""

  __slots__ = ("describe", "result", "since", "failed_at", "reported")

  def __init__(self, describe: Callable[[], str], result: jax.Array):
    self.describe, self.result = describe, result
    self.since = time.monotonic()
    self.failed_at: float | None = None
    self.reported: str | None = None


class _Stuck(Exception):
  """A watched fragment is stuck (the message names it): `wait` raises it,
  and `Program` raises it as `FragmentRuntimeError` (see `is_stuck`)."""


def is_stuck(error: BaseException) -> bool:
  """Whether `error` is `wait`'s signal that a fragment is stuck."""
  return isinstance(error, _Stuck)


def watch(describe: Callable[[], str], result: jax.Array) -> None:
  """Watches `result`, a result of the call `describe()` names, until all of
  its per-device pieces are done."""
  with _cond:
    _watched.append(_Entry(describe, result))
    if _thread[0] is None:
      _thread[0] = threading.Thread(target=_loop, name="mpmd-stuck-watch", daemon=True)
      _thread[0].start()
    _cond.notify()


def watched_execute(execute: Callable[[list], jax.Array | None],
                    describe: Callable[[], str]) -> Callable[[list], jax.Array | None]:
  """`execute` (a call's dispatch), watching the result it returns when that
  lies on several devices."""
  def run(env: list) -> jax.Array | None:
    done = execute(env)
    if done is not None and len(done.sharding.device_set) > 1:
      watch(describe, done)
    return done
  return run


def forget_done() -> None:
  """Stops watching the results that are done (a call that waited for its
  work calls it, so that nothing of the call outlives it)."""
  with _cond:
    _watched[:] = [entry for entry in _watched if entry.reported or not _done(entry.result)]


def raise_if_stuck() -> None:
  """Raises `FragmentRuntimeError` while a watched fragment is stuck (the
  stuck devices would hold the call's work too)."""
  if _found:
    raise FragmentRuntimeError(_found[0])


def wait(x: jax.Array) -> None:
  """Waits until `x` is done, or raises `_Stuck` once a watched fragment is
  found stuck (`x` would never be done)."""
  pause = 5e-5
  while not x.is_ready():
    if _found:
      raise _Stuck(_found[0])
    time.sleep(pause)
    pause = min(2 * pause, 0.01)


def _done(x: jax.Array) -> bool:
  try:
    return x.is_ready()
  except Exception:  # noqa: BLE001 -- deleted (donated) since
    return True


def _loop() -> None:
  while True:
    with _cond:
      while not _watched:
        _cond.wait()
    time.sleep(_TICK)
    with _cond:
      entries = list(_watched)
    for entry in entries:
      state = _look(entry)
      if state == "done":
        with _cond:
          if any(e is entry for e in _watched):
            _watched.remove(entry)
        if entry.reported:
          _finished_after_all(entry)
      elif state is not None and not entry.reported:
        entry.reported = state
        _report(state)
    entries = entry = None  # (holds no result while it sleeps)


def _look(entry: _Entry) -> str | None:
  """"done" when every piece of the entry's result is done (or it was
  deleted), the message when it is stuck, else None."""
  try:
    if entry.result.is_ready():
      return "done"
    if time.monotonic() - entry.since < _PIECES_AFTER:
      return None
    # (Only now: the per-device arrays stay with the result once made.)
    pieces = [(shard.device, shard.data) for shard in entry.result.addressable_shards]
  except Exception:  # noqa: BLE001 -- deleted (donated) since
    return "done"
  failed = waiting = None
  unfinished = 0
  for device, piece in pieces:
    if not piece.is_ready():
      unfinished += 1
      waiting = device
      continue
    if failed is None:
      try:
        piece.block_until_ready()
      except Exception as e:  # noqa: BLE001
        failed = (device, e)
  if not unfinished:
    return "done"
  if failed is None:
    return None
  if entry.failed_at is None:
    entry.failed_at = time.monotonic()
    return None
  if time.monotonic() - entry.failed_at < _GRACE:
    return None
  device, error = failed
  lines = [line.strip() for line in str(error).splitlines() if line.strip()] or [""]
  said = lines[0] if len(lines) == 1 else f"{lines[0]} ... {lines[-1]}"
  return (f"{entry.describe()} failed on device {device.id} ({type(error).__name__}: {said}); "
          f"{unfinished} other device(s) of its mesh (e.g. {waiting.id}) still wait for it in "
          "one of XLA's collectives, which nothing can release: XLA ends this process about "
          "60 s after the failure (jax.jit's program does the same). A host callback that "
          "raises on a mesh of several devices does this (jax.pure_callback, io_callback): "
          "keep such callbacks on meshes of one device, or use jax.debug.callback, whose "
          "failure is contained")


def _report(message: str) -> None:
  _found.append(message)
  _mpmd.set_abort_cause(f"[mpmd] XLA aborted this process: {message}\n")
  sys.stderr.write(f"[mpmd] {message}\n")
  sys.stderr.flush()


def _finished_after_all(entry: _Entry) -> None:
  """A fragment reported stuck finished after all (its other devices were
  only slow): the calls go on."""
  _found.remove(entry.reported)
  _mpmd.set_abort_cause(f"[mpmd] XLA aborted this process: {_found[0]}\n" if _found else "")
  sys.stderr.write(f"[mpmd] {entry.describe()}: every device has finished after all (it was slow, "
                   "not stuck); calls go on\n")
  sys.stderr.flush()
