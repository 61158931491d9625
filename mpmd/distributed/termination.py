"""SIGTERM ends the whole run: this process, after its last-checkpoint hooks,
and every other process within about a second.

JAX's distributed client takes SIGTERM over at `jax.distributed.initialize`
(for its preemption sync points) and does nothing else with it: a worker sent
SIGTERM by a cluster manager went on with its steps. `mpmd.distributed.initialize`
installs this module's handler instead (`handle_sigterm=False` keeps JAX's).
On SIGTERM:

1. the process says so on stderr and publishes that it failed ("got
   SIGTERM") in JAX's coordination service: every other process's watchdog
   (`mpmd.distributed.steps`) ends that process, naming this one, within about
   `MPMD_STEP_CHECK_INTERVAL` seconds (default 1);
2. the hooks registered with `on_termination` run, in the main thread, as
   soon as it runs Python code: at once between steps, or when the current
   call returns;
3. the process exits with code 143 (128 + SIGTERM).

A main thread that does not get back to Python within `MPMD_TERMINATION_GRACE`
seconds (default 5: e.g. blocked in a collective with a process that is gone)
does not hold the exit up: a watcher thread, woken through the signal's
wake-up fd, ends the process without the hooks. Installing another wake-up fd
(`signal.set_wakeup_fd`, e.g. an asyncio loop in the main thread) disables
that watcher; the hooks still run when the main thread gets to them.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable

from mpmd import knobs
from mpmd.distributed import steps

__all__ = ["ENV_GRACE", "install", "on_termination", "termination_requested"]

#: Seconds the main thread gets to run the hooks after SIGTERM.
ENV_GRACE = knobs.MPMD_TERMINATION_GRACE

_hooks: list[Callable[[], None]] = []
_lock = threading.Lock()
_requested = threading.Event()
_installed = [False]


def on_termination(hook: Callable[[], None]) -> Callable[[], None]:
  """Registers `hook()` to run when this process gets SIGTERM, before it
  exits (e.g. to save a last checkpoint of what this process holds: the other
  processes are ending too, so the hook must not call a multi-process
  program or a collective). Hooks run in the main thread in the order they
  were registered; an exception in one is printed and the next runs. Returns
  `hook`, so it can be used as a decorator."""
  with _lock:
    _hooks.append(hook)
  return hook


def termination_requested() -> bool:
  """Whether this process got SIGTERM (for loops that check between steps)."""
  return _requested.is_set()


def grace_seconds() -> float:
  """`MPMD_TERMINATION_GRACE`: how long the hooks may take (default 5 s)."""
  return _grace()


def _grace() -> float:
  return knobs.number(ENV_GRACE)  # (at least 0; malformed: 5)


def _announce(signum: int) -> bool:
  """Says this process got `signum` and tells the others; True the first time."""
  with _lock:
    if _requested.is_set():
      return False
    _requested.set()
  import jax  # noqa: PLC0415 -- loaded already (initialize ran)
  name = signal.Signals(signum).name
  sys.stderr.write(f"[mpmd] process {jax.process_index()} of {jax.process_count()} got {name}: "
                   "ending the run (this process after its on_termination hooks, the others "
                   "at once)\n")
  sys.stderr.flush()
  steps.publish_failure(f"got {name}", timeout=3.0)
  return True


def _exit(signum: int) -> None:
  sys.stdout.flush()
  sys.stderr.flush()
  steps.publish_exit()
  os._exit(128 + signum)


def _handler(signum: int, frame) -> None:  # noqa: ARG001 -- the signal module's signature
  """Runs in the main thread: the hooks, then the exit."""
  _announce(signum)
  with _lock:
    hooks = list(_hooks)
  for hook in hooks:
    try:
      hook()
    except BaseException:  # noqa: BLE001 -- the next hook still runs
      sys.stderr.write(f"[mpmd] on_termination hook {getattr(hook, '__name__', hook)!r} "
                       "raised:\n")
      traceback.print_exc()
  _exit(signum)


def _watch(read_fd: int) -> None:
  """Wakes up on SIGTERM even while the main thread is blocked in C++."""
  while True:
    try:
      data = os.read(read_fd, 64)
    except InterruptedError:
      continue
    except OSError:
      return
    if not data:
      return
    if signal.SIGTERM in data:
      _announce(signal.SIGTERM)
      time.sleep(_grace())
      sys.stderr.write(f"[mpmd] the main thread did not end this process within "
                       f"{ENV_GRACE}={_grace():g} s of SIGTERM (blocked in a step?): ending it "
                       "without its on_termination hooks\n")
      _exit(signal.SIGTERM)


def install() -> bool:
  """Installs the SIGTERM handler (and its watcher thread); `initialize`
  calls it. Only from the main thread; returns whether it was installed."""
  if _installed[0]:
    return True
  if threading.current_thread() is not threading.main_thread():
    return False
  signal.signal(signal.SIGTERM, _handler)
  read_fd, write_fd = os.pipe()
  os.set_blocking(write_fd, False)
  try:
    previous = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
  except ValueError:
    os.close(read_fd)
    os.close(write_fd)
  else:
    if previous != -1:  # someone else's wake-up fd: keep it, no watcher
      signal.set_wakeup_fd(previous)
      os.close(read_fd)
      os.close(write_fd)
    else:
      threading.Thread(target=_watch, args=(read_fd,), name="mpmd.sigterm-watcher",
                       daemon=True).start()
  _installed[0] = True
  return True
