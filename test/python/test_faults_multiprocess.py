"""Faults of a running multi-process job (2 processes, `python -m mpmd.launch`):
stray connections to its ports, a signal to one worker, a failing or stalled
process. Every run is bounded by the launcher's `--timeout`."""

from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import sys
import threading
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPTS = os.path.join(ROOT, "test", "python", "multiprocess")

#: What other programs send: 16 zero bytes (a frame jaxlib's transfer server
#: aborts on), random bytes, an HTTP request, an HTTP/2 preface + SETTINGS.
GARBAGE = {
    "zeros": b"\0" * 16,
    "random": random.Random(0).randbytes(4096),
    "http": b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
    "http2": b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\0\0\0\x04\0\0\0\0\0",
}


def _start(script: str, args: list[str], log_path: str, *, env: dict | None = None,
           timeout: int = 120, grace: int = 10, devices: int = 1) -> subprocess.Popen:
  cmd = [sys.executable, "-m", "mpmd.launch", "--processes", "2", "--devices-per-process",
         str(devices), "--timeout", str(timeout), "--grace", str(grace),
         os.path.join(SCRIPTS, script), *args]
  run_env = dict(os.environ)
  run_env.pop("XLA_FLAGS", None)  # the launcher sets the device count
  run_env.update(env or {})
  return subprocess.Popen(cmd, cwd=ROOT, env=run_env, stdout=open(log_path, "w"),
                          stderr=subprocess.STDOUT)


def _send(port: int, payload: bytes) -> None:
  """Connects to 127.0.0.1:port, sends `payload`, closes (refused is fine)."""
  try:
    with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
      s.sendall(payload)
      time.sleep(0.05)
  except OSError:
    pass


@pytest.mark.multiprocess
@pytest.mark.parametrize("transfers", ["pull", "collective"])
def test_garbage_on_every_port_does_not_stop_the_run(tmp_path, transfers):
  log = str(tmp_path / "log")
  proc = _start("stray_connections.py", ["--dir", str(tmp_path), "--steps", "6"], log,
                env={"MPMD_CROSS_PROCESS_TRANSFERS": transfers})
  held: list[socket.socket] = []
  stop = threading.Event()
  try:
    deadline = time.monotonic() + 100
    while not all((tmp_path / f"ports.{p}").exists() for p in (0, 1)):
      assert proc.poll() is None, open(log).read()
      assert time.monotonic() < deadline, open(log).read()
      time.sleep(0.1)
    ports = sorted({port for p in (0, 1)
                    for port in json.loads((tmp_path / f"ports.{p}").read_text())["ports"]})
    assert ports
    for port in ports:  # an idle connection held open to every port for the whole run
      try:
        held.append(socket.create_connection(("127.0.0.1", port), timeout=2))
      except OSError:
        pass
      for payload in GARBAGE.values():
        _send(port, payload)

    def keep_sending():  # and more garbage while the remaining steps run
      while not stop.is_set():
        for port in ports:
          for payload in GARBAGE.values():
            _send(port, payload)

    sender = threading.Thread(target=keep_sending, daemon=True)
    sender.start()
    (tmp_path / "go").touch()
    code = proc.wait(timeout=150)
  finally:
    stop.set()
    for s in held:
      s.close()
    if proc.poll() is None:
      proc.kill()
  out = open(log).read()
  assert code == 0, out
  assert "socket-server" not in out, out
  for p in (0, 1):
    assert f"process {p}: step 5 loss" in out, out
    assert f"process {p}: largest relative difference from jax.jit" in out, out
    # The transfer servers accept no connection after the first step.
    assert f"transfer servers still accepting connections: []" in out, out


def _send_quickly(port: int, payload: bytes, held: list) -> None:
  """`_send` with a short connect timeout, keeping the socket open (idle)
  when it connected (a filtered port lets the connection time out)."""
  try:
    s = socket.create_connection(("127.0.0.1", port), timeout=0.3)
  except OSError:
    return
  try:
    s.sendall(payload)
  except OSError:
    pass
  held.append(s)


