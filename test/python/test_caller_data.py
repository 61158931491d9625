"""No caller data lost: outputs never alias each other or the caller's
arguments, and a call that cannot run consumes nothing (as with jax.jit)."""

from __future__ import annotations

import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

import mpmd
from models import make_topology


def _config():
  return mpmd.make_config(make_topology(2, 1), {"a": "m0", "b": "m1"})


def _two_stages(w, x):
  h = mpmd.named_computation(lambda w, x: jnp.tanh(x * w), name="a")(w, x)
  return mpmd.named_computation(lambda h: h * 2.0, name="b")(h)


def test_a_value_returned_twice_gives_two_arrays():
  def step(w, x):
    new = w - 0.1 * jnp.sum(_two_stages(w, x))
    return new, new  # e.g. params and an EMA/"best" copy

  f = mpmd.jit(step, _config(), donate_argnums=(0,))
  w, x = jnp.ones(4), jnp.arange(4.0)
  params, best = f(w, x)
  assert params is not best
  assert params.unsafe_buffer_pointer() != best.unsafe_buffer_pointer()
  params, _ = f(params, x)  # donates the first; the copy survives
  assert not best.is_deleted()
  np.testing.assert_allclose(np.asarray(best), np.asarray(jax.jit(step)(w, x)[1]))


def test_an_input_returned_unchanged_is_not_the_callers_array():
  def step(w, x):
    return w, _two_stages(w, x)

  f = mpmd.jit(step, _config(), donate_argnums=(0,))
  w = jax.device_put(jnp.ones(4), NamedSharding(_config().topology["m0"], P()))
  keep = jnp.array(w)
  out, _ = f(w, jnp.arange(4.0))
  assert out is not w
  np.testing.assert_array_equal(np.asarray(out), np.asarray(keep))
  f(out, jnp.arange(4.0))  # donating the output leaves nothing else deleted
  assert not keep.is_deleted()


def test_a_deleted_argument_fails_before_anything_is_donated():
  f = mpmd.jit(lambda w, x: _two_stages(w, x), _config(), donate_argnums=(0, 1))
  w, x = jnp.ones(4), jnp.arange(4.0)
  f(jnp.ones(4), jnp.arange(4.0))  # compiled
  x.delete()
  with pytest.raises(mpmd.MpmdError, match=r"argument args\[1\] has been deleted or donated"):
    f(w, x)
  assert not w.is_deleted()
  np.testing.assert_array_equal(np.asarray(w), np.ones(4))


def test_negative_argnums_count_from_the_end_as_in_jax_jit():
  def step(w, x, scale):
    return _two_stages(w, x) * scale

  f = mpmd.jit(step, _config(), static_argnums=-1, donate_argnums=(-3,))
  assert f.static_argnums == (2,) and f.donate_argnums == (0,)
  w, x = jnp.ones(4), jnp.arange(4.0)
  np.testing.assert_allclose(np.asarray(f(jnp.ones(4), x, 3.0)),
                             np.asarray(jax.jit(step, static_argnums=2)(w, x, 3.0)), rtol=1e-6)
  with pytest.raises(mpmd.ConfigError, match="position -4 is out of range: step has 3"):
    mpmd.jit(step, _config(), donate_argnums=-4)
  with pytest.raises(mpmd.ConfigError, match="has \\*args"):
    mpmd.jit(lambda *a: a[0], _config(), static_argnums=-1)
  with pytest.raises(mpmd.ConfigError, match="must be ints"):
    mpmd.jit(step, _config(), donate_argnums=("w",))


