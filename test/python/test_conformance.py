"""`mpmd.jit` against `jax.jit` over the JAX features real models use.

Each test runs one function both ways (two stages on two meshes of two
devices unless said otherwise) and checks that the results are equal, or
that `mpmd.jit` raises the clear error that docs/limitations.md lists."""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx
from jax.ad_checkpoint import checkpoint_name
from jax.sharding import PartitionSpec as P

import mpmd
from models import make_topology

TOPOLOGY = make_topology(2, 2)
ASSIGNMENT = {"stage0": "m0", "stage1": "m1"}


def _config(**options):
  return mpmd.make_config(TOPOLOGY, dict(ASSIGNMENT), partitioning_options=options or None)


def _leaf_close(a, b, rtol, atol):
  a, b = jnp.asarray(a), jnp.asarray(b)
  assert a.dtype == b.dtype, (a.dtype, b.dtype)
  if jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key):
    a, b = jax.random.key_data(a), jax.random.key_data(b)
  if not jnp.issubdtype(a.dtype, jnp.inexact):
    np.testing.assert_array_equal(a, b)
  else:
    np.testing.assert_allclose(np.asarray(a, np.float32), np.asarray(b, np.float32),
                               rtol=rtol, atol=atol)


def check(f, *args, config=None, rtol=1e-5, atol=1e-6, **jit_kwargs):
  """Runs `f` under `mpmd.jit` and `jax.jit`; returns mpmd's result after
  checking that both give the same pytree of equal values."""
  want = jax.jit(f, **jit_kwargs)(*args)
  got = mpmd.jit(f, config or _config(), **jit_kwargs)(*args)
  assert jax.tree.structure(got) == jax.tree.structure(want)
  jax.tree.map(functools.partial(_leaf_close, rtol=rtol, atol=atol), got, want)
  return got


def stage(i):
  """`named_computation(fn, name=f"stage{i}")` as a decorator."""
  return mpmd.named_computation(name=f"stage{i}")


def _weights(*shapes, dtype=jnp.float32, seed=0):
  keys = jax.random.split(jax.random.key(seed), len(shapes))
  return [(jax.random.normal(k, s) / np.sqrt(s[0])).astype(dtype) for k, s in zip(keys, shapes)]


X = jax.random.normal(jax.random.key(42), (8, 16))
W0, W1 = _weights((16, 16), (16, 4))


def _two_stage_grad(stage0_fn, stage1_fn):
  """A loss over two labelled stages and its gradient step."""
  def loss(ws, x):
    h = stage(0)(stage0_fn)(ws[0], x)
    return stage(1)(stage1_fn)(ws[1], h)

  def step(ws, x):
    value, grads = jax.value_and_grad(loss)(ws, x)
    return value, jax.tree.map(lambda w, g: w - 0.1 * g, ws, grads)
  return step


# --- Typed PRNG keys -------------------------------------------------------------------


@pytest.mark.slow
def test_typed_keys_as_arguments_inside_stages_across_meshes_and_as_results():
  def step(ws, x, key):
    k0, k1, key = jax.random.split(key, 3)

    def loss(ws):
      # stage0 draws dropout masks from a key it is given; the key it splits
      # off crosses to the other mesh.
      def s0(w, x, k):
        ka, kb = jax.random.split(k)
        keep = jax.random.bernoulli(ka, 0.9, x.shape)
        return jnp.tanh(jnp.where(keep, x, 0) / 0.9 @ w), kb
      h, k_next = stage(0)(s0)(ws[0], x, k0)
      def s1(w, h, k, k_other):
        noise = 0.01 * jax.random.normal(jax.random.fold_in(k, 3), h.shape)
        return jnp.mean((h + noise + 0.0 * jax.random.uniform(k_other)) @ w) ** 2
      return stage(1)(s1)(ws[1], h, k1, k_next)

    value, grads = jax.value_and_grad(loss)(ws)
    return value, [w - 0.1 * g for w, g in zip(ws, grads)], key

  _, _, key = check(step, [W0, W1], X, jax.random.key(0))
  assert jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key)
  # Raw uint32 keys and other implementations too.
  check(step, [W0, W1], X, jax.random.key(1, impl="rbg"))
  check(lambda ws, x, k: step(ws, x, jax.random.wrap_key_data(k)), [W0, W1], X,
        jax.random.PRNGKey(2))


