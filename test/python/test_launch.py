"""The local multi-process launcher `python -m mpmd.launch` (mpmd/launch.py).

The child programs here are tiny plain-Python scripts (no JAX), so the tests
stay fast. Nothing here can hang: every launch has a bounded `timeout`, every
subprocess a bounded wait, and every child waits for files with a deadline.
"""

from __future__ import annotations

import _thread
import io
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from mpmd import launch as launch_mod
from mpmd.launch import LaunchError, child_environment, launch, main

# Generous bounds: they only keep a broken launcher from hanging the test run.
BOUND = 60
SUBPROCESS_BOUND = 120

# Children share these helpers: wait for a file (bounded) and write one atomically.
_PRELUDE = textwrap.dedent("""\
    import json, os, signal, subprocess, sys, time
    ME = int(os.environ["MPMD_PROCESS_ID"])

    def wait_for(path, seconds=60):
      end = time.monotonic() + seconds
      while not os.path.exists(path):
        if time.monotonic() > end:
          sys.exit(98)
        time.sleep(0.01)

    def write(path, text):
      with open(path + ".tmp", "w") as f:
        f.write(text)
      os.replace(path + ".tmp", path)
    """)


def _script(tmp_path: Path, body: str, name: str = "child.py") -> str:
  path = tmp_path / name
  path.write_text(_PRELUDE + textwrap.dedent(body))
  return str(path)


def _lines(out: io.StringIO, process: int) -> list[str]:
  prefix = f"[p{process}] "
  return [line[len(prefix):] for line in out.getvalue().splitlines() if line.startswith(prefix)]


def _alive(pid: int) -> bool:
  """Whether `pid` is a live process (a zombie awaiting its reaper counts as gone)."""
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  try:
    state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
  except OSError:
    return False
  return state != "Z"


def _gone(pid: int, seconds: float = 20) -> bool:
  """Waits (bounded) for `pid` to disappear; its reaper may need a moment."""
  end = time.monotonic() + seconds
  while _alive(pid):
    if time.monotonic() > end:
      return False
    time.sleep(0.05)
  return True


def _wait_files(paths: list[Path], seconds: float = BOUND) -> bool:
  end = time.monotonic() + seconds
  while not all(p.exists() for p in paths):
    if time.monotonic() > end:
      return False
    time.sleep(0.02)
  return True


ENV_KEYS = ["MPMD_COORDINATOR_ADDRESS", "MPMD_NUM_PROCESSES", "MPMD_PROCESS_ID",
            "MPMD_HEARTBEAT_TIMEOUT", "MPMD_LAUNCHED", "JAX_PLATFORMS",
            "JAX_CPU_COLLECTIVES_IMPLEMENTATION", "XLA_FLAGS", "PYTHONUNBUFFERED", "MY_VAR"]


def test_environment_output_and_success(tmp_path):
  script = _script(tmp_path, f"""
      print(json.dumps({{k: os.environ.get(k) for k in {ENV_KEYS!r}}}))
      print("args", sys.argv[1:])
      print("to stderr", ME, file=sys.stderr)
      sys.stdout.write("no newline at the end")
      """)
  base = dict(os.environ, MY_VAR="kept",
              XLA_FLAGS="--xla_dump_to=/tmp/x --xla_force_host_platform_device_count=8 "
              "--xla_cpu_enable_fast_math=false")
  out = io.StringIO()
  result = launch([script, "--steps", "3"], processes=3, devices_per_process=2,
                  heartbeat_timeout=6.5, timeout=BOUND, env=base, stream=out)
  assert result.returncode == 0, (result.summary, out.getvalue())
  assert result.exit_codes == (0, 0, 0)
  assert result.failed is None and result.stopped == () and not result.timed_out
  assert "all 3 processes exited with code 0" in result.summary
  ports = set()
  for i in range(3):
    lines = _lines(out, i)
    env = json.loads(lines[0])
    host, port = env["MPMD_COORDINATOR_ADDRESS"].split(":")
    assert host == "127.0.0.1"
    ports.add(int(port))
    assert env["MPMD_NUM_PROCESSES"] == "3"
    assert env["MPMD_PROCESS_ID"] == str(i)
    assert env["MPMD_HEARTBEAT_TIMEOUT"] == "7"  # Whole seconds, rounded up.
    assert env["MPMD_LAUNCHED"] == "1"
    assert env["PYTHONUNBUFFERED"] == "1"
    assert env["JAX_PLATFORMS"] == "cpu"
    assert env["JAX_CPU_COLLECTIVES_IMPLEMENTATION"] == "gloo"
    assert env["XLA_FLAGS"].split() == [
        "--xla_dump_to=/tmp/x", "--xla_cpu_enable_fast_math=false",
        "--xla_force_host_platform_device_count=2"]
    assert env["MY_VAR"] == "kept"
    assert lines[1] == "args ['--steps', '3']"
    assert f"to stderr {i}" in lines  # stderr is merged into the prefixed stream.
    assert lines[-1] == "no newline at the end"
  assert len(ports) == 1 and 0 < ports.pop() < 65536


