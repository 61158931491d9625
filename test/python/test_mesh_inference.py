"""Mesh inference on real training steps: only layers are labelled."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import mpmd
import transformer
from models import make_topology

RTOL = 1e-5
ATOL = 1e-6


def assert_tree_close_normwise(got, want, rtol):
  """Every leaf within `rtol` of the reference in norm: |a - b| <= rtol |b|.

  Adam's per-element update has an unbounded condition number near zero
  gradients (a gradient of 1e-8 from a rounding difference becomes a full
  +-lr step), so elementwise tolerances on Adam-trained parameters test the
  compiler's fusion choices, not correctness; the normwise error does not.
  """
  for (path, a), b in zip(jax.tree_util.tree_flatten_with_path(got)[0], jax.tree.leaves(want)):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    err, ref = np.linalg.norm(a - b), np.linalg.norm(b)
    assert err <= rtol * ref + 1e-12, (
        f"{jax.tree_util.keystr(path)}: |got - want| = {err:.3g}, |want| = {ref:.3g}")


def _mesh_of(array, topology):
  for name, mesh in topology.items():
    if array.sharding.device_set == set(mesh.devices.flat):
      return name
  raise AssertionError(f"{array.sharding} is on no mesh of the topology")


@pytest.mark.slow
def test_flax_transformer_with_adamw():
  topology = make_topology(4, 2)
  config = mpmd.make_config(topology, {f"stage{g}": f"m{g}" for g in range(4)})
  state = ref_state = transformer.make_state()
  x, y = transformer.make_data()
  compiled = mpmd.jit(transformer.train_step, config).lower(state, x, y).compile()
  reference = jax.jit(transformer.train_step)
  for _ in range(5):
    state, loss = compiled(state, x, y)
    ref_state, ref_loss = reference(ref_state, x, y)
    np.testing.assert_allclose(loss, ref_loss, rtol=RTOL)
    assert_tree_close_normwise(state, ref_state, RTOL)

  # The optimizer update of every parameter (and its Adam moments) runs on the
  # mesh that owns the parameter: their outputs are produced by that group's
  # backward fragment, on its mesh.
  producer = {v: inst for inst in compiled.instructions for v in inst.results}
  flat_out = jax.tree_util.tree_flatten_with_path((state, loss))[0]
  checked = 0
  for (path, _), value_id in zip(flat_out, compiled.program.output_ids):
    key = jax.tree_util.keystr(path)
    if "group_" not in key:
      continue
    group = int(key.split("group_")[1][0])
    inst = producer[value_id]
    assert inst.mesh == f"m{group}", (key, inst)
    if "['key']['bias']" not in key:  # Frozen key biases need no gradient.
      assert f"stage{group}(1)" in inst.origins, (key, inst)
    checked += 1
  # Every parameter, and Adam's mu and nu of every trained one.
  num_params = len(jax.tree.leaves(state.params))
  num_frozen = sum("['key']['bias']" in jax.tree_util.keystr(p)
                   for p, _ in jax.tree_util.tree_flatten_with_path(state.params)[0])
  assert checked == num_params + 2 * (num_params - num_frozen)
  for g in range(4):
    for leaf in jax.tree.leaves(state.params[f"group_{g}"]):
      assert _mesh_of(leaf, topology) == f"m{g}"
  # Only the labelled boundaries move computed data: one activation forward
  # and one cotangent backward between consecutive stages. (Inputs used on
  # several meshes, here Adam's step count, are copied to each, down one
  # chain of transfers: a copy of a copy of an input is a copy of it.)
  copies = set(compiled.program.input_ids)
  transfers = [i for i in compiled.instructions if not hasattr(i, "fragment")]
  for t in transfers:  # In program order: a chain's links in turn.
    if t.operands[0] in copies:
      copies.update(t.results)
  computed = [t for t in transfers if t.operands[0] not in copies]
  assert len(computed) == 2 * 3, [str(t) for t in computed]
  inputs = set(compiled.program.input_ids)
  copied = {t.operands[0] for t in transfers if t.operands[0] in inputs}
  assert len(copied) == 1, [str(t) for t in transfers]


def _tied_model_step(use_broadcast: bool):
  vocab, d = 16, 8

  def loss_fn(params, tokens, targets):
    table = mpmd.broadcast(params["embed"]) if use_broadcast else params["embed"]
    h = mpmd.named_computation(lambda e, t: e[t], name="embed")(table, tokens)
    h = mpmd.named_computation(lambda w, h: jnp.tanh(h @ w), name="body")(params["w"], h)
    logits = mpmd.named_computation(lambda e, h: h @ e.T, name="head")(table, h)
    logp = jax.nn.log_softmax(logits)
    return -jnp.mean(jnp.take_along_axis(logp, targets[..., None], axis=-1))

  def step(params, tokens, targets):
    loss, grads = jax.value_and_grad(loss_fn)(params, tokens, targets)
    return loss, jax.tree.map(lambda p, g: p - 0.5 * g, params, grads)

  k1, k2, k3 = jax.random.split(jax.random.key(0), 3)
  params = {"embed": jax.random.normal(k1, (vocab, d)), "w": jax.random.normal(k2, (d, d)) * 0.3}
  tokens = jax.random.randint(k3, (4, 6), 0, vocab)
  targets = (tokens + 1) % vocab
  return step, params, tokens, targets


TIED_ASSIGNMENT = {"embed": "m0", "body": "m1", "head": "m2"}


@pytest.mark.parametrize("options,use_broadcast", [
    ({"mpmd_infer_transfers": True}, False),
    ({"mpmd_infer_cross_mesh_reductions": True}, False),
    ({}, True),
])
def test_tied_embedding(options, use_broadcast):
  step, params, tokens, targets = _tied_model_step(use_broadcast)
  topology = make_topology(3, 2)
  config = mpmd.make_config(topology, TIED_ASSIGNMENT, partitioning_options=options)
  jitted = mpmd.jit(step, config)
  ref_params = params
  for _ in range(3):
    loss, params = jitted(params, tokens, targets)
    ref_loss, ref_params = jax.jit(step)(ref_params, tokens, targets)
    np.testing.assert_allclose(loss, ref_loss, rtol=RTOL)
    for got, want in zip(jax.tree.leaves(params), jax.tree.leaves(ref_params)):
      np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
  # The tied table keeps one home: the first mesh that uses it.
  assert _mesh_of(params["embed"], topology) == "m0"


def test_tied_embedding_without_inference_names_value_and_meshes():
  step, params, tokens, targets = _tied_model_step(use_broadcast=False)
  config = mpmd.make_config(make_topology(3, 2), TIED_ASSIGNMENT)
  with pytest.raises(mpmd.PartitionError) as info:
    mpmd.jit(step, config).lower(params, tokens, targets)
  message = str(info.value)
  assert 'needs result #0 of named computation "head"(1), which is on mesh "m2"' in message
  assert 'on mesh "m0"' in message
  # A sum of gradients from two meshes: the option that makes it one
  # cross-mesh reduction, not the one that allows any transfer.
  assert 'it sums values from meshes "m0" and "m2"' in message
  assert "mpmd_infer_cross_mesh_reductions" in message
  assert "mpmd_infer_transfers" not in message
  assert "test_mesh_inference.py" in message


def test_named_tensor_places_an_unlabelled_value():
  def f(a):
    h = mpmd.named_computation(lambda a: a * 2, name="f")(a)
    h = mpmd.named_tensor(jnp.sin(h), "activation")
    return mpmd.named_computation(lambda h: h + 1, name="g")(h)

  topology = make_topology(3, 2)
  config = mpmd.make_config(topology, {"f": "m0", "activation": "m1", "g": "m2"})
  lowered = mpmd.jit(f, config).lower(jnp.ones(4))
  # sin runs on m0 (with its input), the named tensor is moved to m1, then on.
  imported = lowered.as_text("mpmd-import")
  transfers = [line for line in imported.splitlines() if "mpmd.transfer" in line]
  assert len(transfers) == 2 and '"m1"' in transfers[0] and '"m2"' in transfers[1], transfers
  np.testing.assert_allclose(lowered.compile()(jnp.arange(4.0)), jnp.sin(jnp.arange(4.0) * 2) + 1,
                             rtol=1e-6)


def test_read_input_mesh_from_arguments():
  from models import init_mlp, make_batch, sgd_step
  topology = make_topology(2, 4)
  params = init_mlp(2)
  x, y = make_batch()
  # Both stages' parameters start on m1; read from the arguments, they stay
  # inputs of m1 (and stage0's are copied to m0), else they go to their users.
  placed = jax.device_put(params, jax.sharding.NamedSharding(topology["m1"], jax.sharding.PartitionSpec()))
  assignment = {"stage0": "m0", "stage1": "m1"}
  reading = mpmd.make_config(topology, assignment, read_input_mesh_from_arguments=True)
  assert mpmd.jit(sgd_step, reading).lower(placed, x, y).input_meshes[:4] == ("m1",) * 4
  default = mpmd.make_config(topology, assignment)
  assert mpmd.jit(sgd_step, default).lower(placed, x, y).input_meshes[:4] == ("m0", "m0", "m1", "m1")
  loss, _ = mpmd.jit(sgd_step, reading)(placed, x, y)
  np.testing.assert_allclose(loss, jax.jit(sgd_step)(params, x, y)[0], rtol=RTOL)