# --- custom_vjp / custom_jvp ---------------------------------------------------------


@jax.custom_vjp
def _clipped_tanh(x):
  return jnp.tanh(x)


def _clipped_tanh_fwd(x):
  y = jnp.tanh(x)
  return y, y


def _clipped_tanh_bwd(y, g):
  return (jnp.clip(g * (1 - y ** 2), -0.1, 0.1),)


_clipped_tanh.defvjp(_clipped_tanh_fwd, _clipped_tanh_bwd)


@jax.custom_jvp
def _softplus(x):
  return jnp.logaddexp(x, 0.0)


@_softplus.defjvp
def _softplus_jvp(primals, tangents):
  (x,), (t,) = primals, tangents
  return _softplus(x), t * jax.nn.sigmoid(x) * 2.0  # a deliberately different rule


def test_custom_vjp_and_custom_jvp_inside_stages():
  step = _two_stage_grad(lambda w, x: _clipped_tanh(x @ w),
                         lambda w, h: jnp.mean(_softplus(h @ w)))
  check(step, [W0, W1], X)


# --- Control flow inside a stage -----------------------------------------------------------


def test_scan_fori_while_and_cond_inside_stages():
  def s0(w, x):
    def body(h, _):
      return jnp.tanh(h @ w), jnp.sum(h)
    h, sums = jax.lax.scan(body, x, None, length=3)
    h = jax.lax.fori_loop(0, 2, lambda i, h: h + 0.1 * i * jnp.sin(h), h)
    return h + 0.01 * sums.sum()

  def s1(w, h):
    # while_loop is not reverse-differentiable: only its result enters the loss.
    n = jax.lax.while_loop(lambda c: c[1] < 5.0, lambda c: (c[0] + 1, c[1] + jnp.abs(c[0]) + 1),
                           (jnp.float32(0), jax.lax.stop_gradient(jnp.mean(h))))[0]
    out = jax.lax.cond(jnp.sum(h) > 0, lambda h: h @ w, lambda h: -(h @ w), h)
    return jnp.mean(out ** 2) + 0.001 * n

  check(_two_stage_grad(s0, s1), [W0, W1], X)


def test_labels_inside_control_flow_are_rejected_as_listed():
  def f(w, x):
    return jax.lax.scan(lambda h, _: (stage(0)(lambda w, h: jnp.tanh(h @ w))(w, h), None),
                        x, None, length=2)[0]
  with pytest.raises(mpmd.PartitionError,
                     match="named ops nested in other ops are not supported yet: move "
                           "'mpmd.named_computation' to the top level"):
    mpmd.jit(f, mpmd.make_config(TOPOLOGY, {"stage0": "m0"})).lower(W0, X)


# --- jax.checkpoint policies -----------------------------------------------------------------


@pytest.mark.parametrize("policy", [
    None, jax.checkpoint_policies.dots_saveable, jax.checkpoint_policies.nothing_saveable,
    jax.checkpoint_policies.save_only_these_names("h1"),
], ids=["default", "dots_saveable", "nothing_saveable", "save_only_these_names"])
def test_checkpoint_policies_inside_and_around_stages(policy):
  def block(w, x):
    h = jnp.tanh(x @ w)
    h = checkpoint_name(h, "h1")
    return jnp.sin(h @ w.T @ w)

  inside = _two_stage_grad(jax.checkpoint(block, policy=policy),
                           lambda w, h: jnp.mean((h @ w) ** 2))
  check(inside, [W0, W1], X)

  def loss(ws, x, prevent_cse=True):  # a whole stage under jax.checkpoint
    h = jax.checkpoint(stage(0)(block), policy=policy, prevent_cse=prevent_cse)(ws[0], x)
    return stage(1)(lambda w, h: jnp.mean((h @ w) ** 2))(ws[1], h)
  # (With a policy that saves residuals, JAX's barrier (prevent_cse) holds
  # the stage's residuals and the cotangent from the next mesh together.)
  check(jax.value_and_grad(loss), [W0, W1], X)
  check(jax.value_and_grad(functools.partial(loss, prevent_cse=False)), [W0, W1], X)


