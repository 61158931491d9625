"""(i) Automatic planning (`mpmd.plan`) against the naive even split, on two
pinned processes.

An unbalanced model: 8 units, `block0` heavy (8 dense layers), `block1` ..
`block6` one dense layer each, `block7` a wide output head (width -> 2 x width
logits and a softmax cross-entropy loss, computed inside the unit). As in
benchmarks/pinned_pipeline.py, the pipeline runs as 2 processes with one CPU
device and one core each (`python -m mpmd.launch --processes 2
--devices-per-process 1 --cpus-per-process 1`), so that the two stages really
run in parallel. In the launched run:

1. the cost of one activation transfer between the two processes is measured
   (the runtime's cross-process transfer, at two sizes);
2. both processes run `mpmd.plan` at the same time (units timed on their own
   pinned cores while the other core does the same, as in the pipeline; the
   measured transfer cost) over the allowed microbatch counts and every
   built-in schedule; process 0 publishes its plan and process 1 uses it;
3. both processes compile the planned step and the even split (`block0` ..
   `block3` on the first mesh, the rest on the second; 1F1B) at every allowed
   microbatch count, and time them alternately (median of `--steps`).

The predicted step times (the plan's, and the planner's prediction for the
even split from the same measured costs) are set against the measurements.

    python benchmarks/plan.py                            # writes section (i)
    python benchmarks/plan.py --quick --output /tmp/r.md # smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

ROOT = pathlib.Path(__file__).resolve().parents[1]
UNITS = 8
HEAVY_LAYERS = 8  # dense layers in block0
HEAD_FACTOR = 2   # the head's logits: HEAD_FACTOR x width


def model(width: int):
  """(init_params, step) of the benchmark model."""
  import jax  # noqa: PLC0415
  import jax.numpy as jnp  # noqa: PLC0415
  import numpy as np  # noqa: PLC0415

  import mpmd  # noqa: PLC0415

  def init_params(seed: int = 0):
    rng = np.random.default_rng(seed)
    dense = lambda n_in, n_out: {  # noqa: E731
        "w": (rng.standard_normal((n_in, n_out)) / np.sqrt(n_in)).astype(np.float32),
        "b": np.zeros((n_out,), np.float32)}
    params = [[dense(width, width) for _ in range(HEAVY_LAYERS)]]
    params += [[dense(width, width)] for _ in range(UNITS - 2)]
    params.append([dense(width, HEAD_FACTOR * width)])
    return params

  def body(layers, h):
    for layer in layers:
      h = jax.nn.gelu(h @ layer["w"] + layer["b"])
    return h

  def head(layers, h, labels):
    logits = h @ layers[0]["w"] + layers[0]["b"]
    logp = jax.nn.log_softmax(logits)
    return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=1))

  def loss_fn(params, x, labels):
    h = x
    for i in range(UNITS - 1):
      h = mpmd.named_computation(body, name=f"block{i}")(params[i], h)
    return mpmd.named_computation(head, name=f"block{UNITS - 1}")(params[-1], h, labels)

  import _common  # noqa: PLC0415
  return init_params, _common.sgd_microbatched_step(loss_fn)


def data(batch: int, width: int, seed: int = 1):
  import numpy as np  # noqa: PLC0415
  rng = np.random.default_rng(seed)
  x = rng.standard_normal((batch, width)).astype(np.float32)
  labels = rng.integers(0, HEAD_FACTOR * width, size=(batch,)).astype(np.int32)
  return x, labels


def _transfer_cost(topology, width: int, rows: int, rounds: int):
  """The runtime's cross-process transfer between the two meshes, timed at
  two sizes (there and back), fitted as seconds + bytes x seconds_per_byte."""
  import jax  # noqa: PLC0415
  import numpy as np  # noqa: PLC0415
  from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: PLC0415

  from mpmd.plan import TransferCost  # noqa: PLC0415
  from mpmd.run import crossprocess  # noqa: PLC0415

  a, c = topology["p0"], topology["p1"]
  me = jax.process_index()
  points = []
  for shape in ((2, 8), (max(rows, 4), width)):
    def transfer(src, dst, name, shape=shape):
      plan = crossprocess.make_plan(src, dst, shape, np.float32, NamedSharding(dst, P()))
      ends = ((src.devices.flat[0].process_index,), (dst.devices.flat[0].process_index,))
      if crossprocess.pull_applies(plan, *ends):
        return crossprocess.PullTransfer(plan, f"bench/plan/{name}/{shape}", ends[0][0],
                                         ends[1][0])
      return crossprocess.CrossProcessTransfer(plan)

    there, back = transfer(a, c, "there"), transfer(c, a, "back")
    x = jax.device_put(np.ones(shape, np.float32), NamedSharding(a, P())) if me == 0 else None
    done = lambda y: jax.block_until_ready(y) if y is not None else None  # noqa: E731
    done(back(there(x)))
    t0 = time.perf_counter()
    y = x
    for _ in range(rounds):
      y = back(there(y))
    done(y)
    points.append((4 * shape[0] * shape[1], (time.perf_counter() - t0) / (2 * rounds)))
  (b0, t0_), (b1, t1) = points
  per_byte = max(0.0, (t1 - t0_) / (b1 - b0)) if b1 > b0 else 0.0
  return TransferCost(max(0.0, t0_ - per_byte * b0), per_byte)


def worker(args) -> int:
  """Both processes: plan (process 0), compile both configs, time them."""
  import dataclasses  # noqa: PLC0415

  import jax  # noqa: PLC0415
  import numpy as np  # noqa: PLC0415

  import mpmd  # noqa: PLC0415
  from mpmd import schedule as sched  # noqa: PLC0415
  from mpmd.plan import (TransferCost, config_from_dict, plan as make_plan,  # noqa: PLC0415
                         predict, split_batch, stage_costs)

  mpmd.distributed.initialize()
  me = jax.process_index()
  topology = {f"p{p}": jax.sharding.Mesh(np.array([d for d in jax.devices()
                                                   if d.process_index == p]), ("data",))
              for p in range(jax.process_count())}
  init_params, step = model(args.width)
  params = init_params()
  x, labels = data(args.batch, args.width)
  counts = [int(m) for m in args.microbatches.split(",")]
  transfer = _transfer_cost(topology, args.width, args.batch // max(counts),
                            3 if args.quick else 20)

  # Both processes plan (measure) at the same time, as both stages compute at
  # the same time in the pipeline (they share the machine's memory bandwidth
  # and caches); process 0's plan is the one used. In a --quick smoke run process 1
  # only waits for it.
  if me == 0 or not args.quick:
    t0 = time.perf_counter()
    plan = make_plan(step, topology, params, x, labels, batch_argnums=(1, 2),
                     microbatches=counts, transfer=transfer, repeats=args.repeats,
                     memory_budget=None)
    wall = time.perf_counter() - t0
  if me == 0:
    even = ((0, UNITS // 2), (UNITS // 2, UNITS))
    even_predicted = {}
    for costs in plan.all_costs:  # the planner's prediction for the even split, every M
      pred = predict(sched.one_f_one_b(2, costs.microbatches),
                     stage_costs(costs, even, plan.transfer))
      even_predicted[str(costs.microbatches)] = pred.makespan
    record = plan.to_dict() | {
        "wall": wall, "measure_seconds": plan.measure_seconds,
        "search_seconds": plan.search_seconds, "compiles": plan.compiles,
        "candidates": plan.candidates.table(limit=args.table_rows),
        "summary": plan.summary(), "even_predicted": even_predicted,
        "update_ms_per_mb": plan.costs.update_seconds_per_byte * 1e3 * 2**20}
    if args.png:
      plan.write_png(args.png)
    mpmd.distributed.publish("bench/plan/record", json.dumps(record))
  else:
    deadline = time.monotonic() + 600
    got = None
    while got is None and time.monotonic() < deadline:
      got = mpmd.distributed.try_fetch("bench/plan/record")
      time.sleep(0.05)
    if got is None:
      raise SystemExit("process 1: no plan from process 0")
    record = json.loads(got)

  planned_config = config_from_dict(record, topology)
  even_config = mpmd.make_config(
      topology, {f"block{i}": "p0" if i < UNITS // 2 else "p1" for i in range(UNITS)},
      pipeline_schedule="1F1B")
  # The plan, and the even split (1F1B) at every allowed microbatch count.
  configs = [("plan", planned_config, record["microbatches"])]
  configs += [(f"even/{m}", even_config, m) for m in counts]
  runs = {}
  for name, config, m in configs:
    step_args = split_batch((params, x, labels), (1, 2), m)
    t0 = time.perf_counter()
    compiled = mpmd.jit(step, config).lower(*step_args).compile()
    runs[name] = {"compiled": compiled, "params": step_args[0], "data": step_args[1:],
                  "times": [], "compile": time.perf_counter() - t0}

  def one_step(run):
    t0 = time.perf_counter()
    loss, run["params"] = run["compiled"](run["params"], *run["data"])
    jax.block_until_ready([v for v in jax.tree.leaves(run["params"]) if isinstance(v, jax.Array)])
    value = float(mpmd.distributed.gather(loss))
    return time.perf_counter() - t0, value

  for run in runs.values():  # warm-up
    one_step(run)
  losses = {}
  for _ in range(args.steps):
    for name, run in runs.items():
      seconds, losses[name] = one_step(run)
      run["times"].append(seconds)
  if me == 0:
    out = {name: {"step": statistics.median(run["times"]), "compile": run["compile"],
                  "times": run["times"], "loss": losses[name]} for name, run in runs.items()}
    out["record"] = record
    out["transfer"] = dataclasses.asdict(transfer)
    out["affinity"] = sorted(os.sched_getaffinity(0))
    pathlib.Path(args.worker).write_text(json.dumps(out))
  return 0


def _child_args(args) -> list[str]:
  out = ["--steps", str(args.steps), "--microbatches", args.microbatches, "--batch",
         str(args.batch), "--width", str(args.width), "--repeats", str(args.repeats),
         "--table-rows", str(args.table_rows)]
  if args.png:
    out += ["--png", str(pathlib.Path(args.png).resolve())]
  return out + (["--quick"] if args.quick else [])


def _run(args) -> dict:
  import _common  # noqa: PLC0415
  return _common.run_pinned_worker(__file__, _child_args(args), "plan", quick=args.quick)


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--steps", type=int, default=10, help="timed steps of each config (median)")
  parser.add_argument("--microbatches", default="4,8,16", help="allowed microbatch counts")
  parser.add_argument("--batch", type=int, default=1024, help="global batch (rows)")
  parser.add_argument("--width", type=int, default=1024)
  parser.add_argument("--repeats", type=int, default=9, help="timed rounds per unit program")
  parser.add_argument("--table-rows", type=int, default=12, help="candidates shown")
  parser.add_argument("--png", default=None, help="also draw the plan's timeline here")
  parser.add_argument("--quick", action="store_true", help="tiny sizes (a smoke run)")
  parser.add_argument("--output", default=None, help="results file (default RESULTS.md)")
  parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  if args.quick:
    args.steps, args.batch, args.width, args.repeats, args.microbatches = 2, 32, 32, 2, "2,4"
  if args.worker:
    return worker(args)
  import _common  # noqa: PLC0415
  command = _common.command_line(__file__, argv)
  if len(os.sched_getaffinity(0)) < 2:
    raise SystemExit("needs 2 CPUs")
  r = _run(args)
  rec = r["record"]
  ms = lambda s: f"{s * 1e3:.1f}"  # noqa: E731
  m = rec["microbatches"]
  counts = [int(c) for c in args.microbatches.split(",")]
  plan_s, even_s = r["plan"]["step"], r[f"even/{m}"]["step"]
  best_even = min(counts, key=lambda c: r[f"even/{c}"]["step"])
  best_even_s = r[f"even/{best_even}"]["step"]
  err = lambda pred, meas: f"{100 * (pred - meas) / meas:+.1f}%"  # noqa: E731
  stages = "; ".join(f"{mesh}: {', '.join(g)}"
                     for g, mesh in zip(rec["groups"], rec["stage_meshes"]))
  rows = [["plan", stages, rec["schedule"], str(m), ms(plan_s),
           ms(rec["predicted_step_seconds"]), err(rec["predicted_step_seconds"], plan_s),
           "1.00x"]]
  errors = [(rec["predicted_step_seconds"] - plan_s) / plan_s]
  for c in counts:
    measured, predicted = r[f"even/{c}"]["step"], rec["even_predicted"][str(c)]
    errors.append((predicted - measured) / measured)
    rows.append([f"even split, M={c}", "p0: block0..block3; p1: block4..block7", "1F1B", str(c),
                 ms(measured), ms(predicted), err(predicted, measured),
                 f"{measured / plan_s:.2f}x"])
  table = _common.markdown_table(
      ["config", "stages", "schedule", "M", "measured step (ms)", "predicted (ms)",
       "prediction error", "time / plan's"], rows)
  costs = _common.markdown_table(
      ["unit", "F (ms)", "B (ms)", "B act. grad (ms)", "W (ms)", "params", "stash/microbatch"],
      [[u["name"], f"{u['forward'] * 1e3:.2f}", f"{u['backward'] * 1e3:.2f}",
        f"{u['backward_input'] * 1e3:.2f}" if u["backward_input"] is not None else "-",
        f"{u['weight'] * 1e3:.2f}" if u["weight"] is not None else "-",
        f"{u['param_bytes'] / 2**20:.1f} MiB", f"{u['stash_bytes'] / 2**10:.0f} KiB"]
       for u in rec["unit_costs"]])
  worst = max(abs(e) for e in errors)
  below_above = ("above" if all(e < 0 for e in errors) else "below" if all(e > 0 for e in errors)
                 else "on both sides of")
  picture = ""
  if args.png:
    try:
      shown = pathlib.Path(args.png).resolve().relative_to(ROOT)
    except ValueError:
      shown = pathlib.Path(args.png)
    picture = f"`{shown}` is the plan's predicted timeline."
  t = r["transfer"]
  body = f"""{_common.provenance(command)}

