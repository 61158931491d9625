"""A training step over 2 processes (one mesh of one device each) whose state
is donated and holds a typed PRNG key, checked against `jax.jit`.

Run by test_multiprocess.py through `python -m mpmd.launch --processes 2
--devices-per-process 1`. The state is (parameters, momentum, key):

* the embedding is tied (read by the first stage and the last), so process 0
  offers a donated argument for process 1 to pull while its own later calls
  (the update, donating the state) consume it: the buffer must stay alive
  until process 1 has pulled it;
* the key is split on process 0's mesh (dropout in the first stage) and is
  an output of the step: on process 1 it comes back as a placeholder
  (`mpmd.distributed.RemoteArray`) that is passed back to the next step.

`--out PREFIX` makes process i save the normwise differences from `jax.jit`
after the steps in PREFIX.p<i>.npz (parameters, momentum and losses; the key
data where the process holds the key).
"""

from __future__ import annotations

import argparse
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

import mpmd

DIM, WIDTH, BATCH, MICROBATCHES = 8, 32, 4, 4


def init_state(typed_key: bool):
  rng = np.random.default_rng(0)

  def normal(*shape):
    return (rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32)

  params = {"embed": normal(DIM, WIDTH), "w0": normal(WIDTH, WIDTH), "w1": normal(WIDTH, WIDTH)}
  momentum = jax.tree.map(np.zeros_like, params)
  key = jax.random.key(0) if typed_key else jax.random.key_data(jax.random.key(0))
  return params, momentum, key


def make_data():
  rng = np.random.default_rng(1)
  xs = rng.standard_normal((MICROBATCHES, BATCH, DIM)).astype(np.float32)
  ys = np.sin(xs).astype(np.float32)
  return xs, ys


def _stage0(embed, w0, x, key):
  h = jnp.tanh((x @ embed) @ w0)
  return h * jax.random.bernoulli(key, 0.75, h.shape) / 0.75  # dropout


def _stage1(embed, w1, h):
  return jnp.tanh(h @ w1) @ embed.T  # the tied embedding again


def loss_fn(params, x, y, key):
  h = mpmd.named_computation(_stage0, name="stage0")(params["embed"], params["w0"], x, key)
  out = mpmd.named_computation(_stage1, name="stage1")(params["embed"], params["w1"], h)
  return jnp.mean((out - y) ** 2)


def train_step(state, xs, ys):
  params, momentum, key = state
  typed = jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key)
  k = key if typed else jax.random.wrap_key_data(key)
  keys = jax.random.split(k, MICROBATCHES + 1)
  loss, grads = jnp.zeros(()), jax.tree.map(jnp.zeros_like, params)
  for i in range(MICROBATCHES):
    def microbatch(loss, grads, x, y, sub):
      value, g = jax.value_and_grad(loss_fn)(params, x, y, sub)
      return loss + value, jax.tree.map(jnp.add, grads, g)
    loss, grads = mpmd.call(microbatch, call_counter=i)(loss, grads, xs[i], ys[i], keys[i + 1])
  momentum = jax.tree.map(lambda m, g: 0.9 * m + g / MICROBATCHES, momentum, grads)
  params = jax.tree.map(lambda p, m: p - 0.1 * m, params, momentum)
  new_key = keys[0] if typed else jax.random.key_data(keys[0])
  return (params, momentum, new_key), loss / MICROBATCHES


def _data(x):
  if jax.dtypes.issubdtype(getattr(x, "dtype", np.float32), jax.dtypes.prng_key):
    return jax.random.key_data(x)
  return x


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--steps", type=int, default=3)
  parser.add_argument("--donate", action="store_true", help="donate the state")
  parser.add_argument("--typed-key", action="store_true", help="a typed key in the state "
                      "(else its raw uint32 data)")
  parser.add_argument("--out", default=None)
  args = parser.parse_args(argv)

  mpmd.distributed.initialize()
  me = jax.process_index()
  devices = sorted(jax.devices(), key=lambda d: d.process_index)
  topology = {"m0": Mesh(np.array(devices[:1]), ("data",)),
              "m1": Mesh(np.array(devices[1:2]), ("data",))}
  config = mpmd.make_config(topology, {"stage0": "m0", "stage1": "m1"},
                            pipeline_schedule="1F1B",
                            partitioning_options={"mpmd_infer_cross_mesh_reductions": True})
  step = mpmd.jit(train_step, config, donate_argnums=(0,) if args.donate else ())
  xs, ys = make_data()
  state = init_state(args.typed_key)
  reference = jax.jit(train_step)  # on this process's first device
  want = jax.device_put(state, jax.local_devices()[0])
  losses, ref_losses = [], []
  for i in range(args.steps):
    state, loss = step(state, xs, ys)
    want, ref_loss = reference(want, xs, ys)
    key = state[2]
    if args.typed_key:
      assert jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key), key
      assert key.dtype == want[2].dtype and key.shape == want[2].shape, (key, want[2])
    if not isinstance(key, jax.Array):  # another process's mesh holds it
      assert isinstance(key, mpmd.distributed.RemoteArray), key
    losses.append(float(mpmd.distributed.gather(loss)))
    ref_losses.append(float(ref_loss))
    print(f"process {me}: step {i} loss {losses[-1]:.6f} (jax.jit {ref_losses[-1]:.6f}); "
          f"key {type(key).__name__}", flush=True)
  got = mpmd.distributed.gather(state[:2])
  want = (*jax.device_get(want[:2]), want[2])

  def normwise(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))

  diffs = {"params": max(normwise(a, b) for a, b in zip(jax.tree.leaves(got[0]),
                                                        jax.tree.leaves(want[0]))),
           "momentum": max(normwise(a, b) for a, b in zip(jax.tree.leaves(got[1]),
                                                          jax.tree.leaves(want[1]))),
           "loss": normwise(losses, ref_losses)}
  key = state[2]
  if isinstance(key, jax.Array):  # the key is compared where it is held
    diffs["key"] = float(np.any(np.asarray(_data(key)) != np.asarray(_data(want[2]))))
  print(f"process {me}: normwise differences from jax.jit: {diffs}", flush=True)
  if args.out:
    np.savez(f"{args.out}.p{me}.npz", **{k: np.asarray(v) for k, v in diffs.items()})
  return 0


if __name__ == "__main__":
  sys.exit(main())
