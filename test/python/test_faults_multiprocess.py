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
