"""Pipelined training of an MLP on 8 CPU devices, checked against `jax.jit`.

Each layer group is a `mpmd.named_computation` ("stage0", "stage1", ...)
assigned to its own mesh; everything else (loss, gradient accumulation, the
SGD update) is placed by the compiler on the mesh that owns the data. The
batch is split into microbatches (`mpmd.call` per microbatch) that run in the
order of a pipeline schedule (1F1B by default). The script trains for a few
steps with `mpmd.jit` and with plain `jax.jit` side by side, prints both
losses and step times, and writes the schedule's picture and a Chrome trace
of its simulated timeline.

  python examples/train_mlp.py                   # 4 meshes x 2 devices, 1F1B, 8 microbatches
  python examples/train_mlp.py --schedule ZeroBubbleH1 --microbatches 16
  python examples/train_mlp.py --stages 2 --devices-per-mesh 4 --steps 10
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import mpmd  # noqa: E402
from mpmd import schedule as sched  # noqa: E402


def init_params(num_stages: int, width: int, in_dim: int, out_dim: int, layers_per_stage: int,
                seed: int = 0):
  keys = iter(jax.random.split(jax.random.key(seed), num_stages * layers_per_stage))
  params = []
  for s in range(num_stages):
    stage = []
    for layer in range(layers_per_stage):
      d_in = in_dim if (s == 0 and layer == 0) else width
      last = s == num_stages - 1 and layer == layers_per_stage - 1
      d_out = out_dim if last else width
      stage.append({"w": jax.random.normal(next(keys), (d_in, d_out)) / np.sqrt(d_in),
                    "b": jnp.zeros((d_out,))})
    params.append(stage)
  return params


def make_stage(index: int, num_stages: int):
  def stage(layers, h):
    for i, p in enumerate(layers):
      h = h @ p["w"] + p["b"]
      if not (index == num_stages - 1 and i == len(layers) - 1):
        h = jax.nn.gelu(h)
    return h
  return mpmd.named_computation(stage, name=f"stage{index}")


def loss_fn(params, x, y):
  h = x
  for i, layers in enumerate(params):
    h = make_stage(i, len(params))(layers, h)
  return jnp.mean((h - y) ** 2)


def train_step(params, xs, ys, lr=0.2):
  """One step over the microbatches `xs`, `ys` (lists): accumulate, then update."""
  loss, grads = jnp.zeros(()), jax.tree.map(jnp.zeros_like, params)
  for i, (x, y) in enumerate(zip(xs, ys)):
    def microbatch(loss, grads, x, y):
      l, g = jax.value_and_grad(loss_fn)(params, x, y)
      return loss + l, jax.tree.map(jnp.add, grads, g)
    loss, grads = mpmd.call(microbatch, call_counter=i)(loss, grads, x, y)
  n = len(xs)
  return loss / n, jax.tree.map(lambda p, g: p - lr * g / n, params, grads)


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--stages", type=int, default=4)
  parser.add_argument("--devices-per-mesh", type=int, default=2)
  parser.add_argument("--layers-per-stage", type=int, default=2)
  parser.add_argument("--width", type=int, default=256)
  parser.add_argument("--batch", type=int, default=64)
  parser.add_argument("--steps", type=int, default=8)
  parser.add_argument("--microbatches", type=int, default=8)
  parser.add_argument("--schedule", default="1F1B", help="a built-in schedule name")
  parser.add_argument("--out", default="out", help="where the picture and trace go")
  args = parser.parse_args(argv)

  needed = args.stages * args.devices_per_mesh
  devices = np.array(jax.devices())
  if len(devices) < needed:
    print(f"need {needed} devices, have {len(devices)}", file=sys.stderr)
    return 2
  topology = {f"m{i}": jax.sharding.Mesh(devices[i * args.devices_per_mesh:(i + 1) * args.devices_per_mesh],
                                         ("data",))
              for i in range(args.stages)}
  config = mpmd.make_config(topology, {f"stage{i}": f"m{i}" for i in range(args.stages)},
                            pipeline_schedule=args.schedule)

  in_dim, out_dim = 32, 8
  params = init_params(args.stages, args.width, in_dim, out_dim, args.layers_per_stage)
  kx, ky = jax.random.split(jax.random.key(1))
  x = jax.random.normal(kx, (args.batch * args.microbatches, in_dim))
  y = jnp.sin(x @ jax.random.normal(ky, (in_dim, out_dim)))
  x, y = jnp.split(x, args.microbatches), jnp.split(y, args.microbatches)

  t0 = time.perf_counter()
  compiled = mpmd.jit(train_step, config).lower(params, x, y).compile()
  compile_s = time.perf_counter() - t0
  t0 = time.perf_counter()
  reference = jax.jit(train_step).lower(params, x, y).compile()
  ref_compile_s = time.perf_counter() - t0

  print(f"mpmd: {args.stages} meshes x {args.devices_per_mesh} CPU devices, "
        f"{len(compiled.program.fragments)} fragment programs, "
        f"{sum(1 for i in compiled.instructions if hasattr(i, 'fragment'))} calls and "
        f"{sum(1 for i in compiled.instructions if not hasattr(i, 'fragment'))} transfers per step")
  print(f"compile: mpmd {compile_s:.2f}s, jax.jit {ref_compile_s:.2f}s")
  schedule = compiled.schedule
  print(f"\nschedule {args.schedule}, {args.microbatches} microbatches (each mesh runs its units in this order):")
  print("\n".join(f"  {line}" for line in schedule.to_text().splitlines() if not line.startswith("@")))
  os.makedirs(args.out, exist_ok=True)
  result = sched.simulate(schedule)
  png = os.path.join(args.out, f"schedule-{args.schedule.lower()}.png")
  trace = os.path.join(args.out, f"schedule-{args.schedule.lower()}.json")
  sched.render_png(schedule, result, png)
  sched.write_chrome_trace(schedule, result, trace)
  print(f"simulated bubble fraction {result.bubble_fraction:.1%}; picture: {os.path.abspath(png)}; "
        f"Chrome trace: {os.path.abspath(trace)}\n")
  print(f"{'step':>4}  {'loss (mpmd)':>12}  {'loss (jax.jit)':>14}  {'mpmd ms':>8}  {'jit ms':>7}")
  p, ref_p = params, params
  worst = 0.0
  for step in range(args.steps):
    t0 = time.perf_counter()
    loss, p = compiled(p, x, y)
    loss = float(loss)
    t_mpmd = time.perf_counter() - t0
    t0 = time.perf_counter()
    ref_loss, ref_p = reference(ref_p, x, y)
    ref_loss = float(ref_loss)
    t_ref = time.perf_counter() - t0
    worst = max(worst, abs(loss - ref_loss) / max(abs(ref_loss), 1e-12))
    print(f"{step:>4}  {loss:>12.6f}  {ref_loss:>14.6f}  {t_mpmd * 1e3:>8.1f}  {t_ref * 1e3:>7.1f}")
  params_err = max(float(np.max(np.abs(np.asarray(a) - np.asarray(b)) / (np.abs(np.asarray(b)) + 1e-6)))
                   for a, b in zip(jax.tree.leaves(p), jax.tree.leaves(ref_p)))
  print(f"\nlargest relative difference from jax.jit: loss {worst:.1e}, params {params_err:.1e}")
  def mesh_of(array):
    return next(name for name, mesh in topology.items()
                if set(mesh.devices.flat) == array.sharding.device_set)
  placement = ", ".join(f"stage{i} on {mesh_of(jax.tree.leaves(p[i])[0])}" for i in range(args.stages))
  print(f"updated parameters stay on their meshes: {placement}")
  return 0 if worst < 1e-5 else 1


if __name__ == "__main__":
  sys.exit(main())