# --- Dtypes ------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
def test_low_precision_params_and_activations_cross_meshes(dtype):
  ws = _weights((16, 16), (16, 4), dtype=dtype)
  step = _two_stage_grad(lambda w, x: jax.nn.gelu(x.astype(w.dtype) @ w),
                         lambda w, h: jnp.mean((h @ w).astype(jnp.float32) ** 2))
  loss, new_ws = check(step, ws, X, rtol=2e-2, atol=2e-2)
  assert all(w.dtype == dtype for w in new_ws)


def test_int8_weights_and_integer_activations_cross_meshes():
  q = jnp.round(W0 * 64).astype(jnp.int8)

  def f(q, scale, w1, x):
    def s0(q, scale, x):
      h = x @ (q.astype(jnp.float32) * scale)
      return h, jnp.argmax(h, axis=-1).astype(jnp.int8)   # an int8 activation
    h, idx = stage(0)(s0)(q, scale, x)
    def s1(w, h, idx):
      return jnp.mean(h @ w) + jnp.sum(idx.astype(jnp.int32)), idx.astype(jnp.int32) * 2
    return stage(1)(s1)(w1, h, idx)

  check(f, q, jnp.float32(1 / 64), W1, X)
  # Gradients for the float inputs only, as under jax.jit.
  check(jax.grad(lambda scale, q, w1, x: f(q, scale, w1, x)[0]), jnp.float32(1 / 64), q, W1, X)


# --- Pytrees ----------------------------------------------------------------------------------


@functools.partial(jax.tree_util.register_dataclass, data_fields=["w", "b"], meta_fields=["act"])
@dataclasses.dataclass
class _Layer:
  w: jax.Array
  b: jax.Array | None
  act: str = "tanh"


class _Activations(NamedTuple):
  h: jax.Array
  aux: jax.Array | None


def test_pytrees_of_dataclasses_namedtuples_and_none_leaves():
  params = {"l0": _Layer(W0, jnp.zeros(16)), "l1": _Layer(W1, None, act="id"),
            "unused": None}

  def apply(layer, x):
    y = x @ layer.w + (0 if layer.b is None else layer.b)
    return jnp.tanh(y) if layer.act == "tanh" else y

  def loss(params, x):
    acts = stage(0)(lambda l, x: _Activations(apply(l, x), None))(params["l0"], x)
    out = stage(1)(lambda l, a: _Activations(apply(l, a.h), jnp.sum(a.h)))(params["l1"], acts)
    return jnp.mean(out.h ** 2) + 0.0 * out.aux, out

  def step(params, x):
    (value, out), grads = jax.value_and_grad(loss, has_aux=True)(params, x)
    return value, out, jax.tree.map(lambda p, g: p - 0.1 * g, params, grads)

  value, out, new = check(step, params, X)
  assert isinstance(out, _Activations) and isinstance(new["l1"], _Layer)
  assert new["l1"].b is None and new["unused"] is None


# --- Donation ---------------------------------------------------------------------------------


