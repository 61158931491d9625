"""Multi-process execution (JAX's distributed runtime, gloo on CPU).

The tests marked `multiprocess` start 2 processes x 4 CPU devices with
`python -m mpmd.launch` and run examples/train_multiprocess.py; the others
check the pieces (transfer plans, the cross-process transfer collective,
RemoteArray, gather) inside this process, where all 8 devices are local.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import mpmd
from mpmd.run import crossprocess
from mpmd.distributed import DistributedError, RemoteArray

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(ROOT, "examples", "train_multiprocess.py")
FAULT_SCRIPT = os.path.join(ROOT, "test", "python", "multiprocess", "fault_mid_step.py")
DONATED_STATE = os.path.join(ROOT, "test", "python", "multiprocess", "donated_state.py")


def _meshes(src_shape, dst_shape, src_axes=("data",), dst_axes=("data",)):
  devices = jax.devices()
  n = int(np.prod(src_shape))
  src = Mesh(np.array(devices[:n]).reshape(src_shape), src_axes)
  dst = Mesh(np.array(devices[n:n + int(np.prod(dst_shape))]).reshape(dst_shape), dst_axes)
  return src, dst


# --- transfer plans ----------------------------------------------------------------------------

def test_plan_same_shape_sends_each_block_once():
  src, dst = _meshes((4,), (4,))
  plan = crossprocess.make_plan(src, dst, (8, 6), np.float32, NamedSharding(dst, P("data")))
  assert plan.block == (2, 6)
  assert plan.rounds == (((0, 4), (1, 5), (2, 6), (3, 7)),)
  assert plan.wire_src.spec == P("data") and plan.wire_dst is plan.target
  assert plan.wire_shape == (16, 6)


def test_plan_different_mesh_shapes_sends_whole_value_to_each_target():
  src, dst = _meshes((2,), (2, 3), dst_axes=("data", "model"))
  target = NamedSharding(dst, P("data", "model"))
  plan = crossprocess.make_plan(src, dst, (4, 6), np.float32, target)
  assert plan.block == (4, 6)
  assert plan.wire_src.is_fully_replicated and plan.wire_dst.is_fully_replicated
  # 6 targets fed by 2 sources: 3 rounds, each source sends once per round.
  assert plan.rounds == (((0, 2), (1, 3)), ((0, 4), (1, 5)), ((0, 6), (1, 7)))


def test_plan_rejects_meshes_sharing_devices():
  devices = jax.devices()
  a = Mesh(np.array(devices[:4]), ("data",))
  b = Mesh(np.array(devices[2:6]), ("data",))
  with pytest.raises(mpmd.MpmdError, match="sharing devices"):
    crossprocess.make_plan(a, b, (4,), np.float32, NamedSharding(b, P()))


# --- the collective, run inside one process (all devices local) -------------------------------

@pytest.mark.parametrize("src_shape,dst_shape,dst_axes,spec,shape,dtype", [
    ((4,), (4,), ("data",), P("data"), (8, 3), np.float32),       # block by block
    ((4,), (4,), ("data",), P(None, "data"), (3, 8), np.int32),   # other dim
    ((4,), (4,), ("data",), P(), (5,), np.float32),               # replicated
    ((2,), (2, 3), ("data", "model"), P("data", "model"), (4, 6), np.float32),  # 3 rounds
    ((4,), (2,), ("data",), P("data"), (4, 2), np.float32),       # fewer targets
    ((4,), (4,), ("data",), P(), (), np.float32),                 # scalar
    ((2,), (2,), ("data",), P("data"), (4,), np.bool_),           # bool
])
def test_cross_process_transfer_moves_values_exactly(src_shape, dst_shape, dst_axes, spec, shape,
                                                     dtype):
  src, dst = _meshes(src_shape, dst_shape, dst_axes=dst_axes)
  value = (np.arange(int(np.prod(shape))).reshape(shape) % 7).astype(dtype)
  x = jax.device_put(value, NamedSharding(src, P("data") if shape and shape[0] % 4 == 0 else P()))
  target = NamedSharding(dst, spec)
  transfer = crossprocess.CrossProcessTransfer(
      crossprocess.make_plan(src, dst, shape, dtype, target))
  assert transfer.sends and transfer.receives
  for _ in range(2):  # the second call reuses the compiled collective
    y = transfer(x)
    assert y.sharding.is_equivalent_to(target, len(shape))
    assert y.dtype == dtype
    np.testing.assert_array_equal(np.asarray(y), value)
  assert not x.is_deleted()


# --- RemoteArray and gather ---------------------------------------------------------------------

def test_remote_array_says_where_the_value_is():
  r = RemoteArray((4, 8), np.float32, "stage1_mesh", (1,))
  assert (r.shape, r.dtype, r.ndim, r.size) == ((4, 8), np.float32, 2, 32)
  assert "stage1_mesh" in repr(r)
  with pytest.raises(DistributedError, match=r"mesh 'stage1_mesh', owned by process 1.*gather"):
    np.asarray(r)


def test_gather_in_one_process_is_device_get():
  x = jax.device_put(jnp.arange(4.0), jax.devices()[3])
  got = mpmd.distributed.gather({"x": x, "n": 3})
  np.testing.assert_array_equal(got["x"], np.arange(4.0))
  assert isinstance(got["x"], np.ndarray) and got["n"] == 3


# --- several processes --------------------------------------------------------------------------

def _load_example():
  spec = importlib.util.spec_from_file_location("train_multiprocess", EXAMPLE)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def _launch(args, *, processes=2, devices=4, timeout=240, grace=60, env=None):
  cmd = [sys.executable, "-m", "mpmd.launch", "--processes", str(processes),
         "--devices-per-process", str(devices), "--timeout", str(timeout), "--grace", str(grace),
         *args]
  run_env = dict(os.environ)
  # (XLA_FLAGS is inherited: the launcher replaces its device count and keeps the rest.)
  run_env.update(env or {})
  return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout + 60, env=run_env,
                        cwd=ROOT)


def _reference(example, steps, microbatches, stages):
  """Single-process `jax.jit` of the example's step, on this process's devices."""
  params = example.init_params(stages, 64, 16, 4)
  xs, ys = example.make_data(microbatches, 16, 16, 4)
  step = jax.jit(example.train_step)
  losses = []
  for _ in range(steps):
    loss, params = step(params, xs, ys)
    losses.append(float(loss))
  return np.array(losses), [np.asarray(a) for a in jax.tree.leaves(params)]


@pytest.mark.multiprocess
@pytest.mark.parametrize("layout,stages,expected", [
    # one mesh of one device per process: each runs only its own fragments;
    # every transfer crosses processes (4 microbatches x activation and
    # gradient) as a pull through JAX's transfer server (single-process meshes
    # of the same shape); 8 calls of the microbatches' fragments and the
    # optimizer update; on the last stage each microbatch's forward and
    # backward are one program: 4 calls
    ("per-process-1-device", 2, [
        "[p0] process 0/2: runs fragments on meshes ['p0']; per step 9 calls, "
        "0 transfers inside the process, 8 across processes (8 pulls, 0 collectives)",
        "[p1] process 1/2: runs fragments on meshes ['p1']; per step 5 calls, "
        "0 transfers inside the process, 8 across processes (8 pulls, 0 collectives)"]),
    # CPU meshes of several devices: collectives (pulls into them could hang)
    ("per-process", 2, ["[p0] process 0/2: runs fragments on meshes ['p0']; per step 9 calls, "
                        "0 transfers inside the process, 8 across processes (0 pulls, "
                        "8 collectives)"]),
    # two meshes per process: transfers inside a process stay device_put
    ("2-per-process", 4, ["[p0] process 0/2: runs fragments on meshes ['p0m0', 'p0m1']",
                          "[p1] process 1/2: runs fragments on meshes ['p1m0', 'p1m1']",
                          "8 transfers inside the process, 8 across processes"]),
    # meshes of different shapes (2 and 1 devices in each process): the
    # transfers between them, inside a process and across, change layout
    ("uneven", 4, ["[p0] process 0/2: runs fragments on meshes ['p0m0', 'p0m1']; per step 18 "
                   "calls, 8 transfers inside the process, 8 across processes (0 pulls, "
                   "8 collectives)",
                   "[p1] process 1/2: runs fragments on meshes ['p1m0', 'p1m1']"]),
    # meshes spanning both processes: every process runs every fragment
    ("spanning", 2, ["[p0] process 0/2: runs fragments on meshes ['m0', 'm1']",
                     "[p1] process 1/2: runs fragments on meshes ['m0', 'm1']"]),
    # the transfers of one-device meshes as collectives, when asked for
    ("per-process-1-device-collective", 2, ["[p0] process 0/2: runs fragments on meshes ['p0']; per "
                                   "step 9 calls, 0 transfers inside the process, 8 across "
                                   "processes (0 pulls, 8 collectives)"]),
])
@pytest.mark.slow
def test_processes_train_like_jax_jit(tmp_path, layout, stages, expected):
  """2 processes x 4 CPU devices (or 1), 1F1B over 4 microbatches, 3 steps,
  against single-process `jax.jit` of the same step."""
  out = tmp_path / "result.npz"
  extra = (["--layout", "per-process", "--meshes-per-process", "2"] if layout == "2-per-process"
           else ["--layout", layout.removesuffix("-collective").removesuffix("-1-device")])
  env = {"MPMD_CROSS_PROCESS_TRANSFERS": "collective"} if layout.endswith("-collective") else None
  result = _launch([EXAMPLE, "--steps", "3", "--microbatches", "4", "--schedule", "1F1B", *extra,
                    "--out", str(out)], env=env, devices=1 if "-1-device" in layout else 4)
  assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
  for line in expected:
    assert line in result.stdout, result.stdout[-4000:]
  saved = np.load(out)
  ref_losses, ref_params = _reference(_load_example(), 3, 4, stages)
  np.testing.assert_allclose(saved["losses"], ref_losses, rtol=1e-5)
  for k, ref in enumerate(ref_params):
    np.testing.assert_allclose(saved[f"param{k}"], ref, rtol=1e-5, atol=1e-6)
  assert len(ref_params) == 4 * stages and ref_losses[2] < ref_losses[0]


def _donated_state_run(tmp_path, *flags):
  """test/python/multiprocess/donated_state.py over 2 processes of one CPU
  device (every transfer a pull); each process's normwise differences from
  `jax.jit` after 3 steps."""
  out = tmp_path / "diffs"
  result = _launch([DONATED_STATE, "--steps", "3", "--out", str(out), *flags], devices=1,
                   timeout=180)
  assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-4000:]
  return result, [dict(np.load(f"{out}.p{i}.npz")) for i in range(2)]


@pytest.mark.multiprocess
@pytest.mark.slow
def test_donated_state_offered_for_a_pull_is_not_consumed_before_it(tmp_path):
  """The state is donated, and its tied embedding is offered to process 1
  (a pull) at the start of the step, while process 0's update, dispatched
  long before process 1 pulls, donates it: the pull used to fail on process
  1 (`CopyRawSubBufferToHost() called on deleted or donated buffer`). The
  offer is a copy now, and both processes train like `jax.jit`."""
  result, diffs = _donated_state_run(tmp_path, "--donate")
  for d in diffs:
    assert d["params"] < 1e-6 and d["momentum"] < 1e-6 and d["loss"] < 1e-6, diffs
  assert "deleted or donated" not in result.stdout + result.stderr


@pytest.mark.multiprocess
@pytest.mark.slow
def test_typed_key_output_of_another_process_is_a_placeholder(tmp_path):
  """A typed PRNG key in the state, held by process 0's mesh: on
  process 1 it comes back as a `RemoteArray` of the key's shape and dtype
  (it used to fail wrapping the placeholder), is passed back to the next
  step, and every result equals `jax.jit`'s (the key's data on process 0)."""
  result, diffs = _donated_state_run(tmp_path, "--typed-key")
  for d in diffs:
    assert d["params"] < 1e-6 and d["momentum"] < 1e-6 and d["loss"] < 1e-6, diffs
  assert diffs[0]["key"] == 0.0 and "key" not in diffs[1], diffs
  assert "[p1] process 1: step 2 loss" in result.stdout and "key RemoteArray" in result.stdout


@pytest.mark.multiprocess
@pytest.mark.slow
def test_a_process_failing_mid_step_stops_the_others(tmp_path):
  """Process 1 raises half-way through step 1; process 0, waiting on a
  collective with it, fails on its own (closed connection) instead of hanging."""
  result = _launch([FAULT_SCRIPT, "--steps", "3"], timeout=120, grace=60)
  out = result.stdout + result.stderr
  assert result.returncode != 0, out[-6000:]
  p1 = "\n".join(line for line in result.stdout.splitlines() if line.startswith("[p1]"))
  assert "injected failure in fragment" in p1 and "on mesh 'p1'" in p1, out[-6000:]
  assert "step 2" not in out
  # Process 0 ended on its own with an error: its collective with process 1
  # failed (the usual case), or JAX's coordination service saw process 1 die.
  # The launcher did not have to stop it. (Both often end within one poll of
  # the launcher, which then says it cannot order them.)
  tied = "process 0, process 1 failed within" in result.stderr
  for i in (0, 1):
    assert tied or re.search(rf"process {i} (failed first|exited with code [1-9]|was killed by "
                             "signal)", result.stderr), out[-6000:]
  assert "was stopped" not in result.stderr, out[-6000:]


@pytest.mark.multiprocess
@pytest.mark.slow
def test_processes_running_different_programs_fail_with_a_clear_error(tmp_path):
  """Process 1 lowers for another batch size: the processes lay out
  different programs, and they say so within MPMD_DISTRIBUTED_TIMEOUT."""
  script = tmp_path / "mismatch.py"
  script.write_text(
      "import os, runpy, sys\n"
      "sys.argv = [sys.argv[0]] + (['--batch', '8'] if os.environ['MPMD_PROCESS_ID'] == '1' "
      "else [])\n"
      f"runpy.run_path({EXAMPLE!r}, run_name='__main__')\n")
  result = _launch([str(script)], timeout=120, grace=60, env={"MPMD_DISTRIBUTED_TIMEOUT": "5"})
  out = result.stdout + result.stderr
  assert result.returncode != 0, out[-4000:]
  assert "waited 5 s (MPMD_DISTRIBUTED_TIMEOUT) for process" in out
  assert "to lay out the same program" in out
  assert "every process must call the same mpmd.jit program" in out


UNEVEN_STEPS = """\
import importlib.util, sys, time
import jax
import mpmd
from jax.sharding import PartitionSpec as P
spec = importlib.util.spec_from_file_location("example", {example!r})
example = importlib.util.module_from_spec(spec)
spec.loader.exec_module(example)
mpmd.distributed.initialize()
me = jax.process_index()
config = example.make_config("1F1B", "per-process", 1)
params = example.init_params(len(config.topology), 64, 16, 4)
xs, ys = example.make_data(4, 16, 16, 4)
step = mpmd.jit(example.train_step, config, in_shardings=(None, P("data"), P("data")))
for i in range({steps}):
  {lag}
  loss, params = step(params, xs, ys)
  jax.block_until_ready(params)
  print(f"process {{me}}: step {{i}} done", flush=True)
