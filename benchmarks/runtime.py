"""Runtime benchmarks, side by side with `jax.jit` in one run.

(b) step time of the transformer example (examples/train_transformer.py:
    flax attention+MLP blocks, AdamW, 8 microbatches, 1F1B) pipelined over
    4 meshes x 2 CPU devices with the batch sharded over each mesh's "data"
    axis, against `jax.jit` of the same step over the same 8 devices with the
    batch sharded over all 8 (the same work per device), both donating the
    training state; plus compile time (ours vs jax.jit, and the share of the
    C++ partitioner in ours);
(c) per-fragment dispatch cost: host time to issue one step of a pipeline of
    tiny fragments, per instruction, and the host time of one `jax.jit` call
    of a tiny function for reference;
(e) bubble fraction measured from runtime traces (`Compiled.trace`) against
    the simulator's prediction for the same schedule, with its default cost
    model and with the F/B durations measured in the trace.

    python benchmarks/runtime.py            # writes sections (b), (c), (e)
    python benchmarks/runtime.py --quick --results /tmp/r.md   # smoke run
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import os
import pathlib
import statistics
import sys
import time

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

import _common  # noqa: E402
import mpmd  # noqa: E402
from mpmd.run.program import CallInstruction  # noqa: E402
from mpmd import schedule as sched  # noqa: E402
from mpmd.compile import fragment as mpmd_fragment  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _example():
  if "train_transformer" in sys.modules:
    return sys.modules["train_transformer"]
  spec = importlib.util.spec_from_file_location("train_transformer",
                                                ROOT / "examples" / "train_transformer.py")
  module = importlib.util.module_from_spec(spec)
  sys.modules.setdefault("train_transformer", module)  # flax dataclasses look their module up
  spec.loader.exec_module(module)
  return sys.modules["train_transformer"]


def _topology(num_meshes: int, per_mesh: int, shared: bool = False) -> dict[str, Mesh]:
  """`num_meshes` meshes over the first devices, or all on the first device
  when `shared` (meshes of one device each, `make_config(shared_devices=True)`)."""
  if shared:
    return {f"m{i}": Mesh(np.array(jax.devices()[:1]), ("data",)) for i in range(num_meshes)}
  devices = np.array(jax.devices()[:num_meshes * per_mesh]).reshape(num_meshes, per_mesh)
  return {f"m{i}": Mesh(devices[i], ("data",)) for i in range(num_meshes)}


class Transformer:
  """The example's model and step at a given size, ready for both compilers."""

  def __init__(self, *, layers: int, width: int, seq: int, batch: int, microbatches: int,
               schedule: str = "1F1B", meshes: int = 4, per_mesh: int = 2,
               shared: bool = False):
    ex = _example()
    self.meshes = meshes
    stages = ex.make_stages(meshes, layers, width, heads=4, vocab=64)
    self.optimizer = optax.adamw(1e-3)
    self.step = ex.make_train_step(stages, self.optimizer)
    self.params = ex.init_params(stages, batch, seq, width)
    self.data = ex.make_data(microbatches, batch, seq, vocab=64)
    self.topology = _topology(meshes, per_mesh, shared)
    self.config = mpmd.make_config(self.topology, {f"stage{s}": f"m{s}" for s in range(meshes)},
                                   pipeline_schedule=schedule, shared_devices=shared)
    self.mesh8 = Mesh(np.array(jax.devices()[:1 if shared else meshes * per_mesh]), ("data",))

  def state(self):
    params = jax.tree.map(jnp.copy, self.params)
    return params, self.optimizer.init(params)

  def mpmd_jit(self):
    return mpmd.jit(self.step, self.config, in_shardings=(None, P("data")), donate_argnums=(0,))

  def jax_jit(self):
    replicated = NamedSharding(self.mesh8, P())
    return jax.jit(self.step, in_shardings=(replicated, NamedSharding(self.mesh8, P("data"))),
                   donate_argnums=(0,))


def _timed(fn):
  t0 = time.perf_counter()
  out = fn()
  return out, time.perf_counter() - t0


