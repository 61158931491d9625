"""Memory kinds in assignments: named tensors, inputs and outputs put in host
memory (`"m0#pinned_host"`), moved there and back by transfers on the mesh,
with results equal to `jax.jit`'s."""

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

import mpmd  # noqa: E402
from mpmd.errors import ConfigError, PartitionError  # noqa: E402
from mpmd.run.program import TransferInstruction  # noqa: E402


def _topology():
  d = jax.devices()
  return {"m0": Mesh(np.array(d[0:2]), ("data",)), "m1": Mesh(np.array(d[2:4]), ("data",))}


def _weights():
  return [jnp.eye(8) * 0.5 + 0.01, jnp.eye(8) * 0.25 - 0.02]


def _data():
  return jnp.arange(4 * 8, dtype=jnp.float32).reshape(4, 8) / 32


def _forward(ws, x):
  """Two stages; the first stage's activation is labelled `act`."""
  h = mpmd.named_computation(lambda w, x: jnp.tanh(x @ w), name="s0")(ws[0], x)
  h = mpmd.named_tensor(h, "act")
  return mpmd.named_computation(lambda w, h: jnp.tanh(h @ w), name="s1")(ws[1], h)


def _loss(ws, x):
  return jnp.mean(_forward(ws, x) ** 2)


def _sgd(ws, x):
  loss, grads = jax.value_and_grad(_loss)(ws, x)
  return loss, [w - 0.1 * g for w, g in zip(ws, grads)]


def _kinds(compiled):
  """(source kind, result kind) of each transfer within one mesh."""
  return [(t.src_mesh, t.mesh) for t in compiled.instructions
          if isinstance(t, TransferInstruction) and t.src_mesh == t.mesh]


def _assert_equal(got, want):
  for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-7)


def test_named_tensor_in_host_memory_is_offloaded_and_reloaded():
  config = mpmd.make_config(_topology(), {"s0": "m0", "act": "m0#pinned_host", "s1": "m1"})
  fn = mpmd.jit(_sgd, config)
  lowered = fn.lower(_weights(), _data())
  transfers = [line for line in lowered.as_text("mpmd").splitlines() if "mpmd.transfer" in line]
  host = '!mpmd.mesh_tensor<"m0", tensor<4x8xf32>, memory_kind="pinned_host">'
  # The activation goes to m0's host memory after s0 (forward), and so does
  # its cotangent from m1 (a named tensor's transpose has its name); each
  # leaves host memory for its reader (s1 on m1, s0's backward on m0).
  into = [t for t in transfers if t.endswith(host)]
  out_of = [t for t in transfers if f"({host})" in t]
  assert len(into) == 2 and len(out_of) == 2, transfers
  assert any('-> !mpmd.mesh_tensor<"m0", tensor<4x8xf32>>' in t for t in out_of), out_of
  # `mpmd-opt` replays it with the same spelling.
  assert any("act@m0#pinned_host" in arg for arg in lowered.mpmd_opt_args())
  compiled = lowered.compile()
  assert _kinds(compiled) == [("m0", "m0"), ("m0", "m0")]
  _assert_equal(compiled(_weights(), _data()), jax.jit(_sgd)(_weights(), _data()))


def test_named_tensor_on_device_memory_moves_nothing():
  config = mpmd.make_config(_topology(), {"s0": "m0", "act": "m0#device", "s1": "m1"})
  compiled = mpmd.jit(_forward, config).lower(_weights(), _data()).compile()
  assert not _kinds(compiled)
  _assert_equal(compiled(_weights(), _data()), jax.jit(_forward)(_weights(), _data()))


def test_input_in_host_memory():
  config = mpmd.make_config(_topology(), {"s0": "m0", "s1": "m1"},
                            input_mesh_assignment=(["m0#pinned_host", "m1"], "m0"))
  compiled = mpmd.jit(_forward, config).lower(_weights(), _data()).compile()
  (w0, w1), x = compiled.input_shardings[0]
  assert w0.memory_kind == "pinned_host" and w1.memory_kind != "pinned_host"
  assert x.memory_kind != "pinned_host"
  # The weight is copied to device memory once, at the start, for s0.
  assert _kinds(compiled) == [("m0", "m0")]
  _assert_equal(compiled(_weights(), _data()), jax.jit(_forward)(_weights(), _data()))
  # An argument already in host memory is taken as it is.
  placed = jax.device_put(_weights()[0], w0)
  _assert_equal(compiled([placed, _weights()[1]], _data()),
                jax.jit(_forward)(_weights(), _data()))


