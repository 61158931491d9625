"""Results of `mpmd_jit_with_loop` / `mpmd_jit_by_yield` are `MpmdArray`s that
feed back into the next step; `in_shardings` / `out_shardings` are
`MpmdSharding`s."""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from mpmd import jaxpp

M = 4


def _mesh() -> jaxpp.MpmdMesh:
  devices = np.array(jax.devices()[:4]).reshape(2, 2)
  return jaxpp.MpmdMesh(jax.sharding.Mesh(devices, ("stage", "data")), "stage")


def _loss(params, x, y, rng):
  h = x
  for k, w in enumerate(params):
    h = jnp.tanh(h @ w)
    keep = jax.random.bernoulli(jax.random.fold_in(rng, k), 0.5, h.shape)  # dropout
    h = jaxpp.mark_stage_end(jnp.where(keep, h / 0.5, 0.0))
  return jnp.mean((h - y) ** 2)


def _step(state, xs, ys, unused):
  del unused
  rng = jax.random.fold_in(state["key"], state["step"])
  losses, grads = jaxpp.treduce(
      lambda b: jax.value_and_grad(_loss)(state["params"], b[0], b[1], rng), (xs, ys),
      schedule=jaxpp.Std1F1B(2))
  params = [w - 0.1 * g / M for w, g in zip(state["params"], grads)]
  return {"params": params, "key": state["key"], "step": state["step"] + 1}, losses.mean()


def _state():
  keys = jax.random.split(jax.random.key(0), 2)
  return {"params": [jax.random.normal(k, (8, 8)) * 0.3 for k in keys],
          "key": jax.random.key(7), "step": jnp.int32(0)}


def _batches():
  return (jax.random.normal(jax.random.key(1), (M, 2, 8)),
          jax.random.normal(jax.random.key(2), (M, 2, 8)))


def test_training_loop_with_a_typed_key_feeds_mpmd_arrays_back():
  mesh = _mesh()
  xs, ys = _batches()
  train = jaxpp.mpmd_jit_with_loop(_step, mesh)
  state, ref_state = _state(), _state()
  for _ in range(3):
    state, loss = train(state, xs, ys, jnp.zeros(3))
    ref_state, ref_loss = jax.jit(_step)(ref_state, xs, ys, jnp.zeros(3))
    assert isinstance(loss, jaxpp.MpmdArray) and loss.shape == ()
    assert f"{loss:.4f}" == f"{float(ref_loss):.4f}"
    np.testing.assert_allclose(float(loss), float(ref_loss), rtol=1e-5)
  assert len(train._cache) == 1  # fed-back MpmdArrays hit the compiled program
  for k, (w, ref) in enumerate(zip(state["params"], ref_state["params"])):
    assert isinstance(w, jaxpp.MpmdArray) and mesh.mpmd_idx_of(w) == k
    np.testing.assert_allclose(np.asarray(w.to_mpmd_local_array), ref, rtol=1e-5, atol=1e-6)
  key = state["key"]
  assert isinstance(key, jaxpp.MpmdArray)
  assert jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key)
  np.testing.assert_array_equal(jax.random.key_data(key.to_mpmd_local_array),
                                jax.random.key_data(ref_state["key"]))
  assert int(state["step"]) == 3
  jax.block_until_ready(state)  # MpmdArray.block_until_ready on every leaf


def test_in_and_out_shardings_are_mpmd_shardings():
  mesh = _mesh()
  xs, ys = _batches()
  compiled = jaxpp.mpmd_jit_with_loop(_step, mesh).compile(_state(), xs, ys, jnp.zeros(3))
  (state_s, xs_s, _, unused_s), kwargs_s = compiled.in_shardings
  assert kwargs_s == {}
  for k, s in enumerate(state_s["params"]):
    assert isinstance(s, jaxpp.MpmdSharding) and s.mesh_ids == {k}
  assert xs_s.mesh_ids <= {0, 1} and xs_s.is_used
  assert unused_s == jaxpp.MpmdSharding(mesh, set(), P())  # not read by the program
  out_state_s, loss_s = compiled.out_shardings
  assert [s.mesh_ids for s in out_state_s["params"]] == [{0}, {1}]
  assert isinstance(loss_s, jaxpp.MpmdSharding) and len(loss_s.mesh_ids) == 1


def test_replicated_input_is_read_on_the_group_that_needs_it():
  mesh = _mesh()
  xs, ys = _batches()
  fn = jaxpp.mpmd_jit_with_loop(_step, mesh, donate_argnums=0)
  compiled = fn.compile(_state(), xs, ys, jnp.zeros(3))
  w1 = _state()["params"][1]
  both = jaxpp.spmd_to_mpmd_reshard(mesh, w1, jaxpp.MpmdSharding(mesh, {0, 1}, P()))
  state = dict(_state(), params=[_state()["params"][0], both])
  new_state, loss = compiled(state, xs, ys, jnp.zeros(3))
  copies = both.local_arrays()
  # Stage 1's weight is read (and donated) on group 1; group 0's copy is untouched.
  assert copies[1].is_deleted() and not copies[0].is_deleted()
  _, ref_loss = jax.jit(_step)(_state(), xs, ys, jnp.zeros(3))
  np.testing.assert_allclose(float(loss), float(ref_loss), rtol=1e-5)
  assert mesh.mpmd_idx_of(new_state["params"][1]) == 1


