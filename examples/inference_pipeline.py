"""Forward-only (inference) pipeline: a flax transformer encoder over 4 meshes,
with microbatches, compared to `jax.jit`. No gradients are computed.

Two ways to pipeline inference are shown (`--schedule`):

* `GPipe` (default): stage j of the model runs on mesh j; microbatches flow
  m0 -> m1 -> m2 -> m3 one after the other, so mesh j works on microbatch i
  while mesh j+1 works on microbatch i-1. The built-in GPipe schedule also
  orders backward units; for a forward-only program mpmd keeps only its
  forward units, in its order (`m0: F0 F1 F2 ...` on every mesh).

* `ParallelPipelinesWithWrapAround`: microbatch k enters the pipeline at mesh
  k % P and visits the meshes cyclically (stage j of microbatch k runs on mesh
  (k + j) % P), so every mesh is busy from the first step and there is no
  fill/drain bubble. Every mesh then needs every stage's weights, so the
  function takes one copy of the weights per mesh. The stage j of microbatch k
  is labelled `mb{k}_stage{j}` and assigned to its mesh.

  python examples/inference_pipeline.py
  python examples/inference_pipeline.py --schedule ParallelPipelinesWithWrapAround
  python examples/inference_pipeline.py --microbatches 16 --layers 8 --width 128
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import flax.linen as nn  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import mpmd  # noqa: E402
from mpmd import schedule as sched  # noqa: E402

SCHEDULES = ("GPipe", "ParallelPipelinesWithWrapAround")


class Block(nn.Module):
  """Pre-LayerNorm encoder block: bidirectional self-attention and an MLP."""
  num_heads: int

  @nn.compact
  def __call__(self, x):
    x = x + nn.MultiHeadDotProductAttention(num_heads=self.num_heads)(nn.LayerNorm()(x))
    h = nn.gelu(nn.Dense(4 * x.shape[-1])(nn.LayerNorm()(x)))
    return x + nn.Dense(x.shape[-1])(h)


class Stage(nn.Module):
  """`num_blocks` consecutive blocks: one pipeline stage."""
  num_blocks: int
  num_heads: int

  @nn.compact
  def __call__(self, x):
    for i in range(self.num_blocks):
      x = Block(self.num_heads, name=f"block_{i}")(x)
    return x


def make_infer(stage: Stage, num_stages: int, wrap_around: bool):
  """`infer(weights, microbatches) -> outputs`: one `mpmd.call` per microbatch.

  `weights[j]` are the parameters of stage j; with wrap-around, `weights[m][j]`
  is the copy of stage j's parameters that mesh m uses (each mesh runs every
  stage, and an argument used on one mesh only is placed there once instead
  of being copied to every mesh at each call).
  """
  apply = lambda p, h: stage.apply({"params": p}, h)  # noqa: E731

  def infer(weights, microbatches):
    outputs = []
    for k, x in enumerate(microbatches):
      def microbatch(weights, h, k=k):
        for j in range(num_stages):
          if wrap_around:
            mesh = (k + j) % num_stages
            h = mpmd.named_computation(apply, name=f"mb{k}_stage{j}")(weights[mesh][j], h)
          else:
            h = mpmd.named_computation(apply, name=f"stage{j}")(weights[j], h)
        return h
      outputs.append(mpmd.call(microbatch, call_counter=k)(weights, x))
    return outputs

  return infer


def make_config(schedule: str, topology, num_microbatches: int) -> mpmd.MpmdConfig:
  meshes = list(topology)
  P = len(meshes)
  if schedule == "GPipe":
    return mpmd.make_config(topology, {f"stage{j}": meshes[j] for j in range(P)},
                            pipeline_schedule="GPipe")
  assignment = {f"mb{k}_stage{j}": meshes[(k + j) % P]
                for k in range(num_microbatches) for j in range(P)}
  return mpmd.make_config(topology, assignment, pipeline_schedule=schedule)


def main(argv: Sequence[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                   formatter_class=argparse.ArgumentDefaultsHelpFormatter)
  parser.add_argument("--schedule", default="GPipe", choices=SCHEDULES)
  parser.add_argument("--meshes", type=int, default=4)
  parser.add_argument("--devices-per-mesh", type=int, default=2)
  parser.add_argument("--microbatches", type=int, default=8)
  parser.add_argument("--layers", type=int, default=4, help="blocks in all")
  parser.add_argument("--width", type=int, default=64)
  parser.add_argument("--heads", type=int, default=4)
  parser.add_argument("--seq", type=int, default=32)
  parser.add_argument("--batch", type=int, default=8, help="sequences per microbatch")
  parser.add_argument("--repeats", type=int, default=5, help="timed runs")
  parser.add_argument("--out", default="out", help="where the schedule picture goes")
  args = parser.parse_args(argv)

  if args.layers % args.meshes:
    raise SystemExit(f"--layers {args.layers} must be a multiple of --meshes {args.meshes}")
  devices = np.array(jax.devices())
  if len(devices) < args.meshes * args.devices_per_mesh:
    print(f"need {args.meshes * args.devices_per_mesh} devices, have {len(devices)}",
          file=sys.stderr)
    return 2
  topology = {f"m{i}": jax.sharding.Mesh(devices[i * args.devices_per_mesh:
                                                 (i + 1) * args.devices_per_mesh], ("data",))
              for i in range(args.meshes)}
  stage = Stage(args.layers // args.meshes, args.heads)
  keys = jax.random.split(jax.random.key(0), args.meshes + 1)
  shape = (args.batch, args.seq, args.width)
  init = jax.jit(stage.init)
  params = [init(k, jnp.zeros(shape))["params"] for k in keys[1:]]
  microbatches = list(jax.random.normal(keys[0], (args.microbatches, *shape)))

  wrap_around = args.schedule != "GPipe"
  weights = [params] * args.meshes if wrap_around else params
  infer = make_infer(stage, args.meshes, wrap_around)
  config = make_config(args.schedule, topology, args.microbatches)
  t0 = time.perf_counter()
  compiled = mpmd.jit(infer, config).lower(weights, microbatches).compile()
  compile_s = time.perf_counter() - t0
  reference = jax.jit(infer).lower(weights, microbatches).compile()
  calls = sum(1 for i in compiled.instructions if hasattr(i, "fragment"))
  print(f"inference: {args.layers} blocks of width {args.width} on {args.meshes} meshes x "
        f"{args.devices_per_mesh} CPU devices, {args.microbatches} microbatches of {args.batch} "
        f"sequences; compiled in {compile_s:.1f}s ({len(compiled.program.fragments)} distinct "
        f"fragment programs, {calls} calls and {len(compiled.instructions) - calls} transfers)")
  print(f"\nschedule {args.schedule} (forward only; each mesh runs its units in this order):")
  print("\n".join(f"  {line}" for line in compiled.schedule.to_text().splitlines()
                  if not line.startswith("@")))

  # Place the weights on their meshes once (a call would otherwise copy them
  # there every time); the microbatches are copied to their meshes per call.
  placed = jax.device_put(weights, compiled.input_shardings[0][0])
  outputs = jax.block_until_ready(compiled(placed, microbatches))
  expected = reference(weights, microbatches)
  worst = max(float(np.max(np.abs(np.asarray(a) - np.asarray(b)) / (np.abs(np.asarray(b)) + 1e-3)))
              for a, b in zip(outputs, expected))
  entry = {k: next(n for n, m in topology.items()
                   if set(m.devices.flat) == outputs[k].sharding.device_set)
           for k in range(len(outputs))}
  print(f"\nmicrobatch outputs end on: {', '.join(f'{k}: {m}' for k, m in entry.items())}")

  def timed(fn, weights) -> float:
    t0 = time.perf_counter()
    for _ in range(args.repeats):
      jax.block_until_ready(fn(weights, microbatches))
    return (time.perf_counter() - t0) / args.repeats
  sequences = args.microbatches * args.batch
  t_mpmd, t_ref = timed(compiled, placed), timed(reference, weights)
  print(f"per call: mpmd {t_mpmd * 1e3:.1f} ms ({sequences / t_mpmd:.0f} sequences/s), "
        f"jax.jit {t_ref * 1e3:.1f} ms ({sequences / t_ref:.0f} sequences/s); all meshes share "
        "this host's CPU cores")

  os.makedirs(args.out, exist_ok=True)
  result = sched.simulate(compiled.schedule)
  png = os.path.join(args.out, f"schedule-inference-{args.schedule.lower()}.png")
  sched.render_png(compiled.schedule, result, png)
  print(f"simulated bubble fraction {result.bubble_fraction:.1%}; picture: {os.path.abspath(png)}")
  print(f"largest relative difference from jax.jit: {worst:.1e}")
  return 0 if worst < 1e-5 else 1


if __name__ == "__main__":
  sys.exit(main())