The model: {UNITS} units of width {args.width}: `block0` = {HEAVY_LAYERS} dense+gelu layers,
`block1`..`block{UNITS - 2}` one each, `block{UNITS - 1}` the head (logits of width
{HEAD_FACTOR * args.width}, softmax cross-entropy inside the unit); global batch
{args.batch} rows, SGD. Two processes pinned to one core each (`python -m
mpmd.launch --processes 2 --devices-per-process 1 --cpus-per-process 1`).
Both processes planned at the same time over microbatch counts
{args.microbatches} and every built-in schedule (unit costs timed on each
pinned core while the other core timed its own, as both stages compute at once
in the pipeline; median of {args.repeats}; the cross-process transfer measured
in the same run: {t['seconds'] * 1e3:.2f} ms + {t['seconds_per_byte'] * 1e9:.2f} ms/MB);
process 0's plan was used. All configs then ran alternately;
step time = median of {args.steps} steps after a warm-up (a step ends when both
processes have their results).

{table}

Against the even split at the plan's microbatch count (M={m}) the plan takes
**{100 * (1 - plan_s / even_s):.0f}% less time per step** ({even_s / plan_s:.2f}x the
speed); against the best even split over the allowed counts (M={best_even})
{100 * (1 - plan_s / best_even_s):.0f}% less ({best_even_s / plan_s:.2f}x). The largest
prediction error is {100 * worst:.1f}%. Planning took {rec['wall']:.1f} s
({rec['measure_seconds']:.1f} s tracing and measuring with {rec['compiles']} unit compiles,
{rec['search_seconds']:.2f} s searching, the rest lowering the choice); compile of the
planned step: {r['plan']['compile']:.1f} s.

The measured unit costs at the chosen microbatch count (one microbatch):

{costs}

The best candidates as `print(plan.candidates)` shows them (times predicted;
"pruned": its lower bound was above the best prediction, so it was not
simulated):

```
{rec['candidates']}
```

Predictions cover the units' forward and backward (weight gradients
accumulated), the transfers, the schedule's bubbles and each mesh's update
(timed per byte: {rec['update_ms_per_mb']:.2f} ms/MB of parameters); they leave out the
runtime's host work and the data put on the meshes each step, and the units
were timed with the other core busy with the same programs, not with what it
runs in the pipeline. Here the measurements are {below_above} the predictions.
{picture}
"""
  path = _common.write_section("i", body, args.output)
  print(body)
  print(f"wrote section (i) of {path}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
