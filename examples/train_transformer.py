"""Pipelined training of a small flax transformer language model on 8 CPU devices.

The model is a decoder-only transformer: token embedding, blocks of causal
self-attention + MLP with LayerNorm (each block rematerialised with
`nn.remat`), a final LayerNorm and an output head. Its blocks are cut into
pipeline stages; each stage is one `mpmd.named_computation` ("stage0",
"stage1", ...) assigned to a mesh (the embedding runs in the first stage, the
head in the last). Nothing else is labelled: the loss, the gradient
accumulation and the AdamW update are placed by the compiler on the meshes
that hold their data.

The batch is split into microbatches, each an `mpmd.call(..., call_counter=i)`,
which run in the order of a pipeline schedule (1F1B by default). The script
compiles the step with `mpmd.jit` and with plain `jax.jit`, trains both side by
side, prints a table of losses and step times and the largest relative
difference between the two, and writes a picture of the schedule (PNG), a
Chrome trace of its simulated timeline and one of a measured step (open them
in chrome://tracing or https://ui.perfetto.dev).

  python examples/train_transformer.py           # 4 meshes x 2 devices, 1F1B, 8 microbatches
  python examples/train_transformer.py --schedule GPipe --microbatches 16
  python examples/train_transformer.py --schedule Interleaved1F1B --layers 8   # 2 stages per mesh
  python examples/train_transformer.py --stages 2 --devices-per-mesh 4 --width 256 --layers 12
"""

from __future__ import annotations

import argparse
import os
import sys
import textwrap
import time
from collections.abc import Sequence

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import flax.linen as nn  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

import mpmd  # noqa: E402
from mpmd import schedule as sched  # noqa: E402


# ---------------------------------------------------------------- the model
class Block(nn.Module):
  """Pre-LayerNorm transformer block: causal self-attention, then an MLP.

  The attention projections have no biases. (A key bias would not change the
  output at all, since softmax ignores a constant added to every logit of a
  query, so its true gradient is zero and AD returns rounding noise; Adam
  would turn that noise into full-size updates that differ between any two
  compilations of the same model.)
  """
  num_heads: int

  @nn.compact
  def __call__(self, x):
    width = x.shape[-1]
    h = nn.LayerNorm()(x)
    mask = nn.make_causal_mask(jnp.ones(x.shape[:2], jnp.int32))
    h = nn.MultiHeadDotProductAttention(num_heads=self.num_heads, use_bias=False)(h, mask=mask)
    x = x + h
    h = nn.LayerNorm()(x)
    h = nn.Dense(4 * width)(h)
    h = nn.gelu(h)
    return x + nn.Dense(width)(h)


class Stage(nn.Module):
  """One pipeline stage: `num_blocks` blocks, plus the embedding (first stage)
  or the final LayerNorm and output head (last stage)."""
  num_blocks: int
  num_heads: int
  vocab: int
  width: int
  first: bool
  last: bool

  @nn.compact
  def __call__(self, x):
    if self.first:  # x: int tokens [batch, seq]
      x = nn.Embed(self.vocab, self.width, name="embed")(x)
      positions = self.param("positions", nn.initializers.normal(0.02), (x.shape[1], self.width))
      x = x + positions
    for i in range(self.num_blocks):
      x = nn.remat(Block)(self.num_heads, name=f"block_{i}")(x)
    if self.last:  # logits [batch, seq, vocab]
      x = nn.Dense(self.vocab, name="head")(nn.LayerNorm(name="final_norm")(x))
    return x


