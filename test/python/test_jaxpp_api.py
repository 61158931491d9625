"""`mpmd.jaxpp`: JaxPP's programming model (stage markers, treduce, MpmdMesh,
mpmd_jit_with_loop / mpmd_jit_by_yield, schedule objects) on mpmd."""

from __future__ import annotations

import importlib.util
import pathlib
import sys
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from mpmd import jaxpp
from mpmd.schedule import task_lists as sched_task_lists

api = jaxpp.api
RTOL, ATOL = 1e-5, 1e-6
EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"

API_NAMES = [
    "pipeline_enter_stage", "mark_stage_end", "treduce", "treduce_i", "Add", "Max", "Concat",
    "mpmd_jit_with_loop", "mpmd_jit_by_yield", "MpmdMesh", "Std1F1B", "Eager1F1B", "GPipe",
    "Interleaved1F1B", "ZeroBubble", "KimiK2", "DualPipeV", "BaseSchedule", "Task", "FusedTask",
]


def test_api_surface():
  for name in API_NAMES:
    assert hasattr(api, name), name
    assert getattr(jaxpp, name) is getattr(api, name), name
  assert api.Std1F1B is sched_task_lists.Std1F1B


def test_tutorial_task_lists_through_the_api():
  tasks = api.Interleaved1F1B(num_stages=4, mpmd_dim=4).tasks(4)
  assert [str(t) for t in tasks[2]] == [
      "fwd_2__0", "fwd_2__1", "fwd_2__2", "bwd_2__0", "fwd_2__3", "bwd_2__1", "bwd_2__2",
      "bwd_2__3"]
  assert [str(t) for t in tasks[3]] == [f"FusedTask(fwd_3__{i}, bwd_3__{i})" for i in range(4)]
  tasks = api.Interleaved1F1B(num_stages=8, mpmd_dim=4).tasks(4)
  assert [str(t) for t in tasks[3]] == (
      [f"fwd_3__{i}" for i in range(4)] + [f"FusedTask(fwd_7__{i}, bwd_7__{i})" for i in range(4)]
      + [f"bwd_3__{i}" for i in range(4)])


# ---------------------------------------------------------------------------
# Markers
# ---------------------------------------------------------------------------


def _marked(x):
  h = api.mark_stage_end(jnp.sin(x))
  h = api.pipeline_enter_stage({"a": h * 2.0, "b": h})
  return jnp.sum(h["a"] * h["b"])


def test_markers_are_identities_under_jit_grad_and_vmap():
  x = jnp.linspace(0.0, 1.0, 6).reshape(2, 3)
  plain = lambda x: jnp.sum(2.0 * jnp.sin(x) ** 2)  # noqa: E731
  np.testing.assert_allclose(jax.jit(_marked)(x), plain(x), rtol=RTOL)
  np.testing.assert_allclose(jax.jit(jax.grad(_marked))(x), jax.grad(plain)(x), rtol=RTOL)
  np.testing.assert_allclose(jax.vmap(jax.grad(_marked))(x), jax.vmap(jax.grad(plain))(x),
                             rtol=RTOL)
  # Reverse over reverse transposes the backward markers again.
  second = lambda f: jax.grad(lambda x: jnp.sum(jnp.cos(jax.grad(f)(x))))  # noqa: E731
  np.testing.assert_allclose(jax.jit(second(_marked))(x), second(plain)(x), rtol=1e-4, atol=1e-6)


def test_transpose_of_a_marker_is_a_marker_of_the_same_stage():
  from mpmd.jaxpp import markers

  def f(x):
    with markers.stage_scope():
      return _marked(x)

  eqns = jax.make_jaxpr(jax.grad(f))(jnp.ones((2, 3))).eqns
  found = [(e.params["stage"], e.params["backward"]) for e in eqns
           if e.primitive is markers.marker_p]
  assert found == [(0, False), (1, False), (1, True), (0, True)]
  # Outside a treduce body (or mpmd_jit_by_yield) markers carry no stage.
  eqns = jax.make_jaxpr(_marked)(jnp.ones((2, 3))).eqns
  assert [e.params["stage"] for e in eqns if e.primitive is markers.marker_p] == [None, None]


def test_marker_needs_an_array():
  with pytest.raises(ValueError, match="at least one array"):
    api.mark_stage_end({})


# ---------------------------------------------------------------------------
# treduce under plain jax.jit
# ---------------------------------------------------------------------------