def _alternate(ours, ours_state, ours_data, ref, ref_state, ref_data, *, steps: int,
               warmup: int, return_states: bool = False):
  """Runs the two training steps in turn (both see the same machine); returns
  (our step times, reference step times, our last loss, the reference's), or
  with `return_states` the last states in place of the losses (donated
  states must be carried on)."""
  ours_times, ref_times = [], []
  for i in range(warmup + steps):
    t0 = time.perf_counter()
    ours_state, loss = ours(ours_state, ours_data)
    jax.block_until_ready((ours_state, loss))
    t1 = time.perf_counter()
    ref_state, ref_loss = ref(ref_state, ref_data)
    jax.block_until_ready((ref_state, ref_loss))
    t2 = time.perf_counter()
    if i >= warmup:
      ours_times.append(t1 - t0)
      ref_times.append(t2 - t1)
  if return_states:
    return ours_times, ref_times, ours_state, ref_state
  return ours_times, ref_times, loss, ref_loss


def bench_step_and_compile(args) -> str:
  model = Transformer(layers=args.layers, width=args.width, seq=args.seq, batch=args.batch,
                      microbatches=args.microbatches)
  jax.clear_caches()
  ours = model.mpmd_jit()
  lowered, t_lower = _timed(lambda: ours.lower(model.state(), model.data))
  compiled, t_compile = _timed(lowered.compile)
  jax.clear_caches()  # both compile cold: no trace or compile cached from the other
  ref = model.jax_jit()
  ref_lowered, t_ref_lower = _timed(lambda: ref.lower(model.state(), model.data))
  ref_compiled, t_ref_compile = _timed(ref_lowered.compile)
  ours_total, ref_total = t_lower + t_compile, t_ref_lower + t_ref_compile
  partition = lowered.partition_seconds
  programs = len(compiled.program.fragments)
  calls = sum(isinstance(i, CallInstruction) for i in compiled.instructions)
  transfers = len(compiled.instructions) - calls

  state, ref_state = model.state(), model.state()
  data = [jax.device_put(x, s) for x, s in zip(model.data, compiled.input_shardings[0][1])]
  ref_data = jax.device_put(model.data, NamedSharding(model.mesh8, P("data")))
  ours_times, ref_times, loss, ref_loss = _alternate(
      ours, state, data, ref_compiled, ref_state, ref_data, steps=args.steps, warmup=args.warmup)
  diff = abs(float(loss) - float(ref_loss)) / abs(float(ref_loss))
  ours_ms, ref_ms = 1e3 * statistics.median(ours_times), 1e3 * statistics.median(ref_times)

  size = (f"{args.layers} blocks (width {args.width}, 4 heads), sequence {args.seq}, "
          f"{args.microbatches} microbatches of {args.batch}, AdamW, 1F1B")
  step_table = _common.markdown_table(
      ["", "mpmd.jit (4 meshes x 2 devices)", "jax.jit (8 devices)", "ratio"],
      [["median step time (ms)", f"{ours_ms:.1f}", f"{ref_ms:.1f}", f"{ours_ms / ref_ms:.2f}x"],
       ["fastest step (ms)", f"{1e3 * min(ours_times):.1f}", f"{1e3 * min(ref_times):.1f}",
        f"{min(ours_times) / min(ref_times):.2f}x"]])
  compile_table = _common.markdown_table(
      ["", "mpmd.jit", "jax.jit", "ratio"],
      [["trace + lower (+ partition) (s)", f"{t_lower:.2f}", f"{t_ref_lower:.2f}",
        f"{t_lower / t_ref_lower:.2f}x"],
       ["XLA compile (s)", f"{t_compile:.2f}", f"{t_ref_compile:.2f}",
        f"{t_compile / t_ref_compile:.2f}x"],
       ["total (s)", f"{ours_total:.2f}", f"{ref_total:.2f}", f"{ours_total / ref_total:.2f}x"]])
  return (f"Model: {size}; {programs} distinct fragment programs, {calls} fragment calls and "
          f"{transfers} transfers per step. Steps: {args.steps} measured after {args.warmup} "
          f"warm-up steps, alternating the two compilers. Loss after the last step differs by "
          f"{diff:.1e} (relative).\n\n{step_table}\n\nCompile time of the same step:\n\n"
          f"{compile_table}\n\nThe C++ partitioner (import, schedule, export) took "
          f"{partition:.3f} s, {100 * partition / ours_total:.1f}% of mpmd's total compile "
          f"time.\n")


