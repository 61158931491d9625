"""One command for a lent GPU: mpmd against `jax.jit` at training size, within a time budget.

    python benchmarks/gpu_check.py                 # on the GPU machine: about 7.5 minutes
    python benchmarks/gpu_check.py --budget-s 300  # a shorter budget (later cases skipped)
    python benchmarks/gpu_check.py --quick         # tiny sizes: a CPU test of this script

Runs, in order, each case in a fresh process of its own (so that the GPU's memory is
free for the next one, and an out-of-memory error or a crash stops only that case):

(a) 4 meshes sharing the one device (`make_config(shared_devices=True)`, as
    `benchmarks/gpt2.py` builds them when there is one device), side by side with
    `jax.jit` of the same step in the same process, the sides taking their steps in turns:
    1. `gpt2`: GPT-2 124M of `benchmarks/gpt2.py` (tied embedding, AdamW, 1F1B) at 8
       microbatches of 8 x 1024 tokens; when the mpmd side runs out of memory the
       microbatch is halved (4, 2, 1 sequences) in a new process. `jax.jit` runs the
       whole batch in one gradient and the very microbatched step (unlabelled); the
       faster of the two is the reference (a side that runs out of memory says so).
    2. `small`: the small remat'd model of `gpt2.py` at 8 microbatches (its small-8).
(b) `mp-small`, `mp-gpt2`: the same two steps over 2 processes sharing the one GPU
    through `python -m mpmd.launch --processes 2 --devices-per-process 1`, each with its
    memory fraction (`XLA_PYTHON_CLIENT_MEM_FRACTION`, `--mp-mem-fraction`), one mesh
    per process (the first half of the blocks on process 0): every value between the
    stages crosses between the processes' device buffers. GPT-2 runs at the microbatch
    size that fitted in (a). The results are compared with case (a)'s `jax.jit` after
    the same number of steps; the step time with (a)'s `jax.jit` (not in turns). Two
    departures from (a), each working around an mpmd failure this script found on CPU
    (2 processes, jax 0.12.0.1): the state is not donated (`--mp-donate` donates it:
    a donated buffer offered for a pull was deleted before the pull), and the state's
    PRNG key is raw key data (a typed key among the outputs failed on the process that
    does not hold it). On one GPU the launcher is given `CUDA_VISIBLE_DEVICES=0,0`, so
    that both processes get GPU 0; NCCL refuses two ranks on one GPU, so only pulls
    (mpmd's default cross-process transfers) can work there.

For each case it prints the step time of both and the ratio; the host time to issue a
step (the call returning) and per fragment call (issue time / calls, and the median of
the calls timed where the runtime issues them) against `jax.jit`'s issue time and its
dispatch of a tiny executable with as many buffers as an average fragment call; the wait
after the issue (a step that waits for nothing after its issue is host-bound: the
device was idle while the host issued); the time per step of 5 steps issued back to back
with one wait at the end (what a training loop sees); calls and transfers per step; and
the differences of the loss and the parameters from `jax.jit`'s after `--check-step`
steps, normwise relative, with the tolerance `benchmarks/gpu_smoke.py` uses: on CPU 1e-5
(loss) and 1e-4 (parameters); on an accelerator 4 times how far TF32 moves `jax.jit`
itself (the reference again at `jax.default_matmul_precision("highest")`), at least
the CPU's. A compact Markdown table for RESULTS.md ends the output.

`--option NAME=true|false` (repeatable) sets an mpmd partitioning option for every mpmd
step of the run, e.g. `--option mpmd_batch_weight_gradients=true` (each mesh's weight
gradients computed once for the microbatches: one call a mesh instead of one a
microbatch, which should pay most where the meshes share an accelerator).

The budget (`--budget-s`, default 450 s) bounds the whole run: a case that would not fit
in what is left is skipped with a line saying so, a case past its share is stopped, and
inside a case the timed steps stop early when its time is close. Exit status 0 when every
case that ran matched `jax.jit`, 1 otherwise (a skipped case is not a failure).

On a CPU machine the meshes of (a) share one CPU device (`--cpu-devices`, default 1, as
on one GPU), and (b) runs 2 CPU processes of one device each.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time
import types

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

#: Sizes: GPT-2 124M at a training size, the small model as gpt2.py's small-8;
#: quick: tiny (the CPU test of this script).
FULL = {"gpt2": dict(layers=12, width=768, heads=12, vocab=50257, seq=1024, batch=8,
                     microbatches=8),
        "small": dict(layers=8, width=32, heads=4, vocab=64, seq=16, batch=2, microbatches=8)}
QUICK = {"gpt2": dict(layers=4, width=32, heads=2, vocab=128, seq=16, batch=2, microbatches=2),
         "small": dict(layers=4, width=16, heads=2, vocab=32, seq=8, batch=2, microbatches=2)}
#: Seconds a case needs at the least (compiles and a few steps), full / quick.
NEEDS = {"gpt2": (150, 15), "small": (45, 10), "mp": (100, 20)}
#: Timed steps per side at most (full / quick), and steps issued back to back.
STEPS = (10, 2)
LOOP_STEPS = (5, 2)
CPU_TOLERANCES = (1e-5, 1e-4)  # loss, parameters (gpu_smoke.py's)
#: Exit status of a case process whose mpmd side ran out of memory.
OOM_EXIT = 3


# ---------------------------------------------------------------- helpers (no JAX backend)
def _is_oom(error: BaseException) -> bool:
  seen = error
  while seen is not None:
    text = f"{type(seen).__name__}: {seen}"
    if "RESOURCE_EXHAUSTED" in text or "out of memory" in text.lower():
      return True
    seen = seen.__cause__ or seen.__context__
  return False


def _ms(seconds: float | None) -> str:
  return "-" if seconds is None else f"{seconds * 1e3:.1f}"


def _us(seconds: float | None) -> str:
  return "-" if seconds is None else f"{seconds * 1e6:.0f}"


def _median(xs) -> float | None:
  xs = list(xs)
  return statistics.median(xs) if xs else None


def _sizes(args, model: str) -> dict:
  sizes = dict((QUICK if args.quick else FULL)[model])
  if model == "gpt2":
    for name in ("seq", "batch", "microbatches"):
      if getattr(args, f"gpt2_{name}") is not None:
        sizes[name] = getattr(args, f"gpt2_{name}")
  return sizes


def _size_args(sizes: dict) -> list[str]:
  return [f"--{k}={v}" for k, v in sizes.items()]


def _option_args(args) -> list[str]:
  """`--option` again for a process this script starts."""
  return [f"--option={item}" for item in args.option]


def _run_namespace(model: str, sizes: dict, steps: int,
                   options: list[str] | None = None) -> argparse.Namespace:
  """What `gpt2.Side` reads (`batch` there is the whole batch: microbatches x b;
  `option`: the `--option NAME=true|false` items for mpmd's partitioning)."""
  s = dict(sizes)
  s["batch"] = s["batch"] * s["microbatches"]
  return argparse.Namespace(model=model, schedule="1F1B", steps=steps, option=options or [],
                            **s)


# ---------------------------------------------------------------- (a): one case, in its process
def _params_and_loss(state, loss):
  import jax  # noqa: PLC0415
  import numpy as np  # noqa: PLC0415
  # (copies: on the CPU an array of device_get may share the buffer a later step
  # is donated)
  return [np.array(x, copy=True) for x in jax.tree.leaves(jax.device_get(state[0]))], float(loss)


def _tolerances(effect: tuple[float, float] | None) -> tuple[float, float]:
  if effect is None:
    return CPU_TOLERANCES
  return max(CPU_TOLERANCES[0], 4 * effect[0]), max(CPU_TOLERANCES[1], 4 * effect[1])


def single_process_case(args) -> int:
  """Runs case (a) for `args.model` here; writes its figures to `args.json`."""
  import call_overhead  # noqa: PLC0415 (imports gpt2, then jax)
  import gpt2  # noqa: PLC0415
  import gpu_smoke  # noqa: PLC0415
  import jax  # noqa: PLC0415
  import numpy as np  # noqa: PLC0415

  deadline = args.deadline
  sizes = {k: getattr(args, k) for k in FULL["gpt2"]}
  run = _run_namespace(args.model, sizes, args.steps, args.option)
  platform = jax.default_backend()
  out = {"model": args.model, "sizes": sizes, "platform": platform, "sides": {},
         "devices": f"{len(jax.devices())} {platform} ({jax.devices()[0].device_kind})"}
  timer = call_overhead.CallTimer()
  sides = {}
  jit_sides = {"same": "jax-same", "whole": "jax"}
  for name in ["mpmd", *(jit_sides[k] for k in args.jit_sides.split(","))]:
    t0 = time.time()
    try:
      sides[name] = gpt2.Side(run, "equal", name)
    except Exception as e:  # noqa: BLE001 -- out of memory is a result, anything else not
      if not _is_oom(e):
        raise
      print(f"{name}: out of memory ({str(e).splitlines()[0][:200]})", flush=True)
      sides.pop(name, None)
      gc.collect()
      if name == "mpmd":
        out["oom"] = True
        pathlib.Path(args.json).write_text(json.dumps(out))
        return OOM_EXIT
      out["sides"][name] = {"oom": True}
      continue
    out["sides"][name] = {"compile": sides[name].compile_seconds}
    print(f"{name}: compiled and ran its first step in {time.time() - t0:.1f} s", flush=True)
  states = {name: side.state for name, side in sides.items()}
  done = {name: 1 for name in sides}  # (each side's first step ran when it was built)
  snapshots, times = {}, {name: [] for name in sides}
  host_calls = []

  def step(name, timed):
    side = sides[name]
    if name == "mpmd":
      timer.seconds, timer.on = [], True
    t0 = time.perf_counter()
    result = side.fn(states[name], side.tokens)
    t1 = time.perf_counter()
    jax.block_until_ready(result)
    t2 = time.perf_counter()
    timer.on = False
    states[name], loss = result
    done[name] += 1
    if done[name] == args.check_step:
      snapshots[name] = _params_and_loss(states[name], loss)
    if timed:
      times[name].append((t1 - t0, t2 - t1))
      if name == "mpmd":
        host_calls.append(list(timer.seconds))

  rounds = 0
  while True:
    round_start = time.time()
    for name in sides:
      step(name, timed=rounds > 0)  # (the first round settles every side)
    rounds += 1
    round_seconds = time.time() - round_start
    need_more = min(done.values()) < args.check_step
    if not need_more and (rounds > args.steps
                          or time.time() + 2 * round_seconds + args.reserve > deadline):
      break
  # Back to back: `loop` steps issued, one wait at the end.
  loop = {}
  for name, side in sides.items():
    if time.time() + round_seconds + args.reserve > deadline:
      break
    t0 = time.perf_counter()
    for _ in range(args.loop_steps):
      states[name], loss = side.fn(states[name], side.tokens)
    jax.block_until_ready(states[name])
    loop[name] = (time.perf_counter() - t0) / args.loop_steps

  counts = sides["mpmd"].counts()
  calls = counts["calls"]
  buffers = call_overhead.buffers(sides["mpmd"])
  per_call_buffers = max(1, round(buffers / max(1, calls)))
  out["mpmd"] = {**counts, "buffers": buffers,
                 "host_in_calls": _median(sum(c) for c in host_calls),
                 "per_call_timed": _median(t for c in host_calls for t in c),
                 "calls_timed": len(host_calls[0]) if host_calls else 0,
                 "jit_dispatch_same_buffers": call_overhead.jit_dispatch(per_call_buffers, False)
                 * 1e-6, "per_call_buffers": per_call_buffers}
  for name in sides:
    issue = [a for a, _ in times[name]]
    wait = [b for _, b in times[name]]
    out["sides"][name].update(step=_median(a + b for a, b in times[name]), issue=_median(issue),
                              wait=_median(wait), loop=loop.get(name), steps=len(times[name]))
  # The reference for the results: jax.jit of the same microbatched step when it fitted.
  ref = "jax-same" if "jax-same" in snapshots else "jax" if "jax" in snapshots else None
  out["ref"] = ref
  effect = None
  if ref is not None and platform != "cpu":
    # How far TF32 moves jax.jit itself (gpu_smoke.py's method), if there is time.
    ref_step = out["sides"][ref]["step"] or 0.0
    estimate = out["sides"][ref]["compile"] + 4 * args.check_step * ref_step + args.reserve
    if time.time() + estimate < deadline:
      for name in [n for n in sides if n != ref]:
        del sides[name], states[name]
      gc.collect()
      with jax.default_matmul_precision("highest"):
        exact = gpt2.Side(run, "equal", ref)
        state = exact.state
        for _ in range(args.check_step - 1):
          state, loss = exact.run(state)
        exact_params, exact_loss = _params_and_loss(state, loss)
      effect = (gpu_smoke.rel_diff(snapshots[ref][1], exact_loss),
                gpt2._relative_difference(snapshots[ref][0], exact_params))
    else:
      out["tf32_skipped"] = True
  out["tf32_effect"] = effect
  loss_tol, params_tol = _tolerances(effect)
  out["tolerances"] = (loss_tol, params_tol)
  if ref is not None:
    got, want = snapshots["mpmd"], snapshots[ref]
    out["loss_diff"] = gpu_smoke.rel_diff(got[1], want[1])
    out["params_diff"] = gpt2._relative_difference(got[0], want[0])
    decisive = platform == "cpu" or effect is not None
    out["match"] = _match(out["loss_diff"] < loss_tol and out["params_diff"] < params_tol,
                          decisive)
    if args.reference:
      np.savez(args.reference, loss=np.asarray(want[1]),
               tolerances=np.asarray([loss_tol, params_tol, decisive]),
               **{f"leaf{i}": x for i, x in enumerate(want[0])})
  pathlib.Path(args.json).write_text(json.dumps(out))
  return 0


# ---------------------------------------------------------------- (b): the launched processes
def worker(args) -> int:
  """Runs in each of the 2 launched processes: each model's step over one mesh per
  process; writes this process's figures and the parameters it holds."""
  import call_overhead  # noqa: PLC0415
  import gpt2  # noqa: PLC0415
  import jax  # noqa: PLC0415
  import numpy as np  # noqa: PLC0415
  import optax  # noqa: PLC0415
  from jax.sharding import Mesh  # noqa: PLC0415

  import mpmd  # noqa: PLC0415

  mpmd.distributed.initialize()
  me = jax.process_index()
  devices = sorted(jax.devices(), key=lambda d: d.process_index)
  if len(devices) != 2 or devices[0].process_index == devices[1].process_index:
    raise SystemExit(f"expected one device in each of 2 processes, got {devices}")
  topology = {"m0": Mesh(np.array(devices[:1]), ("data",)),
              "m1": Mesh(np.array(devices[1:]), ("data",))}
  timer = call_overhead.CallTimer()
  outdir = pathlib.Path(args.worker)
  figures = {"process": me, "device": str(jax.local_devices()[0]), "models": {}}
  for model_name, sizes in json.loads(args.mp_models).items():
    run = _run_namespace(model_name, sizes, 0, args.option)
    model = gpt2.make_model(run)
    optimizer = optax.adamw(1e-4)
    m, b, t = sizes["microbatches"], sizes["batch"], sizes["seq"]
    tokens = jax.random.randint(jax.random.key(2), (m, b, t + 1), 0, sizes["vocab"],
                                jax.numpy.int32)
    params, opt_state, key = gpt2.init_state(model, optimizer, t)
    # The key as raw key data (a legacy uint32 key; `jax.random.split` takes both):
    # in this tree's mpmd a typed key among the outputs of a multi-process run
    # fails on the processes that do not hold it (`prng_keys.wrap` of a RemoteArray).
    state = (params, opt_state, jax.random.key_data(key))
    # gpt2.py's quarters: the first two on process 0's mesh, the last two on process 1's.
    labels = {label: "m0" if int(mesh[1:]) < 2 else "m1"
              for label, mesh in gpt2.label_to_mesh(model).items()}
    config = mpmd.make_config(topology, labels, pipeline_schedule="1F1B",
                              partitioning_options={"mpmd_infer_cross_mesh_reductions": True,
                                                    **gpt2.partitioning_options(run)})
    fn = mpmd.jit(gpt2.make_step(model, optimizer, m, labelled=True), config,
                  donate_argnums=(0,) if args.mp_donate else ())
    t0 = time.perf_counter()
    compiled = fn.lower(state, tokens).compile()
    compile_s = time.perf_counter() - t0
    counts = gpt2.Side.counts(types.SimpleNamespace(compiler="mpmd", compiled=compiled))
    issue, wait, host_calls = [], [], []
    for i in range(args.mp_steps):
      timed = i >= 1  # (the first call runs the remaining set-up)
      timer.seconds, timer.on = [], timed
      t0 = time.perf_counter()
      state, loss = compiled(state, tokens)
      t1 = time.perf_counter()
      jax.block_until_ready([x for x in jax.tree.leaves((state, loss)) if isinstance(x, jax.Array)])
      t2 = time.perf_counter()
      timer.on = False
      if i == 0:
        compile_s += t2 - t0
      if timed:
        issue.append(t1 - t0)
        wait.append(t2 - t1)
        host_calls.append(sum(timer.seconds))
      if i + 1 == args.check_step:
        leaves = jax.tree.leaves(state[0])
        held = {f"leaf{k}": np.array(jax.device_get(x), copy=True) for k, x in enumerate(leaves)
                if isinstance(x, jax.Array)}
        if isinstance(loss, jax.Array):
          held["loss"] = np.asarray(jax.device_get(loss))
        np.savez(outdir / f"{model_name}.p{me}.npz", count=np.asarray(len(leaves)), **held)
    figures["models"][model_name] = {"compile": compile_s, "issue": issue, "wait": wait,
                                     "host_in_calls": host_calls, **counts}
    print(f"process {me}, {model_name}: {counts['calls']} calls, {counts['transfers']} "
          f"transfers; step {_ms(_median(a + b for a, b in zip(issue, wait)))} ms", flush=True)
    del state, compiled, fn
    gc.collect()
  (outdir / f"p{me}.json").write_text(json.dumps(figures))
  return 0


# ---------------------------------------------------------------- the driver
class Budget:
  def __init__(self, seconds: float):
    self.start, self.seconds = time.time(), seconds

  def left(self) -> float:
    return self.seconds - (time.time() - self.start)


def _child_env(args, platform: str | None, mem_fraction: float | None) -> dict:
  env = dict(os.environ)
  flags = [f for f in env.get("XLA_FLAGS", "").split()
           if "xla_force_host_platform_device_count" not in f]
  env["XLA_FLAGS"] = " ".join(flags + [
      f"--xla_force_host_platform_device_count={args.cpu_devices}"])
  if args.quick:  # a test of this script: every child compiles without LLVM's optimisation
    import _common  # noqa: PLC0415
    env = _common.quick_env(env)
  if mem_fraction is not None and platform not in (None, "cpu"):
    env["XLA_PYTHON_CLIENT_MEM_FRACTION"] = str(mem_fraction)
  return env


def _run(cmd: list[str], env: dict, timeout: float) -> tuple[int | None, str]:
  """Runs `cmd`, streaming its output; (exit status or None if stopped at the
  timeout, the last lines of its output)."""
  tail: list[str] = []
  with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                        env=env, cwd=ROOT, start_new_session=True) as proc:
    end = time.time() + timeout
    try:
      import selectors  # noqa: PLC0415
      sel = selectors.DefaultSelector()
      sel.register(proc.stdout, selectors.EVENT_READ)
      while True:
        left = end - time.time()
        if left <= 0:
          raise subprocess.TimeoutExpired(cmd, timeout)
        if not sel.select(timeout=min(left, 1.0)):
          if proc.poll() is not None:
            break
          continue
        line = proc.stdout.readline()
        if not line:
          break
        print(f"    {line.rstrip()}", flush=True)
        tail = (tail + [line.rstrip()])[-40:]
      proc.wait(timeout=max(1.0, end - time.time()))
    except subprocess.TimeoutExpired:
      with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, 15)
      try:
        proc.wait(timeout=10)
      except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
          os.killpg(proc.pid, 9)
        proc.wait()
      return None, "\n".join(tail)
  return proc.returncode, "\n".join(tail)