def test_child_environment_cpu_without_inherited_flags():
  env = child_environment(1, processes=2, devices_per_process=4,
                          coordinator_address="127.0.0.1:1234", heartbeat_timeout=30,
                          platform="cpu", base_env={"PATH": "/bin"})
  assert env["PATH"] == "/bin"
  assert env["XLA_FLAGS"] == "--xla_force_host_platform_device_count=4"
  assert env["MPMD_PROCESS_ID"] == "1" and env["MPMD_HEARTBEAT_TIMEOUT"] == "30"
  assert "CUDA_VISIBLE_DEVICES" not in env


def test_child_environment_gpu_slices():
  base = {"XLA_FLAGS": "--xla_force_host_platform_device_count=8", "JAX_PLATFORMS": "cuda"}
  envs = [child_environment(i, processes=3, devices_per_process=2,
                            coordinator_address="127.0.0.1:1234", heartbeat_timeout=30,
                            platform="gpu", base_env=base) for i in range(3)]
  assert [e["CUDA_VISIBLE_DEVICES"] for e in envs] == ["0,1", "2,3", "4,5"]
  for e in envs:  # The GPU platform leaves the device count and platform alone.
    assert e["XLA_FLAGS"] == base["XLA_FLAGS"] and e["JAX_PLATFORMS"] == "cuda"
    assert "JAX_CPU_COLLECTIVES_IMPLEMENTATION" not in e
  # An inherited CUDA_VISIBLE_DEVICES is split into blocks.
  inherited = {"CUDA_VISIBLE_DEVICES": "4,5,6,7"}
  blocks = [child_environment(i, processes=2, devices_per_process=2,
                              coordinator_address="127.0.0.1:1", heartbeat_timeout=30,
                              platform="gpu", base_env=inherited)["CUDA_VISIBLE_DEVICES"]
            for i in range(2)]
  assert blocks == ["4,5", "6,7"]
  with pytest.raises(LaunchError, match="CUDA_VISIBLE_DEVICES='4,5,6,7' lists 4 GPUs"):
    child_environment(0, processes=3, devices_per_process=2, coordinator_address="127.0.0.1:1",
                      heartbeat_timeout=30, platform="gpu", base_env=inherited)
  # JAX_PLATFORMS=cpu inherited would run the "GPU" processes on the CPU: refused.
  with pytest.raises(LaunchError, match="JAX_PLATFORMS='cpu' names no GPU platform"):
    child_environment(0, processes=2, devices_per_process=1, coordinator_address="127.0.0.1:1",
                      heartbeat_timeout=30, platform="gpu", base_env={"JAX_PLATFORMS": "cpu"})
  assert child_environment(0, processes=2, devices_per_process=1,
                           coordinator_address="127.0.0.1:1", heartbeat_timeout=30,
                           platform="gpu",
                           base_env={"JAX_PLATFORMS": "cuda,cpu"})["JAX_PLATFORMS"] == "cuda,cpu"