def make_stages(num_stages: int, layers: int, width: int, heads: int, vocab: int) -> list[Stage]:
  if layers % num_stages:
    raise SystemExit(f"--layers {layers} must be a multiple of the number of pipeline stages "
                     f"({num_stages})")
  return [Stage(layers // num_stages, heads, vocab, width, first=s == 0, last=s == num_stages - 1)
          for s in range(num_stages)]


def init_params(stages: Sequence[Stage], batch: int, seq: int, seed: int = 0):
  """The parameters `stage.init` would create for each stage, built part by
  part: every block has the same shapes, so one compiled block initializer
  serves all of them (compiling each stage's init would take longer than the
  training run here)."""
  first, last = stages[0], stages[-1]
  width, vocab = first.width, first.vocab
  x = jnp.zeros((batch, seq, width))
  tokens = jnp.zeros((batch, seq), jnp.int32)
  init_block = jax.jit(lambda key: Block(first.num_heads).init(key, x)["params"])
  init_embed = jax.jit(lambda key: nn.Embed(vocab, width).init(key, tokens)["params"])
  init_head = jax.jit(lambda key: {"final_norm": nn.LayerNorm().init(key, x)["params"],
                                   "head": nn.Dense(vocab).init(key, x)["params"]})
  keys = iter(jax.random.split(jax.random.key(seed), sum(s.num_blocks for s in stages) + 3))
  params = []
  for stage in stages:
    p = {f"block_{i}": init_block(next(keys)) for i in range(stage.num_blocks)}
    if stage.first:
      p["embed"] = init_embed(next(keys))
      p["positions"] = 0.02 * jax.random.normal(next(keys), (seq, width))
    if stage.last:
      p.update(init_head(next(keys)))
    expected = jax.eval_shape(stage.init, jax.random.key(0), tokens if stage.first else x)
    assert (jax.tree.structure(expected["params"]) == jax.tree.structure(p) and
            jax.tree.map(lambda a: a.shape, expected["params"]) == jax.tree.map(jnp.shape, p)), \
        "the parameters built part by part must match Stage.init's"
    params.append(p)
  return params


# ---------------------------------------------------------------- the step
def make_train_step(stages: Sequence[Stage], optimizer: optax.GradientTransformation):
  """`train_step((params, opt_state), microbatches) -> ((params, opt_state), loss)`."""
  labelled = [mpmd.named_computation(lambda p, h, stage=stage: stage.apply({"params": p}, h),
                                     name=f"stage{s}")
              for s, stage in enumerate(stages)]

  def loss_fn(params, tokens):
    h = tokens[:, :-1]
    for stage, p in zip(labelled, params):
      h = stage(p, h)
    return optax.softmax_cross_entropy_with_integer_labels(h, tokens[:, 1:]).mean()

  def train_step(state, microbatches):
    params, opt_state = state
    loss, grads = jnp.zeros(()), jax.tree.map(jnp.zeros_like, params)
    for i, tokens in enumerate(microbatches):
      def microbatch(loss, grads, tokens):
        l, g = jax.value_and_grad(loss_fn)(params, tokens)
        return loss + l, jax.tree.map(jnp.add, grads, g)
      loss, grads = mpmd.call(microbatch, call_counter=i)(loss, grads, tokens)
    n = len(microbatches)
    grads = jax.tree.map(lambda g: g / n, grads)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return (optax.apply_updates(params, updates), opt_state), loss / n

  return train_step


def make_data(num_microbatches: int, batch: int, seq: int, vocab: int, seed: int = 1):
  """Token sequences with a learnable rule: each sequence counts upwards by a
  stride of 1, 2 or 3 (mod vocab) from a random start."""
  k_start, k_stride = jax.random.split(jax.random.key(seed))
  shape = (num_microbatches * batch, 1)
  start = jax.random.randint(k_start, shape, 0, vocab)
  stride = jax.random.randint(k_stride, shape, 1, 4)
  tokens = (start + stride * jnp.arange(seq + 1)) % vocab
  return list(jnp.split(tokens.astype(jnp.int32), num_microbatches))


# ---------------------------------------------------------------- the script
def pipeline_layout(schedule_name: str, num_meshes: int, num_microbatches: int):
  """The schedule's stage -> mesh placement (more stages than meshes for
  schedules with virtual stages)."""
  builtin = sched.get_schedule(schedule_name)
  if builtin.virtual_stages == "1":
    probe = builtin(num_meshes, num_microbatches)
  else:
    probe = builtin(num_meshes, num_microbatches, builtin.default_virtual_stages)
  if probe.forward_only:
    raise SystemExit(f"{builtin.name} is a forward-only (inference) schedule: see "
                     "examples/inference_pipeline.py")
  return builtin.name, probe.stage_to_mesh


def _relative_error(got, want) -> float:
  """Largest leaf-wise normwise relative difference |got - want| / |want|."""
  worst = 0.0
  for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    worst = max(worst, float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-12)))
  return worst