@pytest.mark.multiprocess
@pytest.mark.parametrize("transfers", ["pull", "collective"])
def test_garbage_during_the_first_call_does_not_stop_the_run(tmp_path, transfers):
  """Garbage to every port as soon as it listens, while the first call runs
  (each process holds 4 s in it after its pulls, before the transfer servers
  are sealed): the run finishes and equals `jax.jit`. (Gloo's connections
  are made before: garbage while gloo makes them can hang the run.)"""
  log = str(tmp_path / "log")
  proc = _start("stray_connections.py", ["--dir", str(tmp_path), "--steps", "3",
                                         "--hold-first-call", "4"], log,
                env={"MPMD_CROSS_PROCESS_TRANSFERS": transfers})
  sys.path.insert(0, SCRIPTS)
  try:
    from stray_connections import listening_ports  # noqa: PLC0415
  finally:
    sys.path.remove(SCRIPTS)
  held: list[socket.socket] = []
  hit: dict[int, int] = {}  # port -> rounds of garbage sent to it
  try:
    for p in (0, 1):
      _wait_for(tmp_path / f"pid.{p}", proc, log)
    pids = [int((tmp_path / f"pid.{p}").read_text()) for p in (0, 1)]
    while proc.poll() is None and not all((tmp_path / f"ports.{p}").exists() for p in (0, 1)):
      for pid in pids:
        try:
          ports = listening_ports(pid)
        except OSError:
          continue
        for port in ports:
          if hit.get(port, 0) < 3:  # every payload, three times over
            hit[port] = hit.get(port, 0) + 1
            for payload in GARBAGE.values():
              threading.Thread(target=_send_quickly, args=(port, payload, held),
                               daemon=True).start()
      time.sleep(0.02)
    (tmp_path / "go").touch()
    code = proc.wait(timeout=150)
  finally:
    for s in list(held):
      s.close()
    if proc.poll() is None:
      proc.kill()
  out = open(log).read()
  assert code == 0, out
  assert "socket-server" not in out, out
  # Garbage reached every transfer server's ports (with pulls: 2 servers of
  # 2 ports each per process).
  transfer_ports = [json.loads(line.split("transfer server ports ", 1)[1])
                    for line in out.splitlines() if "transfer server ports " in line]
  assert len(transfer_ports) == 2, out
  for ports in transfer_ports:
    assert len(ports) == (4 if transfers == "pull" else 0), out
    assert all(port in hit for port in ports), (hit, out)
  for p in (0, 1):
    assert f"process {p}: step 2 loss" in out, out
    assert f"process {p}: largest relative difference from jax.jit" in out, out
    assert "transfer servers still accepting connections: []" in out, out


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
  told = [line for line in out.splitlines()
          if line.startswith("[p0]") and f"process 1 failed: {reason}" in line]
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
def test_sigterm_to_a_worker_blocked_in_a_step_ends_the_run(tmp_path):
  code, out = _sigterm_process_1(tmp_path, "blocked")
  assert code != 0, out
  assert "exit code 143 (128 + SIGTERM: it got SIGTERM)" in out, out
  assert "did not end this process within MPMD_TERMINATION_GRACE" in out, out
  _assert_process_0_names_process_1(out, "got SIGTERM")


@pytest.mark.multiprocess
@pytest.mark.parametrize("mode,what", [
    ("callback", "injected callback failure in stage1"),
    ("oom", "RESOURCE_EXHAUSTED: Out of memory"),
])
def test_a_failing_step_names_its_fragment_in_every_process(tmp_path, mode, what):
  out = _run(tmp_path, mode)
  # Process 1 raises in the failing call, naming the fragment, stage and mesh.
  assert "mpmd.errors.FragmentRuntimeError: fragment" in out, out
  failing = [line for line in out.splitlines()
             if line.startswith("[p1] mpmd.errors.FragmentRuntimeError")]
  assert failing and "of stage1" in failing[0] and "on mesh 'p1'" in failing[0], out
  # Process 0 ends on its own with the same message (not a gloo timeout).
  _assert_process_0_names_process_1(out, "FragmentRuntimeError")
  told = [line for line in out.splitlines()
          if line.startswith("[p0]") and "process 1 failed: FragmentRuntimeError" in line]
  assert "on mesh 'p1'" in told[0], out
  assert what in out, out
  assert "DEADLINE_EXCEEDED" not in out, out


@pytest.mark.multiprocess
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