def test_failure_stops_the_others_after_grace(tmp_path, capsys):
  script = _script(tmp_path, """
      if ME == 1:
        print("failing")
        sys.exit(3)
      time.sleep(300)
      """)
  out = io.StringIO()
  result = launch([script], processes=2, grace=0.5, timeout=BOUND, stream=out)
  assert not result.timed_out, result.summary
  assert result.returncode == 3
  assert result.failed == 1
  assert result.stopped == (0,)
  assert result.exit_codes == (-signal.SIGTERM, 3)
  assert "process 1 failed first (exit code 3)" in result.summary
  assert "process 0 was stopped (still running" in result.summary
  assert "after process 1 failed" in result.summary
  err = capsys.readouterr().err
  assert "mpmd.launch: process 1 failed with exit code 3" in err
  assert "mpmd.launch: " + result.summary in err
  assert _lines(out, 1) == ["failing"]


def test_failure_where_the_other_exits_on_its_own(tmp_path, capsys):
  # Process 1 writes its pid and fails; process 0 exits 1 once process 1 has been reaped,
  # so that the launcher surely sees process 1 fail first.
  flag = tmp_path / "p1.pid"
  script = _script(tmp_path, f"""
      flag = {str(flag)!r}
      if ME == 1:
        write(flag, str(os.getpid()))
        sys.exit(2)
      wait_for(flag)
      pid = int(open(flag).read())
      end = time.monotonic() + 60
      while time.monotonic() < end:
        try:
          os.kill(pid, 0)
        except ProcessLookupError:
          break
        time.sleep(0.01)
      print("peer is gone")
      sys.exit(1)
      """)
  out = io.StringIO()
  result = launch([script], processes=2, grace=BOUND, timeout=2 * BOUND, stream=out)
  assert result.returncode == 2, result.summary
  assert result.failed == 1
  assert result.stopped == ()
  assert result.exit_codes == (1, 2)
  assert "process 1 failed first (exit code 2)" in result.summary
  assert "process 0 exited with code 1" in result.summary
  assert _lines(out, 0) == ["peer is gone"]
  assert "mpmd.launch: " + result.summary in capsys.readouterr().err


def test_timeout_stops_everything(tmp_path, capsys):
  script = _script(tmp_path, """
      print("sleeping")
      time.sleep(300)
      """)
  result = launch([script], processes=2, timeout=1, grace=BOUND, stream=io.StringIO())
  assert result.timed_out
  assert result.returncode == 124
  assert result.failed is None
  assert sorted(result.stopped) == [0, 1]
  assert result.exit_codes == (-signal.SIGTERM, -signal.SIGTERM)
  assert result.summary.startswith("timed out after 1 s; still running: process 0, process 1")
  assert "mpmd.launch: timed out after 1 s; still running: process 0, process 1" in (
      capsys.readouterr().err)


def test_stopping_a_process_stops_its_subprocesses(tmp_path):
  gc_file = tmp_path / "grandchild.pid"
  script = _script(tmp_path, f"""
      gc_file = {str(gc_file)!r}
      if ME == 0:
        grandchild = subprocess.Popen(["sleep", "300"])
        write(gc_file, str(grandchild.pid))
        time.sleep(300)
      wait_for(gc_file)
      sys.exit(1)
      """)
  result = launch([script], processes=2, grace=0.2, timeout=BOUND, stream=io.StringIO())
  assert result.failed == 1 and result.stopped == (0,), result.summary
  grandchild = int(gc_file.read_text())
  assert _gone(grandchild), f"grandchild {grandchild} of the stopped process survived"