def test_treduce_is_an_accumulation_loop_under_jax_jit():
  xs = jax.random.normal(jax.random.key(0), (5, 3))
  ys = jnp.arange(5.0)

  def f(xs, ys):
    return api.treduce(lambda b: (b[0] * b[1], jnp.max(b[0]), b[0].sum()), (xs, ys),
                       operation=(api.Add, api.Max(), api.Concat()))

  total, largest, stacked = jax.jit(f)(xs, ys)
  np.testing.assert_allclose(total, (xs * ys[:, None]).sum(0), rtol=RTOL)
  np.testing.assert_allclose(largest, jnp.max(xs), rtol=RTOL)
  np.testing.assert_allclose(stacked, xs.sum(1), rtol=RTOL)
  eager = f(xs, ys)
  for a, b in zip(eager, (total, largest, stacked)):
    np.testing.assert_allclose(a, b, rtol=RTOL)
  assert "stablehlo.while" in jax.jit(f).lower(xs, ys).as_text()
  # axis=1, and the default (Concat(), Add) over value_and_grad's output.
  loss = lambda w, x: jnp.sum(jnp.tanh(x @ w))  # noqa: E731
  w = jnp.ones((3, 2)) * 0.1
  losses, grad = jax.jit(lambda w, xs: api.treduce(
      lambda x: jax.value_and_grad(loss)(w, x), xs, axis=1))(w, xs[None])
  np.testing.assert_allclose(losses, [loss(w, xs[i][None]) for i in range(5)], rtol=RTOL)
  np.testing.assert_allclose(grad, sum(jax.grad(loss)(w, xs[i][None]) for i in range(5)),
                             rtol=RTOL)


def test_treduce_over_a_negative_axis_of_leaves_of_different_ranks():
  a = jnp.arange(12.0).reshape(3, 4)
  b = jnp.arange(24.0).reshape(2, 3, 4)
  got = jax.jit(lambda a, b: api.treduce(lambda t: (t[0], t[1]), (a, b), axis=-1,
                                         operation=(api.Concat(), api.Add)))(a, b)
  np.testing.assert_array_equal(got[0], a.T)
  np.testing.assert_array_equal(got[1], b.sum(-1))


def test_treduce_i_passes_the_index():
  out = jax.jit(lambda: api.treduce_i(lambda i: (i * 2, i.astype(jnp.float32)), 4,
                                      operation=(api.Concat(), api.Max)))()
  np.testing.assert_array_equal(out[0], [0, 2, 4, 6])
  assert float(out[1]) == 3.0


def test_treduce_bad_inputs():
  with pytest.raises(ValueError, match=r"same length along axis 0.*xs\[0\]: 4, xs\[1\]: 3"):
    api.treduce(lambda b: b[0].sum(), (jnp.ones((4, 2)), jnp.ones((3, 2))), operation=api.Add)
  with pytest.raises(ValueError, match="not a pytree prefix"):
    api.treduce(lambda x: x.sum(), jnp.ones((4, 2)), operation=(api.Add, api.Add))
  with pytest.raises(TypeError, match="operation must be Add, Max, Concat"):
    api.treduce(lambda x: x.sum(), jnp.ones((4, 2)), operation="sum")
  with pytest.raises(ValueError, match="no axis 2"):
    api.treduce(lambda x: x.sum(), jnp.ones((4, 2)), axis=2, operation=api.Add)
  with pytest.raises(NotImplementedError, match="compute the gradient inside its body"):
    jax.grad(lambda w: api.treduce(lambda x: (x * w).sum(), jnp.ones((4, 2)),
                                   operation=api.Add))(1.0)


# ---------------------------------------------------------------------------
# mpmd_jit_with_loop
# ---------------------------------------------------------------------------

M = 4


def _mesh(mpmd_dim: int) -> api.MpmdMesh:
  devices = np.array(jax.devices()).reshape(mpmd_dim, -1)
  return api.MpmdMesh(jax.sharding.Mesh(devices, ("stage", "data")), "stage")


def _mlp(num_stages: int, width: int = 8):
  keys = jax.random.split(jax.random.key(0), num_stages)
  return [{"w": jax.random.normal(k, (width, width)) / np.sqrt(width),
           "b": jnp.full((width,), 0.01 * (s + 1))} for s, k in enumerate(keys)]


def _layer(p, h):
  return api.pipeline_enter_stage(jnp.tanh(h @ p["w"] + p["b"]))