def _probe(args) -> dict:
  # The platform's dispatch cost is measured here too: its row decides which
  # back-to-back units merge (`mpmd.partition.dispatch_cost`) in every case.
  code = ("import json, sys; sys.path.insert(0, sys.argv[1]); import _common, jax; "
          "from mpmd.partition import dispatch_cost; "
          "print(json.dumps({'platform': jax.default_backend(), "
          "'machine': _common.machine_description(), "
          "'dispatch_cost': str(dispatch_cost.measure())}))")
  done = subprocess.run([sys.executable, "-c", code, str(HERE)], capture_output=True, text=True,
                        env=_child_env(args, None, None), cwd=ROOT, timeout=120, check=False)
  if done.returncode:
    raise SystemExit(f"could not start JAX:\n{done.stderr[-3000:]}")
  return json.loads(done.stdout.strip().splitlines()[-1])


def _single(args, model: str, sizes: dict, platform: str, timeout: float, tmp: pathlib.Path):
  """Case (a) for `model` in a process of its own: (its figures or None, a note)."""
  out, ref = tmp / f"{model}.json", tmp / f"{model}.ref.npz"
  cmd = [sys.executable, __file__, "--run-case", model, "--json", str(out), "--reference",
         str(ref), "--deadline", str(time.time() + timeout - 15), "--steps",
         str(args.steps), "--loop-steps", str(args.loop_steps), "--check-step",
         str(args.check_step), "--jit-sides", args.jit_sides, *_size_args(sizes),
         *_option_args(args)]
  code, tail = _run(cmd, _child_env(args, platform, args.mem_fraction), timeout)
  if code is None:
    return None, f"stopped: past its share of the budget ({timeout:.0f} s)"
  if code == OOM_EXIT:
    return {"oom": True}, "out of memory"
  if code != 0 or not out.exists():
    last = [line for line in tail.splitlines() if line.strip()][-1:] or ["?"]
    return None, f"failed (exit status {code}): {last[0][:200]}"
  figures = json.loads(out.read_text())
  figures["reference_file"] = str(ref) if ref.exists() else None
  return figures, ""