def test_sigkill_when_sigterm_is_ignored(tmp_path):
  ready = tmp_path / "ready"
  script = _script(tmp_path, f"""
      if ME == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        write({str(ready)!r}, "")
        time.sleep(300)
      wait_for({str(ready)!r})
      sys.exit(4)
      """)
  result = launch([script], processes=2, grace=0.2, kill_after=0.3, timeout=BOUND,
                  stream=io.StringIO())
  assert result.returncode == 4
  assert result.stopped == (0,)
  assert result.exit_codes == (-signal.SIGKILL, 4)
  assert "process 0 was stopped" in result.summary
  assert "killed after ignoring SIGTERM" in result.summary


def test_leftovers_of_a_finished_process_are_killed(tmp_path):
  # The background grandchild inherits the output pipe: without the cleanup, the
  # launcher would wait for it.
  gc_file = tmp_path / "grandchild.pid"
  script = _script(tmp_path, f"""
      grandchild = subprocess.Popen(["sleep", "300"])
      write({str(gc_file)!r} + str(ME), str(grandchild.pid))
      print("leaving")
      """)
  out = io.StringIO()
  result = launch([script], processes=2, timeout=BOUND, stream=out)
  assert result.returncode == 0, result.summary
  for i in range(2):
    assert _lines(out, i) == ["leaving"]
    grandchild = int(Path(f"{gc_file}{i}").read_text())
    assert _gone(grandchild), f"grandchild {grandchild} of process {i} survived"


def test_killed_by_signal_is_a_failure(tmp_path):
  script = _script(tmp_path, """
      if ME == 0:
        os.kill(os.getpid(), signal.SIGKILL)
      """)
  result = launch([script], processes=2, timeout=BOUND, stream=io.StringIO())
  assert result.failed == 0
  assert result.returncode == 1
  assert result.exit_codes[0] == -signal.SIGKILL
  assert "process 0 failed first (killed by signal SIGKILL)" in result.summary


def test_exit_code_of_a_worker_that_ended_on_a_signal_names_it(tmp_path, capsys):
  """A worker that ends itself on SIGTERM (as mpmd.distributed's handler
  does: exit code 128 + 15) is reported as having got SIGTERM."""
  script = _script(tmp_path, """
      if ME == 1:
        sys.stdout.flush()
        os._exit(128 + signal.SIGTERM)
      time.sleep(30)
      """)
  result = launch([script], processes=2, timeout=BOUND, grace=0, stream=io.StringIO())
  assert result.failed == 1 and result.exit_codes[1] == 143
  assert "process 1 failed first (exit code 143 (128 + SIGTERM: it got SIGTERM))" in result.summary
  assert "process 1 failed with exit code 143 (128 + SIGTERM: it got SIGTERM)" in (
      capsys.readouterr().err)


def test_bad_input(tmp_path, capsys):
  missing = str(tmp_path / "no_such_script.py")
  with pytest.raises(LaunchError, match="script not found: .*no_such_script.py"):
    launch([missing], timeout=BOUND)
  with pytest.raises(SystemExit) as exit_info:
    main(["--processes", "2", missing, "--flag"])
  assert exit_info.value.code == 2
  assert f"script not found: {missing}" in capsys.readouterr().err

  script = _script(tmp_path, "print('never runs')\n")
  with pytest.raises(SystemExit) as exit_info:
    main(["--processes", "0", script])
  assert exit_info.value.code == 2
  assert "argument --processes: must be an integer >= 1, got '0'" in capsys.readouterr().err
  with pytest.raises(SystemExit):
    main(["--devices-per-process", "-1", script])
  assert "--devices-per-process" in capsys.readouterr().err
  with pytest.raises(SystemExit):
    main(["--processes", "2"])
  assert "missing the program to run" in capsys.readouterr().err

  with pytest.raises(LaunchError, match="processes=0 is invalid"):
    launch([script], processes=0)
  with pytest.raises(LaunchError, match="devices_per_process=0 is invalid"):
    launch([script], devices_per_process=0)
  with pytest.raises(LaunchError, match="platform='tpu'"):
    launch([script], platform="tpu")
  with pytest.raises(LaunchError, match="grace=-1 is invalid"):
    launch([script], grace=-1)
  with pytest.raises(LaunchError, match="-m needs a module name"):
    launch(["-m"])
  with pytest.raises(LaunchError, match="command is empty"):
    launch([])


