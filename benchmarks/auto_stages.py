"""(k) Automatic stages (`mpmd.auto_stages`) against the planner's best
labelled plan, on two pinned processes.

The model: an 8-block transformer language model in plain JAX (a token and
position embedding, 8 pre-norm blocks of causal self-attention and a 4x MLP,
a final norm, an untied LM head over the vocabulary and the softmax
cross-entropy), trained by SGD over microbatches (`mpmd.enumerated_for`).
It is written twice from the same functions:

* **unlabelled**: the blocks are calls of a `Block` instance, nothing else;
  `mpmd.auto_stages` finds the blocks, cuts them into stages and picks the
  schedule and microbatch count;
* **labelled**: the same arithmetic with every part a named computation
  (`embed`, `block0` .. `block7`, `head`: the head and the loss in one
  unit), planned by `mpmd.plan` over the same microbatch counts and
  schedules: the planner's best labelled plan.

As in benchmarks/pinned_pipeline.py and benchmarks/plan.py the pipeline runs
as 2 processes with one CPU device and one core each (`python -m mpmd.launch
--processes 2 --devices-per-process 1 --cpus-per-process 1`): the setting has
two meshes (one per core), not four. In each launched run both processes
measure the cross-process transfer, then plan both forms at the same time
(process 0's plans are used), compile (a) the automatic cut, (b) the best
labelled plan and (c) a naive even cut of the labelled form (`embed`,
`block0`..`block3` | `block4`..`block7`, `head`; 1F1B at (b)'s microbatch
count), (d) the cut `auto_stages` makes when it counts only the layers
(``count_outside=False``, its behaviour before it measured the embedding and
head) and (e) the best plan again (a second compile: the noise floor), and
time them alternately (median of `--steps` steps). The ratio
auto / best is taken inside each run; `--runs` repeats the whole run
(planning included).

    python benchmarks/auto_stages.py                             # writes section (k)
    python benchmarks/auto_stages.py --quick --output /tmp/r.md  # smoke run
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import pathlib
import statistics
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

ROOT = pathlib.Path(__file__).resolve().parents[1]
LAYERS = 8


class Block:
  """A pre-norm transformer block: causal self-attention and a 4x MLP."""

  def __init__(self, heads: int):
    self.heads = heads

  def __call__(self, p, h):
    import jax  # noqa: PLC0415
    import jax.numpy as jnp  # noqa: PLC0415

    b, s, d = h.shape
    x = _norm(h, p["ln1"])
    q, k, v = jnp.split(x @ p["qkv"], 3, axis=-1)
    shape = (b, s, self.heads, d // self.heads)
    q, k, v = q.reshape(shape), k.reshape(shape), v.reshape(shape)
    att = jnp.einsum("bqhe,bkhe->bhqk", q, k) / jnp.sqrt(float(d // self.heads))
    causal = jnp.tril(jnp.ones((s, s), bool))
    att = jax.nn.softmax(jnp.where(causal, att, -1e9), axis=-1)
    o = jnp.einsum("bhqk,bkhe->bqhe", att, v).reshape(b, s, d)
    h = h + o @ p["proj"]
    return h + jax.nn.gelu(_norm(h, p["ln2"]) @ p["fc"]) @ p["out"]


def _norm(h, scale):
  import jax.numpy as jnp  # noqa: PLC0415
  mean = h.mean(-1, keepdims=True)
  var = ((h - mean) ** 2).mean(-1, keepdims=True)
  return (h - mean) / jnp.sqrt(var + 1e-5) * scale


def model(width: int, vocab: int, seq: int, heads: int):
  """(init_params, unlabelled step, labelled step) of the benchmark model."""
  import jax  # noqa: PLC0415
  import jax.numpy as jnp  # noqa: PLC0415
  import numpy as np  # noqa: PLC0415

  import mpmd  # noqa: PLC0415

  blocks = [Block(heads) for _ in range(LAYERS)]

  def init_params(seed: int = 0):
    rng = np.random.default_rng(seed)
    normal = lambda *shape: (rng.standard_normal(shape) / np.sqrt(shape[0])).astype(  # noqa: E731
        np.float32)
    ones = lambda n: np.ones((n,), np.float32)  # noqa: E731
    return {
        "embed": {"wte": normal(vocab, width) * 0.1, "wpe": normal(seq, width) * 0.1},
        "blocks": [{"ln1": ones(width), "qkv": normal(width, 3 * width),
                    "proj": normal(width, width), "ln2": ones(width),
                    "fc": normal(width, 4 * width), "out": normal(4 * width, width)}
                   for _ in range(LAYERS)],
        "head": {"lnf": ones(width), "w": normal(width, vocab)},
    }

  def embed(p, ids):
    return p["wte"][ids] + p["wpe"][None]

  def head(p, h, targets):
    logits = _norm(h, p["lnf"]) @ p["w"]
    logp = jax.nn.log_softmax(logits)
    return -jnp.mean(jnp.take_along_axis(logp, targets[..., None], axis=-1))

  def loss_unlabelled(params, ids, targets):
    h = embed(params["embed"], ids)
    for block, p in zip(blocks, params["blocks"]):
      h = block(p, h)
    return head(params["head"], h, targets)

  def loss_labelled(params, ids, targets):
    h = mpmd.named_computation(embed, name="embed")(params["embed"], ids)
    for i, (block, p) in enumerate(zip(blocks, params["blocks"])):
      h = mpmd.named_computation(block.__call__, name=f"block{i}")(p, h)
    return mpmd.named_computation(head, name="head")(params["head"], h, targets)


  import _common  # noqa: PLC0415
  return (init_params, _common.sgd_microbatched_step(loss_unlabelled),
          _common.sgd_microbatched_step(loss_labelled))


def data(batch: int, seq: int, vocab: int, seed: int = 1):
  import numpy as np  # noqa: PLC0415
  rng = np.random.default_rng(seed)
  ids = rng.integers(0, vocab, size=(batch, seq + 1)).astype(np.int32)
  return ids[:, :-1], ids[:, 1:]


def _plan_benchmark():
  """benchmarks/plan.py as a module (its cross-process transfer timing)."""
  spec = importlib.util.spec_from_file_location("bench_plan", ROOT / "benchmarks" / "plan.py")
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def _wait_for(key: str, seconds: float = 900) -> str:
  import mpmd  # noqa: PLC0415
  deadline = time.monotonic() + seconds
  while time.monotonic() < deadline:
    got = mpmd.distributed.try_fetch(key)
    if got is not None:
      return got
    time.sleep(0.05)
  raise SystemExit(f"process 1: nothing published under {key}")


def worker(args) -> int:
  """Both processes: plan both forms, compile the five configs, time them."""
  import jax  # noqa: PLC0415
  import numpy as np  # noqa: PLC0415

  import mpmd  # noqa: PLC0415
  from mpmd.plan import auto_stages_from_dict, config_from_dict, split_batch  # noqa: PLC0415

  mpmd.distributed.initialize()
  me = jax.process_index()
  topology = {f"p{p}": jax.sharding.Mesh(np.array([d for d in jax.devices()
                                                   if d.process_index == p]), ("data",))
              for p in range(jax.process_count())}
  init_params, unlabelled, labelled = model(args.width, args.vocab, args.seq, args.heads)
  params = init_params()
  ids, targets = data(args.batch, args.seq, args.vocab)
  counts = [int(m) for m in args.microbatches.split(",")]
  transfer = _plan_benchmark()._transfer_cost(
      topology, args.width, args.seq * args.batch // max(counts), 3 if args.quick else 20)
  options = dict(batch_argnums=(1, 2), microbatches=counts, transfer=transfer,
                 repeats=args.repeats, memory_budget=None)

  # Both processes plan at the same time (unit costs timed on both cores at once) and
  # process 0's plans are used; in a --quick smoke run process 1 only waits for them.
  if me == 0 or not args.quick:
    t0 = time.perf_counter()
    auto = mpmd.auto_stages(unlabelled, topology, params, ids, targets, **options)
    auto_wall = time.perf_counter() - t0
    t0 = time.perf_counter()
    best = mpmd.plan(labelled, topology, params, ids, targets, **options)
    best_wall = time.perf_counter() - t0
    # auto_stages as it was before it counted the work outside the layers.
    blind = mpmd.auto_stages(unlabelled, topology, params, ids, targets, count_outside=False,
                             **options)
    record = {"auto": auto.to_dict() | {"wall": auto_wall, "summary": auto.summary(),
                                        "candidates": auto.plan.candidates.table(limit=6)},
              "blind": blind.to_dict(),
              "best": best.to_dict() | {"wall": best_wall, "summary": best.summary(),
                                        "candidates": best.candidates.table(limit=6)}}
  if me == 0:
    mpmd.distributed.publish("bench/auto/record", json.dumps(record))
  else:
    record = json.loads(_wait_for("bench/auto/record"))

  auto_step, auto_config = auto_stages_from_dict(record["auto"], unlabelled, topology,
                                                 layer_type=Block)
  blind_step, blind_config = auto_stages_from_dict(record["blind"], unlabelled, topology,
                                                   layer_type=Block)
  best_config = config_from_dict(record["best"], topology)
  half = LAYERS // 2
  even_assignment = {"embed": "p0", "head": "p1"} | {
      f"block{i}": "p0" if i < half else "p1" for i in range(LAYERS)}
  even_config = mpmd.make_config(topology, even_assignment, pipeline_schedule="1F1B")
  configs = [("auto", auto_step, auto_config, record["auto"]["microbatches"]),
             ("best", labelled, best_config, record["best"]["microbatches"]),
             ("even", labelled, even_config, record["best"]["microbatches"]),
             ("blind", blind_step, blind_config, record["blind"]["microbatches"]),
             # The best plan compiled a second time: the noise floor of the ratios.
             ("again", labelled, best_config, record["best"]["microbatches"])]
  runs = {}
  for name, step, config, m in configs:
    step_args = split_batch((params, ids, targets), (1, 2), m)
    t0 = time.perf_counter()
    compiled = mpmd.jit(step, config).lower(*step_args).compile()
    runs[name] = {"compiled": compiled, "params": step_args[0], "data": step_args[1:],
                  "times": [], "compile": time.perf_counter() - t0, "m": m}

  def one_step(run):
    t0 = time.perf_counter()
    loss, run["params"] = run["compiled"](run["params"], *run["data"])
    jax.block_until_ready([v for v in jax.tree.leaves(run["params"]) if isinstance(v, jax.Array)])
    value = float(mpmd.distributed.gather(loss))
    return time.perf_counter() - t0, value

  first_loss = {name: one_step(run)[1] for name, run in runs.items()}  # warm-up
  for _ in range(args.steps):
    for run in runs.values():
      run["times"].append(one_step(run)[0])
  if me == 0:
    out = {name: {"step": statistics.median(run["times"]), "times": run["times"],
                  "compile": run["compile"], "microbatches": run["m"],
                  "first_loss": first_loss[name]} for name, run in runs.items()}
    out["record"] = record
    out["affinity"] = sorted(os.sched_getaffinity(0))
    out["load"] = os.getloadavg()
    pathlib.Path(args.worker).write_text(json.dumps(out))
  return 0


def _child_args(args) -> list[str]:
  out = ["--steps", str(args.steps), "--microbatches", args.microbatches, "--batch",
         str(args.batch), "--width", str(args.width), "--vocab", str(args.vocab), "--seq",
         str(args.seq), "--heads", str(args.heads), "--repeats", str(args.repeats)]
  return out + (["--quick"] if args.quick else [])


def _run(args) -> dict:
  import _common  # noqa: PLC0415
  return _common.run_pinned_worker(__file__, _child_args(args), "auto", quick=args.quick)


def _stages(rec: dict) -> str:
  return "; ".join(f"{mesh}: {', '.join(g)}" for g, mesh in zip(rec["groups"],
                                                                 rec["stage_meshes"]))


def _layer_stages(rec: dict) -> str:
  """The automatic cut with its layers renamed as the labelled form's blocks."""
  return "; ".join(f"{mesh}: {', '.join(u.replace('layer', 'block') for u in g)}"
                   for g, mesh in zip(rec["groups"], rec["stage_meshes"]))


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--runs", type=int, default=3, help="launched runs (planning included)")
  parser.add_argument("--steps", type=int, default=10, help="timed steps of each config (median)")
  parser.add_argument("--microbatches", default="4,8", help="allowed microbatch counts")
  parser.add_argument("--batch", type=int, default=32, help="global batch (sequences)")
  parser.add_argument("--seq", type=int, default=32, help="tokens per sequence")
  parser.add_argument("--width", type=int, default=128)
  parser.add_argument("--vocab", type=int, default=4096)
  parser.add_argument("--heads", type=int, default=4)
  parser.add_argument("--repeats", type=int, default=7, help="timed rounds per unit program")
  parser.add_argument("--quick", action="store_true", help="tiny sizes (a smoke run)")
  parser.add_argument("--output", default=None, help="results file (default RESULTS.md)")
  parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  if args.quick:
    args.runs, args.steps, args.batch, args.seq, args.width, args.vocab = 1, 2, 8, 8, 32, 256
    args.repeats, args.microbatches = 2, "2"
  if args.worker:
    return worker(args)
  import _common  # noqa: PLC0415
  command = _common.command_line(__file__, argv)
  if len(os.sched_getaffinity(0)) < 2:
    raise SystemExit("needs 2 CPUs")
  results = []
  for k in range(args.runs):
    results.append(_run(args))
    r = results[-1]
    print(f"run {k + 1}: auto {r['auto']['step'] * 1e3:.1f} ms, best "
          f"{r['best']['step'] * 1e3:.1f} ms, even {r['even']['step'] * 1e3:.1f} ms, layers "
          f"only {r['blind']['step'] * 1e3:.1f} ms; load "
          f"{r['load'][0]:.2f}", flush=True)
  ms = lambda s: f"{s * 1e3:.1f}"  # noqa: E731
  rows, ratios, even_ratios, blind_ratios, blind_rows, controls = [], [], [], [], [], []
  for k, r in enumerate(results):
    auto, best, blind = r["record"]["auto"], r["record"]["best"], r["record"]["blind"]
    ratio = r["auto"]["step"] / r["best"]["step"]
    even_ratio = r["even"]["step"] / r["best"]["step"]
    blind_ratio = r["blind"]["step"] / r["best"]["step"]
    controls.append(r["again"]["step"] / r["best"]["step"])
    ratios.append(ratio)
    even_ratios.append(even_ratio)
    blind_ratios.append(blind_ratio)
    blind_rows.append([str(k + 1), f"{blind['schedule']}, M={blind['microbatches']}: "
                       f"{_layer_stages(blind)}", ms(r["blind"]["step"]), f"{blind_ratio:.3f}"])
    same = ("same" if [[u.replace("layer", "block") for u in g] for g in auto["groups"]]
            == [[u for u in g if u.startswith("block")] for g in best["groups"]]
            and auto["schedule"] == best["schedule"]
            and auto["microbatches"] == best["microbatches"] else "differs")
    rows.append([str(k + 1), f"{auto['schedule']}, M={auto['microbatches']}: "
                 f"{_layer_stages(auto)}", f"{best['schedule']}, M={best['microbatches']}: "
                 f"{_stages(best)}", same, ms(r["auto"]["step"]), ms(r["best"]["step"]),
                 ms(r["even"]["step"]), f"{ratio:.3f}", f"{even_ratio:.3f}",
                 f"{controls[-1]:.3f}", f"{r['load'][0]:.2f}"])
  blind_table = _common.markdown_table(
      ["run", "layers only: schedule, M, cut", "step (ms)", "/ best"], blind_rows)
  table = _common.markdown_table(
      ["run", "auto_stages: schedule, M, cut (layerK shown as blockK)",
       "best labelled plan: schedule, M, cut", "cut", "auto (ms)", "best (ms)", "even (ms)",
       "auto / best", "even / best", "best again / best", "load (1 min)"], rows)
  last = results[-1]["record"]
  spread = (f"median {statistics.median(ratios):.3f}, range {min(ratios):.3f} .. "
            f"{max(ratios):.3f}")
  within = sum(r <= 1.10 for r in ratios)
  losses = "; ".join(f"{name} {results[-1][name]['first_loss']:.6f}"
                     for name in ("auto", "best", "even", "blind", "again"))
  body = f"""{_common.provenance(command)}

The model: an 8-block transformer LM in plain JAX (width {args.width}, {args.heads} heads,
sequences of {args.seq} tokens, vocabulary {args.vocab}, untied LM head; softmax
cross-entropy), global batch {args.batch} sequences, SGD over microbatches
(`mpmd.enumerated_for`). (a) the **unlabelled** step planned by `mpmd.auto_stages`
(it finds the 8 `Block` calls and cuts between them); (b) the **labelled** form
(`embed`, `block0`..`block7`, `head` as named computations) planned by `mpmd.plan`:
the planner's best labelled plan; (c) a naive even cut of the labelled form
(`embed`, `block0`..`block3` | `block4`..`block7`, `head`; 1F1B at (b)'s M). Both
plans over microbatch counts {args.microbatches} and the default schedules, with the
cross-process transfer measured in the run, unit costs timed on both pinned cores at
once (median of {args.repeats}).

The pinned setting has 2 processes with one core each, so the pipeline has
**2 meshes** (one per core), not the 4 of the target: 4 meshes would put two
meshes on one core, whose stages would not run in parallel. (The unlabelled 8-block
transformer over 4 meshes of 8 virtual devices runs and equals `jax.jit` in
test/python/test_auto_stages.py.)

Each run launches the 2 processes again (planning included); inside a run the five
configs ran alternately, step time = median of {args.steps} steps after a warm-up (a
step ends when both processes have their results). First-step losses of the last run
(the same arithmetic, so they agree; "blind": the layers-only cut below): {losses}.

{table}

**auto / best: {spread}** over {len(ratios)} runs; {within} of {len(ratios)} within 10%.
The even cut / best: median {statistics.median(even_ratios):.3f}. "best again" is the best
plan compiled a second time and timed as a fifth config: its ratio to the first copy
({min(controls):.3f} .. {max(controls):.3f}) is the noise of these ratios on this machine.

Before it counted the work outside the layers (`auto_stages(..., count_outside=False)`:
only the layers measured, the embedding, head and loss left out), the automatic cut
was (timed in the same runs, alternating with the others):

{blind_table}
That cut / best: median {statistics.median(blind_ratios):.3f}, range {min(blind_ratios):.3f} ..
{max(blind_ratios):.3f}.

Planning took
{last['auto']['wall']:.1f} s (auto) and {last['best']['wall']:.1f} s (labelled) in the last run.

`print(auto)` of the last run:

```
{last['auto']['summary']}
```

The labelled plan of the last run:

```
{last['best']['summary']}
```
"""
  path = _common.write_section("k", body, args.output)
  print(body)
  print(f"wrote section (k) of {path}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