def test_arguments_already_on_a_meshs_devices_are_used_without_copies():
  """An argument laid out over a bigger mesh (replicated along `stage`, as a
  JaxPP user's state is) is handed to each stage's mesh from the shards it
  already has there: no copy, and the caller's array stays valid."""
  devices = np.array(jax.devices()[:4]).reshape(2, 2)
  big = jax.sharding.Mesh(devices, ("stage", "data"))
  topology = {f"m{k}": jax.sharding.Mesh(devices[k], ("data",)) for k in range(2)}
  config = mpmd.make_config(topology, {"a": "m0", "b": "m1"})
  w = jax.device_put(jnp.arange(8.0), NamedSharding(big, P("data")))
  x = jax.device_put(jnp.ones(8), NamedSharding(big, P("data")))
  f = mpmd.jit(_two_stages, config, in_shardings=(P("data"), P("data")))
  compiled = f.lower(w, x).compile()
  inputs = compiled._inputs.place([w, x])
  held = {s.data.unsafe_buffer_pointer() for a in (w, x) for s in a.addressable_shards}
  for placed in inputs:
    assert placed.sharding.device_set == set(topology["m0"].devices.flat)
    assert {s.data.unsafe_buffer_pointer() for s in placed.addressable_shards} <= held
  # (jax.jit runs the step over the 4 devices of `big`, mpmd over meshes of 2:
  # programs partitioned differently may round tanh an ulp apart.)
  np.testing.assert_allclose(np.asarray(compiled(w, x)), np.asarray(jax.jit(_two_stages)(w, x)),
                             rtol=1e-6)
  assert not w.is_deleted() and not x.is_deleted()


def _rejects_repeated_and_deleted(call, w, v) -> None:
  """`call(w, v)` (w donated) rejects w passed twice and a deleted v, and
  leaves w intact both times (v is deleted on the way)."""
  with pytest.raises(mpmd.MpmdError, match=r"the same array is passed as arguments"):
    call(w, w)
  assert not w.is_deleted()
  v.delete()
  with pytest.raises(mpmd.MpmdError, match=r"argument args\[1\] has been deleted or donated"):
    call(w, v)
  assert not w.is_deleted()


def test_steady_state_calls_keep_every_check():
  """Once a step's outputs feed the next step (the path that skips the
  per-argument work), a deleted argument and a donated array passed twice
  are still caught before anything runs."""
  def step(w, v):
    h = mpmd.named_computation(lambda w, x: jnp.tanh(x * w), name="a")(w, v)
    y = mpmd.named_computation(lambda h: h * 2.0, name="b")(h)
    return w - 0.1 * h, v, y  # the update runs on m0, where w lives

  compiled = mpmd.jit(step, _config(), donate_argnums=(0,)).lower(
      jnp.ones(4), jnp.arange(4.0)).compile()
  w, v, _ = compiled(jnp.ones(4), jnp.arange(4.0))
  w, v, _ = compiled(w, v)  # outputs fed back: the steady state
  assert compiled._inputs.steady.accept([w, v]) is not None
  _rejects_repeated_and_deleted(compiled, w, v)


def test_jit_steady_state_calls_keep_every_check(caplog):
  """The mpmd.jit function's own steady path (no cache key read per call)
  still recompiles for new shapes, rejects a donated array passed twice and
  a deleted one, and starts over after clear_cache."""
  def step(w, v):
    h = mpmd.named_computation(lambda w, x: jnp.tanh(x * w), name="a")(w, v)
    y = mpmd.named_computation(lambda h: h * 2.0, name="b")(h)
    return w - 0.1 * h, v, y

  f = mpmd.jit(step, _config(), donate_argnums=(0,))
  w, v, _ = f(jnp.ones(4), jnp.arange(4.0))
  for _ in range(3):
    w, v, y = f(w, v)
  assert f._last is not None and len(f._cache) == 1
  w8, v8, y8 = f(jnp.ones(8), jnp.arange(8.0))  # new shapes: a second program
  assert len(f._cache) == 2 and y8.shape == (8,)
  np.testing.assert_allclose(np.asarray(y8), np.asarray(jax.jit(step)(jnp.ones(8),
                                                                     jnp.arange(8.0))[2]))
  w, v, _ = f(w, v)  # back to the first program
  w, v, _ = f(w, v)
  _rejects_repeated_and_deleted(f, w, v)
  f.clear_cache()
  with caplog.at_level(logging.INFO, logger="mpmd"):
    f(w, jnp.arange(4.0))
  assert "compiling step" in caplog.text and len(f._cache) == 1
