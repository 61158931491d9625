"""Models written as a third party writes them (no mpmd in their source),
pipelined over 4 meshes with `mpmd.label_layers`: a GPT-2-style flax linen
LM with tied embeddings, a flax nnx model with dropout (typed keys in its
`Rngs`), an equinox model. Each step equals `jax.jit` of the same step."""

from __future__ import annotations

import contextlib
import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

import mpmd
from models import make_topology

RTOL, ATOL = 2e-5, 2e-6
NUM_LAYERS, NUM_MESHES = 4, 4
ASSIGNMENT = {f"stage{i}": f"m{i}" for i in range(NUM_MESHES)}


def _config(**options):
  return mpmd.make_config(make_topology(NUM_MESHES, 2), dict(ASSIGNMENT),
                          partitioning_options=options or None)


def _assert_trees_close(got, want):
  assert jax.tree.structure(got) == jax.tree.structure(want)
  for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
    if jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key):
      a, b = jax.random.key_data(a), jax.random.key_data(b)
    np.testing.assert_allclose(a, b, rtol=RTOL, atol=ATOL)


def _assert_stages_on_their_meshes(jitted, *args):
  """Each layer group's forward runs on its own mesh (the labels took)."""
  compiled = jitted.lower(*args).compile()
  placed = {(i.mesh, o) for i in compiled.instructions for o in getattr(i, "origins", ())}
  for name, mesh in ASSIGNMENT.items():
    assert (mesh, name) in placed, sorted(placed)


def _run_both(step, jitted, state, *batch, steps: int = 2):
  """`steps` steps of `jitted` and of `jax.jit(step)` from the same state."""
  ref = state
  for _ in range(steps):
    out = jitted(*state, *batch)
    ref_out = jax.jit(step)(*ref, *batch)
    np.testing.assert_allclose(out[0], ref_out[0], rtol=RTOL)
    state, ref = out[1:], ref_out[1:]
  _assert_trees_close(state, ref)


# --- A GPT-2-style flax linen model, as a third party writes it ----------------------


class _Block(nn.Module):
  d: int
  heads: int = 2

  @nn.compact
  def __call__(self, h, attention_mask=None, deterministic: bool = True):
    x = nn.LayerNorm()(h)
    causal = nn.make_causal_mask(jnp.ones(h.shape[:2], jnp.int32))
    if attention_mask is not None:
      causal = nn.combine_masks(causal, attention_mask)
    x = nn.MultiHeadDotProductAttention(self.heads, dropout_rate=0.1)(
        x, x, mask=causal, deterministic=deterministic)
    h = h + x
    x = nn.Dense(4 * self.d)(nn.LayerNorm()(h))
    x = nn.Dropout(0.1)(nn.gelu(x), deterministic=deterministic)
    return h + nn.Dense(self.d)(x)


class _LM(nn.Module):
  vocab: int = 32
  d: int = 16
  layers: int = NUM_LAYERS

  @nn.compact
  def __call__(self, ids, deterministic: bool = True):
    wte = nn.Embed(self.vocab, self.d, name="wte")
    wpe = nn.Embed(ids.shape[1], self.d, name="wpe")
    h = wte(ids) + wpe(jnp.arange(ids.shape[1]))
    for i in range(self.layers):
      h = _Block(self.d, name=f"h_{i}")(h, None, deterministic)
    return wte.attend(nn.LayerNorm(name="ln_f")(h))  # tied LM head: wte.T


@pytest.mark.slow
def test_third_party_linen_lm_with_tied_embeddings_pipelines_and_equals_jax_jit():
  model = _LM()
  ids = jax.random.randint(jax.random.key(0), (4, 8), 0, model.vocab)
  params = model.init(jax.random.PRNGKey(0), ids)
  # GPT-2's clipping by the global gradient norm (a sum over every mesh). Not
  # Adam: the attention key bias's gradient is zero up to rounding, which
  # Adam's normalisation would blow up to a full step of either sign.
  tx = optax.chain(optax.clip_by_global_norm(1.0), optax.sgd(0.1, momentum=0.9))

  def step(params, opt_state, ids, rng, labelled=True):
    def loss_fn(params):
      with (mpmd.label_layers(_Block, mpmd.stage_names(NUM_LAYERS, NUM_MESHES)) if labelled
            else contextlib.nullcontext()):
        logits = model.apply(params, ids, deterministic=False, rngs={"dropout": rng})
      return optax.softmax_cross_entropy_with_integer_labels(logits[:, :-1], ids[:, 1:]).mean()
    loss, grads = jax.value_and_grad(loss_fn)(params)
    updates, opt_state = tx.update(grads, opt_state, params)
    return loss, optax.apply_updates(params, updates), opt_state

  rng = jax.random.PRNGKey(7)
  # wte is used on the first mesh (embedding) and the last (LM head): its
  # gradient is a sum across meshes, which the error names the option for.
  with pytest.raises(mpmd.PartitionError, match="mpmd_infer_cross_mesh_reductions"):
    mpmd.jit(step, _config()).lower(params, tx.init(params), ids, rng)
  jitted = mpmd.jit(step, _config(mpmd_infer_cross_mesh_reductions=True))
  _assert_stages_on_their_meshes(jitted, params, tx.init(params), ids, rng)
  _run_both(step, jitted, (params, tx.init(params)), ids, rng)
  # The labels change nothing: the model without them (dropout included).
  _assert_trees_close(jitted(params, tx.init(params), ids, rng),
                      jax.jit(functools.partial(step, labelled=False))(
                          params, tx.init(params), ids, rng))


