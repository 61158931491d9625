"""Typed PRNG keys (`jax.random.key`) as arguments and outputs of mpmd.jit.

The program takes and returns the keys' uint32 data; callers see key arrays,
exactly as `jax.jit` returns them.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import mpmd
from models import make_topology


def _stage0(w, x, key):
  h = jnp.tanh(x @ w)
  return h * jax.random.bernoulli(key, 0.75, h.shape) / 0.75  # dropout inside the stage


def _stage1(w, h):
  return h @ w


def _loss(params, x, y, key):
  h = mpmd.named_computation(_stage0, name="stage0")(params[0], x, key)
  out = mpmd.named_computation(_stage1, name="stage1")(params[1], h)
  return jnp.mean((out - y) ** 2)


def _step(params, x, y, key):
  key, sub = jax.random.split(key)
  loss, grads = jax.value_and_grad(_loss)(params, x, y, sub)
  return loss, jax.tree.map(lambda p, g: p - 0.1 * g, params, grads), key


def _setup(impl=None):
  topology = make_topology(2, 2)
  config = mpmd.make_config(topology, {"stage0": "m0", "stage1": "m1"})
  params = [jnp.full((16, 32), 0.1), jnp.full((32, 4), 0.1)]
  x, y = jnp.ones((8, 16)), jnp.zeros((8, 4))
  key = jax.random.key(0) if impl is None else jax.random.key(0, impl=impl)
  return config, params, x, y, key


def _same(a, b):
  """Equal pytrees; key leaves compared by their data."""
  def data(t):
    return jax.tree.map(lambda v: jax.random.key_data(v)
                        if jax.dtypes.issubdtype(v.dtype, jax.dtypes.prng_key) else v, t)
  for u, v in zip(jax.tree.leaves(data(a)), jax.tree.leaves(data(b))):
    np.testing.assert_allclose(np.asarray(u), np.asarray(v), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("impl", [None, "rbg"])
def test_key_argument_and_output_equal_jax_jit(impl):
  config, params, x, y, key = _setup(impl)
  f = mpmd.jit(_step, config)
  want, got = (params, key), (params, key)
  for _ in range(3):  # the second and third calls take the steady-state path
    want = jax.jit(_step)(want[0], x, y, want[1])[1:]
    loss, new_params, new_key = f(got[0], x, y, got[1])
    got = (new_params, new_key)
    assert new_key.dtype == key.dtype and new_key.shape == key.shape
    assert isinstance(new_key, jax.Array)
    _same(got, want)


def test_batched_keys_and_key_made_on_a_mesh():
  """A batch of keys goes in; a key split on a mesh comes out with the mesh's placement."""
  topology = make_topology(2, 1)
  config = mpmd.make_config(topology, {"a": "m0", "b": "m1"})

  def step(keys, x):
    h = mpmd.named_computation(lambda k, x: x + jax.random.normal(k[0], x.shape), name="a")(
        keys, x)
    k2 = mpmd.named_computation(lambda k, h: (jax.random.split(k[1], 3), h * 2), name="b")(
        keys, h)
    return k2

  keys = jax.random.split(jax.random.key(7), 2)
  x = jnp.ones((4,))
  want = jax.jit(step)(keys, x)
  got = mpmd.jit(step, config)(keys, x)
  _same(got, want)
  assert got[0].dtype == keys.dtype and got[0].shape == (3,)
  assert got[0].sharding.device_set <= set(topology["m1"].devices.flat)


def test_lower_compile_call_and_donated_key():
  config, params, x, y, key = _setup()
  compiled = mpmd.jit(_step, config, donate_argnums=3).lower(params, x, y, key).compile()
  key_copy = jax.random.wrap_key_data(jnp.array(jax.random.key_data(key)))
  _, _, new_key = compiled(params, x, y, key_copy)
  want = jax.jit(_step)(params, x, y, key)
  _same(new_key, want[2])


def test_abstract_key_arguments_lower():
  """`lower` takes ShapeDtypeStructs of key dtype, as jax.jit's does."""
  config, params, x, y, key = _setup()
  sds = jax.ShapeDtypeStruct(key.shape, key.dtype)
  lowered = mpmd.jit(_step, config).lower(params, x, y, sds)
  assert "tensor<2xui32>" in lowered.as_text("stablehlo")
  compiled = lowered.compile()
  _same(compiled(params, x, y, key)[1], jax.jit(_step)(params, x, y, key)[1])


def test_raw_data_where_a_key_was_traced_is_a_clear_error():
  config, params, x, y, key = _setup()
  compiled = mpmd.jit(_step, config).lower(params, x, y, key).compile()
  with pytest.raises(mpmd.MpmdError, match=r"args\[3\] was traced as a PRNG key array"):
    compiled(params, x, y, jax.random.key_data(key))


def test_mpmd_jit_recompiles_for_another_key_implementation():
  config, params, x, y, key = _setup()
  f = mpmd.jit(_step, config)
  f(params, x, y, key)
  rbg = jax.random.key(0, impl="rbg")
  _, _, out = f(params, x, y, rbg)
  assert out.dtype == rbg.dtype
  _same(out, jax.jit(_step)(params, x, y, rbg)[2])


@pytest.mark.parametrize("impl", [None, "rbg"])
def test_key_output_on_another_process_is_a_placeholder_of_the_key(impl):
  """In a multi-process run an output on another process's mesh is a
  `RemoteArray` of the program's (uint32) data: a key output comes back as a
  placeholder of the key's shape and dtype (wrapping it as a key failed),
  and passed back as an argument it stands for the data again."""
  from mpmd.distributed import RemoteArray
  from mpmd.trace.prng_keys import KeyBoundary
  keys = jax.random.split(jax.random.key(0) if impl is None else jax.random.key(0, impl=impl), 3)
  data = jax.random.key_data(keys)
  boundary = KeyBoundary.of([keys], [keys])
  remote = RemoteArray(data.shape, data.dtype, "m1", (1,))
  (got,) = boundary.wrap([remote])
  assert isinstance(got, RemoteArray)
  assert (got.shape, got.dtype, got.mesh, got.processes) == ((3,), keys.dtype, "m1", (1,))
  assert "key<" in repr(got)
  assert remote.shape == data.shape and remote.dtype == data.dtype  # (not changed)
  (back,) = boundary.unwrap([got])
  assert isinstance(back, RemoteArray)
  assert (back.shape, back.dtype, back.mesh) == (data.shape, data.dtype, "m1")
