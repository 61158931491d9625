"""Automatic pipeline planning: a model labelled in small units, planned by
`mpmd.plan` and trained with the plan's config next to `jax.jit`.

The model is unbalanced on purpose: `block0` is a stack of dense layers
(heavy), `block1` .. `block{N-2}` one dense layer each, the last block a wider
output head with the loss inside it. The planner measures each unit's forward
and backward, then chooses which consecutive blocks form each stage, the
schedule and the number of microbatches (the global batch is fixed).

    python examples/plan_blocks.py --meshes 4 --devices-per-mesh 2
    python -m mpmd.plan examples/plan_blocks.py:problem --meshes 4 --devices-per-mesh 2

`problem()` is what the command line plans: an `mpmd.plan.Problem`.
"""

from __future__ import annotations

import argparse
import os
import sys

if "--xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                             + " --xla_force_host_platform_device_count=8").strip()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import mpmd  # noqa: E402
from mpmd.plan import Problem  # noqa: E402


def init_params(num_blocks: int = 8, width: int = 32, heavy_layers: int = 4, seed: int = 0):
  """block0: `heavy_layers` dense layers; then one per block; the head: width -> 2 x width."""
  rng = np.random.default_rng(seed)

  def dense(n_in, n_out):
    return {"w": jnp.asarray(rng.standard_normal((n_in, n_out)) / np.sqrt(n_in), jnp.float32),
            "b": jnp.zeros((n_out,), jnp.float32)}

  params = [[dense(width, width) for _ in range(heavy_layers)]]
  params += [[dense(width, width)] for _ in range(num_blocks - 2)]
  params.append([dense(width, 2 * width)])
  return params


def _body(layers, h):
  for layer in layers:
    h = jnp.tanh(h @ layer["w"] + layer["b"])
  return h


def _head(layers, h, y):
  out = h @ layers[0]["w"] + layers[0]["b"]
  return jnp.mean((out - y) ** 2)


def loss_fn(params, x, y):
  """Each block is the named computation `block{i}`; the loss is inside the last."""
  h = x
  for i in range(len(params) - 1):
    h = mpmd.named_computation(_body, name=f"block{i}")(params[i], h)
  return mpmd.named_computation(_head, name=f"block{len(params) - 1}")(params[-1], h, y)


def train_step(params, xs, ys):
  """One SGD step over microbatches stacked on the leading axis of xs, ys."""
  m = xs.shape[0]

  def microbatch(carry, i, batch):
    loss, grads = carry
    value, g = jax.value_and_grad(loss_fn)(params, *batch)
    return loss + value, jax.tree.map(jnp.add, grads, g)

  init = (jnp.zeros(()), jax.tree.map(jnp.zeros_like, params))
  loss, grads = mpmd.enumerated_for(microbatch, init, (xs, ys))
  return loss / m, jax.tree.map(lambda p, g: p - 0.1 * g / m, params, grads)


def make_data(batch: int = 32, width: int = 32, seed: int = 1):
  rng = np.random.default_rng(seed)
  x = jnp.asarray(rng.standard_normal((batch, width)), jnp.float32)
  y = jnp.asarray(rng.standard_normal((batch, 2 * width)), jnp.float32)
  return x, y


def problem(num_blocks: int = 8, width: int = 32, batch: int = 32) -> Problem:
  """The planning problem: the step, its arguments (global batch), which hold the batch."""
  x, y = make_data(batch, width)
  return Problem(train_step, (init_params(num_blocks, width), x, y), batch_argnums=(1, 2),
                 microbatches=(4, 8))


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--meshes", type=int, default=4)
  parser.add_argument("--devices-per-mesh", type=int, default=2)
  parser.add_argument("--blocks", type=int, default=8)
  parser.add_argument("--width", type=int, default=32)
  parser.add_argument("--batch", type=int, default=32)
  parser.add_argument("--steps", type=int, default=3)
  parser.add_argument("--png", default=None, help="draw the plan's predicted timeline")
  args = parser.parse_args(argv)
  devices = np.array(jax.devices())
  k = args.devices_per_mesh
  topology = {f"m{i}": jax.sharding.Mesh(devices[i * k:(i + 1) * k], ("data",))
              for i in range(args.meshes)}
  prob = problem(args.blocks, args.width, args.batch)
  plan = prob.plan(topology)
  print(plan.candidates.table(limit=10))
  print(plan.summary())
  if args.png:
    print(f"wrote {plan.write_png(args.png)}")

  params, xs, ys = plan.split_batch(*prob.args)
  train = mpmd.jit(train_step, plan.config)
  reference = jax.jit(train_step)
  ref_params = params
  for i in range(args.steps):
    loss, params = train(params, xs, ys)
    ref_loss, ref_params = reference(ref_params, xs, ys)
    print(f"step {i}: loss {float(loss):.6f} (jax.jit {float(ref_loss):.6f})")
  diff = np.sqrt(sum(float(jnp.sum((jnp.asarray(a) - b) ** 2))
                     for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(ref_params))))
  norm = np.sqrt(sum(float(jnp.sum(b ** 2)) for b in jax.tree.leaves(ref_params)))
  print(f"parameters after {args.steps} steps: |mpmd - jax.jit| / |jax.jit| = {diff / norm:.1e}")
  return 0 if diff / norm < 1e-5 else 1


if __name__ == "__main__":
  sys.exit(main())