def _loss(params, x, y):
  h = x
  for k, p in enumerate(params):
    # Odd stages mark their end inside a nested jax.jit (inlined by the splitter).
    h = (jax.jit(_layer) if k % 2 else _layer)(p, h)
  return jnp.mean((h - y) ** 2)


def _step(params, xs, ys, schedule):
  losses, grads = api.treduce(lambda b: jax.value_and_grad(_loss)(params, *b), (xs, ys),
                              schedule=schedule)
  return losses, jax.tree.map(lambda p, g: p - 0.1 * g / M, params, grads)


def _batches(width: int = 8):
  return (jax.random.normal(jax.random.key(1), (M, 2, width)),
          jax.random.normal(jax.random.key(2), (M, 2, width)))


def _assert_close(got, want):
  for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=RTOL, atol=ATOL)


def _unit(task_unit, mesh: int) -> str:
  return f"{task_unit.kind}{task_unit.microbatch}" + (
      f".s{task_unit.stage}" if task_unit.stage != mesh else "")


# Two groups keep the number of programs to compile small; the tutorial test
# runs four.
SCHEDULES = [
    (api.Std1F1B(2), 2), (api.Eager1F1B(2), 2), (api.GPipe(2), 2), (api.ZeroBubble(2), 2),
    (api.Interleaved1F1B(num_stages=4, mpmd_dim=2), 2), (api.KimiK2(num_stages=4, mpmd_dim=2), 2),
    (api.DualPipeV(num_stages=4, mpmd_dim=2), 2),
]


@pytest.mark.parametrize("schedule,mpmd_dim", SCHEDULES, ids=lambda s: type(s).__name__)
def test_schedule_matches_jax_jit_and_runs_its_tasks_in_order(schedule, mpmd_dim):
  mesh = _mesh(mpmd_dim)
  params = _mlp(schedule.num_stages)
  xs, ys = _batches()
  step = partial(_step, schedule=schedule)
  compiled = api.mpmd_jit_with_loop(step, mesh).compile(params, xs, ys)
  ref_params = params
  for _ in range(2):
    losses, params = compiled(params, xs, ys)
    ref_losses, ref_params = jax.jit(step)(ref_params, xs, ys)
    _assert_close((losses, params), (ref_losses, ref_params))
  # Each group runs its task list in order; a FusedTask is one program (which
  # keeps the unit of its last part when it fuses one unit's B and W).
  tasks = schedule.tasks(M)
  split = schedule.is_partial_bwd
  for m in range(mpmd_dim):
    expected = []
    for entry in tasks[m]:
      if isinstance(entry, api.FusedTask):
        units = [_unit(u, m) for t in entry for u in t.units(split)]
        origins = sorted({f"stage_{t.stage}" + ("(1)" if t.kind.name != "FWD" else "")
                          for t in entry})
        expected.append((units[-1], origins))
      elif entry is not None:
        expected += [(_unit(u, m), None) for u in entry.units(split)]
    # A forward merged with the backward right after it (`F3+B3`) runs both.
    ran = [(unit, sorted(set(i.origins))) for i in compiled.instructions
           if hasattr(i, "fragment") and i.mesh == mesh.mesh_name(m) and (i.unit or i.origins)
           for unit in i.unit.split("+")]
    assert len(ran) == len(expected), (m, ran, expected)
    for (unit, origins), (want_unit, want_origins) in zip(ran, expected):
      assert unit == want_unit or (not unit and origins == want_origins), (m, ran, expected)
  # Stage k's parameters live (and are updated) on the group the schedule gives it.
  for k, p in enumerate(params):
    assert mesh.mpmd_idx_of(p["w"]) == schedule.get_mpmd_idx(k)
    assert isinstance(p["w"], api.MpmdArray) and p["w"].mpmd_idxs == {schedule.get_mpmd_idx(k)}
    assert isinstance(p["w"].to_mpmd_local_array, jax.Array)