def _tiny_pipeline(microbatches: int, per_mesh: int):
  topology = _topology(4, per_mesh)
  config = mpmd.make_config(topology, {f"stage{s}": f"m{s}" for s in range(4)},
                            pipeline_schedule="1F1B")

  def loss(params, x):
    for s, w in enumerate(params):
      x = mpmd.named_computation(lambda w, x: jnp.tanh(x @ w), name=f"stage{s}")(w, x)
    return jnp.mean(x ** 2)

  def step(params, xs):
    grads = None
    for i, x in enumerate(xs):
      g = mpmd.call(jax.grad(loss), call_counter=i)(params, x)
      grads = g if grads is None else jax.tree.map(jnp.add, grads, g)
    return jax.tree.map(lambda p, g: p - 0.01 * g, params, grads)

  params = [jnp.eye(8) for _ in range(4)]
  xs = [jnp.ones((2, 8)) * i for i in range(microbatches)]
  return mpmd.jit(step, config), params, xs


def _per_call(fn, args, repeats: int, inner: int = 100) -> float:
  """Median host seconds per call of `fn(*args)` (calls issued back to back)."""
  jax.block_until_ready(fn(*args))
  times = []
  for _ in range(repeats):
    t0 = time.perf_counter()
    for _ in range(inner):
      out = fn(*args)
    times.append((time.perf_counter() - t0) / inner)
    jax.block_until_ready(out)
  return statistics.median(times)


def bench_dispatch(args) -> str:
  rows = []
  for per_mesh in (1, 2):
    # One fragment alone vs jax.jit of the same computation on the same devices.
    mesh = Mesh(np.array(jax.devices()[:per_mesh]), ("d",))
    s = NamedSharding(mesh, P())
    fn = lambda w, x: (jnp.tanh(x @ w),)  # noqa: E731
    w, x = jax.device_put(jnp.eye(8), s), jax.device_put(jnp.ones((2, 8)), s)
    frag = mpmd_fragment.compile_fragment(jax.jit(fn).lower(w, x).as_text(), mesh, name="tiny",
                                          in_shardings=[s, s])
    ours = _per_call(frag, (w, x), args.dispatch_repeats)
    ref = _per_call(jax.jit(fn, in_shardings=(s, s)), (w, x), args.dispatch_repeats)
    rows.append([f"one fragment call, mesh of {per_mesh} device(s)", f"{1e6 * ours:.1f}",
                 f"{1e6 * ref:.1f}", f"{1e6 * (ours - ref):+.1f}"])
    # A whole pipeline step, per instruction.
    step, params, xs = _tiny_pipeline(args.microbatches, per_mesh)
    params = step(params, xs)
    compiled = next(iter(next(iter(step._cache.values()))[1].values()))
    n = len(compiled.instructions)
    calls = sum(isinstance(i, CallInstruction) for i in compiled.instructions)
    per_step = []
    for _ in range(args.dispatch_repeats):
      jax.block_until_ready(params)
      t0 = time.perf_counter()
      params = step(params, xs)
      per_step.append(time.perf_counter() - t0)
    jax.block_until_ready(params)
    step_s = statistics.median(per_step)
    rows.append([f"pipeline step on 4 meshes x {per_mesh}: {calls} calls + {n - calls} "
                 f"transfers, per instruction", f"{1e6 * step_s / n:.1f}", "", ""])
  table = _common.markdown_table(["", "mpmd (µs)", "jax.jit (µs)", "difference"], rows)
  return (f"Host time to issue work: one tiny fragment (an 8x8 matmul) called back to back, "
          f"against `jax.jit` of the same computation on the same devices; and one step of a "
          f"4-stage pipeline of such fragments ({args.microbatches} microbatches, 1F1B), divided "
          f"by its number of instructions (argument placement, the instruction loop, "
          f"transfers). Medians of {args.dispatch_repeats} repeats.\n\n{table}\n\n"
          f"On the CPU backend a call of a small program on several devices also pays for "
          f"running it (PJRT's CPU client executes small programs inline and synchronises the "
          f"devices of a multi-device program), which is why both columns grow with the mesh "
          f"size; the difference column is mpmd's own cost.\n")


#: Steps per side in (c)'s equal-arithmetic table: a step takes 5-15 ms, and
#: on a shared 2-core machine fewer give ratios that move by 5% between runs.
EQUAL_ARITHMETIC_STEPS = 300
#: Blocks per side of the run where each compiler runs alone.
EQUAL_ARITHMETIC_BLOCKS = 6