def test_donated_params_are_consumed_and_results_equal():
  step = _two_stage_grad(lambda w, x: jnp.tanh(x @ w), lambda w, h: jnp.mean((h @ w) ** 2))
  jitted = mpmd.jit(step, _config(), donate_argnums=0)
  # Arguments not on their mesh yet (here on the default device) are copied
  # there and the copies donated: the caller's arrays stay (as listed).
  ws = [jnp.array(W0), jnp.array(W1)]
  got = jitted(ws, X)
  jax.tree.map(functools.partial(_leaf_close, rtol=1e-5, atol=1e-6), got,
               jax.jit(step)([W0, W1], X))
  assert not any(w.is_deleted() for w in ws)
  # Arguments on their meshes (what the previous step returned) are donated,
  # as under jax.jit.
  placed = got[1]
  want = jax.jit(step)(jax.device_get(placed), X)
  got = jitted(placed, X)
  jax.tree.map(functools.partial(_leaf_close, rtol=1e-5, atol=1e-6), got, want)
  assert all(w.is_deleted() for w in placed)
  assert not X.is_deleted()


# --- shard_map inside a stage ---------------------------------------------------------------------


def test_shard_map_inside_a_stage_over_its_mesh():
  def s0(w, x):
    def local(w, x):  # each device its rows; a psum for the batch mean
      h = jnp.tanh(x @ w)
      return h, jax.lax.psum(jnp.sum(h), "x") / 8
    sharded = jax.shard_map(local, mesh=TOPOLOGY["m0"], in_specs=(P(), P("x")),
                            out_specs=(P("x"), P()))
    h, mean = sharded(w, x)
    return h - mean

  check(_two_stage_grad(s0, lambda w, h: jnp.mean((h @ w) ** 2)), [W0, W1], X)


# --- Host callbacks -------------------------------------------------------------------------


def test_debug_print_and_callbacks_inside_stages(capfd):
  def s0(w, x):
    h = jnp.tanh(x @ w)
    jax.debug.print("stage0 sum {s}", s=jnp.sum(h))
    return h + jax.pure_callback(lambda a: np.asarray(a * 0 + 1, np.float32),
                                 jax.ShapeDtypeStruct(h.shape, h.dtype), h)

  def f(w0, w1, x):
    h = stage(0)(s0)(w0, x)
    return stage(1)(lambda w, h: jnp.mean(h @ w))(w1, h)

  expected = float(jnp.sum(jnp.tanh(X @ W0)))
  check(f, W0, W1, X)
  printed = capfd.readouterr().out
  sums = [float(line.split()[-1]) for line in printed.splitlines() if line.startswith("stage0 sum")]
  assert len(sums) == 2, printed  # once by jax.jit, once by mpmd.jit
  np.testing.assert_allclose(sums, [expected] * 2, rtol=1e-5)


def test_ordered_effects_are_rejected_as_listed():
  def f(w0, w1, x):
    def s0(w, x):
      jax.debug.print("{}", jnp.sum(x), ordered=True)
      return x @ w
    h = stage(0)(s0)(w0, x)
    return stage(1)(lambda w, h: jnp.mean(h @ w))(w1, h)
  with pytest.raises(NotImplementedError,
                     match=r"do not support ordered effects \(e.g. jax.debug.print\(ordered=True\)\)"):
    mpmd.jit(f, _config())(W0, W1, X)


# --- flax modules inside stages -------------------------------------------------------------------


class _MLP(nn.Module):
  @nn.compact
  def __call__(self, x):
    return nn.Dense(4)(nn.relu(nn.Dense(16)(x)))


def test_flax_linen_modules_as_stages():
  enc, dec = nn.Dense(16), _MLP()
  params = {"enc": enc.init(jax.random.key(0), X), "dec": dec.init(jax.random.key(1), X)}

  def loss(params, x):
    h = stage(0)(lambda p, x: jnp.tanh(enc.apply(p, x)))(params["enc"], x)
    return stage(1)(lambda p, h: jnp.mean(dec.apply(p, h) ** 2))(params["dec"], h)

  check(jax.value_and_grad(loss), params, X)