def test_named_computations_and_microbatch_calls_in_the_program():
  schedule = api.Std1F1B(2)
  fn = api.mpmd_jit_with_loop(partial(_step, schedule=schedule), _mesh(2))
  params, (xs, ys) = _mlp(2), _batches()
  text = fn.lower(params, xs, ys).as_text("stablehlo")
  for k in range(2):
    assert f'mpmd.named_computation<"stage_{k}">' in text, k  # forward
    assert f'mpmd.named_computation<"stage_{k}"(1)>' in text, k  # backward
  for i in range(M):
    assert f"call_counter = {i} : ui32" in text
  compiled = fn.compile(params, xs, ys)
  assert jax.tree.structure(compiled.in_shardings) == jax.tree.structure(((params, xs, ys), {}))
  origins = {o for i in compiled.instructions for o in getattr(i, "origins", ())}
  assert {"stage_0", "stage_1(1)"} <= origins, origins
  # Called directly, the function compiles once per signature and runs.
  losses, _ = fn(params, xs, ys)
  np.testing.assert_allclose(losses, jax.jit(partial(_step, schedule=schedule))(
      params, xs, ys)[0], rtol=RTOL)


def test_specs_and_donation_are_passed_to_mpmd_jit():
  schedule = api.Std1F1B(2)
  mesh = _mesh(2)  # two groups of 4 devices along "data"
  params, (xs, ys) = _mlp(2), _batches()
  specs = jax.tree.map(lambda _: P("data"), params)
  fn = api.mpmd_jit_with_loop(partial(_step, schedule=schedule), mesh,
                              in_specs=(specs, P(), P()), out_specs=(P(), specs),
                              donate_argnums=0)
  compiled = fn.compile(params, xs, ys)
  shardings = compiled.in_shardings[0][0]
  assert shardings[1]["w"] == api.MpmdSharding(mesh, {1}, P("data"))
  placed = api.spmd_to_mpmd_reshard(mesh, params, shardings)
  assert placed[1]["w"].sharding.spec == P("data")
  assert placed[1]["w"].to_mpmd_local_array.sharding.mesh == mesh.unstack[1]
  assert mesh.mpmd_idx_of(placed[1]["w"]) == 1
  losses, new_params = compiled(placed, xs, ys)
  assert placed[0]["w"].is_deleted()  # donated
  for k, p in enumerate(new_params):
    assert p["w"].sharding.spec == P("data") and mesh.mpmd_idx_of(p["w"]) == k
  ref_losses, ref_params = jax.jit(partial(_step, schedule=schedule))(params, xs, ys)
  _assert_close((losses, new_params), (ref_losses, ref_params))
  # JaxPP's spelling: NamedShardings over the whole mesh contribute their specs.
  whole = jax.sharding.NamedSharding(mesh.jax_mesh, P("data"))
  fn = api.mpmd_jit_with_loop(partial(_step, schedule=schedule), mesh,
                              in_shardings=(jax.tree.map(lambda _: whole, params), None, None))
  assert fn.in_specs[0] == specs
  with pytest.raises(ValueError, match="in_shardings or in_specs, not both"):
    api.mpmd_jit_with_loop(_step, mesh, in_shardings=P(), in_specs=P())


def test_readme_style_step_with_aux_outputs_and_default_operation():
  """JaxPP's README step: decorator form, has_aux (with a Python int), the
  default (Concat(), Add), optax, a (2, 1, 4) mesh."""
  import optax
  devices = np.array(jax.devices()).reshape(2, 1, 4)
  mesh = jaxpp.MpmdMesh(jax.sharding.Mesh(devices, ("mpmd", "data", "model")), "mpmd")
  optimizer = optax.adam(1e-2)

  def loss_fn(pars, batch):
    res = batch
    for w in pars:
      res = jaxpp.pipeline_enter_stage(jnp.tanh(res @ w))
    return jnp.mean((res - batch) ** 2) / M, (res, 4)

  @partial(jaxpp.mpmd_jit_with_loop, mpmd_mesh=mesh)
  def pp_train_step(opt_state, pars, batch):
    mubatch_grad = partial(jax.value_and_grad(loss_fn, has_aux=True), pars)
    (losses, (pred, fours)), grad = jaxpp.treduce(mubatch_grad, batch,
                                                  schedule=jaxpp.Std1F1B(mesh.mpmd_dim))
    updates, opt_state = optimizer.update(grad, opt_state, pars)
    return opt_state, optax.apply_updates(pars, updates), losses, pred, fours

  pars = [jax.random.normal(jax.random.key(i), (8, 8)) * 0.3 for i in range(2)]
  batch = jax.random.normal(jax.random.key(5), (M, 2, 8))
  opt_state = optimizer.init(pars)
  got = pp_train_step(opt_state, pars, batch)
  _assert_close(got, jax.jit(pp_train_step.__wrapped__)(opt_state, pars, batch))
  assert got[2].shape == (M,) and got[3].shape == (M, 2, 8)
  np.testing.assert_array_equal(got[4], [4] * M)


