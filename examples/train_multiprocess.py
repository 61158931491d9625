"""Pipelined training over several processes: one mesh per process.

Run it with the local launcher (2 processes x 4 CPU devices, gloo between them):

  python -m mpmd.launch --processes 2 --devices-per-process 4 examples/train_multiprocess.py
  python -m mpmd.launch --processes 4 --devices-per-process 2 examples/train_multiprocess.py --steps 5

Every process runs this same script. Each process owns the devices of one
mesh (stage `i` runs on the mesh of process `i`; `--meshes-per-process 2`
gives each process two stages), compiles and runs only its meshes'
fragments, and exchanges activations and gradients with its neighbours
through XLA collectives. The microbatch data is sharded over each
mesh's `data` axis. Each step prints the loss (gathered from the last stage's
process) next to plain `jax.jit` of the same step computed on this process's
first device; `--out result.npz` makes process 0 save the losses and the
final parameters (gathered) for checking.
"""

from __future__ import annotations

import argparse
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, PartitionSpec as P

import mpmd
from mpmd.run import crossprocess
from mpmd.run.program import CallInstruction, CrossProcessTransferInstruction, TransferInstruction


def init_params(num_stages: int, width: int, in_dim: int, out_dim: int, seed: int = 0):
  """Two dense layers per stage, as NumPy arrays (the same on every process)."""
  rng = np.random.default_rng(seed)
  params = []
  for s in range(num_stages):
    d_in = in_dim if s == 0 else width
    d_out = out_dim if s == num_stages - 1 else width
    params.append([{"w": (rng.standard_normal((d_in, width)) / np.sqrt(d_in)).astype(np.float32),
                    "b": np.zeros((width,), np.float32)},
                   {"w": (rng.standard_normal((width, d_out)) / np.sqrt(width)).astype(np.float32),
                    "b": np.zeros((d_out,), np.float32)}])
  return params


def make_data(num_microbatches: int, batch: int, in_dim: int, out_dim: int, seed: int = 1):
  rng = np.random.default_rng(seed)
  x = rng.standard_normal((num_microbatches, batch, in_dim)).astype(np.float32)
  w = rng.standard_normal((in_dim, out_dim)).astype(np.float32)
  y = np.sin(x @ w)
  return list(x), list(y)


def make_stage(index: int, num_stages: int):
  def stage(layers, h):
    h = jax.nn.gelu(h @ layers[0]["w"] + layers[0]["b"])
    h = h @ layers[1]["w"] + layers[1]["b"]
    return h if index == num_stages - 1 else jax.nn.gelu(h)
  return mpmd.named_computation(stage, name=f"stage{index}")


def loss_fn(params, x, y):
  h = x
  for i, layers in enumerate(params):
    h = make_stage(i, len(params))(layers, h)
  return jnp.mean((h - y) ** 2)


def train_step(params, xs, ys, lr=0.1):
  """One step over microbatches `xs`, `ys`: accumulate the gradients, then SGD."""
  loss, grads = jnp.zeros(()), jax.tree.map(jnp.zeros_like, params)
  for i, (x, y) in enumerate(zip(xs, ys)):
    def microbatch(loss, grads, x, y):
      value, g = jax.value_and_grad(loss_fn)(params, x, y)
      return loss + value, jax.tree.map(jnp.add, grads, g)
    loss, grads = mpmd.call(microbatch, call_counter=i)(loss, grads, x, y)
  n = len(xs)
  return loss / n, jax.tree.map(lambda p, g: p - lr * g / n, params, grads)


