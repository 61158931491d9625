"""Compile cost flat in microbatches: fragments of different microbatches
that differ only in constants (slice offsets, loop indices) share one program
(-mpmd-parameterize-fragment-constants), for every way of writing microbatches.

Counts of distinct fragment programs are deterministic; numerics are checked
against plain `jax.jit` of the same step.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import mpmd
from mpmd import jaxpp

WIDTH = 8


def _topology(num_meshes: int = 2):
  devices = np.array(jax.devices())
  return {f"m{i}": jax.sharding.Mesh(devices[i:i + 1], ("data",)) for i in range(num_meshes)}


def _stage(w, h):
  return jnp.tanh(h @ w)


def _loss(params, x, y):
  h = mpmd.named_computation(_stage, name="s0")(params[0], x)
  h = mpmd.named_computation(_stage, name="s1")(params[1], h)
  return jnp.mean((h - y) ** 2)


def _accumulate(params, x, y, grads, total):
  loss, g = jax.value_and_grad(_loss)(params, x, y)
  return jax.tree.map(jnp.add, grads, g), total + loss


def _zeros(params):
  return jax.tree.map(jnp.zeros_like, params), jnp.zeros(())


def step_list(params, xs, ys):
  """Microbatches as a list of arrays."""
  grads, total = _zeros(params)
  for i, (x, y) in enumerate(zip(xs, ys)):
    grads, total = mpmd.call(functools.partial(_accumulate, params), call_counter=i)(
        x, y, grads, total)
  return total, grads


def step_stacked(params, xs, ys):
  """`xs[i]` on a stacked array."""
  grads, total = _zeros(params)
  for i in range(xs.shape[0]):
    grads, total = mpmd.call(functools.partial(_accumulate, params), call_counter=i)(
        xs[i], ys[i], grads, total)
  return total, grads


def step_fori(params, xs, ys):
  """`mpmd.fori_loop` with the loop index slicing a stacked array."""
  def body(i, carry):
    grads, total = carry
    x = jax.lax.dynamic_index_in_dim(xs, i, keepdims=False)
    y = jax.lax.dynamic_index_in_dim(ys, i, keepdims=False)
    return _accumulate(params, x, y, grads, total)
  grads, total = mpmd.fori_loop(xs.shape[0], body, _zeros(params))
  return total, grads


def _params():
  keys = jax.random.split(jax.random.key(0), 2)
  return [jax.random.normal(k, (WIDTH, WIDTH)) / np.sqrt(WIDTH) for k in keys]


def _batches(m: int):
  xs = jax.random.normal(jax.random.key(1), (m, 2, WIDTH))
  ys = jax.random.normal(jax.random.key(2), (m, 2, WIDTH))
  return xs, ys


def _assert_close(got, want):
  got, want = jax.tree.leaves(got), jax.tree.leaves(want)
  num = np.sqrt(sum(float(np.sum((np.asarray(a) - np.asarray(b)) ** 2)) for a, b in zip(got, want)))
  den = np.sqrt(sum(float(np.sum(np.asarray(b) ** 2)) for b in want))
  assert num <= 1e-5 * max(den, 1.0), (num, den)


def _num_programs(lowered: mpmd.Lowered) -> int:
  return len(lowered.partition.functions)


@pytest.mark.parametrize("step", [step_list, step_stacked, step_fori], ids=lambda f: f.__name__)
def test_distinct_programs_do_not_grow_with_microbatches(step):
  config = mpmd.make_config(_topology(), {"s0": "m0", "s1": "m1"}, pipeline_schedule="1F1B")
  params = _params()
  counts = {}
  for m in (3, 6):
    xs, ys = _batches(m)
    args = (params, list(xs), list(ys)) if step is step_list else (params, xs, ys)
    lowered = mpmd.jit(step, config).lower(*args)
    counts[m] = _num_programs(lowered)
    if m == 6:
      compiled = lowered.compile()
      _assert_close(compiled(*args), jax.jit(step)(*args))
      # Every fragment program is compiled once per (program, mesh).
      assert len(compiled.program.fragments) == counts[m]
  assert counts[3] == counts[6], counts


def test_stacked_batch_constants_are_operands_placed_once():
  config = mpmd.make_config(_topology(), {"s0": "m0", "s1": "m1"}, pipeline_schedule="GPipe")
  params = _params()
  xs, ys = _batches(4)
  lowered = mpmd.jit(step_stacked, config).lower(params, xs, ys)
  constants = lowered.partition.constants
  # One offset per microbatch and mesh that slices the batch there.
  assert sorted(int(c.value) for c in constants if c.mesh == "m0") == [0, 1, 2, 3]
  assert {c.dtype for c in constants} == {"int32"}
  compiled = lowered.compile()
  placed = compiled.program.constants
  assert set(placed) == {c.id for c in constants}
  for c in constants:
    assert int(placed[c.id]) == int(c.value)
    assert placed[c.id].sharding.device_set == set(lowered.config.topology[c.mesh].devices.flat)
  # Several steps reuse the same placed constants.
  first = compiled(params, xs, ys)
  second = compiled(params, xs, ys)
  _assert_close(second, first)
  _assert_close(first, jax.jit(step_stacked)(params, xs, ys))


def _jaxpp_step(params, xs, ys, schedule):
  def loss(params, x, y):
    h = x
    for p in params:
      h = jaxpp.api.pipeline_enter_stage(jnp.tanh(h @ p))
    return jnp.mean((h - y) ** 2)
  losses, grads = jaxpp.api.treduce(lambda b: jax.value_and_grad(loss)(params, *b), (xs, ys),
                                    schedule=schedule)
  return losses, grads


def test_treduce_programs_do_not_grow_with_microbatches():
  devices = np.array(jax.devices()[:2]).reshape(2, 1)
  mesh = jaxpp.api.MpmdMesh(jax.sharding.Mesh(devices, ("stage", "data")), "stage")
  params = _params()
  counts = {}
  for m in (2, 4):
    xs, ys = _batches(m)
    schedule = jaxpp.api.Std1F1B(2)
    step = functools.partial(_jaxpp_step, schedule=schedule)
    fn = jaxpp.api.mpmd_jit_with_loop(step, mesh)
    lowered = fn.lower(params, xs, ys)
    counts[m] = _num_programs(lowered)
    if m == 4:
      compiled = fn.compile(params, xs, ys)
      _assert_close(compiled(params, xs, ys), jax.jit(step)(params, xs, ys))
  assert counts[2] == counts[4], counts
