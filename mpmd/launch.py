"""Run one program as N processes on this machine: a local multi-process JAX run.

    python -m mpmd.launch --processes 2 --devices-per-process 4 train.py --steps 3
    python -m mpmd.launch --processes 2 -m mypkg.train --steps 3

starts N copies of `python train.py --steps 3` (everything after the script, or
after `-m module`, goes to the program untouched). Each process gets the
variables `mpmd.distributed.initialize()` reads (`MPMD_COORDINATOR_ADDRESS`,
`MPMD_NUM_PROCESSES`, `MPMD_PROCESS_ID`, `MPMD_HEARTBEAT_TIMEOUT`, plus
`MPMD_LAUNCHED=1`) and, with `--platform cpu` (the default), K virtual CPU
devices (`XLA_FLAGS=--xla_force_host_platform_device_count=K`) and gloo
collectives; with `--platform gpu`, the i-th block of K GPUs
(`CUDA_VISIBLE_DEVICES`). The coordinator listens on a free port of
127.0.0.1.

The output of process i (stdout and stderr merged) is streamed line by line to
the launcher's stdout, each line prefixed with `[pi] `.

The launcher never hangs: when a process fails (non-zero exit code or killed
by a signal), the others get `--grace` seconds to exit on their own and are
then stopped (SIGTERM to their process group, SIGKILL 5 s later); after
`--timeout` seconds in all, every process still running is stopped (exit code
124); SIGINT / SIGTERM to the launcher stop every process too (exit code 130 /
143). On failure a summary on stderr says what happened to each process. Each
process runs in its own session, so stopping it stops what it started too, and
whatever a process leaves behind in its process group is killed when it
exits.

From Python: `launch(["train.py", "--steps", "3"], processes=2)` returns a
`LaunchResult`. The launcher needs nothing of `mpmd.distributed` (which the
launched processes use to join the run), so it lives here, at its entry
point.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import IO, TextIO

from mpmd import knobs
from mpmd.errors import LaunchError

__all__ = ["ENV_CPU_AFFINITY", "ENV_RUN_DIR", "PLATFORMS", "exit_notice", "failure_path", "LaunchError", "LaunchResult", "child_environment",
           "cpu_block", "free_port", "launch", "main"]

#: Values of `--platform`.
PLATFORMS = ("cpu", "gpu")
#: The CPUs a worker is pinned to (comma-separated), read by the start-up stub.
ENV_CPU_AFFINITY = knobs.MPMD_CPU_AFFINITY
#: A directory the launcher and its workers share for the run: each failed
#: worker writes its failure record there (`failure_path`), and the launcher
#: writes how each worker that failed ended (`exit_notice`), which a worker
#: killed by a signal cannot say itself.
ENV_RUN_DIR = knobs.MPMD_RUN_DIR

_LOG_PREFIX = "mpmd.launch: "
_POLL_SECONDS = 0.05
#: Seconds a process must have been stopped (SIGSTOP) before the launcher says so.
_STOPPED_REPORT = 3.0
_READER_JOIN_SECONDS = 5.0
_LINE_LIMIT = 1 << 16
_DEVICE_COUNT_FLAG = "--xla_force_host_platform_device_count"
_DEVICE_COUNT_RE = re.compile(r"^--?xla_force_host_platform_device_count(=.*)?$")


@dataclasses.dataclass(frozen=True)
class LaunchResult:
  """How a launch ended.

  Attributes:
    returncode: the launcher's exit code: 0 when every process exited with 0;
      the failed process's exit code when positive, else 1; 124 on timeout.
    exit_codes: per process, its exit code (negative: killed by that signal, as
      in `subprocess`), or None for a process that could not be stopped.
    failed: index of the first process that failed, or None.
    stopped: the processes the launcher had to stop, in the order it stopped them.
    timed_out: whether the overall timeout ran out (with no process failed).
    summary: one line saying what happened to each process.
  """
  returncode: int
  exit_codes: tuple[int | None, ...]
  failed: int | None
  stopped: tuple[int, ...]
  timed_out: bool
  summary: str


def free_port(host: str = "127.0.0.1") -> int:
  """A TCP port of `host` that is free now (bound to port 0 and released)."""
  with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
    sock.bind((host, 0))
    return sock.getsockname()[1]


def failure_path(run_dir: str, process: int) -> str:
  """Where process `process` writes its failure record (JSON: `failed`,
  `reason`, `time`, `cause`, `first`; see `mpmd.distributed.failures`)."""
  return os.path.join(run_dir, f"failure.{process}.json")


def _exit_path(run_dir: str, process: int) -> str:
  return os.path.join(run_dir, f"exit.{process}.json")


def read_failure(run_dir: str, process: int) -> dict | None:
  """Process `process`'s failure record, or None when it wrote none."""
  try:
    with open(failure_path(run_dir, process)) as f:
      record = json.load(f)
  except (OSError, ValueError):
    return None
  return record if isinstance(record, dict) and record.get("failed") else None


