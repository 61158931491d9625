"""The runtime's last word when JAX or XLA aborts the process (SIGABRT): the
extension's handler names a peer on this host that died or is stopped, read
from its pid when the signal comes (`mpmd.distributed.failures.arm_abort_note`),
after any line the runtime left (`set_abort_cause`), then hands the signal on."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

from mpmd.distributed import failures


def _abort_with(setup: str) -> tuple[int, str]:
  """Runs `setup` in a fresh Python, then os.abort(); its exit code and stderr."""
  code = "import os\nfrom mpmd import _mpmd\nfrom mpmd.distributed import failures\n"
  code += textwrap.dedent(setup) + "\nos.abort()\n"
  done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                        timeout=60)
  return done.returncode, done.stderr


def _identity(pid: int) -> str:
  return json.dumps({"namespace": failures._namespace(), "pid": pid})


def test_a_dead_peer_is_named_after_the_cause_and_the_abort_goes_on():
  dead = subprocess.Popen([sys.executable, "-c", "pass"])
  dead.wait()
  code, err = _abort_with(f"""
      _mpmd.set_abort_cause("fragment 'f' is stuck\\n")
      failures.arm_abort_note(1, {{0: {_identity(dead.pid)!r}, 1: {_identity(os.getpid())!r}}})
      """)
  assert code == -signal.SIGABRT, (code, err)
  lines = err.splitlines()
  assert lines[0] == "fragment 'f' is stuck", err
  assert lines[1].startswith(f"[mpmd] process 1: process 0 died (its pid {dead.pid} is gone), "
                             "and with it JAX's coordination service, which it hosted"), err
  assert len(lines) == 2, err


def test_a_stopped_peer_is_named_and_a_running_one_is_not():
  stopped = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
  running = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
  try:
    os.kill(stopped.pid, signal.SIGSTOP)
    code, err = _abort_with(f"""
        failures.arm_abort_note(0, {{1: {_identity(stopped.pid)!r},
                                     2: {_identity(running.pid)!r}}})
        """)
  finally:
    for p in (stopped, running):
      p.kill()
      p.wait()
  assert code == -signal.SIGABRT, (code, err)
  assert err.splitlines() == [
      f"[mpmd] process 0: process 1 is stopped (pid {stopped.pid}, state T: SIGSTOP, or a "
      "debugger) and missed JAX's heartbeats: JAX's coordination service ends the run, this "
      "process with it (its message above)"], err


def test_process_0_on_another_host_gets_the_conditional_line():
  elsewhere = json.dumps({"namespace": "another-host/boot/1", "pid": 1})
  code, err = _abort_with(f"""
      failures.arm_abort_note(1, {{0: {elsewhere!r}}})
      """)
  assert code == -signal.SIGABRT, (code, err)
  assert err.startswith("[mpmd] process 1: JAX or XLA aborted this process (its message above); "
                        "if it says the coordination service cannot be reached, process 0"), err


def test_nothing_is_said_when_every_peer_runs_and_the_text_is_readable():
  running = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
  try:
    code, err = _abort_with(f"""
        failures.arm_abort_note(0, {{1: {_identity(running.pid)!r}}})
        assert _mpmd.abort_note_text() == ""
        """)
  finally:
    running.kill()
    running.wait()
  assert code == -signal.SIGABRT and "[mpmd]" not in err, (code, err)


def test_a_handler_installed_before_still_runs():
  """faulthandler (installed first) still writes its traceback after the note."""
  code, err = _abort_with("""
      import faulthandler
      faulthandler.enable()
      _mpmd.set_abort_cause("the runtime's line\\n")
      """)
  assert code == -signal.SIGABRT, (code, err)
  assert err.index("the runtime's line") < err.index("Fatal Python error: Aborted"), err


def test_peer_state_reads_pids_as_the_handler_does():
  """The watchdog's `peer_state` and the handler read /proc the same way
  (one reader, in the extension): gone, stopped, running, another host."""
  dead = subprocess.Popen([sys.executable, "-c", "pass"])
  dead.wait()
  stopped = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
  try:
    os.kill(stopped.pid, signal.SIGSTOP)
    time.sleep(0.2)
    assert failures.peer_state(_identity(dead.pid)) == "gone"
    assert failures.peer_state(_identity(stopped.pid)) == "stopped"
    assert failures.peer_state(_identity(os.getpid())) is None
    elsewhere = json.dumps({"namespace": "another-host/boot/1", "pid": stopped.pid})
    assert failures.peer_state(elsewhere) is None and failures.peer_state(None) is None
  finally:
    stopped.kill()
    stopped.wait()
