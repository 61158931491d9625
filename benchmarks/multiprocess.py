"""(f) Several processes: step time and transfer cost, side by side in one run.

Step time of the training step of examples/train_multiprocess.py (2 pipeline
stages of 2 dense layers, 1F1B, microbatches sharded over each mesh's "data"
axis), run three ways on the same 8 CPU devices:

* mpmd in ONE process, 2 meshes x 4 devices (transfers are `device_put`);
* mpmd over TWO processes x 4 devices (`python -m mpmd.launch`; each process
  runs its own mesh, transfers are gloo collectives over loopback TCP);
* `jax.jit` of the same step in one process, the batch sharded over all 8;

the mpmd runs once with the microbatches sharded over each mesh's `data`
axis (gradients are all-reduced inside each mesh) and once replicated (no
collectives inside meshes): in a multi-process CPU run, XLA runs every
collective through gloo, those inside a process's own mesh too.

And the cost of one transfer between the two meshes (a value sharded over
4 devices, moved there and back many times): `device_put` inside one process
against the cross-process collective, for three sizes.

    python benchmarks/multiprocess.py            # writes section (f)
    python benchmarks/multiprocess.py --quick --output /tmp/r.md   # smoke run
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

import _common  # noqa: E402
import mpmd  # noqa: E402
from mpmd.run import crossprocess  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _example():
  spec = importlib.util.spec_from_file_location("train_multiprocess",
                                                ROOT / "examples" / "train_multiprocess.py")
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def _problem(args):
  ex = _example()
  params = ex.init_params(2, args.width, 16, 4)
  xs, ys = ex.make_data(args.microbatches, args.batch, 16, 4)
  return ex, params, xs, ys


def _time_steps(step, params, xs, ys, steps: int, finish) -> tuple[float, float]:
  """(first call incl. compile, seconds per step over `steps` more steps)."""
  t0 = time.perf_counter()
  loss, params = step(params, xs, ys)
  finish(loss, params)
  first = time.perf_counter() - t0
  loss, params = step(params, xs, ys)  # settle layouts (a recompile, if any)
  finish(loss, params)
  t0 = time.perf_counter()
  for _ in range(steps):
    loss, params = step(params, xs, ys)
  finish(loss, params)
  return first, (time.perf_counter() - t0) / steps


def _time_transfers(move_there, move_back, x, rounds: int, finish) -> float:
  """Seconds per transfer, moving `x` there and back `rounds` times."""
  y = move_back(move_there(x))
  finish(y)
  t0 = time.perf_counter()
  for _ in range(rounds):
    y = move_back(move_there(y))
  finish(y)
  return (time.perf_counter() - t0) / (2 * rounds)


def _sizes(args) -> list[int]:
  """Elements of the transferred float32 values (multiples of 4 devices)."""
  return [1024, 256 * 1024] if args.quick else [1024, 256 * 1024, 4 * 1024 * 1024]


_SHARDED = (None, P("data"), P("data"))


def worker(args) -> int:
  """Runs in each launched process; process 0 writes the figures as JSON."""
  mpmd.distributed.initialize()
  ex, params, xs, ys = _problem(args)
  config = ex.make_config("1F1B")

  def finish(loss, params):
    jax.block_until_ready([x for x in jax.tree.leaves(params) if isinstance(x, jax.Array)])
    mpmd.distributed.gather(loss)  # the end of the step on every process

  steps = {}
  for name, shardings in (("sharded", _SHARDED), ("replicated", None)):
    step = mpmd.jit(ex.train_step, config, in_shardings=shardings)
    steps[name] = _time_steps(step, params, xs, ys, args.steps, finish)

  a, b = config.topology["p0"], config.topology["p1"]
  me = jax.process_index()
  transfers = {}
  for n in _sizes(args):
    there = crossprocess.CrossProcessTransfer(crossprocess.make_plan(
        a, b, (n,), np.float32, NamedSharding(b, P("data"))))
    back = crossprocess.CrossProcessTransfer(crossprocess.make_plan(
        b, a, (n,), np.float32, NamedSharding(a, P("data"))))
    x = jax.device_put(np.ones((n,), np.float32), NamedSharding(a, P("data"))) if me == 0 else None
    rounds = max(4, min(200, (64 << 20) // (n * 4)))
    transfers[n] = _time_transfers(there, back, x, rounds if not args.quick else 3,
                                   lambda y: jax.block_until_ready(y) if y is not None else None)
  if me == 0:
    pathlib.Path(args.worker).write_text(json.dumps({"steps": steps, "transfers": transfers}))
  return 0


def _in_process(args) -> dict:
  ex, params, xs, ys = _problem(args)
  devices = np.array(jax.devices()[:8])
  topology = {"p0": Mesh(devices[:4], ("data",)), "p1": Mesh(devices[4:], ("data",))}
  config = mpmd.make_config(topology, {"stage0": "p0", "stage1": "p1"}, pipeline_schedule="1F1B")

  def finish(loss, params):
    jax.block_until_ready((loss, params))

  steps = {}
  for name, shardings in (("sharded", _SHARDED), ("replicated", None)):
    step = mpmd.jit(ex.train_step, config, in_shardings=shardings)
    steps[name] = _time_steps(step, params, xs, ys, args.steps, finish)
  everywhere = Mesh(devices, ("data",))
  batch = NamedSharding(everywhere, P("data"))
  reference = jax.jit(ex.train_step, in_shardings=(NamedSharding(everywhere, P()), batch, batch))
  steps["jax.jit"] = _time_steps(reference, params, xs, ys, args.steps, finish)
  transfers = {}
  a, b = (NamedSharding(topology[m], P("data")) for m in ("p0", "p1"))
  for n in _sizes(args):
    x = jax.device_put(np.ones((n,), np.float32), a)
    rounds = max(4, min(200, (64 << 20) // (n * 4)))
    transfers[n] = _time_transfers(lambda v: jax.device_put(v, b), lambda v: jax.device_put(v, a),
                                   x, rounds if not args.quick else 3, jax.block_until_ready)
  return {"steps": steps, "transfers": transfers}


def _launched(args) -> dict:
  with tempfile.TemporaryDirectory() as tmp:
    out = pathlib.Path(tmp) / "figures.json"
    cmd = [sys.executable, "-m", "mpmd.launch", "--processes", "2", "--devices-per-process", "4",
           "--timeout", "900", str(pathlib.Path(__file__).resolve()), "--worker", str(out),
           "--steps", str(args.steps), "--microbatches", str(args.microbatches),
           "--batch", str(args.batch), "--width", str(args.width)]
    env = None
    if args.quick:
      cmd.append("--quick")
      env = _common.quick_env(dict(os.environ))  # a smoke run: LLVM's optimisation off
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=960, cwd=ROOT, env=env)
    if done.returncode != 0:
      raise RuntimeError(f"the 2-process run failed ({done.returncode}):\n"
                         f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    figures = json.loads(out.read_text())
  figures["transfers"] = {int(k): v for k, v in figures["transfers"].items()}
  return figures


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--steps", type=int, default=20)
  parser.add_argument("--microbatches", type=int, default=8)
  parser.add_argument("--batch", type=int, default=64, help="rows per microbatch")
  parser.add_argument("--width", type=int, default=512)
  parser.add_argument("--quick", action="store_true", help="tiny sizes (a smoke run)")
  parser.add_argument("--output", default=None, help="results file (default RESULTS.md)")
  parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  if args.worker:
    return worker(args)
  command = _common.command_line(__file__, argv)
  single = _in_process(args)
  multi = _launched(args)
  ms = lambda s: f"{s * 1e3:.1f}"  # noqa: E731
  one, two = single["steps"], multi["steps"]
  rows = []
  for name, label in (("sharded", "sharded over `data`"), ("replicated", "replicated")):
    base = one[name][1]
    rows.append([f"mpmd, 1 process, 2 meshes x 4; batch {label}", f"{one[name][0]:.2f}",
                 ms(base), "1.00x"])
    rows.append([f"mpmd, 2 processes x 4 (gloo); batch {label}", f"{two[name][0]:.2f}",
                 ms(two[name][1]), f"{two[name][1] / base:.2f}x"])
  rows.append(["jax.jit, 1 process, 8 devices; batch sharded", f"{one['jax.jit'][0]:.2f}",
               ms(one["jax.jit"][1]), f"{one['jax.jit'][1] / one['sharded'][1]:.2f}x"])
  steps = _common.markdown_table(["run", "first call (s)", "step (ms)", "vs 1 process"], rows)
  rows = []
  for n in _sizes(args):
    local, remote = single["transfers"][n], multi["transfers"][n]
    rows.append([f"{n * 4 / 1024:.0f} KiB", f"{local * 1e6:.0f}", f"{remote * 1e6:.0f}",
                 f"{remote / local:.1f}x", f"{n * 4 / remote / 2**20:.0f}"])
  transfers = _common.markdown_table(
      ["value (f32, 4 shards)", "device_put (µs)", "cross-process (µs)", "ratio",
       "cross-process MiB/s"], rows)
  body = f"""{_common.provenance(command)}

The training step of `examples/train_multiprocess.py`: 2 stages of 2 dense
layers, width {args.width}, {args.microbatches} microbatches of {args.batch} rows,
1F1B. Step time is the mean
over {args.steps} steps after two warm-up steps, each run ending when every process
has its results (the 2-process run ends its timing with a `gather` of the loss).

{steps}

One transfer between the meshes (4 shards, one per device; moved there and
back, mean per transfer):

{transfers}

With the batch sharded, most of the 2-process step is gloo: in a multi-process
CPU run XLA runs every collective through gloo (TCP), also the gradient
all-reduces inside a process's own mesh, which one process does through
shared memory; the replicated rows show the cost of the cross-process
transfers alone. On this 2-core machine the two processes also share the cores
of their 8 virtual devices, so these are upper bounds for real hosts, where
NCCL does the collectives on GPUs.
"""
  path = _common.write_section("f", body, args.output)
  print(body)
  print(f"wrote section (f) of {path}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