def _launched(args, models: dict, platform: str, timeout: float, tmp: pathlib.Path):
  """Case (b): the models' steps over 2 launched processes; (figures or None, note)."""
  import numpy as np  # noqa: PLC0415
  outdir = tmp / "mp"
  outdir.mkdir(exist_ok=True)
  gpu = platform != "cpu"
  cmd = [sys.executable, "-m", "mpmd.launch", "--processes", "2", "--devices-per-process", "1",
         "--platform", "gpu" if gpu else "cpu", "--timeout", str(int(timeout - 10)),
         "--grace", "10", __file__, "--worker", str(outdir), "--mp-models", json.dumps(models),
         "--mp-steps", str(args.mp_steps), "--check-step", str(args.check_step),
         *_option_args(args)]
  if args.mp_donate:
    cmd.append("--mp-donate")
  env = _child_env(args, platform, None)
  env["XLA_PYTHON_CLIENT_MEM_FRACTION"] = str(args.mp_mem_fraction)
  if gpu:
    # The launcher gives process i the i-th block of the GPUs CUDA_VISIBLE_DEVICES
    # lists: the one GPU listed twice gives both processes that GPU.
    visible = [d for d in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    first = visible[0] if visible else "0"
    env["CUDA_VISIBLE_DEVICES"] = f"{first},{first}"
  code, tail = _run(cmd, env, timeout)
  if code is None:
    return None, f"stopped: past its share of the budget ({timeout:.0f} s)"
  files = [outdir / f"p{i}.json" for i in range(2)]
  if code != 0 or not all(f.exists() for f in files):
    errors = [line for line in tail.splitlines() if "Error" in line or "error" in line]
    last = (errors or [line for line in tail.splitlines() if line.strip()] or ["?"])[-1]
    return None, f"failed (exit status {code}): {last.strip()[:240]}"
  per_process = [json.loads(f.read_text()) for f in files]
  figures = {}
  for name in models:
    figs = [p["models"][name] for p in per_process]
    steps = [max(a + b for a, b in zip(*pair)) for pair in
             zip(*[zip(f["issue"], f["wait"]) for f in figs])]
    issue = [max(x) for x in zip(*[f["issue"] for f in figs])]
    held = [dict(np.load(outdir / f"{name}.p{i}.npz")) for i in range(2)]
    figures[name] = {"step": _median(steps), "issue": _median(issue),
                     "wait": _median(max(x) for x in zip(*[f["wait"] for f in figs])),
                     "host_in_calls": _median(sum(x) for x in zip(*[f["host_in_calls"]
                                                                     for f in figs])),
                     "calls": sum(f["calls"] for f in figs),
                     "transfers": sum(f["transfers"] for f in figs),
                     "compile": max(f["compile"] for f in figs), "held": held,
                     "per_process_calls": [f["calls"] for f in figs]}
  return figures, ""


def _compare_with_reference(held: list[dict], reference: str | None):
  """(loss diff, params diff, match or None, note) of the 2-process run's
  parameters against case (a)'s jax.jit after the same steps."""
  import numpy as np  # noqa: PLC0415

  import gpt2  # noqa: PLC0415
  import gpu_smoke  # noqa: PLC0415
  if reference is None:
    return None, None, None, "no reference: case (a) of this model did not run"
  ref = dict(np.load(reference))
  count = int(held[0]["count"])
  got = []
  for k in range(count):
    leaf = next((h[f"leaf{k}"] for h in held if f"leaf{k}" in h), None)
    if leaf is None:
      return None, None, False, f"parameter {k} is held by no process"
    got.append(leaf)
  want = [ref[f"leaf{k}"] for k in range(count)]
  loss = next((h["loss"] for h in held if "loss" in h), None)
  d_loss = None if loss is None else gpu_smoke.rel_diff(loss, ref["loss"])
  d_params = gpt2._relative_difference(got, want)
  loss_tol, params_tol, decisive = ref["tolerances"]
  ok = (d_loss is None or d_loss < loss_tol) and d_params < params_tol
  return d_loss, d_params, _match(ok, bool(decisive)), ""


def _match(ok: bool, decisive: bool) -> bool | None:
  """Within the tolerances: True. Beyond them: False where the tolerances are
  decisive (on CPU, or calibrated by TF32's effect), else None (not known)."""
  return True if ok else (False if decisive else None)


def _describe(model: str, sizes: dict) -> str:
  m, b, t = sizes["microbatches"], sizes["batch"], sizes["seq"]
  what = ("GPT-2 (tied head)" if model == "gpt2" else "small remat'd model")
  return (f"{what}, {sizes['layers']} blocks of width {sizes['width']}, {m} microbatches "
          f"of {b} x {t} tokens")


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--budget-s", type=float, default=450.0,
                      help="the whole run's time budget in seconds (default 450)")
  parser.add_argument("--quick", action="store_true", help="tiny sizes (a CPU test)")
  parser.add_argument("--cases", default="gpt2,small,mp",
                      help="comma-separated, of gpt2, small, mp (in this order)")
  parser.add_argument("--gpt2-batch", type=int, default=None,
                      help="sequences per microbatch to try first (default 8, halved on OOM)")
  parser.add_argument("--gpt2-seq", type=int, default=None, help="tokens per sequence (1024)")
  parser.add_argument("--gpt2-microbatches", type=int, default=None, help="(default 8)")
  parser.add_argument("--steps", type=int, default=None,
                      help="timed steps per side at most (default 10; quick 2)")
  parser.add_argument("--loop-steps", type=int, default=None,
                      help="steps issued back to back, one wait at the end (default 5)")
  parser.add_argument("--check-step", type=int, default=3,
                      help="results compared after this many steps (at least 2)")
  parser.add_argument("--jit-sides", default="same,whole",
                      help="jax.jit's steps in (a): same (the microbatched step), whole "
                      "(the whole batch in one gradient), or both (default)")
  parser.add_argument("--mem-fraction", type=float, default=0.9,
                      help="XLA_PYTHON_CLIENT_MEM_FRACTION of a case (a) process (GPU)")
  parser.add_argument("--mp-mem-fraction", type=float, default=0.45,
                      help="XLA_PYTHON_CLIENT_MEM_FRACTION of each of the 2 processes")
  parser.add_argument("--mp-steps", type=int, default=None,
                      help="steps of each model in the 2-process run (default 8; quick 4)")
  parser.add_argument("--mp-donate", action="store_true",
                      help="donate the state in the 2-process run too (off: with it, this "
                      "tree's mpmd failed on CPU: a donated buffer offered for a pull was "
                      "deleted before the pull)")
  parser.add_argument("--option", action="append", default=[], metavar="NAME=true|false",
                      help="an mpmd partitioning option for every mpmd step this run "
                      "compiles (repeatable), e.g. mpmd_batch_weight_gradients=true")
  parser.add_argument("--cpu-devices", type=int, default=1,
                      help="CPU devices of a case process on a CPU machine (1: the meshes "
                      "share one, as on one GPU)")
  # The processes this script starts.
  parser.add_argument("--run-case", default=None, help=argparse.SUPPRESS)
  parser.add_argument("--json", default=None, help=argparse.SUPPRESS)
  parser.add_argument("--reference", default=None, help=argparse.SUPPRESS)
  parser.add_argument("--deadline", type=float, default=None, help=argparse.SUPPRESS)
  parser.add_argument("--reserve", type=float, default=5.0, help=argparse.SUPPRESS)
  parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
  parser.add_argument("--mp-models", default=None, help=argparse.SUPPRESS)
  for name in FULL["gpt2"]:
    parser.add_argument(f"--{name}", type=int, default=None, help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  args.steps = args.steps if args.steps is not None else STEPS[args.quick]
  args.loop_steps = args.loop_steps if args.loop_steps is not None else LOOP_STEPS[args.quick]
  args.mp_steps = args.mp_steps if args.mp_steps is not None else (4 if args.quick else 8)
  args.check_step = max(2, args.check_step)
  for item in args.option:
    name, _, value = item.partition("=")
    if not name or value.lower() not in ("true", "false"):
      raise SystemExit(f"--option {item!r}: give NAME=true or NAME=false")
  if not args.jit_sides or set(args.jit_sides.split(",")) - {"same", "whole"}:
    raise SystemExit(f"--jit-sides {args.jit_sides!r}: use same, whole or same,whole")
  args.mp_steps = max(args.mp_steps, args.check_step + 1)
  if args.run_case:
    args.model = args.run_case
    return single_process_case(args)
  if args.worker:
    return worker(args)
  return drive(args, argv)


def drive(args, argv) -> int:
  budget = Budget(args.budget_s)
  cases = [c.strip() for c in args.cases.split(",") if c.strip()]
  unknown = set(cases) - set(NEEDS)
  if unknown:
    raise SystemExit(f"unknown cases {sorted(unknown)}: use gpt2, small, mp")
  probe = _probe(args)
  platform = probe["platform"]
  print(f"gpu_check: {probe['machine']}; budget {args.budget_s:.0f} s", flush=True)
  # Every case partitions by this platform's measured row (unless one is given).
  os.environ.setdefault("MPMD_DISPATCH_COST", probe["dispatch_cost"])
  print(f"dispatch cost measured on {platform}: {probe['dispatch_cost']} (CALL_US,KERNEL_US,"
        f"GFLOPS: the row for mpmd.partition.dispatch_cost.MEASURED); the cases use "
        f"MPMD_DISPATCH_COST={os.environ['MPMD_DISPATCH_COST']}", flush=True)
  if platform == "cpu" and not args.quick:
    print("(no accelerator: full sizes on the CPU take far longer than the budget; "
          "use --quick for a test of this script)", flush=True)
  needs = {c: NEEDS[c][args.quick] for c in NEEDS}
  results: dict[str, dict] = {}
  notes: dict[str, str] = {}
  sizes_used: dict[str, dict] = {}
  ok = True
  with tempfile.TemporaryDirectory(prefix="gpu_check.") as tmpdir:
    tmp = pathlib.Path(tmpdir)
    for case in cases:
      later = sum(needs[c] for c in cases[cases.index(case) + 1:])
      if case in ("gpt2", "small"):
        sizes = _sizes(args, case)
        while True:
          left = budget.left()
          if left < needs[case]:
            notes[case] = (f"skipped: {left:.0f} s of the budget left, the case needs about "
                           f"{needs[case]} s")
            print(f"\n== {case}: {notes[case]}", flush=True)
            break
          share = max(needs[case], left - later)
          print(f"\n== {case} (a): {_describe(case, sizes)}, 4 meshes sharing one device, "
                f"against jax.jit (at most {share:.0f} s)", flush=True)
          figures, note = _single(args, case, sizes, platform, share, tmp)
          if figures is not None and figures.get("oom"):
            if sizes["batch"] == 1:
              notes[case] = "out of memory at 1 sequence per microbatch"
              break
            sizes = {**sizes, "batch": sizes["batch"] // 2}
            print(f"   mpmd ran out of memory: halving the microbatch to {sizes['batch']} "
                  "sequences", flush=True)
            continue
          if figures is None:
            notes[case] = note
            ok = False
            print(f"   {note}", flush=True)
          else:
            results[case] = figures
            sizes_used[case] = sizes
            ok &= figures.get("match") is not False
          break
      else:  # the 2-process run
        left = budget.left()
        if left < needs["mp"]:
          notes["mp"] = (f"skipped: {left:.0f} s of the budget left, the case needs about "
                         f"{needs['mp']} s")
          print(f"\n== mp: {notes['mp']}", flush=True)
          continue
        # The models whose case (a) ran (their jax.jit is the reference), at its sizes.
        models = {name: sizes_used[name] for name in ("small", "gpt2") if name in sizes_used}
        if not models:
          models = {"small": _sizes(args, "small")}
        print(f"\n== mp (b): {', '.join(models)} over 2 processes sharing one device "
              f"(python -m mpmd.launch, memory fraction {args.mp_mem_fraction} each; "
              f"at most {left - 5:.0f} s)", flush=True)
        figures, note = _launched(args, models, platform, left - 5, tmp)
        if figures is None:
          notes["mp"] = note
          ok = False
          print(f"   {note}", flush=True)
          continue
        for name, f in figures.items():
          reference = results.get(name, {}).get("reference_file")
          f["loss_diff"], f["params_diff"], f["match"], f["note"] = _compare_with_reference(
              f.pop("held"), reference)
          ok &= f["match"] is not False
          results[f"mp-{name}"] = f
    notes["dispatch cost"] = (f"measured {probe['dispatch_cost']} (CALL_US,KERNEL_US,GFLOPS); "
                              f"the cases ran with MPMD_DISPATCH_COST="
                              f"{os.environ['MPMD_DISPATCH_COST']}")
    body = report(args, results, notes, sizes_used, platform, probe["machine"], argv)
  print("\n" + body, flush=True)
  print("all results match jax.jit" if ok else
        "MISMATCH or FAILURE: see the notes above", flush=True)
  return 0 if ok else 1


def report(args, results: dict, notes: dict, sizes_used: dict, platform: str, machine: str,
           argv) -> str:
  """The lines of each case and the Markdown table for RESULTS.md."""
  import _common  # noqa: PLC0415
  lines, rows = [], []

  def fastest_jit(r: dict) -> tuple[str, dict | None]:
    ran = {n: s for n, s in r["sides"].items() if n != "mpmd" and s.get("step") is not None}
    if not ran:
      return "-", None
    name = min(ran, key=lambda n: ran[n]["step"])
    return ("whole batch" if name == "jax" else "microbatched"), ran[name]

  def diffs(r: dict) -> list[str]:
    fmt = lambda x: "-" if x is None else f"{x:.1e}"  # noqa: E731
    match = {True: "yes", False: "NO", None: "not known"}[r.get("match")]
    return [fmt(r.get("loss_diff")), fmt(r.get("params_diff")), match]

  if "dispatch cost" in notes:
    lines.append(f"- dispatch cost: {notes['dispatch cost']}")
  if args.option:
    lines.append(f"- mpmd partitioning options: {', '.join(args.option)}")
  for case in ("gpt2", "small"):
    if case in notes:
      lines.append(f"- {case} (a): {notes[case]}")
    if case not in results:
      continue
    r, sizes = results[case], sizes_used[case]
    mp, sides = r["mpmd"], r["sides"]
    which, ref = fastest_jit(r)
    mpmd = sides["mpmd"]
    tokens = sizes["microbatches"] * sizes["batch"] * sizes["seq"]
    side_text = "; ".join(
        f"{n}: " + ("out of memory" if s.get("oom") else
                    f"step {_ms(s['step'])} ms (issue {_ms(s['issue'])}, wait "
                    f"{_ms(s['wait'])}), back to back {_ms(s.get('loop'))} ms/step, compile "
                    f"{s['compile']:.1f} s, {s['steps']} timed steps")
        for n, s in sides.items())
    effect = r.get("tf32_effect")
    lines.append(
        f"- {case} (a), {_describe(case, sizes)} ({tokens} tokens a step), {r['devices']}: "
        f"{side_text}. mpmd: {mp['calls']} calls ({mp['calls_timed']} timed where the runtime "
        f"issues them), {mp['transfers']} transfers, {mp['moved'] / 2**20:.1f} MiB moved, "
        f"{mp['buffers']} buffers a step ({mp['per_call_buffers']} a call on average; "
        f"`jax.jit` dispatches a tiny executable of that many arrays in "
        f"{_us(mp['jit_dispatch_same_buffers'])} us). Results against `jax.jit` "
        f"({r['ref']}) after {args.check_step} steps: loss {diffs(r)[0]}, parameters "
        f"{diffs(r)[1]}, tolerances {r['tolerances'][0]:.1e} / {r['tolerances'][1]:.1e}"
        + (f" (TF32 moves `jax.jit` by {effect[0]:.1e} / {effect[1]:.1e})" if effect else
           " (TF32's effect not measured: no time left)" if r.get("tf32_skipped") else ""))
    calls = max(1, mp["calls"])
    rows.append([
        f"{case}, 4 meshes sharing the device", f"{tokens}", _ms(mpmd["step"]),
        f"{_ms(ref['step'] if ref else None)} ({which})",
        f"{mpmd['step'] / ref['step']:.2f}x" if ref else "-",
        _ms(mpmd["issue"]), _us(mpmd["issue"] / calls), _us(mp["per_call_timed"]),
        _us(ref["issue"] if ref else None), _us(mp["jit_dispatch_same_buffers"]),
        f"{_ms(mpmd['wait'])} / {_ms(ref['wait'] if ref else None)}",
        f"{_ms(mpmd.get('loop'))} / {_ms(ref.get('loop') if ref else None)}",
        f"{mp['calls']}", f"{mp['transfers']}", *diffs(r)])
  if "mp" in notes:
    lines.append(f"- mp (b): {notes['mp']}")
  for name in ("small", "gpt2"):
    r = results.get(f"mp-{name}")
    if r is None:
      continue
    sizes = sizes_used.get(name) or _sizes(args, name)
    tokens = sizes["microbatches"] * sizes["batch"] * sizes["seq"]
    which, ref = fastest_jit(results[name]) if name in results else ("-", None)
    lines.append(
        f"- {name} (b), {_describe(name, sizes)}, 2 processes sharing the device: step "
        f"{_ms(r['step'])} ms (issue {_ms(r['issue'])}, wait {_ms(r['wait'])}; the slower "
        f"process's, per step), host in the calls {_ms(r['host_in_calls'])} ms a step, first "
        f"call {r['compile']:.1f} s with compile, calls per process {r['per_process_calls']}, "
        f"{r['transfers']} transfers; results against case (a)'s `jax.jit` after "
        f"{args.check_step} steps: loss {diffs(r)[0]}, parameters {diffs(r)[1]}"
        + (f" ({r['note']})" if r.get("note") else ""))
    calls = max(1, r["calls"])
    rows.append([
        f"{name}, 2 processes sharing the device", f"{tokens}", _ms(r["step"]),
        f"{_ms(ref['step'] if ref else None)} ({which}, (a))",
        f"{r['step'] / ref['step']:.2f}x" if ref else "-", _ms(r["issue"]),
        _us(r["issue"] / calls * 2), "-", _us(ref["issue"] if ref else None), "-",
        f"{_ms(r['wait'])} / {_ms(ref['wait'] if ref else None)}", "-",
        f"{r['calls']}", f"{r['transfers']}", *diffs(r)])
  table = _common.markdown_table(
      ["case", "tokens a step", "mpmd step (ms)", "jax.jit step (ms), the faster", "ratio",
       "mpmd issue (ms)", "issue / calls (us)", "median call (us)", "jax.jit issue (us)",
       "jax.jit dispatch, same buffers (us)", "wait after issue (ms), mpmd / jax.jit",
       "back to back (ms/step), mpmd / jax.jit", "calls", "transfers", "loss diff",
       "params diff", "match"], rows)
  command = _common.command_line(__file__, argv)
  return (f"Command: `{command}`  \nMachine: {machine}\n\n" + "\n".join(lines) + "\n\n"
          + table + "\nStep: medians of the timed steps, the sides in turns in one process "
          "((b): per step the slower process; its `jax.jit` is case (a)'s). Issue: the time "
          "for the call to return; wait: `block_until_ready` after it. Issue / calls: the "
          "issue time over the fragment calls of a step ((b): per process); median call: each "
          "call timed where the runtime issues it. Back to back: "
          f"{args.loop_steps} steps issued, one wait at the end. Differences: normwise "
          "relative, after the same steps, against `jax.jit` of the same microbatched step "
          "where it fitted (else the whole batch).\n")


if __name__ == "__main__":
  sys.exit(main())
