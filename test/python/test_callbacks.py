"""Host callbacks inside an MPMD step (`jax.debug.print`, `jax.pure_callback`)
run where their fragment runs, with the values of that call, and give the
results of plain `jax.jit` (the fragment programs that call them are compiled
with the step's callbacks; before, running one crashed the process)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import mpmd


def _topology():
  devices = np.array(jax.devices())
  return {"m0": jax.sharding.Mesh(devices[0:2], ("data",)),
          "m1": jax.sharding.Mesh(devices[2:4], ("data",))}


def _host_scale(x):
  return (np.asarray(x) * 3.0).astype(np.float32)


def _first(w, h):
  jax.debug.print("first stage sum {s}", s=jnp.sum(h))
  return jnp.tanh(h @ w)


def _second(w, h, x):
  # (on the data only: pure callbacks have no derivative)
  scaled = jax.pure_callback(_host_scale, jax.ShapeDtypeStruct(x.shape, x.dtype), x)
  return jnp.tanh((h + scaled) @ w)


def _step(params, xs):
  def loss(params, x):
    h = mpmd.named_computation(_first, name="a")(params[0], x)
    h = mpmd.named_computation(_second, name="b")(params[1], h, x)
    return jnp.sum(h ** 2)

  total, grads = jnp.zeros(()), jax.tree.map(jnp.zeros_like, params)
  for i in range(xs.shape[0]):
    def microbatch(x, total, grads):
      value, g = jax.value_and_grad(loss)(params, x)
      return total + value, jax.tree.map(jnp.add, grads, g)
    total, grads = mpmd.call(microbatch, call_counter=i)(xs[i], total, grads)
  return total, grads


def test_callbacks_run_in_their_fragments_with_jit_results(capfd):
  rng = np.random.default_rng(0)
  params = [rng.standard_normal((4, 4)).astype(np.float32) * 0.5 for _ in range(2)]
  xs = rng.standard_normal((2, 2, 4)).astype(np.float32)
  config = mpmd.make_config(_topology(), {"a": "m0", "b": "m1"}, pipeline_schedule="GPipe")
  compiled = mpmd.jit(_step, config).lower(params, xs).compile()
  jax.effects_barrier()
  capfd.readouterr()
  got = compiled(params, xs)
  jax.effects_barrier()
  printed = [line for line in capfd.readouterr().out.splitlines() if "first stage sum" in line]
  want = jax.jit(_step)(params, xs)
  for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
  # One print per microbatch, with that microbatch's values.
  sums = sorted(float(line.rsplit(" ", 1)[1]) for line in printed)
  np.testing.assert_allclose(sums, sorted(float(xs[i].sum()) for i in range(2)), rtol=1e-5)
