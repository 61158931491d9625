"""(h) Real pipeline parallelism on a CPU machine: two pinned processes.

All meshes of one process share the machine's cores, so a single-process CPU
run cannot beat `jax.jit`. Two processes pinned to separate cores can: this
runs a 2-stage 1F1B step (examples/train_multiprocess.py's model, widened so
that one stage's forward of one microbatch takes >= 10 ms) with M
microbatches as

* mpmd over 2 processes, one CPU device and one core each
  (`python -m mpmd.launch --processes 2 --devices-per-process 1
  --cpus-per-process 1`);
* `jax.jit` of the same step on one device pinned to one core (the same
  arithmetic on the same core as one stage of the pipeline);
* `jax.jit` on one device, unpinned (XLA's intra-op threads use both cores:
  what a user of this machine would pick instead).

The pipeline runs twice: with cross-process pulls (the default) and with
gloo collectives. It reports the speed-up over pinned `jax.jit` next to the 1F1B ideal
P*M/(M+P-1) (P = 2 stages), and the measured bubble next to the simulated one
(`mpmd.schedule.simulate` with the F and B times of the pipeline's own
programs and the transfer time, measured in the same processes). Measured
bubble = 1 - (time each stage computes, from its measured F and B) /
(stages x step time).

    python benchmarks/pinned_pipeline.py                 # writes section (h)
    python benchmarks/pinned_pipeline.py --quick --output /tmp/r.md   # smoke run
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

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

ROOT = pathlib.Path(__file__).resolve().parents[1]
IN_DIM, OUT_DIM = 16, 4


def _example():
  spec = importlib.util.spec_from_file_location("train_multiprocess",
                                                ROOT / "examples" / "train_multiprocess.py")
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def _median_seconds(run, finish, repeats: int) -> float:
  """Median wall time of `run()` followed by `finish(result)`, after one warm-up."""
  finish(run())
  times = []
  for _ in range(repeats):
    t0 = time.perf_counter()
    finish(run())
    times.append(time.perf_counter() - t0)
  return statistics.median(times)


def _stage_costs(compiled, repeats: int) -> tuple[float, float]:
  """(F, B) seconds of one microbatch on this process: the pipeline's own
  forward and backward programs (its units `F<i>` and `B<i>`, their
  gradient accumulation included) run alone on zeros, median over their
  calls of `repeats` runs each. A stage whose forward and backward are one
  program (`F<i>+B<i>`, the last stage by default) reports that program's
  time as B and 0 as F."""
  import jax  # noqa: PLC0415
  import numpy as np  # noqa: PLC0415
  from mpmd.run import program as rt  # noqa: PLC0415

  times: dict[str, list[float]] = {"F": [], "B": []}
  seen = set()
  for inst in compiled.instructions:
    if not isinstance(inst, rt.CallInstruction) or not inst.unit:
      continue
    kind = "B" if "B" in inst.unit else "F"
    fragment = inst.fragment
    if (kind, fragment.name) in seen:  # microbatches share programs
      continue
    seen.add((kind, fragment.name))
    zeros = [np.zeros(a.shape, a.dtype) for a in fragment.in_avals]

    def args():
      return [jax.device_put(z, a.sharding) for z, a in zip(zeros, fragment.in_avals)]

    for _ in range(repeats):
      xs = jax.block_until_ready(args())  # fresh: the program may consume them
      t0 = time.perf_counter()
      jax.block_until_ready(fragment.call_trusted(xs))
      times[kind].append(time.perf_counter() - t0)
  return tuple(statistics.median(times[k]) if times[k] else 0.0 for k in ("F", "B"))


def worker(args) -> int:
  """One pipeline stage per process (launched); process 0 writes JSON."""
  import jax  # noqa: PLC0415
  import numpy as np  # noqa: PLC0415
  from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: PLC0415

  import mpmd  # noqa: PLC0415
  from mpmd.run import crossprocess  # noqa: PLC0415

  mpmd.distributed.initialize()
  ex = _example()
  me = jax.process_index()
  params = ex.init_params(2, args.width, IN_DIM, OUT_DIM)
  xs, ys = ex.make_data(args.microbatches, args.batch, IN_DIM, OUT_DIM)
  config = ex.make_config("1F1B")
  step = mpmd.jit(ex.train_step, config)
  t0 = time.perf_counter()
  compiled = step.lower(params, xs, ys).compile()
  compile_s = time.perf_counter() - t0

  def finish(result):
    loss, new = result
    jax.block_until_ready([x for x in jax.tree.leaves(new) if isinstance(x, jax.Array)])
    mpmd.distributed.gather(loss)  # the end of the step on every process

  state = {"params": params}

  def run():
    loss, state["params"] = compiled(state["params"], xs, ys)
    return loss, state["params"]

  step_s = _median_seconds(run, finish, args.steps)
  f, b = _stage_costs(compiled, args.repeats)

  # One activation between the two processes (one way), moved as the
  # pipeline moves it (a pull, or a collective).
  a, c = config.topology["p0"], config.topology["p1"]
  shape = (args.batch, args.width)

  def transfer(src, dst, name):
    plan = crossprocess.make_plan(src, dst, shape, np.float32, NamedSharding(dst, P()))
    ends = ((src.devices.flat[0].process_index,), (dst.devices.flat[0].process_index,))
    if crossprocess.pull_applies(plan, *ends):
      return crossprocess.PullTransfer(plan, f"bench/{name}", ends[0][0], ends[1][0])
    return crossprocess.CrossProcessTransfer(plan)

  there, back = transfer(a, c, "there"), transfer(c, a, "back")
  x = jax.device_put(np.ones(shape, np.float32), NamedSharding(a, P())) if me == 0 else None
  done = lambda y: jax.block_until_ready(y) if y is not None else None  # noqa: E731
  rounds = 3 if args.quick else 40
  done(back(there(x)))
  t0 = time.perf_counter()
  y = x
  for _ in range(rounds):
    y = back(there(y))
  done(y)
  transfer_s = (time.perf_counter() - t0) / (2 * rounds)

  # Every process's F and B, through the coordination service.
  mpmd.distributed.publish(f"bench/pinned/{me}", json.dumps([f, b]))
  if me == 0:
    deadline = time.monotonic() + 120
    peers = {}
    while len(peers) < jax.process_count() and time.monotonic() < deadline:
      for p in range(jax.process_count()):
        got = mpmd.distributed.try_fetch(f"bench/pinned/{p}")
        if got is not None:
          peers[p] = json.loads(got)
      time.sleep(0.05)
    pathlib.Path(args.worker).write_text(json.dumps({
        "compile": compile_s, "step": step_s, "stage_costs": [peers[p] for p in sorted(peers)],
        "transfer": transfer_s, "affinity": sorted(os.sched_getaffinity(0))}))
  return 0


def reference(args) -> int:
  """`jax.jit` of the same step on one device, pinned to the CPUs in
  `PINNED_PIPELINE_CPUS` when set; writes JSON."""
  cpus = os.environ.get("PINNED_PIPELINE_CPUS")
  if cpus:
    os.sched_setaffinity(0, [int(c) for c in cpus.split(",")])
  import jax  # noqa: PLC0415

  ex = _example()
  params = jax.device_put(ex.init_params(2, args.width, IN_DIM, OUT_DIM), jax.devices()[0])
  xs, ys = ex.make_data(args.microbatches, args.batch, IN_DIM, OUT_DIM)
  step = jax.jit(ex.train_step)
  state = {"params": params}

  def run():
    loss, state["params"] = step(state["params"], xs, ys)
    return loss, state["params"]

  seconds = _median_seconds(run, jax.block_until_ready, args.steps)
  pathlib.Path(args.reference).write_text(json.dumps({
      "step": seconds, "affinity": sorted(os.sched_getaffinity(0))}))
  return 0


def _child_args(args) -> list[str]:
  out = ["--steps", str(args.steps), "--microbatches", str(args.microbatches),
         "--batch", str(args.batch), "--width", str(args.width), "--repeats", str(args.repeats)]
  return out + (["--quick"] if args.quick else [])


def _env(args) -> dict[str, str]:
  env = dict(os.environ)
  env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=1"
  env["JAX_PLATFORMS"] = "cpu"
  if args.quick:  # a smoke run: compiled without LLVM's optimisation (_common.QUICK_XLA_FLAGS)
    import _common  # noqa: PLC0415
    env = _common.quick_env(env)
  return env


def _run_reference(args, cpus: list[int] | None) -> dict:
  with tempfile.TemporaryDirectory() as tmp:
    out = pathlib.Path(tmp) / "reference.json"
    cmd = [sys.executable, str(pathlib.Path(__file__).resolve()), "--reference", str(out),
           *_child_args(args)]
    env = _env(args)
    if cpus:  # the child pins itself before it imports jax (no preexec_fn: no fork here)
      env["PINNED_PIPELINE_CPUS"] = ",".join(str(c) for c in cpus)
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env, cwd=ROOT)
    if done.returncode != 0:
      raise RuntimeError(f"jax.jit run failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(out.read_text())


def _run_pipeline(args, transfers: str) -> dict:
  with tempfile.TemporaryDirectory() as tmp:
    out = pathlib.Path(tmp) / "pipeline.json"
    cmd = [sys.executable, "-m", "mpmd.launch", "--processes", "2", "--devices-per-process", "1",
           "--cpus-per-process", "1", "--timeout", "900",
           str(pathlib.Path(__file__).resolve()), "--worker", str(out), *_child_args(args)]
    env = _env(args)
    # The launcher sets the device count (and keeps the other flags).
    env["XLA_FLAGS"] = " ".join(f for f in env["XLA_FLAGS"].split()
                                if "xla_force_host_platform_device_count" not in f)
    env["MPMD_CROSS_PROCESS_TRANSFERS"] = transfers
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=960, env=env, cwd=ROOT)
    if done.returncode != 0:
      raise RuntimeError(f"the 2-process run failed ({done.returncode}):\n"
                         f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return json.loads(out.read_text())


def _split_merged(costs: list) -> tuple[list, list[int]]:
  """Per-stage (F, B) with a stage whose forward and backward are one
  program (F reported as 0) split in the proportion of the other stages'
  F and B; and the indices of such stages."""
  alone = [(f, b) for f, b in costs if f > 0]
  ratio = sum(f for f, _ in alone) / sum(f + b for f, b in alone) if alone else 1 / 3
  merged = [s for s, (f, _) in enumerate(costs) if f == 0]
  return [(b * ratio, b * (1 - ratio)) if f == 0 else (f, b) for f, b in costs], merged


def _simulated(microbatches: int, f: float, b: float, latency: float):
  from mpmd import schedule as sched  # noqa: PLC0415
  return sched.simulate(sched.one_f_one_b(2, microbatches),
                        sched.CostModel(forward=f, backward=b, latency=latency))


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--steps", type=int, default=10, help="timed steps (median)")
  parser.add_argument("--microbatches", type=int, default=8)
  parser.add_argument("--batch", type=int, default=256, help="rows per microbatch")
  parser.add_argument("--width", type=int, default=2048)
  parser.add_argument("--repeats", type=int, default=20, help="timings of F and B (median)")
  parser.add_argument("--quick", action="store_true", help="tiny sizes (a smoke run)")
  parser.add_argument("--output", default=None, help="results file (default RESULTS.md)")
  parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
  parser.add_argument("--reference", default=None, help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  if args.quick:
    args.steps, args.batch, args.width, args.repeats = 2, 16, 64, 3
  if args.worker:
    return worker(args)
  if args.reference:
    return reference(args)
  import _common  # noqa: PLC0415
  command = _common.command_line(__file__, argv)
  allowed = sorted(os.sched_getaffinity(0))
  if len(allowed) < 2:
    raise SystemExit("needs 2 CPUs")
  pinned = _run_reference(args, allowed[:1])
  unpinned = _run_reference(args, None)
  pipes = {mode: _run_pipeline(args, mode) for mode in ("pull", "collective")}
  pipe = pipes["pull"]
  m = args.microbatches
  ideal = 2 * m / (m + 1)
  ms = lambda s: f"{s * 1e3:.1f}"  # noqa: E731
  labels = {"pull": "pulls (default)", "collective": "collectives"}
  rows = [["jax.jit, 1 device, pinned to 1 core", ms(pinned["step"]), "1.00x", ""]]
  bubble_rows = []
  for mode, run in pipes.items():
    ((f0, b0), (f1, b1)), _ = _split_merged(run["stage_costs"])
    f, b = (f0 + f1) / 2, (b0 + b1) / 2
    sim = _simulated(m, f, b, run["transfer"])
    speedup = pinned["step"] / run["step"]
    measured_bubble = 1 - m * (f0 + b0 + f1 + b1) / (2 * run["step"])
    rows.append([f"mpmd 1F1B, 2 processes x 1 device, 1 core each; transfers: {labels[mode]}",
                 ms(run["step"]), f"{speedup:.2f}x", f"{speedup / ideal:.2f}"])
    bubble_rows.append([labels[mode], f"{measured_bubble:.1%}", f"{sim.bubble_fraction:.1%}",
                        f"{100 * (measured_bubble - sim.bubble_fraction):+.1f}",
                        ms(run["step"]), ms(sim.makespan), ms(run["transfer"])])
  rows.append(["jax.jit, 1 device, unpinned (2 cores)", ms(unpinned["step"]),
               f"{pinned['step'] / unpinned['step']:.2f}x", ""])
  table = _common.markdown_table(["run", "step (ms)", "speed-up vs pinned jax.jit",
                                  f"of the 1F1B ideal ({ideal:.2f}x)"], rows)
  split, merged = _split_merged(pipe["stage_costs"])
  costs = _common.markdown_table(
      ["stage", "F per microbatch (ms)", "B per microbatch (ms)"],
      [[f"{s}" + (" (F+B one program, split)" if s in merged else ""), ms(f), ms(b)]
       for s, (f, b) in enumerate(split)])
  bubble = _common.markdown_table(
      ["transfers", "measured bubble", "simulated bubble", "difference (points)",
       "measured step (ms)", "simulated step (ms)", "one transfer (ms)"], bubble_rows)
  body = f"""{_common.provenance(command)}