def test_treduce_i_and_max_under_mpmd_jit_with_loop():
  schedule = api.Std1F1B(2)
  params = _mlp(2)
  xs, ys = _batches()

  def step(params, xs, ys):
    def body(i):
      x = jax.lax.dynamic_index_in_dim(xs, i, keepdims=False)
      y = jax.lax.dynamic_index_in_dim(ys, i, keepdims=False)
      loss, grads = jax.value_and_grad(_loss)(params, x, y)
      return loss, loss, grads
    return api.treduce_i(body, M, schedule=schedule, operation=(api.Max, api.Concat(), api.Add))

  got = api.mpmd_jit_with_loop(step, _mesh(2))(params, xs, ys)
  _assert_close(got, jax.jit(step)(params, xs, ys))


def test_mpmd_jit_by_yield_forward_pipeline():
  mesh = _mesh(2)
  params = _mlp(4)
  x = jax.random.normal(jax.random.key(3), (2, 8))

  def infer(params, x):
    h = x
    for p in params:
      h = api.mark_stage_end(jnp.tanh(h @ p["w"] + p["b"]))
    return h

  fn = api.mpmd_jit_by_yield(infer, mesh, target_num_stages=4)
  compiled = fn.compile(params, x)
  np.testing.assert_allclose(compiled(params, x), jax.jit(infer)(params, x), rtol=RTOL)
  calls = [(i.mesh, i.origins) for i in compiled.instructions if hasattr(i, "fragment")]
  assert [m for m, o in calls if "stage_2" in o] == ["mpmd0"], calls
  assert [m for m, o in calls if "stage_3" in o] == ["mpmd1"], calls
  with pytest.raises(api.StageError, match="target_num_stages=3"):
    api.mpmd_jit_by_yield(infer, mesh, target_num_stages=3).compile(params, x)


def test_mpmd_mesh():
  devices = np.array(jax.devices()).reshape(2, 1, 4)
  mesh = api.MpmdMesh(jax.sharding.Mesh(devices, ("mpmd", "data", "model")), "mpmd")
  assert (mesh.mpmd_dim, mesh.mpmd_axis) == (2, 0)
  assert dict(mesh.lowering_mesh().shape) == {"mpmd": 1, "data": 1, "model": 4}
  assert [list(m.devices.flat) for m in mesh.unstack] == [list(devices[0].flat),
                                                          list(devices[1].flat)]
  assert mesh.device_mpmd_idx[jax.devices()[5]] == 1
  with pytest.raises(ValueError, match="axis 'stage' is not an axis of the mesh"):
    api.MpmdMesh(jax.sharding.Mesh(devices, ("mpmd", "data", "model")), "stage")


# ---------------------------------------------------------------------------
# Bad programs
# ---------------------------------------------------------------------------


def _compile(step, mpmd_dim=2, num_params=2):
  params, (xs, ys) = _mlp(num_params), _batches()
  return api.mpmd_jit_with_loop(step, _mesh(mpmd_dim)).compile(params, xs, ys)


def test_schedule_with_another_number_of_stages():
  with pytest.raises(api.StageError, match=r"num_stages=4 but the treduce body marks 2 stages"):
    _compile(partial(_step, schedule=api.Interleaved1F1B(num_stages=4, mpmd_dim=2)))


def test_schedule_for_another_mpmd_dim():
  with pytest.raises(ValueError, match="runs on 2 ranks but the MpmdMesh has mpmd_dim=4"):
    _compile(partial(_step, schedule=api.Std1F1B(2)), mpmd_dim=4)


def test_marker_whose_output_is_not_differentiated():
  def loss(params, x, y):
    h = api.pipeline_enter_stage(jnp.tanh(x @ params[0]["w"]))
    unused = api.pipeline_enter_stage(h * 2.0)  # never reaches the loss
    del unused
    return jnp.mean((api.pipeline_enter_stage(h @ params[1]["w"]) - y) ** 2)

  def step(params, xs, ys):
    return api.treduce(lambda b: jax.value_and_grad(loss)(params, *b), (xs, ys),
                       schedule=api.Std1F1B(3))

  with pytest.raises(api.StageError, match=r"3 forward stage markers but 2 backward ones \(5 "
                                           r"stage boundaries; 3 stages need 6\).*without a "
                                           r"backward marker: \[1\]"):
    _compile(step)


