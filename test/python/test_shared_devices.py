"""Meshes that share devices (`make_config(shared_devices=True)`): a pipeline
tried on fewer devices than it has meshes, e.g. four meshes on one GPU."""

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from jax.sharding import Mesh  # noqa: E402

import mpmd  # noqa: E402
from mpmd.errors import ConfigError  # noqa: E402
from mpmd.run.program import TransferInstruction  # noqa: E402


def _mesh(*devices):
  return Mesh(np.array(list(devices)), ("data",))


def _stage(i, w, x):
  return mpmd.named_computation(lambda w, x: jnp.tanh(x @ w), name=f"s{i}")(w, x)


def _loss(ws, x):
  for i, w in enumerate(ws):
    x = _stage(i, w, x)
  return jnp.mean(x ** 2)


def _step(ws, xs):
  """SGD over the microbatches of `xs`, each one `mpmd.call`."""
  acc = jax.tree.map(jnp.zeros_like, ws)
  for i in range(xs.shape[0]):
    def microbatch(acc, i=i):
      grads = jax.grad(_loss)(ws, xs[i])
      return jax.tree.map(jnp.add, acc, grads)
    acc = mpmd.call(microbatch, call_counter=i)(acc)
  return [w - 0.1 * g for w, g in zip(ws, acc)]


def _weights():
  return [jnp.eye(8) * 0.5 + 0.01 * i for i in range(4)]


def _data():
  return jnp.arange(4 * 2 * 8, dtype=jnp.float32).reshape(4, 2, 8) / 64


def test_overlapping_meshes_are_an_error_that_names_the_option():
  d = jax.devices()
  with pytest.raises(ConfigError, match=r"device .* is in both mesh 'a' and mesh 'b'.*"
                                        r"shared_devices=True"):
    mpmd.make_config({"a": _mesh(d[0]), "b": _mesh(d[0])}, {"s0": "a"})


def test_a_mesh_that_lists_a_device_twice_is_an_error():
  d = jax.devices()
  with pytest.raises(ConfigError, match="mesh 'a' lists a device twice"):
    mpmd.make_config({"a": Mesh(np.array([d[0], d[0]]), ("data",))}, {"s0": "a"},
                     shared_devices=True)


def test_four_meshes_on_one_device_equal_jax_jit_over_two_steps_with_donation():
  dev = jax.devices()[0]
  topology = {f"m{i}": _mesh(dev) for i in range(4)}
  config = mpmd.make_config(topology, {f"s{i}": f"m{i}" for i in range(4)},
                            pipeline_schedule="1F1B", shared_devices=True)
  fn = mpmd.jit(_step, config, donate_argnums=0)
  compiled = fn.lower(_weights(), _data()).compile()
  transfers = [i for i in compiled.instructions if isinstance(i, TransferInstruction)]
  # Activations forward, cotangents back: every transfer is a real copy on
  # the shared device (an alias would be freed or donated by one mesh while
  # the other still reads it).
  assert transfers and all(t.may_alias is False for t in transfers)
  copiers = [t.copier for t in transfers if t.copier is not None]
  assert copiers and all(c.semantics.name == "ALWAYS_COPY" for c in copiers)
  want = jax.jit(_step)(_weights(), _data())
  got = compiled(_weights(), _data())
  for a, b in zip(got, want, strict=True):
    np.testing.assert_allclose(a, b, rtol=1e-6)
    assert a.devices() == {dev}
  want2 = jax.jit(_step)(want, _data())
  got2 = compiled(got, _data())
  assert all(a.is_deleted() for a in got)  # donated
  for a, b in zip(got2, want2, strict=True):
    np.testing.assert_allclose(a, b, rtol=1e-6)


def test_meshes_that_overlap_in_part():
  d = jax.devices()
  topology = {"m0": _mesh(d[0], d[1]), "m1": _mesh(d[1], d[2]), "m2": _mesh(d[2], d[3]),
              "m3": _mesh(d[3], d[0])}
  config = mpmd.make_config(topology, {f"s{i}": f"m{i}" for i in range(4)},
                            pipeline_schedule="GPipe", shared_devices=True)
  got = mpmd.jit(_step, config)(_weights(), _data())
  want = jax.jit(_step)(_weights(), _data())
  for a, b in zip(got, want, strict=True):
    np.testing.assert_allclose(a, b, rtol=1e-6)


def test_an_arguments_devices_do_not_name_a_mesh_when_meshes_share_them():
  dev = jax.devices()[0]
  config = mpmd.make_config({"a": _mesh(dev), "b": _mesh(dev)}, {"s0": "a"},
                            shared_devices=True)
  assert config.mesh_of_devices([dev]) is None
  disjoint = mpmd.make_config({"a": _mesh(dev), "b": _mesh(jax.devices()[1])}, {"s0": "a"})
  assert disjoint.mesh_of_devices([dev]) == "a"