examples/train_multiprocess.py's model widened: 2 stages of 2 dense layers,
width {args.width}, {m} microbatches of {args.batch} rows, 1F1B, SGD. The
pipeline runs as 2 processes pinned to one core each
(`python -m mpmd.launch --processes 2 --devices-per-process 1
--cpus-per-process 1`); `jax.jit` runs the same step on one device, pinned to
one core and unpinned. Step time: median of {args.steps} steps after a warm-up
(the pipeline's step ends when both processes have their results). Compile
of the pipeline: {pipe['compile']:.1f} s.

{table}

Stage costs: the pipeline's own forward and backward programs (gradient
accumulation included) run alone on zeros in their pinned process. By
default the last stage runs each microbatch's forward and backward as one
program; its time is split in the proportion of the other stage's F and B:

{costs}

The schedule simulated with these costs (the mean of the two stages) and the
measured time of one activation transfer as latency, against the
measurement:

{bubble}

The measured bubble counts the time the stages do not compute their own F
and B (so it includes the host work of the runtime and the transfers); the
simulated one adds the transfer as latency between the meshes. With pulls
(`jax.experimental.transfer`) a stage does not wait for its peer to send or
receive; a gloo collective (`MPMD_CROSS_PROCESS_TRANSFERS=collective`) holds
both devices until both processes reach it. Unpinned, `jax.jit` uses both
cores for every matmul (XLA's intra-op threads): the pipeline need not beat
that on this machine, and the table shows both.
"""
  path = _common.write_section("h", body, args.output)
  print(body)
  print(f"wrote section (h) of {path}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