def write_exit_notice(run_dir: str, process: int, code: int) -> None:
  """Tells the other workers how process `process` ended (code != 0)."""
  path = _exit_path(run_dir, process)
  with contextlib.suppress(OSError):
    with open(path + ".tmp", "w") as f:
      json.dump({"code": code, "phrase": _exit_phrase(code)}, f)
    os.replace(path + ".tmp", path)


def exit_notice(run_dir: str, process: int) -> str | None:
  """How the launcher saw process `process` end ("was killed by signal
  SIGKILL", "exited with code 1"), or None when it has not (yet) seen it
  fail."""
  try:
    with open(_exit_path(run_dir, process)) as f:
      return str(json.load(f)["phrase"])
  except (OSError, ValueError, KeyError, TypeError):
    return None


def child_environment(process_id: int, *, processes: int, devices_per_process: int,
                      coordinator_address: str, heartbeat_timeout: float, platform: str,
                      base_env: Mapping[str, str],
                      cpus_per_process: int | None = None) -> dict[str, str]:
  """The environment of process `process_id`: `base_env` plus the launcher's variables.

  Sets `MPMD_COORDINATOR_ADDRESS`, `MPMD_NUM_PROCESSES`, `MPMD_PROCESS_ID`,
  `MPMD_HEARTBEAT_TIMEOUT` (whole seconds, rounded up), `MPMD_LAUNCHED=1` and
  `PYTHONUNBUFFERED=1`. For platform "cpu": `JAX_PLATFORMS=cpu`,
  `JAX_CPU_COLLECTIVES_IMPLEMENTATION=gloo`, and `XLA_FLAGS` with any inherited
  `--xla_force_host_platform_device_count` replaced by `devices_per_process`
  (other inherited flags kept). For platform "gpu": `CUDA_VISIBLE_DEVICES` =
  the `process_id`-th block of `devices_per_process` GPUs: ordinals
  i*K .. i*K+K-1, or that block of the entries of an inherited
  `CUDA_VISIBLE_DEVICES` (an inherited `JAX_PLATFORMS` that names no GPU
  platform is an error). With `cpus_per_process` = C: `MPMD_CPU_AFFINITY`,
  the `process_id`-th block of C of the CPUs this process may run on (see
  `cpu_block`); the worker is pinned to them before Python starts.
  """
  _check_counts(processes, devices_per_process)
  if not isinstance(process_id, int) or not 0 <= process_id < processes:
    raise LaunchError(f"process_id={process_id!r} is out of range: pass 0 .. {processes - 1} "
                      f"(processes={processes})")
  _check_platform(platform)
  env = dict(base_env)
  env.update({
      knobs.MPMD_COORDINATOR_ADDRESS: coordinator_address,
      knobs.MPMD_NUM_PROCESSES: str(processes),
      knobs.MPMD_PROCESS_ID: str(process_id),
      knobs.MPMD_HEARTBEAT_TIMEOUT: _whole_seconds("heartbeat_timeout", heartbeat_timeout),
      knobs.MPMD_LAUNCHED: "1",
      "PYTHONUNBUFFERED": "1",
  })
  if platform == "cpu":
    env["JAX_PLATFORMS"] = "cpu"
    env["JAX_CPU_COLLECTIVES_IMPLEMENTATION"] = "gloo"
    env["XLA_FLAGS"] = _with_device_count(base_env.get("XLA_FLAGS", ""), devices_per_process)
  else:
    # An inherited JAX_PLATFORMS without a GPU platform (e.g. "cpu") would make the
    # workers run on the CPU without a word.
    platforms = {p.strip() for p in base_env.get("JAX_PLATFORMS", "").split(",") if p.strip()}
    if platforms and not platforms & {"cuda", "gpu", "rocm"}:
      raise LaunchError(f"platform 'gpu', but JAX_PLATFORMS={base_env['JAX_PLATFORMS']!r} "
                        "names no GPU platform, so the processes would run without GPUs: "
                        "unset JAX_PLATFORMS or set it to cuda")
    env["CUDA_VISIBLE_DEVICES"] = _gpu_block(process_id, processes, devices_per_process,
                                             base_env.get("CUDA_VISIBLE_DEVICES", ""))
  env.pop(ENV_CPU_AFFINITY, None)
  if cpus_per_process is not None:
    cpus = cpu_block(process_id, processes, cpus_per_process)
    env[ENV_CPU_AFFINITY] = ",".join(str(c) for c in cpus)
  return env


def cpu_block(process_id: int, processes: int, cpus_per_process: int) -> tuple[int, ...]:
  """The CPUs process `process_id` is pinned to: the `process_id`-th block of
  `cpus_per_process` of the CPUs this process may run on (in order), so that
  no two processes share a core. Raises `LaunchError` when there are fewer
  than `processes * cpus_per_process` of them."""
  _check_counts(processes, cpus_per_process, ("processes", "cpus_per_process"))
  if not hasattr(os, "sched_getaffinity"):
    raise LaunchError("cpus_per_process needs CPU affinity (os.sched_setaffinity), which this "
                      f"platform ({sys.platform}) lacks: leave it out")
  allowed = sorted(os.sched_getaffinity(0))
  needed = processes * cpus_per_process
  if len(allowed) < needed:
    raise LaunchError(f"{processes} processes x {cpus_per_process} CPUs need {needed} CPUs, but "
                      f"this process may run on {len(allowed)} ({_cpu_list(allowed)}): lower "
                      "--processes or --cpus-per-process")
  return tuple(allowed[process_id * cpus_per_process:(process_id + 1) * cpus_per_process])


