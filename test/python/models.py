"""Small pipelined models shared by the tests: an MLP split into stages."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import mpmd


def make_topology(num_meshes: int, devices_per_mesh: int, axis: str = "x"):
  """`num_meshes` meshes named m0, m1, ... over consecutive CPU devices."""
  devices = np.array(jax.devices()[: num_meshes * devices_per_mesh])
  return {f"m{i}": jax.sharding.Mesh(devices[i * devices_per_mesh:(i + 1) * devices_per_mesh], (axis,))
          for i in range(num_meshes)}


def init_mlp(num_stages: int, width: int = 32, in_dim: int = 16, out_dim: int = 4, seed: int = 0):
  """Per-stage (w, b) parameters of an MLP with one layer per stage."""
  dims = [in_dim] + [width] * (num_stages - 1) + [out_dim]
  keys = jax.random.split(jax.random.key(seed), num_stages)
  return [{"w": jax.random.normal(k, (dims[i], dims[i + 1])) / np.sqrt(dims[i]),
           "b": jnp.full((dims[i + 1],), 0.01 * (i + 1))}
          for i, k in enumerate(keys)]


def make_batch(batch: int = 8, in_dim: int = 16, out_dim: int = 4, seed: int = 1):
  kx, ky = jax.random.split(jax.random.key(seed))
  return jax.random.normal(kx, (batch, in_dim)), jax.random.normal(ky, (batch, out_dim))


def layer(p, h, last: bool):
  h = h @ p["w"] + p["b"]
  return h if last else jnp.tanh(h)


def mlp_loss(params, x, y):
  """Mean squared error; stage i is the named computation `stage{i}`."""
  h = x
  for i, p in enumerate(params):
    last = i == len(params) - 1
    h = mpmd.named_computation(lambda p, h, last=last: layer(p, h, last), name=f"stage{i}")(p, h)
  return jnp.mean((h - y) ** 2)


def sgd_step(params, x, y, lr: float = 0.1):
  """One training step: loss, gradients, SGD update of every parameter."""
  loss, grads = jax.value_and_grad(mlp_loss)(params, x, y)
  return loss, jax.tree.map(lambda p, g: p - lr * g, params, grads)


def accumulating(loss_fn, lr: float = 0.1):
  """A training step over stacked microbatches `xs`, `ys`: the gradients of
  `loss_fn(params, x, y)` summed over them in `mpmd.enumerated_for`, then one
  SGD update with their mean; the step returns the mean loss and the new
  parameters."""

  def step(params, xs, ys):
    def microbatch(carry, i, batch):
      loss_acc, grad_acc = carry
      loss, grads = jax.value_and_grad(loss_fn)(params, *batch)
      return loss_acc + loss, jax.tree.map(jnp.add, grad_acc, grads)

    init = (jnp.zeros(()), jax.tree.map(jnp.zeros_like, params))
    loss, grads = mpmd.enumerated_for(microbatch, init, (xs, ys))
    m = xs.shape[0]
    return loss / m, jax.tree.map(lambda p, g: p - lr * g / m, params, grads)

  return step


#: `accumulating` of `mlp_loss`.
accumulating_step = accumulating(mlp_loss)


def assert_close_over_the_tree(got, want, rtol: float = 1e-5) -> None:
  """`got` within `rtol` of `want` normwise over the whole tree (in float64):
  some leaves have an exactly zero gradient, and Adam amplifies their
  rounding noise, so leaf by leaf is the wrong test after Adam steps."""
  got_leaves = [np.asarray(a, np.float64) for a in jax.tree.leaves(got)]
  want_leaves = [np.asarray(b, np.float64) for b in jax.tree.leaves(want)]
  num = sum(float(np.sum((a - b) ** 2)) for a, b in zip(got_leaves, want_leaves, strict=True))
  den = sum(float(np.sum(b ** 2)) for b in want_leaves)
  assert (num / den) ** 0.5 < rtol, f"relative difference {(num / den) ** 0.5:.3g} over the tree"