def test_outputs_in_host_memory():
  config = mpmd.make_config(_topology(), {"s0": "m0", "act": "m0", "s1": "m1"},
                            output_mesh_assignment=("m1#pinned_host", ["m0#pinned_host",
                                                                       "m1#device"]))
  fn = mpmd.jit(_sgd, config)
  loss, (w0, w1) = fn(_weights(), _data())
  assert loss.sharding.memory_kind == "pinned_host"
  assert w0.sharding.memory_kind == "pinned_host"
  assert w1.sharding.memory_kind == "device"
  assert {d.id for d in loss.devices()} == {2, 3} and {d.id for d in w0.devices()} == {0, 1}
  _assert_equal((loss, [w0, w1]), jax.jit(_sgd)(_weights(), _data()))
  # The next step takes the weights where the last one left them.
  _assert_equal(fn([w0, w1], _data()), jax.jit(_sgd)([np.asarray(w0), np.asarray(w1)], _data()))


def test_output_in_host_memory_with_out_shardings():
  mesh = _topology()["m1"]
  config = mpmd.make_config(_topology(), {"s0": "m0", "s1": "m1"},
                            output_mesh_assignment="m1#pinned_host")
  fn = mpmd.jit(_forward, config, out_shardings=NamedSharding(mesh, P("data")))
  out = fn(_weights(), _data())
  assert out.sharding.memory_kind == "pinned_host"
  assert out.sharding.spec == P("data")
  _assert_equal(out, jax.jit(_forward)(_weights(), _data()))


def test_unknown_memory_kind_names_the_name_and_the_kind():
  with pytest.raises(ConfigError, match=r"name 'act' is assigned to memory kind 'qwerty' of "
                                        r"mesh 'm0': use one of device, pinned_host"):
    mpmd.make_config(_topology(), {"act": "m0#qwerty"})
  with pytest.raises(ConfigError, match=r"input_mesh_assignment entry is assigned to memory "
                                        r"kind 'unpinned_host' of mesh 'm1'"):
    mpmd.make_config(_topology(), {"s0": "m0"}, input_mesh_assignment="m1#unpinned_host")
  with pytest.raises(ConfigError, match=r"name 'act' is assigned to mesh 'm9', which is not in "
                                        r"the topology"):
    mpmd.make_config(_topology(), {"act": "m9#pinned_host"})


def test_memory_kinds_are_defined_once_in_the_partitioner():
  """make_config accepts the kinds the C++ partitioner places values in
  (include/mpmd/Dialect/MemoryKinds.h, read through the extension); the
  dialect's verifier names the same list."""
  assert mpmd.config.MEMORY_KINDS == tuple(mpmd._mpmd.MEMORY_KINDS) == ("device", "pinned_host")
  for kind in mpmd.config.MEMORY_KINDS:
    mpmd.make_config(_topology(), {"act": f"m0#{kind}"})
  ok, text = mpmd._mpmd.run_pipeline(
      'func.func @f(%a: !mpmd.mesh_tensor<"m1", tensor<4xf32>>) attributes '
      '{topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {\n'
      '  %0 = mpmd.transfer %a : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> '
      '!mpmd.mesh_tensor<"m1", tensor<4xf32>, memory_kind="unpinned_host">\n  return\n}\n')
  listed = " or ".join(f'"{k}"' for k in mpmd.config.MEMORY_KINDS)
  assert not ok and f"memory kinds {listed} only" in text, text


def test_named_computation_in_host_memory_is_an_error():
  config = mpmd.make_config(_topology(), {"s0": "m0#pinned_host", "act": "m0", "s1": "m1"})
  with pytest.raises(PartitionError, match=r'named computation "s0" is assigned to memory kind '
                                           r'"pinned_host" of mesh "m0": a computation runs in '
                                           r'device memory; to keep a value in host memory, '
                                           r'label it with a named tensor'):
    mpmd.jit(_forward, config).lower(_weights(), _data())