def test_module_form(tmp_path):
  package = tmp_path / "modules"
  package.mkdir()
  (package / "launched_mod.py").write_text(textwrap.dedent("""\
      import os, sys
      print("module", os.environ["MPMD_PROCESS_ID"], sys.argv[1:])
      """))
  out = io.StringIO()
  env = dict(os.environ, PYTHONPATH=str(package))
  result = launch(["-m", "launched_mod", "a", "--b"], processes=2, env=env, timeout=BOUND,
                  stream=out)
  assert result.returncode == 0, (result.summary, out.getvalue())
  assert _lines(out, 0) == ["module 0 ['a', '--b']"]
  assert _lines(out, 1) == ["module 1 ['a', '--b']"]


def test_split_argv_keeps_the_programs_flags():
  split = launch_mod._split_argv
  assert split(["--processes", "3", "s.py", "--processes", "5"]) == (
      ["--processes", "3"], ["s.py", "--processes", "5"])
  assert split(["--grace=1", "-m", "pkg.mod", "-x"]) == (["--grace=1"], ["-m", "pkg.mod", "-x"])
  assert split(["-mpkg.mod", "a"]) == ([], ["-mpkg.mod", "a"])
  assert split(["--timeout", "5", "--", "s.py"]) == (["--timeout", "5"], ["s.py"])


def _sleeping_script(tmp_path):
  """A child that records its pid, says it is ready, then sleeps 300 s:
  (script, ready files of processes 0 and 1, pid file prefix)."""
  pids = tmp_path / "pid"
  script = _script(tmp_path, f"""
      write({str(pids)!r} + str(ME), str(os.getpid()))
      write({str(tmp_path / 'ready')!r} + str(ME), "")
      time.sleep(300)
      """)
  return script, [tmp_path / f"ready{i}" for i in range(2)], pids