def make_config(schedule: str, layout: str = "per-process",
                meshes_per_process: int = 1) -> mpmd.MpmdConfig:
  """The meshes, over the global devices (axis `data`), one stage on each.

  "per-process": each process's devices split into `meshes_per_process`
  meshes (transfers between two meshes of one process stay `device_put`).
  "spanning": one mesh per process, each over an equal share of every
  process's devices (so every fragment runs on all processes).
  "uneven": two meshes of different shapes per process, over half and a
  quarter of its devices.
  """
  by_process: dict[int, list] = {}
  for d in jax.devices():
    by_process.setdefault(d.process_index, []).append(d)
  groups = [ds for _, ds in sorted(by_process.items())]
  if layout == "per-process":
    k = meshes_per_process
    size = len(groups[0]) // k
    topology = {(f"p{p}" if k == 1 else f"p{p}m{j}"): Mesh(np.array(ds[j * size:(j + 1) * size]),
                                                          ("data",))
                for p, ds in enumerate(groups) for j in range(k)}
  elif layout == "uneven":
    # Meshes of different shapes: in each process, one mesh over half of its
    # devices and one over a quarter (at least one device).
    topology = {}
    for p, ds in enumerate(groups):
      half, quarter = max(1, len(ds) // 2), max(1, len(ds) // 4)
      topology[f"p{p}m0"] = Mesh(np.array(ds[:half]), ("data",))
      topology[f"p{p}m1"] = Mesh(np.array(ds[half:half + quarter]), ("data",))
  elif layout == "spanning":
    n, k = len(groups), len(groups[0]) // len(groups)
    topology = {f"m{i}": Mesh(np.array([d for ds in groups for d in ds[i * k:(i + 1) * k]]),
                              ("data",)) for i in range(n)}
  else:
    raise ValueError(f"unknown layout {layout!r}: use 'per-process', 'uneven' or 'spanning'")
  stages = {f"stage{i}": name for i, name in enumerate(topology)}
  return mpmd.make_config(topology, stages, pipeline_schedule=schedule)


def describe(compiled: mpmd.Compiled) -> str:
  """What this process runs of the program."""
  kinds = {CallInstruction: 0, TransferInstruction: 0,
           CrossProcessTransferInstruction: 0}
  pulls = 0
  for inst in compiled.instructions:
    kinds[type(inst)] += 1
    pulls += isinstance(getattr(inst, "transfer", None), crossprocess.PullTransfer)
  meshes = sorted({i.mesh for i in compiled.instructions if isinstance(i, CallInstruction)})
  across = kinds[CrossProcessTransferInstruction]
  return (f"runs fragments on meshes {meshes}; per step {kinds[CallInstruction]} calls, "
          f"{kinds[TransferInstruction]} transfers inside the process, "
          f"{across} across processes ({pulls} pulls, {across - pulls} collectives)")


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--steps", type=int, default=3)
  parser.add_argument("--microbatches", type=int, default=4)
  parser.add_argument("--batch", type=int, default=16, help="rows per microbatch")
  parser.add_argument("--width", type=int, default=64)
  parser.add_argument("--schedule", default="1F1B")
  parser.add_argument("--layout", default="per-process",
                      choices=["per-process", "uneven", "spanning"],
                      help="meshes inside processes (of one shape, or uneven), or meshes "
                           "spanning every process")
  parser.add_argument("--meshes-per-process", type=int, default=1,
                      help="with --layout per-process: pipeline stages per process")
  parser.add_argument("--out", default=None, help="process 0 saves losses and params here (.npz)")
  args = parser.parse_args(argv)

  mpmd.distributed.initialize()
  me, count = jax.process_index(), jax.process_count()
  config = make_config(args.schedule, args.layout, args.meshes_per_process)
  in_dim, out_dim = 16, 4
  params = init_params(len(config.topology), args.width, in_dim, out_dim)
  xs, ys = make_data(args.microbatches, args.batch, in_dim, out_dim)

  step = mpmd.jit(train_step, config, in_shardings=(None, P("data"), P("data")))
  t0 = time.perf_counter()
  compiled = step.lower(params, xs, ys).compile()
  print(f"process {me}/{count}: {describe(compiled)}; {len(compiled.program.fragments)} fragment "
        f"programs compiled in {time.perf_counter() - t0:.1f}s", flush=True)

  reference = jax.jit(train_step)  # on this process's first device
  ref_params = jax.device_put(params, jax.local_devices()[0])
  losses = []
  worst = 0.0
  for i in range(args.steps):
    t0 = time.perf_counter()
    loss, params = step(params, xs, ys)
    loss = float(mpmd.distributed.gather(loss))  # the last stage's process has it
    seconds = time.perf_counter() - t0
    ref_loss, ref_params = reference(ref_params, xs, ys)
    worst = max(worst, abs(loss - float(ref_loss)) / abs(float(ref_loss)))
    losses.append(loss)
    print(f"process {me}: step {i} loss {loss:.6f} (jax.jit {float(ref_loss):.6f}) "
          f"{seconds * 1e3:.0f} ms", flush=True)

  final = mpmd.distributed.gather(params)  # a collective: every process calls it
  params_err = max(float(np.max(np.abs(a - np.asarray(b)) / (np.abs(np.asarray(b)) + 1e-6)))
                   for a, b in zip(jax.tree.leaves(final), jax.tree.leaves(ref_params)))
  print(f"process {me}: largest relative difference from jax.jit: loss {worst:.1e}, "
        f"params {params_err:.1e}", flush=True)
  if args.out and me == 0:
    np.savez(args.out, losses=np.array(losses),
             **{f"param{k}": a for k, a in enumerate(jax.tree.leaves(final))})
  return 0 if worst < 1e-4 and params_err < 1e-3 else 1


if __name__ == "__main__":
  sys.exit(main())