def _cpu_list(cpus: Sequence[int]) -> str:
  return ",".join(str(c) for c in cpus)


def launch(command: Sequence[str], *, processes: int = 2, devices_per_process: int = 4,
           timeout: float = 600, grace: float = 30, heartbeat_timeout: float = 30,
           platform: str = "cpu", env: Mapping[str, str] | None = None,
           stream: TextIO | None = None, log: TextIO | None = None,
           kill_after: float = 5, cpus_per_process: int | None = None) -> LaunchResult:
  """Runs `command` as `processes` processes and waits for all of them, within bounds.

  Args:
    command: what follows `python`: a script and its arguments
      (`["train.py", "--steps", "3"]`) or `["-m", "pkg.module", ...args]`.
    processes: how many processes (>= 1).
    devices_per_process: devices per process: virtual CPU devices (cpu) or
      GPUs (gpu), >= 1.
    timeout: overall bound in seconds; processes still running then are stopped
      and the result has `timed_out` and returncode 124.
    grace: after a process fails, seconds the others get to exit on their own
      before they are stopped.
    heartbeat_timeout: passed to the processes as `MPMD_HEARTBEAT_TIMEOUT`.
    platform: "cpu" or "gpu" (see `child_environment`).
    env: the base environment of the processes (default: `os.environ`); the
      launcher's variables are added to it.
    stream: where the prefixed output lines go (default: `sys.stdout`).
    log: where the launcher's own messages go (default: `sys.stderr`).
    kill_after: seconds between SIGTERM and SIGKILL when stopping a process.
    cpus_per_process: pin each process to its own block of this many CPUs
      (Linux CPU affinity; `cpu_block`), so that processes do not share
      cores: on a CPU machine, the way to make pipeline stages run in
      parallel. None (default): no pinning.

  Returns:
    A `LaunchResult`.

  Raises:
    LaunchError: an invalid argument (nothing was started).
    KeyboardInterrupt: on SIGINT, after every process was stopped.
    SystemExit: code 143 (129) on SIGTERM (SIGHUP) to this process, after every
      process was stopped; only when called from the main thread.
  """
  argv = _child_argv(command)
  _check_counts(processes, devices_per_process)
  _check_platform(platform)
  _check_seconds("timeout", timeout, positive=True)
  _check_seconds("grace", grace, positive=False)
  _check_seconds("kill_after", kill_after, positive=False)
  base_env = os.environ if env is None else env
  address = f"127.0.0.1:{free_port()}"
  envs = [child_environment(i, processes=processes, devices_per_process=devices_per_process,
                            coordinator_address=address, heartbeat_timeout=heartbeat_timeout,
                            platform=platform, base_env=base_env,
                            cpus_per_process=cpus_per_process) for i in range(processes)]
  run_dir = tempfile.mkdtemp(prefix="mpmd-run-")
  try:
    for env_ in envs:
      env_[ENV_RUN_DIR] = run_dir
    run = _Run(argv, envs, stream=sys.stdout if stream is None else stream,
               log=sys.stderr if log is None else log, timeout=timeout, grace=grace,
               kill_after=kill_after, run_dir=run_dir)
    return run.run()
  finally:
    shutil.rmtree(run_dir, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> int:
  """The command line: `python -m mpmd.launch [options] (script.py | -m module) [args ...]`.

  Returns the exit code (see `LaunchResult.returncode`; 130 on SIGINT).
  """
  argv = sys.argv[1:] if argv is None else list(argv)
  own, command = _split_argv(argv)
  parser = _parser()
  args = parser.parse_args(own)
  if not command:
    parser.error("missing the program to run: give a script path or -m module after the "
                 "launcher's options")
  try:
    result = launch(command, processes=args.processes,
                    devices_per_process=args.devices_per_process, timeout=args.timeout,
                    grace=args.grace, heartbeat_timeout=args.heartbeat_timeout,
                    platform=args.platform, cpus_per_process=args.cpus_per_process)
  except LaunchError as e:
    parser.error(str(e))
  except KeyboardInterrupt:
    return 130
  except SystemExit as e:  # SIGTERM / SIGHUP, after the processes were stopped.
    return e.code if isinstance(e.code, int) else 1
  return result.returncode


# --- validation ---------------------------------------------------------------------------------


def _check_counts(processes: int, devices_per_process: int,
                  names: tuple[str, str] = ("processes", "devices_per_process")) -> None:
  for name, value in zip(names, (processes, devices_per_process)):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
      raise LaunchError(f"{name}={value!r} is invalid: pass an integer >= 1")


def _check_platform(platform: str) -> None:
  if platform not in PLATFORMS:
    raise LaunchError(f"platform={platform!r} is not supported: pass one of {', '.join(PLATFORMS)}")


def _check_seconds(name: str, value: float, *, positive: bool) -> None:
  ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
  if not ok or value < 0 or (positive and value == 0):
    bound = "> 0" if positive else ">= 0"
    raise LaunchError(f"{name}={value!r} is invalid: pass a finite number of seconds {bound}")


def _whole_seconds(name: str, value: float) -> str:
  _check_seconds(name, value, positive=True)
  return str(max(1, math.ceil(value)))


def _child_argv(command: Sequence[str]) -> list[str]:
  """`[python, *command]`, after checking that `command` names something to run."""
  if isinstance(command, str):
    raise LaunchError(f"command={command!r} must be a sequence of strings, e.g. "
                      f"[{command!r}] or ['-m', 'pkg.module']")
  command = list(command)
  if not command:
    raise LaunchError("the command is empty: pass a script path and its arguments, or "
                      "['-m', 'pkg.module', ...]")
  for arg in command:
    if not isinstance(arg, str):
      raise LaunchError(f"command argument {arg!r} is not a string")
  if not sys.executable:
    raise LaunchError("sys.executable is empty: cannot tell which Python to start")
  first = command[0]
  if first.startswith("-m") and len(first) > 2:
    command = ["-m", first[2:], *command[1:]]
    first = "-m"
  if first == "-m":
    if len(command) < 2 or not command[1] or command[1].startswith("-"):
      raise LaunchError("-m needs a module name after it, e.g. -m mypkg.train")
    return [sys.executable, *command]
  if first.startswith("-"):
    raise LaunchError(f"{first!r} is not a script path: put the launcher's options before the "
                      "script, and use -m module to run a module")
  if not os.path.exists(first):
    raise LaunchError(f"script not found: {first} (looked in {os.getcwd()}); pass the path of a "
                      "Python file, or -m module")
  return [sys.executable, *command]


def _with_device_count(xla_flags: str, count: int) -> str:
  kept = [flag for flag in xla_flags.split() if not _DEVICE_COUNT_RE.match(flag)]
  return " ".join([*kept, f"{_DEVICE_COUNT_FLAG}={count}"])


def _gpu_block(process_id: int, processes: int, per_process: int, inherited: str) -> str:
  needed = processes * per_process
  visible = [d.strip() for d in inherited.split(",") if d.strip()]
  if visible:
    if len(visible) < needed:
      raise LaunchError(
          f"CUDA_VISIBLE_DEVICES={inherited!r} lists {len(visible)} GPUs but {processes} processes "
          f"x {per_process} devices need {needed}: lower --processes or --devices-per-process, "
          "or unset CUDA_VISIBLE_DEVICES")
    devices = visible[process_id * per_process:(process_id + 1) * per_process]
  else:
    devices = [str(d) for d in range(process_id * per_process, (process_id + 1) * per_process)]
  return ",".join(devices)


# --- running ------------------------------------------------------------------------------------


# Run first in each worker: on Linux the kernel sends it SIGKILL when the
# launcher dies (even by SIGKILL, which leaves no chance to stop it), so no
# worker is left running under init. The setting survives exec.
_DIE_WITH_PARENT = """
import ctypes, os, sys
launcher = int(sys.argv[1])
if sys.platform.startswith("linux"):
  ctypes.CDLL(None, use_errno=True).prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL
  if os.getppid() != launcher:  # the launcher died before prctl
    os._exit(137)
cpus = os.environ.get(%r)
if cpus:  # before exec, so every thread of the worker inherits it
  os.sched_setaffinity(0, [int(c) for c in cpus.split(",")])
os.execv(sys.argv[2], sys.argv[2:])
""" % ENV_CPU_AFFINITY  # (a stub without mpmd: the name from the table)


def _dies_with_launcher(argv: Sequence[str]) -> list[str]:
  """`argv` run through a Python stub that ties the worker's life to this
  process (see `_DIE_WITH_PARENT`)."""
  return [sys.executable, "-c", _DIE_WITH_PARENT, str(os.getpid()), *argv]


class _Terminated(BaseException):
  """Raised in the main thread by the launcher's SIGTERM / SIGHUP handler."""

  def __init__(self, signum: int):
    super().__init__(signum)
    self.signum = signum


def _signal_name(signum: int) -> str:
  try:
    return signal.Signals(signum).name
  except ValueError:
    return f"signal {signum}"


def _signal_note(code: int | None) -> str:
  """For an exit code 128 + N where N is a signal (what a worker that ends
  itself on a signal returns, e.g. 143 on SIGTERM): " (128 + SIGTERM: it got
  SIGTERM)"; else ""."""
  if code is None or not 128 < code <= 128 + 64:
    return ""
  try:
    name = signal.Signals(code - 128).name
  except ValueError:
    return ""
  return f" (128 + {name}: it got {name})"


def _exit_phrase(code: int | None) -> str:
  if code is None:
    return "could not be stopped"
  if code < 0:
    return f"was killed by signal {_signal_name(-code)}"
  return f"exited with code {code}{_signal_note(code)}"


def _seconds(value: float) -> str:
  return f"{value:.1f}".rstrip("0").rstrip(".")


def _killpg(pgid: int, sig: int) -> None:
  try:
    os.killpg(pgid, sig)
  except (ProcessLookupError, PermissionError):
    pass


def _in_main_thread() -> bool:
  return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def _termination_raises() -> Iterator[None]:
  """While active (main thread only), SIGTERM and SIGHUP raise `_Terminated` once."""
  if not _in_main_thread():
    yield
    return
  fired: list[int] = []

  def handler(signum, frame):
    if not fired:
      fired.append(signum)
      raise _Terminated(signum)

  previous = {}
  for sig in (signal.SIGTERM, signal.SIGHUP):
    current = signal.getsignal(sig)
    if current is not signal.SIG_IGN:  # e.g. under nohup: leave it ignored.
      previous[sig] = current
      signal.signal(sig, handler)
  try:
    yield
  finally:
    for sig, old in previous.items():
      signal.signal(sig, signal.SIG_DFL if old is None else old)


@contextlib.contextmanager
def _signals_ignored() -> Iterator[None]:
  """While active (main thread only), SIGINT / SIGTERM / SIGHUP cannot interrupt a cleanup."""
  if not _in_main_thread():
    yield
    return
  previous = {sig: signal.signal(sig, signal.SIG_IGN)
              for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
  try:
    yield
  finally:
    for sig, old in previous.items():
      signal.signal(sig, signal.SIG_DFL if old is None else old)


class _Run:
  """One launch: starts the processes, streams their output, and supervises them."""

  def __init__(self, argv: list[str], envs: list[dict[str, str]], *, stream: TextIO,
               log: TextIO, timeout: float, grace: float, kill_after: float,
               run_dir: str | None = None):
    self.argv = argv
    self.run_dir = run_dir
    self.envs = envs
    self.stream = stream
    self.log = log
    self.timeout = timeout
    self.grace = grace
    self.kill_after = kill_after
    n = len(envs)
    self.procs: list[subprocess.Popen] = []
    self.readers: list[threading.Thread] = []
    self.write_lock = threading.Lock()
    self.start = time.monotonic()
    self.done = [False] * n
    self.exit_codes: list[int | None] = [None] * n
    self.exit_times: list[float | None] = [None] * n
    self.failed: int | None = None
    self.fail_time: float | None = None
    #: Processes found failed in the same poll as `failed`: which one failed
    #: first is not known.
    self.tied: tuple[int, ...] = ()
    self.stopped: list[int] = []
    self.stop_times: dict[int, float] = {}
    self.sigkilled: set[int] = set()
    self.timed_out = False
    self.cut_by_timeout = False
    self.interrupted: str | None = None
    #: Wall-clock times: each exit, and since when each process has been
    #: stopped (state T: SIGSTOP, a debugger), while it is.
    self.exit_walls: list[float | None] = [None] * n
    self.stopped_since: dict[int, float] = {}
    self.stop_reported: set[int] = set()
    #: The process that failed first by the failure records (`_verdict`).
    self.verdict: tuple[int, str] | None = None

  def run(self) -> LaunchResult:
    try:
      with _termination_raises():
        try:
          self._start_all()
          self._supervise()
        except BaseException as exc:
          self._abort(exc)
          raise
        finally:
          self._join_readers()
    except _Terminated as exc:
      raise SystemExit(128 + exc.signum) from None
    self.verdict = self._verdict()
    result = self._result()
    if result.returncode != 0:
      self._log(result.summary)
    return result

  # Starting and streaming.

  def _start_all(self) -> None:
    self.start = time.monotonic()
    for i, env in enumerate(self.envs):
      proc = subprocess.Popen(_dies_with_launcher(self.argv), env=env, stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              start_new_session=True)
      self.procs.append(proc)
      reader = threading.Thread(target=self._pump, args=(i, proc.stdout),
                                name=f"mpmd.launch-p{i}", daemon=True)
      reader.start()
      self.readers.append(reader)

  def _pump(self, index: int, pipe: IO[bytes]) -> None:
    """Copies the lines of process `index` to the stream, prefixed; drains to the end."""
    prefix = f"[p{index}] "
    try:
      for raw in iter(lambda: pipe.readline(_LINE_LIMIT), b""):
        text = raw.decode("utf-8", errors="replace")
        if not text.endswith("\n"):
          text += "\n"
        with self.write_lock:
          try:
            self.stream.write(prefix + text)
            self.stream.flush()
          except (OSError, ValueError):
            pass  # Keep draining, so that the process never blocks on a full pipe.
    except (OSError, ValueError):
      pass
    finally:
      with contextlib.suppress(OSError):
        pipe.close()

  def _join_readers(self) -> None:
    deadline = time.monotonic() + _READER_JOIN_SECONDS
    for i, reader in enumerate(self.readers):
      reader.join(max(0.0, deadline - time.monotonic()))
      if reader.is_alive():
        self._log(f"the output of process {i} may be incomplete: its pipe is still held open "
                  "by a process that left its process group")

  # Supervising.

  def _running(self) -> list[int]:
    return [i for i in range(len(self.procs)) if not self.done[i]]

  def _exited(self, index: int) -> bool:
    """Whether process `index` has exited; if so, records it and kills what it left behind."""
    if self.done[index]:
      return True
    proc = self.procs[index]
    if hasattr(os, "waitid"):
      try:
        info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
      except ChildProcessError:  # Reaped already: poll() below reports it.
        info = False
      if info is None:
        return False
      if info is not False:
        # Its zombie still holds the process group id: kill the group's leftovers safely.
        _killpg(proc.pid, signal.SIGKILL)
    code = proc.poll()
    if code is None:
      return False
    now = time.monotonic()
    self.done[index] = True
    self.exit_codes[index] = code
    self.exit_times[index] = now
    self.exit_walls[index] = time.time()
    if code != 0 and self.run_dir is not None:
      write_exit_notice(self.run_dir, index, code)
    if (code != 0 and self.failed is None and index not in self.stop_times
        and not self.timed_out and self.interrupted is None):
      self.failed = index
      self.fail_time = now
      what = (f"failed with exit code {code}{_signal_note(code)}" if code > 0
              else _exit_phrase(code))
      others = [i for i in range(len(self.procs)) if not self.done[i]]
      then = (f"; giving {_names(others)} {_seconds(self.grace)} s to exit" if others else "")
      self._log(f"process {index} {what}{self._cause_note(index)}{then}")
    return True

  def _cause_note(self, index: int) -> str:
    """" (after process j failed, says its record)" when process `index`'s
    failure record says its failure follows another's."""
    record = read_failure(self.run_dir, index) if self.run_dir else None
    cause = record.get("cause") if record else None
    if isinstance(cause, int):
      return f" (after process {cause} failed, says its failure record)"
    for i, since in self.stopped_since.items():
      if i != index:
        return (f" (process {i} has been stopped for {_seconds(time.time() - since)} s: "
                f"it most likely ended because process {i} did not answer)")
    return ""

  def _watch_stopped(self) -> None:
    """Notes since when each running process has been stopped (state T), and
    says so once it has been for `_STOPPED_REPORT` seconds."""
    for i in self._running():
      stopped = _process_state(self.procs[i].pid) in ("T", "t")
      if not stopped:
        self.stopped_since.pop(i, None)
        self.stop_reported.discard(i)
        continue
      since = self.stopped_since.setdefault(i, time.time())
      if i not in self.stop_reported and time.time() - since >= _STOPPED_REPORT:
        self.stop_reported.add(i)
        self._log(f"process {i} (pid {self.procs[i].pid}) has been stopped for "
                  f"{_seconds(time.time() - since)} s (state T: SIGSTOP, or a debugger); the "
                  "others wait for it, and JAX's coordination service ends the run once it has "
                  "missed its heartbeats for --heartbeat-timeout seconds (send it SIGCONT to "
                  "go on)")

  def _poll_all(self) -> None:
    first = self.failed
    if self.failed is None:
      self._watch_stopped()
    ended = [i for i in range(len(self.procs)) if not self.done[i] and self._exited(i)]
    if first is None and self.failed is not None:
      tied = tuple(i for i in ended if self.exit_codes[i] != 0)
      recorded = self.run_dir is not None and any(read_failure(self.run_dir, i) for i in tied)
      if len(tied) > 1 and not recorded:  # (else the records say who failed first)
        self.tied = tied
        self._log(f"{_names(tied)} ended within the same {_POLL_SECONDS} s poll: which one "
                  "failed first is not known; look for the first error in their output")

  def _supervise(self) -> None:
    deadline = self.start + self.timeout
    while True:
      self._poll_all()
      running = self._running()
      if not running:
        return
      now = time.monotonic()
      if self.failed is not None:
        grace_end = self.fail_time + self.grace
        if now >= grace_end or now >= deadline:
          self.cut_by_timeout = now < grace_end
          self._stop(running)
          return
        wake = min(grace_end, deadline)
      elif now >= deadline:
        self.timed_out = True
        self._log(f"timed out after {_seconds(self.timeout)} s; still running: "
                  f"{_names(running)}; stopping them")
        self._stop(running)
        return
      else:
        wake = deadline
      time.sleep(max(0.0, min(_POLL_SECONDS, wake - now)))

  def _stop(self, indices: Sequence[int]) -> None:
    """SIGTERM to each process group, SIGKILL `kill_after` s later; reaps them (bounded)."""
    signalled = []
    for i in indices:
      if self._exited(i):
        continue
      if i not in self.stop_times:
        self.stopped.append(i)
        self.stop_times[i] = time.monotonic()
      _killpg(self.procs[i].pid, signal.SIGTERM)
      signalled.append(i)
    if not self._wait_for(signalled, self.kill_after):
      for i in signalled:
        if not self._exited(i):
          self.sigkilled.add(i)
          _killpg(self.procs[i].pid, signal.SIGKILL)
      self._wait_for(signalled, max(self.kill_after, 1.0))

  def _wait_for(self, indices: Sequence[int], seconds: float) -> bool:
    end = time.monotonic() + seconds
    while True:
      if all(self._exited(i) for i in indices):
        return True
      if time.monotonic() >= end:
        return False
      time.sleep(_POLL_SECONDS)

  def _abort(self, exc: BaseException) -> None:
    """Stops every process after an interrupt (or an error in the launcher itself)."""
    if isinstance(exc, KeyboardInterrupt):
      self.interrupted = "SIGINT"
    elif isinstance(exc, _Terminated):
      self.interrupted = _signal_name(exc.signum)
    else:
      self.interrupted = f"an error in the launcher ({type(exc).__name__}: {exc})"
    with _signals_ignored():
      running = [i for i in range(len(self.procs)) if not self._exited(i)]
      if running:
        self._log(f"interrupted by {self.interrupted}; stopping {_names(running)}")
      self._stop(running)
      if self.procs:
        self._log(self._summary())

  # Reporting.

  def _verdict(self) -> tuple[int, str] | None:
    """The process that failed first, and what it did, from the failure
    records the processes wrote, the exits they did not explain (a signal)
    and the processes that were stopped when the first one failed; None when
    there is nothing to go by (then exit order decides)."""
    if self.failed is None or self.timed_out or self.interrupted is not None:
      return None
    candidates: list[tuple[float, int, str]] = []
    for i in range(len(self.procs)):
      record = read_failure(self.run_dir, i) if self.run_dir else None
      if record is not None:
        if not isinstance(record.get("cause"), int):
          candidates.append((float(record.get("time") or 0.0), i,
                             _shorten(str(record.get("reason") or "see its output"))))
        continue
      code = self.exit_codes[i]
      if code not in (None, 0) and i not in self.stop_times and self.exit_walls[i] is not None:
        candidates.append((self.exit_walls[i] - _POLL_SECONDS, i,
                           "it wrote no failure record (a signal it could not handle, or a "
                           "crash)"))
    for i, since in self.stopped_since.items():
      candidates.append((since, i, f"stopped (state T: SIGSTOP, or a debugger) "
                                   f"{_seconds(self.fail_time_wall() - since)} s before "
                                   f"process {self.failed} ended"))
    recorded = any(read_failure(self.run_dir, i) for i in range(len(self.procs))
                   ) if self.run_dir else False
    if not candidates or not (recorded or self.stopped_since):
      return None  # (exits alone: their order decides, ties included)
    _, origin, what = min(candidates)
    return origin, what

  def fail_time_wall(self) -> float:
    """Wall-clock time the first process found failed ended."""
    wall = self.exit_walls[self.failed] if self.failed is not None else None
    return wall if wall is not None else time.time()

  def _result(self) -> LaunchResult:
    if self.timed_out:
      code = 124
    elif self.failed is not None:
      origin = self.verdict[0] if self.verdict else self.failed
      failed_code = self.exit_codes[origin]
      code = failed_code if failed_code and failed_code > 0 else 1
    else:
      code = 0
    failed = self.verdict[0] if self.verdict else self.failed
    return LaunchResult(returncode=code, exit_codes=tuple(self.exit_codes), failed=failed,
                        stopped=tuple(self.stopped), timed_out=self.timed_out,
                        summary=self._summary())

  def _summary(self) -> str:
    n = len(self.procs)
    if self.interrupted is not None:
      head = f"interrupted by {self.interrupted} after {_seconds(self._elapsed())} s"
    elif self.timed_out:
      head = (f"timed out after {_seconds(self.timeout)} s; still running: "
              f"{_names(self.stopped)}")
    elif self.verdict is not None:
      return self._verdict_summary()
    elif self.failed is not None and self.tied:
      f = self.failed
      head = (f"{_names(self.tied)} failed within {_POLL_SECONDS} s of each other ("
              + ", ".join(_code_phrase(self.exit_codes[i]) for i in self.tied)
              + f") after {_seconds(self.exit_times[f] - self.start)} s")
    elif self.failed is not None:
      f = self.failed
      head = (f"process {f} failed first ({_code_phrase(self.exit_codes[f])}) after "
              f"{_seconds(self.exit_times[f] - self.start)} s")
    else:
      return f"all {n} processes exited with code 0 after {_seconds(self._elapsed())} s"
    parts = [head]
    for i in range(n):
      if i == self.failed or i in self.tied:
        continue
      if self.timed_out and i in self.stop_times and self.done[i]:
        if i in self.sigkilled:
          parts.append(f"process {i} ignored SIGTERM and was killed")
        continue
      parts.append(self._describe(i))
    return "; ".join(parts)

  def _verdict_summary(self) -> str:
    origin, what = self.verdict
    code = self.exit_codes[origin]
    how = "still running" if code is None else _code_phrase(code)
    if origin in self.stop_times:
      how = f"then stopped by the launcher: {how}"
    parts = [f"process {origin} failed first ({how}): {what}"]
    for i in range(len(self.procs)):
      if i == origin:
        continue
      text = self._describe(i)
      record = read_failure(self.run_dir, i) if self.run_dir else None
      cause = record.get("cause") if record else None
      if isinstance(cause, int):
        text += f" (its failure followed process {cause}'s)"
      elif origin in self.stopped_since and i not in self.stop_times:
        text += f" (most likely because process {origin} did not answer)"
      parts.append(text)
    return "; ".join(parts)

  def _describe(self, i: int) -> str:
    if i in self.stop_times:
      if not self.done[i]:
        return (f"process {i} could not be stopped (pid {self.procs[i].pid} still running after "
                "SIGKILL)")
      text = f"process {i} was stopped"
      if self.failed is not None and self.fail_time is not None:
        waited = self.stop_times[i] - self.fail_time
        text += f" (still running {_seconds(waited)} s after process {self.failed} failed"
        text += ", when the overall timeout ran out)" if self.cut_by_timeout else ")"
      if i in self.sigkilled:
        text += " and killed after ignoring SIGTERM"
      return text
    if not self.done[i]:
      return f"process {i} is still running"
    code, t = self.exit_codes[i], self.exit_times[i]
    origin = self.verdict[0] if self.verdict else self.failed
    if self.verdict and self.exit_times[origin] is not None:
      after = t - self.exit_times[origin]
      return (f"process {i} {_exit_phrase(code)}, {_seconds(abs(after))} s "
              f"{'after' if after >= 0 else 'before'} process {origin} ended")
    if self.failed is not None and self.fail_time is not None and t >= self.fail_time:
      return (f"process {i} {_exit_phrase(code)}, {_seconds(t - self.fail_time)} s after process "
              f"{self.failed} failed")
    return f"process {i} {_exit_phrase(code)} after {_seconds(t - self.start)} s"

  def _elapsed(self) -> float:
    return time.monotonic() - self.start

  def _log(self, message: str) -> None:
    try:
      self.log.write(_LOG_PREFIX + message + "\n")
      self.log.flush()
    except (OSError, ValueError):
      pass


def _process_state(pid: int) -> str | None:
  """The state letter of process `pid` (/proc/<pid>/stat), or None."""
  try:
    with open(f"/proc/{pid}/stat") as f:
      return f.read().rsplit(")", 1)[1].split()[0]
  except (OSError, IndexError):
    return None


def _shorten(text: str, limit: int = 600) -> str:
  text = " ".join(text.split())
  return text if len(text) <= limit else text[:limit - 3] + "..."


def _names(indices: Sequence[int]) -> str:
  return ", ".join(f"process {i}" for i in indices)


def _code_phrase(code: int | None) -> str:
  if code is not None and code < 0:
    return f"killed by signal {_signal_name(-code)}"
  return f"exit code {code}{_signal_note(code)}"


# --- command line -------------------------------------------------------------------------------


def _split_argv(argv: Sequence[str]) -> tuple[list[str], list[str]]:
  """Splits argv into the launcher's options and the program (script or -m module, and args)."""
  argv = list(argv)
  i = 0
  while i < len(argv):
    token = argv[i]
    if token == "--":
      return argv[:i], argv[i + 1:]
    if token == "-m" or (token.startswith("-m") and not token.startswith("--")):
      return argv[:i], argv[i:]
    if token.startswith("-") and token != "-":
      i += 1 if ("=" in token or token in ("-h", "--help")) else 2
      continue
    return argv[:i], argv[i:]
  return argv, []


def _int_at_least_1(text: str) -> int:
  try:
    value = int(text)
  except ValueError:
    raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}") from None
  if value < 1:
    raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}")
  return value