def test_flax_nnx_modules_as_stages():
  rngs = nnx.Rngs(0)
  enc_def, enc_state = nnx.split(nnx.Linear(16, 16, rngs=rngs))
  dec_def, dec_state = nnx.split(nnx.Sequential(nnx.Linear(16, 8, rngs=rngs), nnx.relu,
                                                nnx.Linear(8, 4, rngs=rngs)))

  def loss(states, x):
    h = stage(0)(lambda s, x: jnp.tanh(nnx.merge(enc_def, s)(x)))(states[0], x)
    return stage(1)(lambda s, h: jnp.mean(nnx.merge(dec_def, s)(h) ** 2))(states[1], h)

  check(jax.value_and_grad(loss), (enc_state, dec_state), X)


# --- optax -----------------------------------------------------------------------------------------


def _mlp_params():
  return {"stage0": {"w": W0, "b": jnp.zeros(16)}, "stage1": {"w": W1, "b": jnp.zeros(4)}}


def _mlp_loss(params, x):
  h = stage(0)(lambda p, x: jnp.tanh(x @ p["w"] + p["b"]))(params["stage0"], x)
  return stage(1)(lambda p, h: jnp.mean((h @ p["w"] + p["b"]) ** 2))(params["stage1"], h)


def _optax_step(tx):
  def step(params, opt_state, x):
    value, grads = jax.value_and_grad(_mlp_loss)(params, x)
    updates, opt_state = tx.update(grads, opt_state, params)
    return value, optax.apply_updates(params, updates), opt_state
  return step


def _decay_mask(params):
  return jax.tree_util.tree_map_with_path(lambda path, _: path[-1].key == "w", params)


@pytest.mark.parametrize("name", ["adamw_masked", "multi_transform", "masked_chain"])
def test_optax_chains_with_masks_and_multi_transform(name):
  params = _mlp_params()
  tx = {
      "adamw_masked": optax.adamw(1e-2, weight_decay=0.1, mask=_decay_mask),
      "multi_transform": optax.multi_transform(
          {"fast": optax.adam(1e-2), "slow": optax.sgd(1e-3, momentum=0.9)},
          {"stage0": "fast", "stage1": "slow"}),
      "masked_chain": optax.chain(optax.masked(optax.add_decayed_weights(0.1), _decay_mask),
                                  optax.scale_by_adam(), optax.scale(-1e-2)),
  }[name]
  step = _optax_step(tx)
  state = ref = (params, tx.init(params))
  jitted = mpmd.jit(step, _config())
  for _ in range(3):
    out, ref_out = jitted(*state, X), jax.jit(step)(*ref, X)
    jax.tree.map(functools.partial(_leaf_close, rtol=1e-5, atol=1e-6), out, ref_out)
    state, ref = out[1:], ref_out[1:]


def test_global_norm_clipping_across_meshes_needs_cross_mesh_reductions_as_listed():
  """`clip_by_global_norm`: the norm is a sum over every mesh's gradients
  that every mesh then reads; the error names the option."""
  tx = optax.chain(optax.clip_by_global_norm(0.1), optax.adam(1e-2))
  params = _mlp_params()
  step = _optax_step(tx)
  with pytest.raises(mpmd.PartitionError, match="it sums values from meshes .* set the "
                     "partitioning option mpmd_infer_cross_mesh_reductions"):
    mpmd.jit(step, _config()).lower(params, tx.init(params), X)
  # Adam after the clip squares each clipped gradient (x * x of a value
  # computed from both meshes): equal to jax.jit over several steps.
  for options in ({"mpmd_infer_cross_mesh_reductions": True}, {"mpmd_infer_transfers": True}):
    state = ref = (params, tx.init(params))
    jitted = mpmd.jit(step, _config(**options))
    for _ in range(3):
      out, ref_out = jitted(*state, X), jax.jit(step)(*ref, X)
      jax.tree.map(functools.partial(_leaf_close, rtol=1e-5, atol=1e-6), out, ref_out)
      state, ref = out[1:], ref_out[1:]
