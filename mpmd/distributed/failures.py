"""Failure records: which process failed first and why, and which peers are gone.

A process that fails (an uncaught exception, a signal it handles, a step-count
mismatch) publishes a `FailureRecord` before it waits for anything: in JAX's
coordination service, for the other processes, and, under `python -m
mpmd.launch`, in the launcher's run directory (`MPMD_RUN_DIR`), for the
launcher's verdict. The record says what failed (the error: a
`FragmentRuntimeError` names the fragment, stage and mesh) and whether this
failure follows another process's (`cause`): a process whose collective broke
because its peer is gone names that peer, never itself. Of the failures that
follow nobody's, the first to claim the coordination service's key
`mpmd/steps/first` is the one that failed first (`first`).

A process killed without a word (SIGKILL, a crash) writes no record. Its
peers learn of it without waiting for one:

* the launcher writes `exit.<i>.json` in the run directory when process i
  ends with a non-zero code or a signal (which only it, the parent, knows);
* every process publishes its host and pid at start-up; a peer on the same
  host whose pid is gone (or a zombie) has died, and one in state T is
  stopped (SIGSTOP, a debugger).

JAX itself may end a process first: its distributed client aborts (SIGABRT,
in JAX's words) when the coordination service, which process 0 hosts, is
gone, or when a peer missed its heartbeats. `arm_abort_note` leaves a line
with the extension's SIGABRT handler that names the peer on this host that
died or is stopped, read from its pid when the signal comes.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import socket
import time

from mpmd import _mpmd, knobs


__all__ = ["FailureRecord", "arm_abort_note", "claim_first", "identity", "peer_state", "run_dir",
           "write_local"]

_FIRST_KEY = "mpmd/steps/first"
#: The launcher's run directory (`mpmd.launch.ENV_RUN_DIR`; not imported from
#: there, which `python -m mpmd.launch` runs as __main__).
_ENV_RUN_DIR = knobs.MPMD_RUN_DIR
#: Seconds to wait for the launcher's notice of a peer whose pid is gone (it
#: polls its processes every 0.05 s).
_NOTICE_WAIT = 0.3


@dataclasses.dataclass
class FailureRecord:
  """One process's failure.

  Attributes:
    process: the failed process.
    reason: what failed (the error, or the signal it got).
    time: wall-clock time it failed.
    cause: the process whose failure this one follows (e.g. a collective
      whose other end died), or None when it follows nobody's known failure.
    first: whether it claimed the run's first failure.
  """

  process: int
  reason: str
  time: float
  cause: int | None = None
  first: bool = False

  def to_json(self) -> str:
    return json.dumps({"failed": True, **dataclasses.asdict(self)})

  @staticmethod
  def from_json(process: int, text: str) -> FailureRecord | None:
    """The record in `text` (process `process`'s), or None if it says no failure."""
    data = json.loads(text)
    if not data.get("failed"):
      return None
    cause = data.get("cause")
    return FailureRecord(process=process, reason=data.get("reason") or "see its output",
                         time=float(data.get("time") or 0.0),
                         cause=cause if isinstance(cause, int) else None,
                         first=bool(data.get("first")))


def run_dir() -> str | None:
  """The launcher's run directory (`MPMD_RUN_DIR`), if there is one."""
  path = knobs.path(_ENV_RUN_DIR)
  return path if path and os.path.isdir(path) else None


def write_local(record: FailureRecord) -> None:
  """Writes `record` where the launcher reads it (nothing without a run
  directory). Never raises."""
  directory = run_dir()
  if directory is None:
    return
  from mpmd.launch import failure_path  # noqa: PLC0415 -- (see _ENV_RUN_DIR)
  path = failure_path(directory, record.process)
  try:
    with open(path + ".tmp", "w") as f:
      f.write(record.to_json())
    os.replace(path + ".tmp", path)
  except OSError:
    pass


def claim_first(client, me: int) -> int | None:
  """Claims the run's first failure for process `me`; returns the process
  that holds it (`me` when this claim won), or None when the coordination
  service does not answer."""
  try:
    client.key_value_set(_FIRST_KEY, str(me), allow_overwrite=False)
    return me
  except Exception:  # noqa: BLE001 -- ALREADY_EXISTS, or the service is gone
    pass
  try:
    return int(client.key_value_try_get(_FIRST_KEY))
  except Exception:  # noqa: BLE001
    return None


@functools.cache
def _namespace() -> str:
  """What tells this host's pid namespace from others: the host name, the
  boot and the namespace's inode (read once per process)."""
  try:
    with open("/proc/sys/kernel/random/boot_id") as f:
      boot = f.read().strip()
    ns = os.stat("/proc/self/ns/pid").st_ino
  except OSError:
    return ""  # (no /proc: pids are not looked at)
  return f"{socket.gethostname()}/{boot}/{ns}"


def identity() -> str:
  """This process's identity for its peers' liveness checks (JSON)."""
  return json.dumps({"namespace": _namespace(), "pid": os.getpid()})


def _local_pid(peer_identity: str | None) -> int | None:
  """The pid of the peer `peer_identity` names when it runs on this host
  (in this pid namespace), else None."""
  if not peer_identity:
    return None
  info = json.loads(peer_identity)
  mine = _namespace()
  if not mine or info.get("namespace") != mine:
    return None
  return int(info["pid"])


def peer_state(peer_identity: str | None) -> str | None:
  """What a same-host peer's pid says: "gone" (no such process, or a
  zombie), "stopped" (state T or t), or None (running, or not on this host).
  (The extension reads /proc/<pid>/stat, as its SIGABRT handler does.)"""
  pid = _local_pid(peer_identity)
  return None if pid is None else _mpmd.process_state(pid)


def arm_abort_note(me: int, identities: dict[int, str]) -> None:
  """Leaves with the SIGABRT handler what process `me` says if JAX aborts
  it: for each peer on this host (`identities`: process -> `identity()`),
  a line for its pid being gone and one for it being stopped; when process 0
  runs on another host, a line saying what JAX's abort may mean."""
  peers = []
  elsewhere = False
  for peer, text in sorted(identities.items()):
    if peer == me:
      continue
    pid = _local_pid(text)
    if pid is None:
      elsewhere |= peer == 0
      continue
    hosted = (", and with it JAX's coordination service, which it hosted" if peer == 0 else "")
    peers.append((pid,
                  f"[mpmd] process {me}: process {peer} died (its pid {pid} is gone){hosted}; JAX "
                  f"ends this process too (its message above); the launcher's summary or process "
                  f"{peer}'s output says how it ended\n",
                  f"[mpmd] process {me}: process {peer} is stopped (pid {pid}, state T: SIGSTOP, "
                  "or a debugger) and missed JAX's heartbeats: JAX's coordination service ends "
                  "the run, this process with it (its message above)\n"))
  otherwise = (f"[mpmd] process {me}: JAX or XLA aborted this process (its message above); if "
               "it says the coordination service cannot be reached, process 0, which hosts it "
               "on another host, died or cannot be reached\n" if elsewhere and me != 0 else "")
  _mpmd.set_abort_peers(peers, otherwise)


def launcher_says(process: int) -> str | None:
  """How the launcher saw process `process` end ("was killed by signal
  SIGKILL", "exited with code 1"), or None (still running, ended with 0, or
  no launcher)."""
  directory = run_dir()
  if directory is None:
    return None
  from mpmd.launch import exit_notice  # noqa: PLC0415 -- (see _ENV_RUN_DIR)
  return exit_notice(directory, process)


def describe_gone(process: int, pid_says: str | None) -> str | None:
  """How a peer that wrote no failure record ended ("was killed by signal
  SIGKILL (says the launcher)"), or None when nothing says it ended."""
  said = launcher_says(process)
  if said is None and pid_says == "gone" and run_dir() is not None:
    # The launcher, its parent, knows the signal: it says so within a poll.
    deadline = time.monotonic() + _NOTICE_WAIT
    while said is None and time.monotonic() < deadline:
      time.sleep(0.01)
      said = launcher_says(process)
  if said is not None:
    return f"{said} (says the launcher)"
  if pid_says == "gone":
    return "died without a word (its pid is gone: killed by a signal, or crashed)"
  return None


def stopped_for(since: dict[int, float], process: int, stopped: bool) -> float:
  """Seconds process `process` has been seen stopped (0 when it runs);
  `since` keeps when each was first seen so."""
  if not stopped:
    since.pop(process, None)
    return 0.0
  return time.monotonic() - since.setdefault(process, time.monotonic())