def test_mpmd_jit_by_yield_returns_mpmd_arrays():
  mesh = _mesh()

  def infer(params, x):
    for w in params:
      x = jaxpp.mark_stage_end(jnp.tanh(x @ w))
    return x

  params = _state()["params"]
  x = _batches()[0][0]
  out = jaxpp.mpmd_jit_by_yield(infer, mesh)(params, x)
  assert isinstance(out, jaxpp.MpmdArray) and out.mpmd_idxs == {1}
  np.testing.assert_allclose(np.asarray(out), jax.jit(infer)(params, x), rtol=1e-5)
  again = jaxpp.mpmd_jit_by_yield(partial(infer), mesh)(params, out)  # fed back
  np.testing.assert_allclose(np.asarray(again), jax.jit(infer)(params, np.asarray(out)),
                             rtol=1e-5)


def test_mpmd_array_keyword_argument_is_rejected():
  fn = jaxpp.mpmd_jit_by_yield(lambda x: jaxpp.mark_stage_end(x * 2.0), _mesh())
  out = fn(jnp.ones(2))
  with pytest.raises(TypeError, match="pass MpmdArrays as positional arguments"):
    fn.compile(out)(out, y=out)


def _clipped_step(ws, xs, ys):
  """A global gradient norm over every stage's gradient clips every update."""

  def loss(ws, x, y):
    for w in ws:
      x = jaxpp.mark_stage_end(jnp.tanh(x @ w))
    return jnp.mean((x - y) ** 2)

  losses, grads = jaxpp.treduce(lambda b: jax.value_and_grad(loss)(ws, *b), (xs, ys),
                                schedule=jaxpp.Std1F1B(2))
  squares = [jnp.sum(g ** 2) for g in grads]  # stage k's on group k
  norm = jnp.sqrt(jaxpp.cross_mpmd_all_reduce(*squares))
  scale = jnp.minimum(1.0, 0.01 / norm)
  return [w - 0.1 * scale * g for w, g in zip(ws, grads)], norm, jaxpp.cross_mpmd_stack(squares)


def test_cross_mpmd_all_reduce_and_stack_combine_values_of_every_group():
  mesh = _mesh()
  ws = [jnp.eye(8) * 0.7, jnp.eye(8) * 0.3]
  xs, _ = _batches()
  ys = jnp.zeros_like(xs)
  compiled = jaxpp.mpmd_jit_with_loop(_clipped_step, mesh).compile(ws, xs, ys)
  new_ws, norm, squares = compiled(ws, xs, ys)
  ref_ws, ref_norm, ref_squares = jax.jit(_clipped_step)(ws, xs, ys)
  np.testing.assert_allclose(float(norm), float(ref_norm), rtol=1e-5)
  np.testing.assert_allclose(np.asarray(squares), ref_squares, rtol=1e-5)
  assert squares.shape == (2,)
  for k, (w, ref) in enumerate(zip(new_ws, ref_ws)):
    assert mesh.mpmd_idx_of(w) == k  # each stage's update stays on its group
    np.testing.assert_allclose(np.asarray(w), ref, rtol=1e-5, atol=1e-7)
  # The norm's operands cross between the groups.
  assert any(not hasattr(i, "fragment") for i in compiled.instructions)


def test_cross_mpmd_operands_must_be_alike():
  with pytest.raises(ValueError, match="at least one array"):
    jaxpp.cross_mpmd_all_reduce()
  with pytest.raises(ValueError, match=r"shape and dtype of the first \(float32\[2\]\); array 1 is "
                                       r"int32\[2\]"):
    jaxpp.cross_mpmd_all_reduce(jnp.ones(2), jnp.ones(2, jnp.int32))
  with pytest.raises(ValueError, match=r"cross_mpmd_stack: .* array 2 is float32\[3\]"):
    jaxpp.cross_mpmd_stack([jnp.ones(2), jnp.ones(2), jnp.ones(3)])
  np.testing.assert_array_equal(jaxpp.cross_mpmd_stack([jnp.ones(2), jnp.zeros(2)], axis=-1),
                                [[1, 0], [1, 0]])


@pytest.mark.parametrize("schedule", [jaxpp.Std1F1B(2), jaxpp.ZeroBubble(2)],
                         ids=lambda s: type(s).__name__)
def test_collect_task_times_ms_names_the_tasks(schedule):
  mesh = _mesh()

  def loss(ws, x, y):
    for w in ws:
      x = jaxpp.mark_stage_end(jnp.tanh(x @ w))
    return jnp.mean((x - y) ** 2)

  def step(ws, xs, ys):
    return jaxpp.treduce(lambda b: jax.value_and_grad(loss)(ws, *b), (xs, ys),
                         schedule=schedule)

  ws = [jnp.eye(8) * 0.7, jnp.eye(8) * 0.3]
  xs, ys = _batches()
  fn = jaxpp.mpmd_jit_with_loop(step, mesh)
  with jaxpp.collect_task_times_ms(enabled=False) as untimed:
    fn(ws, xs, ys)
  assert untimed == {}
  with jaxpp.collect_task_times_ms() as times:
    for _ in range(2):
      losses, grads = fn(ws, xs, ys)
  assert isinstance(losses, jaxpp.MpmdArray)
  np.testing.assert_allclose(np.asarray(losses), jax.jit(step)(ws, xs, ys)[0], rtol=1e-5)
  tasks = {str(t) for row in schedule.tasks(M) for t in row if t is not None}
  # Every task of the schedule ran once per step (a forward merged with the
  # backward after it counts as one fused task).
  ran = set()
  for name, ms in times.items():
    assert len(ms) == 2 and all(t >= 0 for t in ms), (name, ms)
    if name.startswith("FusedTask("):
      ran.update(name[len("FusedTask("):-1].split(", "))
    elif "__" in name:
      ran.add(name)
  flat = set()
  for t in tasks:
    flat.update(t[len("FusedTask("):-1].split(", ") if t.startswith("FusedTask(") else [t])
  assert ran == flat, (sorted(ran ^ flat))
  fn(ws, xs, ys)  # after the context: not collected
  assert len(times["fwd_0__0"]) == 2