def _in_blocks(ours, ours_state, ours_data, ref, ref_state, ref_data):
  """Step times of each training step run alone: blocks of consecutive
  steps of one side, taking turns (the first step of a block, which follows
  the other side's, is not counted)."""
  ours_times, ref_times = [], []
  per_block = EQUAL_ARITHMETIC_STEPS // EQUAL_ARITHMETIC_BLOCKS
  for _ in range(EQUAL_ARITHMETIC_BLOCKS):
    for fn, times, is_ours in ((ours, ours_times, True), (ref, ref_times, False)):
      state, data = (ours_state, ours_data) if is_ours else (ref_state, ref_data)
      for i in range(per_block + 1):
        t0 = time.perf_counter()
        state, loss = fn(state, data)
        jax.block_until_ready((state, loss))
        if i:
          times.append(time.perf_counter() - t0)
      if is_ours:
        ours_state = state
      else:
        ref_state = state
  return ours_times, ref_times


def bench_equal_arithmetic(args) -> str:
  """The issue's small transformer on 4 meshes of ONE device each against
  jax.jit on one device: the same arithmetic on the same cores, so the
  ratio is mpmd's own overhead."""
  rows, alone = [], []
  apart = {"mpmd_merge_forward_with_backward": False}
  for label, schedule, microbatches, options in (
      ("4 stages, no microbatches", None, 1, None),
      ("4 stages, no microbatches, last stage's F and B apart", None, 1, apart),
      ("4 stages, 8 microbatches, 1F1B", "1F1B", 8, None),
      ("4 stages, 8 microbatches, 1F1B, last stage's F and B apart", "1F1B", 8, apart)):
    model = Transformer(layers=8, width=32, seq=16, batch=16 // microbatches,
                        microbatches=microbatches, schedule=schedule, meshes=4, per_mesh=1)
    config = dataclasses.replace(model.config, partitioning_options=options)
    ours = mpmd.jit(model.step, config, donate_argnums=(0,))
    ref = jax.jit(model.step, donate_argnums=(0,))
    state, ref_state = model.state(), model.state()
    device = jax.devices()[0]
    ref_state = jax.device_put(ref_state, device)
    ref_data = jax.device_put(model.data, device)
    compiled = ours.lower(state, model.data).compile()
    state_shardings, data_shardings = compiled.input_shardings[0]
    data = [jax.device_put(x, s) for x, s in zip(model.data, data_shardings)]
    state = jax.device_put(state, state_shardings)
    # Both sides are called as a user calls them: the mpmd.jit function and
    # the jax.jit function (the compiled program is only asked for layouts).
    ours_times, ref_times, state, ref_state = _alternate(
        ours, state, data, ref, ref_state, ref_data, steps=EQUAL_ARITHMETIC_STEPS,
        warmup=args.warmup, return_states=True)
    ours_ms, ref_ms = 1e3 * statistics.median(ours_times), 1e3 * statistics.median(ref_times)
    paired = statistics.median(a / b for a, b in zip(ours_times, ref_times))
    n = len(compiled.instructions)
    rows.append([label, f"{n}", f"{ours_ms:.2f}", f"{ref_ms:.2f}", f"{ours_ms / ref_ms:.3f}x",
                 f"{paired:.3f}x"])
    ours_ms, ref_ms = (1e3 * statistics.median(t)
                       for t in _in_blocks(ours, state, data, ref, ref_state, ref_data))
    alone.append([label, f"{ours_ms:.2f}", f"{ref_ms:.2f}", f"{ours_ms / ref_ms:.3f}x"])
  table = _common.markdown_table(
      ["program", "instructions", "mpmd.jit (ms)", "jax.jit (ms)", "ratio of medians",
       "median of step ratios"], rows)
  alone_table = _common.markdown_table(
      ["program", "mpmd.jit (ms)", "jax.jit (ms)", "ratio"], alone)
  return (f"Equal arithmetic: a small transformer step (8 blocks, width 32, sequence 16, a "
          f"batch of 16 sequences, AdamW) on 4 meshes of ONE CPU device each, against "
          f"`jax.jit` of the same step on one device; both donate the training state and are "
          f"called as functions (`mpmd.jit(step, config)(...)` and `jax.jit(step)(...)`). "
          f"The rows marked \"apart\" keep each microbatch's forward and backward on the last "
          f"stage two programs (`mpmd_merge_forward_with_backward=False`; by default they are "
          f"merged into one). "
          f"Medians of {EQUAL_ARITHMETIC_STEPS} steps each after {args.warmup} warm-up steps, "
          f"alternating the two compilers; the last column is the median of the ratios of "
          f"each mpmd step to the jax.jit step right after it (steady against the machine's "
          f"drift over the run).\n\n{table}\n\nThe same steps as a training loop runs them, "
          f"each compiler alone: {EQUAL_ARITHMETIC_BLOCKS} blocks of "
          f"{EQUAL_ARITHMETIC_STEPS // EQUAL_ARITHMETIC_BLOCKS} consecutive steps per side, "
          f"taking turns (medians of all steps; switching programs every step, as above, "
          f"costs both sides time: cold caches, sleeping threads):\n\n{alone_table}\n")


