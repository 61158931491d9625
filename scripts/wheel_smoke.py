"""Smoke test of an installed mpmd wheel (run by scripts/check_wheel.sh).

Run it from outside the source tree, with the Python the wheel was installed into:

    XLA_FLAGS=--xla_force_host_platform_device_count=8 python scripts/wheel_smoke.py

It checks that

* ``mpmd`` and its extension ``mpmd._mpmd`` come from site-packages (not a source tree)
  and the extension (MLIR/LLVM linked in) works in one process with jaxlib (which
  bundles its own LLVM/MLIR, imported first);
* a 2-mesh training step (an MLP with one layer per mesh, 4 CPU devices per mesh,
  3 SGD steps) compiled by mpmd.jit gives the loss and parameters jax.jit gives
  (normwise relative difference below 1e-5);
* a 1F1B schedule over 4 microbatches on the same 2 meshes matches jax.jit too.

Prints one line per check and exits non-zero on the first failure.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import jax  # noqa: E402  (jaxlib with its own LLVM/MLIR is loaded first, on purpose)
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import mpmd  # noqa: E402
from mpmd import _mpmd  # noqa: E402

TOL = 1e-5


def check(cond: bool, what: str) -> None:
  print(("ok    " if cond else "FAIL  ") + what, flush=True)
  if not cond:
    sys.exit(1)


def rel_diff(a, b) -> float:
  """max over leaves of ||a - b|| / max(||b||, 1e-30)."""
  la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
  assert len(la) == len(lb)
  return max(float(np.linalg.norm(np.asarray(x, np.float64) - np.asarray(y, np.float64)) /
                   max(np.linalg.norm(np.asarray(y, np.float64)), 1e-30))
             for x, y in zip(la, lb))


# -- the model (as test/python/models.py: one MLP layer per stage) -----------------------

def init_params(widths=(16, 32, 4), seed=0):
  keys = jax.random.split(jax.random.key(seed), len(widths) - 1)
  return [{"w": jax.random.normal(k, (widths[i], widths[i + 1])) / np.sqrt(widths[i]),
           "b": jnp.full((widths[i + 1],), 0.01 * (i + 1))}
          for i, k in enumerate(keys)]


def layer(p, h, last):
  h = h @ p["w"] + p["b"]
  return h if last else jnp.tanh(h)


def loss_fn(params, x, y):
  h = x
  for i, p in enumerate(params):
    last = i == len(params) - 1
    h = mpmd.named_computation(lambda p, h, last=last: layer(p, h, last), name=f"stage{i}")(p, h)
  return jnp.mean((h - y) ** 2)


def sgd_step(params, x, y, lr=0.1):
  loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
  return loss, jax.tree.map(lambda p, g: p - lr * g, params, grads)


def microbatched_step(params, xs, ys, lr=0.1):
  """Gradients summed over the microbatches (leading axis of xs, ys), one SGD update."""
  grad_fn = jax.value_and_grad(loss_fn)
  total_loss, total_grads = 0.0, None
  for i in range(xs.shape[0]):
    loss, grads = mpmd.call(grad_fn, call_counter=i)(params, xs[i], ys[i])
    total_loss = total_loss + loss
    total_grads = grads if total_grads is None else jax.tree.map(jnp.add, total_grads, grads)
  return total_loss, jax.tree.map(lambda p, g: p - lr * g, params, total_grads)


def main() -> None:
  site = os.path.dirname(os.path.dirname(jax.__file__))
  check(os.path.dirname(os.path.dirname(mpmd.__file__)) == site,
        f"mpmd imported from site-packages ({os.path.dirname(mpmd.__file__)})")
  check(_mpmd.__file__.startswith(site), f"extension {os.path.basename(_mpmd.__file__)}")
  print(f"      python {sys.version.split()[0]}, jax {jax.__version__}, "
        f"{len(jax.devices())} {jax.devices()[0].platform} devices", flush=True)

  devices = np.array(jax.devices()[:8])
  check(len(devices) == 8, "8 devices (XLA_FLAGS=--xla_force_host_platform_device_count=8)")
  topology = {"m0": jax.sharding.Mesh(devices[:4], ("data",)),
              "m1": jax.sharding.Mesh(devices[4:], ("data",))}
  config = mpmd.make_config(topology, {"stage0": "m0", "stage1": "m1"})

  kx, ky = jax.random.split(jax.random.key(1))
  x, y = jax.random.normal(kx, (8, 16)), jax.random.normal(ky, (8, 4))

  # 3 SGD steps under mpmd.jit and jax.jit.
  params_mpmd = params_ref = init_params()
  step_mpmd, step_ref = mpmd.jit(sgd_step, config), jax.jit(sgd_step)
  for _ in range(3):
    loss_mpmd, params_mpmd = step_mpmd(params_mpmd, x, y)
    loss_ref, params_ref = step_ref(params_ref, x, y)
  meshes = sorted({mesh for p in params_mpmd for leaf in jax.tree.leaves(p)
                   for mesh in [tuple(sorted(d.id for d in leaf.sharding.device_set))]})
  check(len(meshes) == 2, f"parameters live on 2 meshes: {meshes}")
  d_loss, d_params = rel_diff(loss_mpmd, loss_ref), rel_diff(params_mpmd, params_ref)
  check(d_loss < TOL and d_params < TOL,
        f"2-mesh SGD x3 == jax.jit (loss {float(loss_mpmd):.6f}; rel. diff loss {d_loss:.1e}, "
        f"params {d_params:.1e})")

  # 1F1B over 4 microbatches.
  config_1f1b = mpmd.make_config(topology, {"stage0": "m0", "stage1": "m1"},
                                 pipeline_schedule="1F1B")
  xs, ys = x.reshape(4, 2, 16), y.reshape(4, 2, 4)
  loss_mpmd, params_mpmd = mpmd.jit(microbatched_step, config_1f1b)(init_params(), xs, ys)
  loss_ref, params_ref = jax.jit(microbatched_step)(init_params(), xs, ys)
  d_loss, d_params = rel_diff(loss_mpmd, loss_ref), rel_diff(params_mpmd, params_ref)
  check(d_loss < TOL and d_params < TOL,
        f"2-mesh 1F1B x4 microbatches == jax.jit (rel. diff loss {d_loss:.1e}, "
        f"params {d_params:.1e})")
  print("wheel smoke test passed", flush=True)


if __name__ == "__main__":
  main()