def _seconds_type(positive: bool):
  def parse(text: str) -> float:
    try:
      value = float(text)
    except ValueError:
      value = math.nan
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
      bound = "> 0" if positive else ">= 0"
      raise argparse.ArgumentTypeError(f"must be a number of seconds {bound}, got {text!r}")
    return value
  return parse


def _parser() -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(
      prog="python -m mpmd.launch",
      usage="python -m mpmd.launch [options] (script.py | -m module) [args ...]",
      description="Run a Python program as N processes of one multi-process JAX run on this "
      "machine. Everything after the script (or -m module) is passed to the program.")
  parser.add_argument("--processes", type=_int_at_least_1, default=2, metavar="N",
                      help="number of processes (default 2)")
  parser.add_argument("--devices-per-process", type=_int_at_least_1, default=4, metavar="K",
                      help="virtual CPU devices (or GPUs) per process (default 4)")
  parser.add_argument("--timeout", type=_seconds_type(True), default=600.0, metavar="S",
                      help="stop everything after S seconds in all; exit code 124 (default 600)")
  parser.add_argument("--grace", type=_seconds_type(False), default=30.0, metavar="S",
                      help="after a process fails, seconds the others get to exit on their own "
                      "before they are stopped (default 30)")
  parser.add_argument("--heartbeat-timeout", type=_seconds_type(True), default=30.0, metavar="S",
                      help="MPMD_HEARTBEAT_TIMEOUT for the processes (default 30)")
  parser.add_argument("--cpus-per-process", type=_int_at_least_1, default=None, metavar="C",
                      help="pin each process to its own block of C CPUs (Linux CPU affinity), "
                      "so that processes do not share cores (default: no pinning)")
  parser.add_argument("--platform", choices=PLATFORMS, default="cpu",
                      help="cpu: K virtual CPU devices per process with gloo collectives; "
                      "gpu: a block of K GPUs per process via CUDA_VISIBLE_DEVICES (default cpu)")
  return parser


if __name__ == "__main__":
  sys.exit(main())