def _what_the_times_mean(args, devices, calls: int, transfers: int) -> str:
  """What the step times above measure, said plainly."""
  try:
    cores = len(os.sched_getaffinity(0))
  except AttributeError:  # not Linux
    cores = os.cpu_count() or 1
  if devices[0].platform != "cpu":
    where = f"the {args.stages} meshes run on {devices[0].platform} devices"
  else:
    where = (f"the {args.stages * args.devices_per_mesh} devices are virtual CPU devices sharing "
             f"this machine's {cores} cores: the {args.stages} meshes share the cores that "
             "jax.jit's one program uses, and cannot run side by side any faster than it")
  return textwrap.fill(
      f"What the step times mean: {where}; each pipelined step also makes {calls} small program "
      f"calls and {transfers} transfers between meshes. They show what running the schedule "
      "costs, not a speed-up. A pipeline is faster than jax.jit on a CPU machine only when each "
      "stage has cores of its own: `python benchmarks/pinned_pipeline.py` runs two processes "
      "pinned to one core each beside jax.jit on one core (1.64x faster in "
      "benchmarks/RESULTS.md, section (h)); docs/performance.md says more.", 100)


def main(argv: Sequence[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                   formatter_class=argparse.ArgumentDefaultsHelpFormatter)
  parser.add_argument("--schedule", default="1F1B",
                      help="a built-in schedule name (python -m mpmd.schedule --list)")
  parser.add_argument("--microbatches", type=int, default=8)
  parser.add_argument("--stages", type=int, default=4, help="number of meshes")
  parser.add_argument("--devices-per-mesh", type=int, default=2)
  parser.add_argument("--layers", type=int, default=4, help="transformer blocks in all")
  parser.add_argument("--width", type=int, default=64, help="model width")
  parser.add_argument("--heads", type=int, default=4)
  parser.add_argument("--vocab", type=int, default=64)
  parser.add_argument("--seq", type=int, default=32, help="sequence length")
  parser.add_argument("--batch", type=int, default=4, help="sequences per microbatch")
  parser.add_argument("--steps", type=int, default=10)
  parser.add_argument("--learning-rate", type=float, default=3e-3)
  parser.add_argument("--out", default="out", help="where the picture and trace go")
  args = parser.parse_args(argv)

  needed = args.stages * args.devices_per_mesh
  devices = np.array(jax.devices())
  if len(devices) < needed:
    print(f"need {needed} devices ({args.stages} meshes x {args.devices_per_mesh}), have "
          f"{len(devices)}: set XLA_FLAGS=--xla_force_host_platform_device_count={needed}",
          file=sys.stderr)
    return 2
  name, stage_to_mesh = pipeline_layout(args.schedule, args.stages, args.microbatches)
  num_stages = len(stage_to_mesh)
  topology = {f"m{i}": jax.sharding.Mesh(devices[i * args.devices_per_mesh:
                                                 (i + 1) * args.devices_per_mesh], ("data",))
              for i in range(args.stages)}
  config = mpmd.make_config(
      topology, {f"stage{s}": f"m{stage_to_mesh[s]}" for s in range(num_stages)},
      name_to_stage_assignment=({f"stage{s}": s for s in range(num_stages)}
                                if num_stages > args.stages else None),
      pipeline_schedule=name)

  stages = make_stages(num_stages, args.layers, args.width, args.heads, args.vocab)
  params = init_params(stages, args.batch, args.seq)
  optimizer = optax.adamw(args.learning_rate, weight_decay=1e-4)
  state = (params, optimizer.init(params))
  data = make_data(args.microbatches, args.batch, args.seq, args.vocab)
  train_step = make_train_step(stages, optimizer)
  num_params = sum(x.size for x in jax.tree.leaves(params))
  print(f"model: {args.layers} blocks of width {args.width} ({num_params:,} parameters) in "
        f"{num_stages} stages on {args.stages} meshes x {args.devices_per_mesh} CPU devices; "
        f"{args.microbatches} microbatches of {args.batch} sequences of {args.seq} tokens")

  t0 = time.perf_counter()
  compiled = mpmd.jit(train_step, config).lower(state, data).compile()
  compile_s = time.perf_counter() - t0
  t0 = time.perf_counter()
  reference = jax.jit(train_step).lower(state, data).compile()
  ref_compile_s = time.perf_counter() - t0
  calls = sum(1 for i in compiled.instructions if hasattr(i, "fragment"))
  print(f"compiled in {compile_s:.1f}s (jax.jit: {ref_compile_s:.1f}s): "
        f"{len(compiled.program.fragments)} distinct fragment programs, {calls} fragment calls "
        f"and {len(compiled.instructions) - calls} transfers per step")

  schedule = compiled.schedule
  print(f"\nschedule {name}, {args.microbatches} microbatches (each mesh runs its units in "
        "this order; F = forward, B = backward, W = weight gradient, .sN = stage N):")
  print("\n".join(f"  {line}" for line in schedule.to_text().splitlines()
                  if not line.startswith("@")))

  print(f"\n{'step':>4}  {'loss':>9}  {'jax.jit loss':>12}  {'step ms':>8}  {'jax.jit ms':>10}")
  ref_state, worst_loss = state, 0.0
  for step in range(args.steps):
    t0 = time.perf_counter()
    state, loss = jax.block_until_ready(compiled(state, data))
    t_mpmd = time.perf_counter() - t0
    t0 = time.perf_counter()
    ref_state, ref_loss = jax.block_until_ready(reference(ref_state, data))
    t_ref = time.perf_counter() - t0
    loss, ref_loss = float(loss), float(ref_loss)
    worst_loss = max(worst_loss, abs(loss - ref_loss) / max(abs(ref_loss), 1e-12))
    print(f"{step:>4}  {loss:>9.5f}  {ref_loss:>12.5f}  {t_mpmd * 1e3:>8.1f}  {t_ref * 1e3:>10.1f}")
  params_err = _relative_error(state[0], ref_state[0])
  print(f"\nlargest relative difference from jax.jit: loss {worst_loss:.1e}, "
        f"parameters {params_err:.1e} (normwise, per array)")
  print(_what_the_times_mean(args, devices, calls, len(compiled.instructions) - calls))

  os.makedirs(args.out, exist_ok=True)
  result = sched.simulate(schedule)
  png = os.path.join(args.out, f"schedule-{name.lower()}.png")
  trace = os.path.join(args.out, f"schedule-{name.lower()}.json")
  sched.render_png(schedule, result, png)
  sched.write_chrome_trace(schedule, result, trace)
  _, measured = compiled.trace(state, data)  # one more step, timing every fragment call
  runtime_trace = os.path.join(args.out, f"runtime-{name.lower()}.json")
  measured.write_chrome_trace(runtime_trace)
  print(f"\nsimulated schedule (F=1, B=2): bubble fraction {result.bubble_fraction:.1%}, "
        f"peak {result.peak_activation} live activations per mesh; measured bubble fraction of "
        f"one step: {measured.bubble_fraction:.1%}")
  print(f"schedule picture: {os.path.abspath(png)}")
  print(f"Chrome trace:     {os.path.abspath(trace)} (simulated)")
  print(f"Chrome trace:     {os.path.abspath(runtime_trace)} (measured)")
  return 0 if worst_loss < 1e-5 and params_err < 1e-4 else 1


if __name__ == "__main__":
  sys.exit(main())