# --- A flax nnx model with dropout ---------------------------------------------------


class _NnxBlock(nnx.Module):

  def __init__(self, d: int, rngs: nnx.Rngs):
    self.norm = nnx.LayerNorm(d, rngs=rngs)
    self.up = nnx.Linear(d, 2 * d, rngs=rngs)
    self.down = nnx.Linear(2 * d, d, rngs=rngs)
    self.dropout = nnx.Dropout(0.1, rngs=rngs)

  def __call__(self, x):
    return x + self.down(self.dropout(nnx.gelu(self.up(self.norm(x)))))


class _NnxNet(nnx.Module):

  def __init__(self, d: int, layers: int, rngs: nnx.Rngs):
    self.embed = nnx.Linear(8, d, rngs=rngs)
    self.blocks = nnx.List([_NnxBlock(d, rngs) for _ in range(layers)])
    self.head = nnx.Linear(d, 4, rngs=rngs)

  def __call__(self, x):
    h = self.embed(x)
    for block in self.blocks:
      h = block(h)
    return self.head(h)


def test_nnx_model_with_dropout_pipelines_and_equals_jax_jit():
  graphdef, params, rest = nnx.split(_NnxNet(16, NUM_LAYERS, nnx.Rngs(0, dropout=1)),
                                     nnx.Param, ...)
  # The dropout stream's key is a typed key (jax.random.key), an argument of the step.
  assert any(jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key) for a in jax.tree.leaves(rest))
  tx = optax.sgd(0.1, momentum=0.9)
  x = jax.random.normal(jax.random.key(1), (8, 8))
  y = jax.random.normal(jax.random.key(2), (8, 4))

  def step(params, rest, opt_state, x, y):
    model = nnx.merge(graphdef, params, rest)

    def loss_fn(model):
      with mpmd.label_layers(_NnxBlock, mpmd.stage_names(NUM_LAYERS, NUM_MESHES)):
        return jnp.mean((model(x) - y) ** 2)

    loss, grads = nnx.value_and_grad(loss_fn)(model)
    updates, opt_state = tx.update(grads, opt_state, params)
    _, _, rest = nnx.split(model, nnx.Param, ...)  # the dropout RNG count advanced
    return loss, optax.apply_updates(params, updates), rest, opt_state

  jitted = mpmd.jit(step, _config())
  _assert_stages_on_their_meshes(jitted, params, rest, tx.init(params), x, y)
  _run_both(step, jitted, (params, rest, tx.init(params)), x, y)


class _NnxCallRngsBlock(nnx.Module):
  """Takes its `nnx.Rngs` at call time (the other common nnx style)."""

  def __init__(self, d: int, rngs: nnx.Rngs):
    self.linear = nnx.Linear(d, d, rngs=rngs)
    self.dropout = nnx.Dropout(0.5)

  def __call__(self, x, rngs: nnx.Rngs):
    return x + self.dropout(jnp.tanh(self.linear(x)), rngs=rngs)


@pytest.mark.parametrize("rngs_at_call", [False, True])
def test_nnx_labels_keep_the_dropout_streams_of_the_unlabelled_model(rngs_at_call):
  """Each labelled block advances the shared RNG stream as it would
  unlabelled: the blocks draw different masks (compared with the model
  without labels, not only with jax.jit of the labelled step)."""
  block_type = _NnxCallRngsBlock if rngs_at_call else _NnxBlock
  rngs = nnx.Rngs(0, dropout=1)  # one stream shared by the blocks that hold it
  blocks = nnx.List([block_type(8, rngs) for _ in range(2)])
  graphdef, params, rest = nnx.split(blocks, nnx.Param, ...)
  x = jax.random.normal(jax.random.key(1), (4, 8))

  def step(params, rest, key, labelled):
    model = nnx.merge(graphdef, params, rest)

    def loss_fn(model):
      rngs = nnx.Rngs(dropout=key)
      h = x
      with (mpmd.label_layers(block_type, ["stage0", "stage1"]) if labelled
            else contextlib.nullcontext()):
        for block in model:
          h = block(h, rngs) if rngs_at_call else block(h)
      return jnp.mean(h ** 2)

    return nnx.value_and_grad(loss_fn)(model)

  config = mpmd.make_config(make_topology(2, 1), {"stage0": "m0", "stage1": "m1"})
  key = jax.random.key(3)
  unlabelled = jax.jit(functools.partial(step, labelled=False))(params, rest, key)
  for jitted in (jax.jit, lambda f: mpmd.jit(f, config)):
    got = jitted(functools.partial(step, labelled=True))(params, rest, key)
    _assert_trees_close(got, unlabelled)


# --- An equinox model ------------------------------------------------------------------