def test_body_without_markers_or_backward():
  def no_markers(params, xs, ys):
    return api.treduce(lambda b: jax.value_and_grad(
        lambda p: jnp.mean((b[0] @ p[0]["w"] - b[1]) ** 2))(params), (xs, ys),
        schedule=api.Std1F1B(2))

  with pytest.raises(api.StageError, match="has no stage markers"):
    _compile(no_markers)

  def forward_only(params, xs, ys):
    return api.treduce(lambda b: _loss(params, *b), (xs, ys), schedule=api.Std1F1B(2),
                       operation=api.Add)

  with pytest.raises(api.StageError, match="2 forward stage markers but 0 backward"):
    _compile(forward_only)


def test_marker_inside_checkpoint_is_rejected():
  def loss(params, x, y):
    h = jax.checkpoint(lambda x: api.pipeline_enter_stage(jnp.tanh(x @ params[0]["w"])))(x)
    return jnp.mean((api.pipeline_enter_stage(h @ params[1]["w"]) - y) ** 2)

  def step(params, xs, ys):
    return api.treduce(lambda b: jax.value_and_grad(loss)(params, *b), (xs, ys),
                       schedule=api.Std1F1B(2))

  with pytest.raises(api.StageError, match=r"calls a stage marker inside `remat2?`.*"
                                           r"test_jaxpp_api.py:\d+.*move the marker out"):
    _compile(step)


def test_step_needs_exactly_one_top_level_treduce():
  with pytest.raises(ValueError, match="has no treduce loop"):
    _compile(lambda params, xs, ys: jax.value_and_grad(_loss)(params, xs[0], ys[0]))
  with pytest.raises(ValueError, match="has 2 treduce loops"):
    _compile(lambda p, xs, ys: (_step(p, xs, ys, api.Std1F1B(2)),
                                _step(p, xs, ys, api.Std1F1B(2))))
  with pytest.raises(ValueError, match="inside `jit`"):
    _compile(jax.jit(partial(_step, schedule=api.Std1F1B(2))))
  with pytest.raises(ValueError, match="needs a schedule"):
    _compile(partial(_step, schedule=None))


# ---------------------------------------------------------------------------
# The tutorial program
# ---------------------------------------------------------------------------


def _load_tutorial():
  spec = importlib.util.spec_from_file_location("jaxpp_tutorial", EXAMPLES / "jaxpp_tutorial.py")
  module = importlib.util.module_from_spec(spec)
  sys.modules[spec.name] = module
  spec.loader.exec_module(module)
  return module


@pytest.mark.slow
def test_tutorial_example_matches_jax_jit(capsys):
  # Tiny: 2 groups of 2 devices, one block per stage, 2 microbatches. The full
  # size (8 devices, 4 stages, 8 blocks) is the example's default.
  argv = ["--devices", "4", "--mpmd-dim", "2", "--stages", "2", "--layers", "2", "--seq", "4",
          "--batch", "4", "--microbatches", "2", "--steps", "2", "--schedule", "Interleaved1F1B"]
  assert _load_tutorial().main(argv) == 0
  out = capsys.readouterr().out
  assert "largest relative difference from jax.jit" in out and "OK" in out
  assert "step 2: loss mpmd" in out


def test_mpmd_jit_by_yield_training_step_updates_each_stage_on_its_group():
  mesh = _mesh(2)
  params = _mlp(4)
  x, y = _batches()[0][0], _batches()[1][0]

  def step(params, x, y):
    loss, grads = jax.value_and_grad(_loss)(params, x, y)
    return loss, jax.tree.map(lambda p, g: p - 0.1 * g, params, grads)

  compiled = api.mpmd_jit_by_yield(step, mesh).compile(params, x, y)
  loss, new_params = compiled(params, x, y)
  _assert_close((loss, new_params), jax.jit(step)(params, x, y))
  # The update after the last (backward) marker is not forced into stage 0:
  # each parameter is updated on the group of its stage.
  assert [mesh.mpmd_idx_of(p["w"]) for p in new_params] == [0, 1, 0, 1]
  origins = [o for i in compiled.instructions for o in getattr(i, "origins", ())]
  assert {"stage_3", "stage_3(1)", "stage_0(1)"} <= set(origins), origins