"""


@pytest.mark.multiprocess
@pytest.mark.slow
@pytest.mark.parametrize("lag", ["pass", "if me == 1 and i == 2: time.sleep(4)"],
                         ids=["together", "process-1-lags"])
def test_processes_running_different_step_counts_fail_naming_the_counts(tmp_path, lag):
  """Process 0 runs 2 steps, process 1 runs 3: process 1's third call waits
  on process 0 for ever (JAX's shutdown barrier would end both after about
  300 s, saying nothing of steps). Both fail on their own instead, within
  about MPMD_STEP_CHECK_INTERVAL of process 0's exit, naming both processes,
  their call counts and the call site. Also when process 1 reads process 0's
  end before it starts its third call (it lags behind): that call fails at
  its start (once, the end was read and the call counts compared only then,
  and process 1 waited for ever; seen under load)."""
  script = tmp_path / "uneven.py"
  script.write_text(UNEVEN_STEPS.format(example=str(EXAMPLE), lag=lag,
                                        steps="2 if me == 0 else 3"))
  result = _launch([str(script)], timeout=90, grace=30)
  out = result.stdout + result.stderr
  assert result.returncode != 0, out[-4000:]
  assert "process 1: step 1 done" in out and "step 2 done" not in out, out[-4000:]
  message = re.search(r"process 0 finished \(is exiting\) after 2 call\(s\) of mpmd.jit program "
                      r"'train_step' \(\w+\), but process 1 started call 3 of it \(at "
                      r"\S+uneven.py:\d+\), which needs process 0", out)
  assert message, out[-4000:]
  p0 = [line for line in result.stdout.splitlines() if line.startswith("[p0]")]
  assert any("another process reports" in line for line in p0), out[-4000:]
  # Both ended on their own: the launcher stopped no one.
  assert "was stopped" not in result.stderr and "timed out" not in result.stderr, out[-4000:]


@pytest.mark.multiprocess
@pytest.mark.slow
def test_processes_running_the_same_step_counts_exit_cleanly(tmp_path):
  script = tmp_path / "even.py"
  script.write_text(UNEVEN_STEPS.format(example=str(EXAMPLE), lag="pass", steps="2"))
  result = _launch([str(script)], timeout=120, grace=60)
  out = result.stdout + result.stderr
  assert result.returncode == 0, out[-4000:]
  assert "finished (is exiting)" not in out and "step 1 done" in out


def test_initialize_without_coordinator_says_how_to_start():
  env = {k: v for k, v in os.environ.items() if not k.startswith("MPMD_")}
  done = subprocess.run([sys.executable, "-c", "import mpmd; mpmd.distributed.initialize()"],
                        capture_output=True, text=True, timeout=120, env=env)
  assert done.returncode != 0
  assert "DistributedError: cannot join a multi-process run" in done.stderr, done.stderr[-2000:]
  assert "python -m mpmd.launch --processes N script.py" in done.stderr