def test_keyboard_interrupt_stops_everything(tmp_path, capsys):
  script, ready, pids = _sleeping_script(tmp_path)

  def interrupt_when_ready():
    if _wait_files(ready, 30):
      _thread.interrupt_main()

  previous_sigint = signal.signal(signal.SIGINT, signal.default_int_handler)
  previous_sigterm = signal.getsignal(signal.SIGTERM)
  try:
    threading.Thread(target=interrupt_when_ready, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
      launch([script], processes=2, timeout=BOUND, stream=io.StringIO())
  finally:
    signal.signal(signal.SIGINT, previous_sigint)
  assert signal.getsignal(signal.SIGTERM) is previous_sigterm  # The launcher restored it.
  err = capsys.readouterr().err
  assert "mpmd.launch: interrupted by SIGINT; stopping process 0, process 1" in err
  assert "process 0 was stopped; process 1 was stopped" in err
  for i in range(2):
    assert _gone(int(Path(f"{pids}{i}").read_text()))


def test_cli_passes_arguments_and_exit_code(tmp_path):
  script = _script(tmp_path, """
      print("argv", sys.argv[1:], os.environ["XLA_FLAGS"].split()[-1])
      if ME == 1:
        sys.exit(int(sys.argv[sys.argv.index("--code") + 1]))
      """)
  proc = subprocess.run(
      [sys.executable, "-m", "mpmd.launch", "--processes", "2", "--devices-per-process", "3",
       "--grace", "30", "--timeout", str(BOUND), script, "--processes", "7", "--code", "5"],
      capture_output=True, text=True, timeout=SUBPROCESS_BOUND)
  assert proc.returncode == 5, proc.stderr
  for i in range(2):
    assert (f"[p{i}] argv ['--processes', '7', '--code', '5'] "
            "--xla_force_host_platform_device_count=3") in proc.stdout.splitlines()
  assert "mpmd.launch: process 1 failed with exit code 5" in proc.stderr
  assert "process 1 failed first (exit code 5)" in proc.stderr


def test_one_module_holds_the_launcher(tmp_path):
  """`mpmd.launch` is the launcher itself (no second module re-exporting
  it), and `python -m mpmd.launch` runs it without a warning about the
  module being imported twice."""
  import importlib.util  # noqa: PLC0415
  assert launch_mod.launch.__module__ == launch_mod.main.__module__ == "mpmd.launch"
  assert importlib.util.find_spec("mpmd.distributed.launch") is None
  script = _script(tmp_path, """
      print("hello from", ME)
      """)
  proc = subprocess.run(
      [sys.executable, "-m", "mpmd.launch", "--processes", "2", "--timeout", str(BOUND), script],
      capture_output=True, text=True, timeout=SUBPROCESS_BOUND)
  assert proc.returncode == 0, proc.stderr
  for i in range(2):
    assert f"[p{i}] hello from {i}" in proc.stdout.splitlines()
  assert "RuntimeWarning" not in proc.stderr, proc.stderr


def _signal_launcher(tmp_path, signum: int):
  """Starts `python -m mpmd.launch` on two sleeping processes, sends it
  `signum` once they run; returns (launcher, its stderr, pid file prefix)."""
  script, ready, pids = _sleeping_script(tmp_path)
  # (Its run folder in tmp_path: a SIGKILLed launcher cannot remove it.)
  launcher = subprocess.Popen(
      [sys.executable, "-m", "mpmd.launch", "--timeout", str(BOUND), script],
      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
      env={**os.environ, "TMPDIR": str(tmp_path)})
  try:
    assert _wait_files(ready), "the processes did not start"
    launcher.send_signal(signum)
    _, err = launcher.communicate(timeout=SUBPROCESS_BOUND)
  finally:
    if launcher.poll() is None:
      launcher.kill()
      launcher.communicate()
  return launcher, err, pids


def test_cli_sigterm_stops_everything(tmp_path):
  launcher, err, pids = _signal_launcher(tmp_path, signal.SIGTERM)
  assert launcher.returncode == 143, err
  assert "mpmd.launch: interrupted by SIGTERM; stopping process 0, process 1" in err
  for i in range(2):
    assert _gone(int(Path(f"{pids}{i}").read_text()))


def test_failures_in_the_same_poll_are_not_ordered(tmp_path, monkeypatch, capsys):
  """Two processes that fail between two polls: the launcher cannot tell
  which was first and says so instead of naming one."""
  monkeypatch.setattr(launch_mod, "_POLL_SECONDS", 3.0)  # both exit within one sleep
  script = _script(tmp_path, """
      write(%r + str(ME), "")
      wait_for(%r + str(1 - ME))
      sys.exit(4 + ME)
      """ % (str(tmp_path / "ready"), str(tmp_path / "ready")))
  result = launch([script], processes=2, timeout=BOUND, grace=BOUND, stream=io.StringIO())
  assert result.failed == 0 and result.stopped == ()
  assert result.exit_codes == (4, 5)
  assert result.summary.startswith("process 0, process 1 failed within 3.0 s of each other "
                                   "(exit code 4, exit code 5)"), result.summary
  assert "which one failed first is not known" in capsys.readouterr().err


def test_workers_die_with_a_killed_launcher(tmp_path):
  """SIGKILL leaves the launcher no chance to stop its processes: the kernel
  does it (the parent-death signal each worker sets before the program runs),
  so none is left running under init."""
  _, _, pids = _signal_launcher(tmp_path, signal.SIGKILL)
  for i in range(2):
    assert _gone(int(Path(f"{pids}{i}").read_text())), f"process {i} outlived its launcher"


def test_cpu_pinning_gives_each_process_its_own_cores(tmp_path, monkeypatch):
  """--cpus-per-process C: process i runs on the i-th block of C allowed CPUs
  (set before Python starts, so every thread of the worker inherits it)."""
  allowed = sorted(os.sched_getaffinity(0))
  if len(allowed) < 2:
    pytest.skip("needs 2 CPUs")
  script = _script(tmp_path, """\
      print("cpus", ",".join(str(c) for c in sorted(os.sched_getaffinity(0))), flush=True)
      """)
  out = io.StringIO()
  result = launch([script], processes=2, cpus_per_process=1, stream=out, log=io.StringIO(),
                  timeout=SUBPROCESS_BOUND)
  assert result.returncode == 0
  assert _lines(out, 0) == [f"cpus {allowed[0]}"] and _lines(out, 1) == [f"cpus {allowed[1]}"]
  # Without the option the worker keeps the launcher's CPUs, even if the
  # caller's environment carries the variable.
  monkeypatch.setenv(launch_mod.ENV_CPU_AFFINITY, str(allowed[0]))
  out = io.StringIO()
  assert launch([script], processes=1, stream=out, log=io.StringIO(),
                timeout=SUBPROCESS_BOUND).returncode == 0
  assert _lines(out, 0) == ["cpus " + ",".join(str(c) for c in allowed)]


def test_cpu_pinning_needs_enough_cpus(capsys):
  allowed = sorted(os.sched_getaffinity(0))
  with pytest.raises(LaunchError, match=rf"2 processes x {len(allowed)} CPUs need "
                     rf"{2 * len(allowed)} CPUs, but this process may run on {len(allowed)}"):
    launch_mod.cpu_block(0, 2, len(allowed))
  with pytest.raises(LaunchError, match="cpus_per_process=0 is invalid"):
    launch_mod.cpu_block(0, 2, 0)
  with pytest.raises(SystemExit):
    main(["--processes", "2", "--cpus-per-process", str(len(allowed)), __file__])
  assert "lower --processes or --cpus-per-process" in capsys.readouterr().err
  env = child_environment(0, processes=1, devices_per_process=1, coordinator_address="h:1",
                          heartbeat_timeout=30, platform="cpu", base_env={},
                          cpus_per_process=1)
  assert env[launch_mod.ENV_CPU_AFFINITY] == str(allowed[0])


def test_the_launcher_starts_without_importing_jax():
  """`python -m mpmd.launch` imports neither JAX nor the stages (a second
  saved in every launch): the package binds its public names on first use."""
  code = ("import sys, mpmd.launch\n"
          "assert 'jax' not in sys.modules, sorted(m for m in sys.modules if 'jax' in m)\n"
          "assert 'mpmd.jit' not in sys.modules\n"
          "print('ok')\n")
  _prints_ok(code)


def _prints_ok(code: str) -> None:
  """Runs `code` in a fresh Python: it must print "ok" and exit 0."""
  result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=SUBPROCESS_BOUND)
  assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


def test_public_names_are_the_functions_whatever_was_imported_first():
  """`mpmd.jit` and `mpmd.plan` name the functions, also when their modules
  of the same names were imported first (importing a submodule binds it on
  its package); every name of `__all__` resolves, and `dir` lists it."""
  code = ("import mpmd.stages, mpmd.plan.planner, mpmd.jit\n"
          "import mpmd, types\n"
          "assert callable(mpmd.jit) and not isinstance(mpmd.jit, types.ModuleType)\n"
          "assert callable(mpmd.plan) and not isinstance(mpmd.plan, types.ModuleType)\n"
          "assert isinstance(mpmd.distributed, types.ModuleType)\n"
          "import mpmd.jit, mpmd.plan\n"
          "assert not isinstance(mpmd.jit, types.ModuleType)\n"
          "assert all(getattr(mpmd, n) is not None for n in mpmd.__all__)\n"
          "assert set(mpmd.__all__) <= set(dir(mpmd))\n"
          "try:\n"
          "  mpmd.no_such_name\n"
          "except AttributeError as e:\n"
          "  assert 'no_such_name' in str(e)\n"
          "print('ok')\n")
  _prints_ok(code)