def bench_bubbles(args) -> str:
  rows = []
  for name in args.bubble_schedules:
    model = Transformer(layers=args.layers, width=args.width, seq=args.seq, batch=args.batch,
                        microbatches=args.microbatches, schedule=name)
    compiled = model.mpmd_jit().lower(model.state(), model.data).compile()
    state = model.state()
    data = [jax.device_put(x, s) for x, s in zip(model.data, compiled.input_shardings[0][1])]
    traces = []
    for _ in range(args.warmup + 2):
      (state, _), trace = compiled.trace(state, data)
      traces.append(trace)
    trace = min(traces[args.warmup:], key=lambda t: t.span)
    predicted = sched.simulate(compiled.schedule).bubble_fraction
    # Units alone (not a forward merged with its backward, `F3+B3`).
    f = [e.end - e.start for e in trace.calls if e.name.startswith("F") and "+" not in e.name]
    b = [e.end - e.start for e in trace.calls if e.name.startswith("B")]
    measured_cost = sched.CostModel(forward=1.0, backward=statistics.median(b) / statistics.median(f))
    predicted_measured = sched.simulate(compiled.schedule, measured_cost).bubble_fraction
    path = pathlib.Path(args.trace_dir) / f"runtime-trace-{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    trace.write_chrome_trace(str(path))
    rows.append([name, f"{100 * trace.bubble_fraction:.1f}%", f"{100 * predicted:.1f}%",
                 f"{statistics.median(b) / statistics.median(f):.2f}",
                 f"{100 * predicted_measured:.1f}%", f"{1e3 * trace.span:.1f}"])
  table = _common.markdown_table(
      ["schedule", "measured bubble", "simulated (F=1, B=2)", "measured B/F",
       "simulated (measured B/F)", "step span (ms)"], rows)
  return (f"The transformer of (b), traced with `Compiled.trace` (one watcher thread per mesh "
          f"stamps when each fragment's results are ready; a fragment starts when the previous "
          f"one on its mesh ended, its inputs were ready and it was issued). Bubble = 1 - "
          f"busy / (meshes x span), fastest of 2 traced steps after {args.warmup} warm-up "
          f"steps. Chrome traces: `{args.trace_dir}/runtime-trace-<schedule>.json`.\n\n{table}\n\n"
          f"On a CPU host the virtual devices of all meshes share the machine's cores "
          f"({os.cpu_count()} here), so at most that many fragments make progress at once: the "
          f"measured bubble there reflects core contention as much as the schedule. On a machine "
          f"with one accelerator per device the two columns are directly comparable.\n")


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--layers", type=int, default=8)
  parser.add_argument("--width", type=int, default=128)
  parser.add_argument("--seq", type=int, default=32)
  parser.add_argument("--batch", type=int, default=16, help="sequences per microbatch")
  parser.add_argument("--microbatches", type=int, default=8)
  parser.add_argument("--steps", type=int, default=10)
  parser.add_argument("--warmup", type=int, default=2)
  parser.add_argument("--dispatch-repeats", type=int, default=20)
  parser.add_argument("--bubble-schedules", nargs="*", default=["GPipe", "1F1B"])
  parser.add_argument("--trace-dir", default="out")
  parser.add_argument("--sections", default="bce")
  parser.add_argument("--results", default=None, help="results file (default benchmarks/RESULTS.md)")
  parser.add_argument("--quick", action="store_true", help="tiny sizes (smoke test)")
  args = parser.parse_args(argv)
  if args.quick:
    args.layers, args.width, args.seq, args.batch, args.microbatches = 4, 32, 8, 8, 4
    args.steps, args.warmup, args.dispatch_repeats = 2, 1, 3
  command = _common.command_line(__file__, argv)
  head = _common.provenance(command)
  if "b" in args.sections:
    body = bench_step_and_compile(args)
    _common.write_section("b", head + "\n" + body, args.results)
    print(body)
  if "c" in args.sections:
    body = bench_dispatch(args) + "\n" + bench_equal_arithmetic(args)
    _common.write_section("c", head + "\n" + body, args.results)
    print(body)
  if "e" in args.sections:
    body = bench_bubbles(args)
    _common.write_section("e", head + "\n" + body, args.results)
    print(body)
  return 0


if __name__ == "__main__":
  sys.exit(main())