def _equinox_model():
  eqx = pytest.importorskip("equinox")

  class Block(eqx.Module):
    norm: eqx.nn.LayerNorm
    mlp: eqx.nn.MLP

    def __init__(self, d, key):
      self.norm = eqx.nn.LayerNorm(d)
      self.mlp = eqx.nn.MLP(d, d, 2 * d, 1, activation=jax.nn.gelu, key=key)

    def __call__(self, x):
      return x + jax.vmap(self.mlp)(jax.vmap(self.norm)(x))

  class Net(eqx.Module):
    embed: eqx.nn.Linear
    blocks: list
    head: eqx.nn.Linear

    def __init__(self, d, layers, key):
      keys = jax.random.split(key, layers + 2)
      self.embed = eqx.nn.Linear(8, d, key=keys[0])
      self.blocks = [Block(d, k) for k in keys[1:-1]]
      self.head = eqx.nn.Linear(d, 4, key=keys[-1])

    def __call__(self, x):
      h = jax.vmap(self.embed)(x)
      for block in self.blocks:
        h = block(h)
      return jax.vmap(self.head)(h)

  return eqx, Block, Net(16, NUM_LAYERS, jax.random.key(0))


def test_equinox_model_pipelines_and_equals_jax_jit():
  eqx, block_type, model = _equinox_model()
  params, static = eqx.partition(model, eqx.is_array)
  tx = optax.adam(1e-2)
  x = jax.random.normal(jax.random.key(1), (8, 8))
  y = jax.random.normal(jax.random.key(2), (8, 4))

  def step(params, opt_state, x, y):
    def loss_fn(params):
      model = eqx.combine(params, static)
      with mpmd.label_layers(block_type, mpmd.stage_names(NUM_LAYERS, NUM_MESHES)):
        return jnp.mean((model(x) - y) ** 2)
    loss, grads = jax.value_and_grad(loss_fn)(params)
    updates, opt_state = tx.update(grads, opt_state, params)
    return loss, eqx.apply_updates(params, updates), opt_state

  original_call = block_type.__call__
  jitted = mpmd.jit(step, _config())
  _assert_stages_on_their_meshes(jitted, params, tx.init(params), x, y)
  _run_both(step, jitted, (params, tx.init(params)), x, y)
  assert block_type.__call__ is original_call  # the class is left as it was


# --- The helper itself --------------------------------------------------------------------


def test_stage_names_cut_layers_into_contiguous_even_groups():
  assert mpmd.stage_names(4, 4) == ["stage0", "stage1", "stage2", "stage3"]
  assert mpmd.stage_names(5, 2) == ["stage0"] * 3 + ["stage1"] * 2
  assert mpmd.stage_names(3, 1, prefix="s") == ["s0"] * 3
  with pytest.raises(ValueError, match="1 <= num_stages <= num_layers"):
    mpmd.stage_names(2, 3)


class _Plain:
  """A layer class that is neither flax nor equinox."""

  def __init__(self, w):
    self.w = w

  def __call__(self, x):
    return jnp.tanh(x @ self.w)


def test_label_layers_labels_plain_classes_in_call_order_and_restores_them():
  layers = [_Plain(jnp.eye(4) * (i + 1)) for i in range(3)]

  def f(x):
    with mpmd.label_layers(_Plain, lambda i, layer: f"layer{i}"):
      for layer in layers:
        x = layer(x)
    return x

  text = jax.jit(f).lower(jnp.ones((2, 4))).as_text()
  config = mpmd.make_config(make_topology(3, 1), {f"layer{i}": f"m{i}" for i in range(3)})
  stablehlo = mpmd.jit(f, config).lower(jnp.ones((2, 4))).as_text("stablehlo")
  for i in range(3):
    assert f'mpmd.named_computation<"layer{i}">' in stablehlo
  assert "named_computation" not in text  # plain jax.jit: identities
  np.testing.assert_allclose(mpmd.jit(f, config)(jnp.ones((2, 4))), jax.jit(f)(jnp.ones((2, 4))),
                             rtol=RTOL)
  assert _Plain.__call__.__qualname__ == "_Plain.__call__"


def test_label_layers_names_the_layer_when_names_run_out():
  layers = [_Plain(jnp.eye(4)) for _ in range(3)]

  def f(x):
    with mpmd.label_layers(_Plain, ["a", "b"]):
      for layer in layers:
        x = layer(x)
    return x

  with pytest.raises(ValueError, match=r"call #2 of a _Plain, but names has only 2 entries"):
    jax.jit(f)(jnp.ones((2, 4)))


@pytest.mark.parametrize("layer_types,names,message", [
    ("Block", ["a"], "needs a layer class"),
    (_Plain, "stage0", "names must be a sequence of names"),
    (_Plain, ["a"], None),
])
def test_label_layers_rejects_bad_arguments(layer_types, names, message):
  if message is None:
    with pytest.raises(TypeError, match="has no method 'forward'"):
      with mpmd.label_layers(layer_types, names, method="forward"):
        pass
    return
  with pytest.raises(TypeError, match=message):
    with mpmd.label_layers(layer_types, names):
      pass
