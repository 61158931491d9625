"""Faults of a running multi-process job (2 processes, `python -m mpmd.launch`):
stray connections to its ports, a signal to one worker, a failing or stalled
process. Every run is bounded by the launcher's `--timeout`."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPTS = os.path.join(ROOT, "test", "python", "multiprocess")

def _start(script: str, args: list[str], log_path: str, *, env: dict | None = None,
           timeout: int = 120, grace: int = 10, devices: int = 1) -> subprocess.Popen:
  cmd = [sys.executable, "-m", "mpmd.launch", "--processes", "2", "--devices-per-process",
         str(devices), "--timeout", str(timeout), "--grace", str(grace),
         os.path.join(SCRIPTS, script), *args]
  run_env = dict(os.environ)
  # (XLA_FLAGS is inherited: the launcher replaces its device count and keeps the rest.)
  run_env.update(env or {})
  return subprocess.Popen(cmd, cwd=ROOT, env=run_env, stdout=open(log_path, "w"),
                          stderr=subprocess.STDOUT)


def _start_sender(tmp_path, kinds: str = "") -> tuple[subprocess.Popen, str, str]:
  """Starts garbage_sender.py (sending `kinds` of its payloads, default
  all), as user `nobody` when this runs as root (another local user);
  returns it, the file to list ports in, and the file that stops it."""
  shared = tempfile.mkdtemp(prefix="mpmd-garbage-")
  os.chmod(shared, 0o755)
  ports, stop = os.path.join(shared, "ports"), os.path.join(shared, "stop")
  # (A copy `nobody` can read wherever the checkout is, e.g. under a 0700
  # directory.)
  script = shutil.copy(os.path.join(SCRIPTS, "garbage_sender.py"), shared)
  os.chmod(script, 0o644)
  cmd = [sys.executable, script, "--ports", ports, "--stop", stop, "--kinds", kinds]
  if os.geteuid() == 0 and shutil.which("setpriv"):
    as_nobody = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
    cmd = as_nobody + [_python_for(as_nobody), *cmd[1:]]
  sender = subprocess.Popen(cmd, stdout=open(str(tmp_path / "sender.log"), "w"),
                            stderr=subprocess.STDOUT)
  return sender, ports, stop


def _python_for(prefix: list[str]) -> str:
  """A Python that runs under `prefix` (another user): this one, unless
  that user cannot read it (a venv of a Python under root's 0700 home),
  else the system's (the sender needs only the standard library)."""
  for python in (sys.executable, "/usr/bin/python3", shutil.which("python3") or ""):
    if python and subprocess.run([*prefix, python, "-c", "pass"], capture_output=True,
                                 timeout=30).returncode == 0:
      return python
  raise RuntimeError(f"no Python runs as {prefix}: cannot start the garbage sender")


def _list_ports(path: str, ports) -> None:
  with open(path + ".tmp", "w") as f:
    json.dump(sorted(ports), f)
  os.chmod(path + ".tmp", 0o644)
  os.replace(path + ".tmp", path)


def _stop_sender(sender: subprocess.Popen, stop: str, tmp_path) -> dict[int, int]:
  """Stops the sender; how many connections it made to each port. Removes
  the folder `_start_sender` made."""
  open(stop, "w").close()
  try:
    sender.wait(timeout=30)
  finally:
    if sender.poll() is None:
      sender.kill()
      sender.wait()
    shutil.rmtree(os.path.dirname(stop), ignore_errors=True)
  out = (tmp_path / "sender.log").read_text()
  line = [l for l in out.splitlines() if l.startswith("sent ")]
  assert line, out
  if os.geteuid() == 0 and shutil.which("setpriv"):
    assert "as uid 65534" in line[0], out
  counts = line[0][len("sent "):].rsplit(" as uid ", 1)[0]
  return {int(k): v for k, v in json.loads(counts).items()}


def _check_run(out: str, steps: int) -> None:
  """Both processes finished every step, equal to `jax.jit`, with gloo's
  socket filtered and its connections admitted."""
  assert "socket-server" not in out, out
  for p in (0, 1):
    assert f"process {p}: step {steps - 1} loss" in out, out
    assert f"process {p}: largest relative difference from jax.jit" in out, out
    assert "transfer servers still accepting connections: []" in out, out
  gloo = [json.loads(line.split("gloo admission ", 1)[1])
          for line in out.splitlines() if "gloo admission " in line]
  assert len(gloo) == 2 and all(g["on"] and not g["stalled"] for g in gloo), out
  # Each connection one process made to the other's gloo port was admitted there.
  assert sum(g["admitted"] for g in gloo) >= 1, out
  assert sum(g["admitted"] for g in gloo) == sum(g["announced"] for g in gloo), out


@pytest.mark.multiprocess
@pytest.mark.parametrize("transfers", ["pull", "collective"])
@pytest.mark.slow
def test_garbage_on_every_port_does_not_stop_the_run(tmp_path, transfers):
  """Garbage from another user to every port the processes listen on after
  their first step, and all through the remaining steps."""
  log = str(tmp_path / "log")
  proc = _start("stray_connections.py", ["--dir", str(tmp_path), "--steps", "6"], log,
                env={"MPMD_CROSS_PROCESS_TRANSFERS": transfers})
  sender, ports_file, stop = _start_sender(tmp_path)
  try:
    for p in (0, 1):
      _wait_for(tmp_path / f"ports.{p}", proc, log)
    ports = sorted({port for p in (0, 1)
                    for port in json.loads((tmp_path / f"ports.{p}").read_text())["ports"]})
    _list_ports(ports_file, ports)
    time.sleep(2)  # (the first rounds: 3 of every payload to every port)
    (tmp_path / "go").touch()
    code = proc.wait(timeout=150)
  finally:
    if proc.poll() is None:
      proc.kill()
    sent = _stop_sender(sender, stop, tmp_path)
  out = open(log).read()
  assert code == 0, out
  assert set(sent) == set(ports), (sent, out)
  _check_run(out, 6)


@pytest.mark.multiprocess
@pytest.mark.parametrize("transfers", ["pull", "collective"])
@pytest.mark.slow
def test_garbage_while_gloo_connects_and_during_the_first_call(tmp_path, transfers, kinds=""):
  """Garbage from another user to every port as soon as it listens: gloo's
  from the moment the processes joined the run, so before and while gloo
  makes its connections (in the first call), and the transfer servers' while
  the first call holds 4 s after its pulls: the run finishes and equals
  `jax.jit`. (Without the filter on gloo's socket, gloo's sequence numbers
  sent before it connects hang the first call.)"""
  log = str(tmp_path / "log")
  proc = _start("stray_connections.py", ["--dir", str(tmp_path), "--steps", "3",
                                         "--hold-first-call", "4", "--wait-for-go-first"],
                log, env={"MPMD_CROSS_PROCESS_TRANSFERS": transfers}, timeout=90)
  sys.path.insert(0, SCRIPTS)
  try:
    from stray_connections import listening_ports  # noqa: PLC0415
  finally:
    sys.path.remove(SCRIPTS)
  sender, ports_file, stop = _start_sender(tmp_path, kinds)
  seen: set[int] = set()
  try:
    for p in (0, 1):
      _wait_for(tmp_path / f"pid.{p}", proc, log)
    pids = [int((tmp_path / f"pid.{p}").read_text()) for p in (0, 1)]
    first = time.monotonic()
    while proc.poll() is None and not all((tmp_path / f"ports.{p}").exists() for p in (0, 1)):
      for pid in pids:
        try:
          seen.update(listening_ports(pid))
        except OSError:
          continue
      _list_ports(ports_file, seen)
      if time.monotonic() - first > 2 and not (tmp_path / "go-first").exists():
        (tmp_path / "go-first").touch()  # gloo's ports have had their garbage
      time.sleep(0.02)
    (tmp_path / "go").touch()
    code = proc.wait(timeout=120)
  finally:
    if proc.poll() is None:
      proc.kill()
    sent = _stop_sender(sender, stop, tmp_path)
  out = open(log).read()
  assert code == 0, out
  # Garbage reached every port: gloo's and every transfer server's (with
  # pulls: 2 servers of 2 ports each per process).
  transfer_ports = [json.loads(line.split("transfer server ports ", 1)[1])
                    for line in out.splitlines() if "transfer server ports " in line]
  assert len(transfer_ports) == 2, out
  gloo_ports = [json.loads(line.split("gloo admission ", 1)[1])["address"][1]
                for line in out.splitlines() if "gloo admission " in line]
  for ports in transfer_ports:
    assert len(ports) == (4 if transfers == "pull" else 0), out
    assert all(sent.get(port, 0) > 0 for port in ports), (sent, out)
  assert gloo_ports and all(sent.get(port, 0) > 0 for port in gloo_ports), (sent, out)
  _check_run(out, 3)


def _wait_for(path, proc: subprocess.Popen, log: str, seconds: float = 100) -> None:
  deadline = time.monotonic() + seconds
  while not os.path.exists(path):
    assert proc.poll() is None, open(log).read()
    assert time.monotonic() < deadline, open(log).read()
    time.sleep(0.05)


def _assert_process_0_names_process_1(out: str, reason: str) -> None:
  """Process 0 ended on its own (the launcher did not have to stop it),
  non-zero, saying that process 1 failed and why: from its watchdog, or in
  the error of the step that process 1's exit broke."""
  # (Whichever comes first: its own watchdog, "process 1 failed: <reason>";
  # the launcher's failure record read by its watchdog, "process 1 exited with
  # code 143 (... it <reason>) (says the launcher)"; or the error of the step
  # that process 1's exit broke, "... failure of process 1, which failed
  # first: ... <reason>".)
  told = [line for line in out.splitlines()
          if line.startswith("[p0]") and "process 1 " in line and reason in line]
  assert told, out
  assert "was stopped" not in out and "process 0 exited with code 0" not in out, out


def _run(tmp_path, mode: str, *extra: str, env: dict | None = None, grace: int = 8) -> str:
  """Runs faulty_worker.py in `mode` to the end; returns the launcher's output."""
  log = str(tmp_path / "log")
  proc = _start("faulty_worker.py", ["--dir", str(tmp_path), "--mode", mode, *extra], log,
                env=env, grace=grace)
  try:
    proc.wait(timeout=150)
  finally:
    if proc.poll() is None:
      proc.kill()
  return open(log).read()


def _sigterm_process_1(tmp_path, mode: str) -> tuple[int, str]:
  log = str(tmp_path / "log")
  # --grace 8: the launcher stops (and reports as stopped) a process still
  # running 8 s after the first one ended.
  proc = _start("faulty_worker.py", ["--dir", str(tmp_path), "--mode", mode], log, grace=8)
  try:
    _wait_for(tmp_path / "pid.1", proc, log)
    os.kill(int((tmp_path / "pid.1").read_text()), 15)
    code = proc.wait(timeout=60)
  finally:
    if proc.poll() is None:
      proc.kill()
  return code, open(log).read()


@pytest.mark.multiprocess
@pytest.mark.slow
def test_sigterm_to_one_worker_ends_the_run_after_its_checkpoint_hook(tmp_path):
  code, out = _sigterm_process_1(tmp_path, "sigterm")
  assert code != 0, out
  assert "process 1 of 2 got SIGTERM" in out, out
  # The launcher says which process got the signal.
  assert "exit code 143 (128 + SIGTERM: it got SIGTERM)" in out, out
  _assert_process_0_names_process_1(out, "got SIGTERM")
  # The hook ran in process 1 (the one that got the signal), not in process 0.
  assert (tmp_path / "checkpoint.1").exists(), out
  assert not (tmp_path / "checkpoint.0").exists(), out


@pytest.mark.multiprocess
@pytest.mark.slow
def test_sigterm_to_a_worker_blocked_in_a_step_ends_the_run(tmp_path):
  code, out = _sigterm_process_1(tmp_path, "blocked")
  assert code != 0, out
  assert "exit code 143 (128 + SIGTERM: it got SIGTERM)" in out, out
  assert "did not end this process within MPMD_TERMINATION_GRACE" in out, out
  _assert_process_0_names_process_1(out, "got SIGTERM")


@pytest.mark.multiprocess
@pytest.mark.parametrize("mode,what,failing", [
    ("callback", "injected callback failure in stage1", 1),
    ("oom", "RESOURCE_EXHAUSTED: Out of memory", 1),
    ("oom", "RESOURCE_EXHAUSTED: Out of memory", 0),
])
@pytest.mark.slow
def test_a_failing_step_names_its_fragment_in_every_process(tmp_path, mode, what, failing):
  """The failing process's failure record comes first: every process and the
  launcher name it and its fragment, none blames the other, and every process
  is gone within seconds (issue 45's target: 3 s; 0.5 s measured)."""
  out, ended = _run_timed(tmp_path, mode, "--failing", str(failing))
  other = 1 - failing
  # The failing process raises in the failing call, naming the fragment, stage and mesh.
  raised = [line for line in out.splitlines()
            if line.startswith(f"[p{failing}] mpmd.errors.FragmentRuntimeError: fragment")]
  assert raised and f"of stage{failing}" in raised[0], out
  assert f"on mesh 'p{failing}'" in raised[0], out
  # The other process ends on its own with the same message (not a gloo timeout).
  told = [line for line in out.splitlines() if line.startswith(f"[p{other}]")
          and f"process {failing} failed: FragmentRuntimeError" in line]
  assert told and f"on mesh 'p{failing}'" in told[0], out
  assert "was stopped" not in out and f"process {other} exited with code 0" not in out, out
  # The launcher's verdict comes from the records, not from who exited first.
  assert f"process {failing} failed first (exit code 1): FragmentRuntimeError" in out, out
  assert f"process {other} failed first" not in out, out
  assert "within the same 0.05 s poll" not in out, out
  # No circular blame: the failing process never names the other as the first.
  assert f"this follows the failure of process {other}" not in out, out
  assert f"process {other} failed:" not in out, out
  assert what in out, out
  assert "DEADLINE_EXCEEDED" not in out, out
  fault = float((tmp_path / f"fault.{failing}").read_text())
  assert ended - fault < 10, (ended - fault, out)


def _run_timed(tmp_path, mode: str, *extra: str) -> tuple[str, float]:
  """`_run`, and the wall-clock time the launcher returned."""
  out = _run(tmp_path, mode, *extra)
  return out, time.time()


def _signal_worker(tmp_path, victim: int, sig: int) -> tuple[int, str, float]:
  """Runs faulty_worker.py until `victim` has done 2 steps, sends it `sig`;
  returns the launcher's exit code, its output and how long after the
  signal it returned."""
  log = str(tmp_path / "log")
  proc = _start("faulty_worker.py", ["--dir", str(tmp_path), "--mode", "forever"], log,
                grace=8)
  try:
    _wait_for(tmp_path / f"pid.{victim}", proc, log)
    sent = time.monotonic()
    os.kill(int((tmp_path / f"pid.{victim}").read_text()), sig)
    code = proc.wait(timeout=60)
    took = time.monotonic() - sent
  finally:
    if proc.poll() is None:
      proc.kill()
  return code, open(log).read(), took


@pytest.mark.multiprocess
def test_sigkill_of_a_worker_is_named_by_the_others_at_once(tmp_path):
  """A killed process writes no failure record: process 0 does not wait for
  one, and names process 1 and its signal (the launcher's notice) within
  seconds (issue 45's target: 2 s; 0.5-0.8 s measured)."""
  code, out, took = _signal_worker(tmp_path, 1, signal.SIGKILL)
  assert code != 0, out
  said = [line for line in out.splitlines() if line.startswith("[p0] [mpmd]")
          and "process 1 was killed by signal SIGKILL" in line]
  assert said, out
  assert "process 1 failed first (killed by signal SIGKILL)" in out, out
  assert "process 0 failed first" not in out and "was stopped" not in out, out
  assert took < 10, (took, out)


@pytest.mark.multiprocess
@pytest.mark.slow
def test_sigkill_of_process_0_is_named_by_process_1_and_the_launcher(tmp_path):
  """Process 0 hosts JAX's coordination service: its death aborts process 1
  at once, in JAX's words (before Python can run); the extension's SIGABRT
  handler then says that process 0 died, and the launcher names process 0,
  never process 1."""
  code, out, took = _signal_worker(tmp_path, 0, signal.SIGKILL)
  assert code != 0, out
  said = [line for line in out.splitlines()
          if line.startswith("[p1] [mpmd] process 1: process 0 died (its pid ")]
  assert said and "JAX's coordination service, which it hosted" in said[0], out
  assert "process 0 failed first (killed by signal SIGKILL)" in out, out
  assert "process 1 failed first" not in out and "was stopped" not in out, out
  assert took < 10, (took, out)


@pytest.mark.multiprocess
@pytest.mark.slow
def test_a_stopped_worker_is_named_and_the_run_goes_on_when_continued(tmp_path):
  """SIGSTOP of process 1 for 8 s: the launcher and process 0 name it as
  stopped within seconds (never process 0), and once continued the run goes
  on (the processes then end with SIGTERM, as a cluster manager would)."""
  log = str(tmp_path / "log")
  proc = _start("faulty_worker.py", ["--dir", str(tmp_path), "--mode", "forever"], log,
                grace=8)
  try:
    _wait_for(tmp_path / "pid.1", proc, log)
    pid = int((tmp_path / "pid.1").read_text())
    os.kill(pid, signal.SIGSTOP)
    time.sleep(8)
    out = open(log).read()
    os.kill(pid, signal.SIGCONT)
    steps_before = out.count("[p1] process 1: step")
    deadline = time.monotonic() + 60
    while open(log).read().count("[p1] process 1: step") < steps_before + 2:
      assert proc.poll() is None and time.monotonic() < deadline, open(log).read()
      time.sleep(0.1)
    os.kill(pid, signal.SIGTERM)
    proc.wait(timeout=60)
  finally:
    if proc.poll() is None:
      proc.kill()
  assert f"mpmd.launch: process 1 (pid {pid}) has been stopped for" in out, out
  told = [line for line in out.splitlines()
          if line.startswith("[p0] [mpmd] process 0: process 1 has been stopped for")]
  assert told and "SIGSTOP" in told[0], out
  assert "process 0 has been stopped" not in out, out
  assert "process 1 failed first (exit code 143" in open(log).read(), open(log).read()


@pytest.mark.multiprocess
@pytest.mark.slow
def test_a_stalled_peer_is_reported_while_it_stalls(tmp_path):
  out = _run(tmp_path, "stall", "--stall", "6",
             env={"MPMD_STALL_WARNING": "2", "MPMD_STEP_CHECK_INTERVAL": "0.2"})
  assert "process 0: finished 6 steps" in out and "process 1: finished 6 steps" in out, out
  reports = [line for line in out.splitlines()
             if "[mpmd] process 0: call 4 of mpmd.jit program 'step'" in line]
  assert reports, out
  # It says how long, and which process is behind and where.
  assert "has been running for" in reports[0], out
  assert "process 1 is not in a call for" in reports[0], out
  assert "(last started: call 3 of 'step')" in reports[0], out
  # And what this process waits for: the transfer from the stalled process.
  assert "at instruction" in reports[0] and "transfer from mesh 'p1' to mesh 'p0'" in reports[0], out
  assert "(in _check (mpmd.run.program" in reports[0], out


@pytest.mark.multiprocess
@pytest.mark.slow
def test_an_unadmitted_gloo_connection_is_named_and_ends_the_run(tmp_path):
  """Gloo's connections never admitted (as behind NAT): the process that
  made one names it within seconds, then ends, and the other follows: no
  hang (the waiting side of a gloo pair has no timeout)."""
  out = _run_script(tmp_path, "gloo_unadmitted.py", env={"MPMD_GLOO_ADMISSION_TIMEOUT": "5"})
  assert "gloo admission on: True" in out, out
  assert "the collective finished" not in out, out
  assert "timed out" not in out, out
  reports = [line for line in out.splitlines() if "was not let in within 3 s" in line]
  assert reports, out
  failing = reports[0][len("[p"):][0]
  other = "1" if failing == "0" else "0"
  assert f"process {failing}: gloo's connection from 127.0.0.1:" in reports[0], out
  assert f"to process {other}'s gloo port 127.0.0.1:" in reports[0], out
  assert f"process {failing} failed first (exit code 1)" in out, out
  if failing == "1":  # (process 0 ending takes the coordination service, and process 1, with it)
    assert (f"process {other}: process {failing} failed: DistributedError: gloo's connection"
            in out), out


def _run_script(tmp_path, script: str, *, env: dict | None = None) -> str:
  log = str(tmp_path / "log")
  proc = _start(script, [], log, env=env, timeout=60, grace=15)
  try:
    proc.wait(timeout=90)
  finally:
    if proc.poll() is None:
      proc.kill()
  return open(log).read()


@pytest.mark.multiprocess
def test_gloo_admission_on_in_one_process_only_fails_at_once(tmp_path):
  log = str(tmp_path / "log")
  proc = _start("gloo_unadmitted.py", ["--mismatch"], log, timeout=60, grace=15)
  try:
    proc.wait(timeout=90)
  finally:
    if proc.poll() is None:
      proc.kill()
  out = open(log).read()
  assert "timed out" not in out, out
  assert ("DistributedError: process 0 filters gloo's listening socket and process 1 does not "
          "(MPMD_GLOO_ADMISSION=0 there" in out), out
  assert "the collective finished" not in out, out
