"""Every pipeline schedule runs a 4-mesh training step with 8 microbatches,
in exactly the schedule's order, and matches plain `jax.jit` over 3 steps."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import mpmd
from mpmd import schedule as sched
from models import accumulating_step, init_mlp, layer, make_topology, mlp_loss

P, M = 4, 8
RTOL, ATOL = 1e-5, 1e-6


#: Gradient accumulation inside the microbatch call, then one SGD update.
microbatched_step = accumulating_step


def _data(num_stages):
  params = init_mlp(num_stages, width=16)
  xs = jax.random.normal(jax.random.key(1), (M, 4, 16))
  ys = jax.random.normal(jax.random.key(2), (M, 4, 4))
  return params, xs, ys


def _config(name, **kwargs):
  """The schedule, and an assignment placing its stages as it expects."""
  probe = sched.get_schedule(name)(P, M, 2 if _virtual(name) else None)
  stages = probe.num_stages
  assignment = {f"stage{s}": f"m{probe.stage_to_mesh[s]}" for s in range(stages)}
  stage_ids = {f"stage{s}": s for s in range(stages)} if stages > P else None
  return stages, mpmd.make_config(make_topology(P, 2), assignment, name_to_stage_assignment=stage_ids,
                                  pipeline_schedule=name, **kwargs)


def _virtual(name):
  try:
    sched.get_schedule(name)(P, M, None)
    return False
  except Exception:  # noqa: BLE001 - schedules that need virtual stages say so
    return True


def _unit_name(unit, mesh):
  """The compiler's name of a unit: the stage is implicit when it is the mesh's."""
  return f"{unit.kind}{unit.microbatch}" + (f".s{unit.stage}" if unit.stage != mesh else "")


def _run_and_compare(name, **kwargs):
  num_stages, config = _config(name, **kwargs)
  params, xs, ys = _data(num_stages)
  compiled = mpmd.jit(microbatched_step, config).lower(params, xs, ys).compile()
  reference = jax.jit(microbatched_step)
  ref_params = params
  for _ in range(3):
    loss, params = compiled(params, xs, ys)
    ref_loss, ref_params = reference(ref_params, xs, ys)
    np.testing.assert_allclose(loss, ref_loss, rtol=RTOL)
    for got, want in zip(jax.tree.leaves(params), jax.tree.leaves(ref_params)):
      np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
  return compiled


@pytest.mark.parametrize("name", sorted(sched.SCHEDULES))
def test_schedule_matches_jax_jit_and_runs_in_order(name):
  if name.lower().replace("_", "") == "parallelpipelineswithwraparound":
    pytest.skip("forward only (no backward units): tested by test_parallel_pipelines_with_wrap_around")
  compiled = _run_and_compare(name)
  schedule = compiled.schedule
  assert schedule is not None
  for m in range(P):
    # A forward merged with the backward right after it runs both (`F3+B3`).
    ran = [u for i in compiled.instructions
           if getattr(i, "unit", "") and i.mesh == f"m{m}" for u in i.unit.split("+")]
    assert ran == [_unit_name(u, m) for u in schedule.orders[m]], f"mesh m{m}"


def _listed_step(params, xs, ys):
  """Microbatches passed as lists of arrays (one input per microbatch)."""
  loss_acc, grad_acc = jnp.zeros(()), jax.tree.map(jnp.zeros_like, params)
  for i, (x, y) in enumerate(zip(xs, ys)):
    def microbatch(loss_acc, grad_acc, x, y):
      loss, grads = jax.value_and_grad(mlp_loss)(params, x, y)
      return loss_acc + loss, jax.tree.map(jnp.add, grad_acc, grads)
    loss_acc, grad_acc = mpmd.call(microbatch, call_counter=i)(loss_acc, grad_acc, x, y)
  return loss_acc, jax.tree.map(lambda p, g: p - 0.1 * g, params, grad_acc)


@pytest.mark.parametrize("schedule", ["1F1B", "ZeroBubbleH1"])
def test_compile_count_does_not_grow_with_microbatches(schedule):
  """Microbatches given as separate inputs: the number of distinct programs
  is the same for 4 and 16 microbatches (the first and last microbatch of a
  stage differ from the middle ones: accumulator start, parameter update).
  test_compile_once.py covers microbatches sliced from one stacked input."""
  config = mpmd.make_config(make_topology(P, 2), {f"stage{s}": f"m{s}" for s in range(P)},
                            pipeline_schedule=schedule)
  params = init_mlp(P, width=16)
  counts = []
  for num_microbatches in (4, 16):
    xs = [jax.random.normal(jax.random.key(i), (4, 16)) for i in range(num_microbatches)]
    ys = [jax.random.normal(jax.random.key(100 + i), (4, 4)) for i in range(num_microbatches)]
    compiled = mpmd.jit(_listed_step, config).lower(params, xs, ys).compile()
    units = sum(len(i.unit.split("+")) for i in compiled.instructions if getattr(i, "unit", ""))
    assert units == (3 if schedule == "ZeroBubbleH1" else 2) * P * num_microbatches
    counts.append(len(compiled.program.fragments))
    loss, new_params = compiled(params, xs, ys)
    ref_loss, ref_params = jax.jit(_listed_step)(params, xs, ys)
    np.testing.assert_allclose(loss, ref_loss, rtol=RTOL)
  assert counts[0] == counts[1], counts


def test_text_table_and_task_lists_give_the_same_program():
  text = sched.get_schedule("1F1B")(P, M).to_text()
  jaxpp_style = sched.task_lists.Std1F1B(P)
  programs = []
  for spec in (text, jaxpp_style, "1F1B"):
    config = mpmd.make_config(make_topology(P, 2), {f"stage{s}": f"m{s}" for s in range(P)},
                              pipeline_schedule=spec)
    compiled = mpmd.jit(microbatched_step, config).lower(*_data(P)).compile()
    programs.append([(i.mesh, i.unit) for i in compiled.instructions if getattr(i, "unit", "")])
  assert programs[0] == programs[1] == programs[2]


def _stacked_two_stage_step():
  params = init_mlp(2, width=16)
  xs = jax.random.normal(jax.random.key(1), (2, 4, 16))
  ys = jax.random.normal(jax.random.key(2), (2, 4, 4))

  def step(params, xs, ys):
    def microbatch(carry, i, batch):
      loss, grads = jax.value_and_grad(mlp_loss)(params, *batch)
      return carry[0] + loss, jax.tree.map(jnp.add, carry[1], grads)
    return mpmd.enumerated_for(microbatch, (jnp.zeros(()), jax.tree.map(jnp.zeros_like, params)),
                               (xs, ys))
  return step, (params, xs, ys)


def test_impossible_text_schedule_names_the_deadlock():
  good = sched.get_schedule("GPipe")(2, 2).to_text()
  bad = good.replace("m0: F0 F1 B0 B1", "m0: B0 F0 F1 B1")
  assert bad != good
  config = mpmd.make_config(make_topology(2, 4), {"stage0": "m0", "stage1": "m1"},
                            pipeline_schedule=bad)
  step, (params, xs, ys) = _stacked_two_stage_step()

  with pytest.raises(mpmd.PartitionError, match='deadlocks: it runs B0 on mesh "m0" before F0 on '
                                                'mesh "m0"'):
    mpmd.jit(step, config).lower(params, xs, ys)


def test_text_table_line_for_a_mesh_not_in_the_topology():
  table = "m0: F0 F1 B0 B1\nm1: F0 B0 F1 B1\nm2: F0 F1 B0 B1"
  config = mpmd.make_config(make_topology(2, 4), {"stage0": "m0", "stage1": "m1"},
                            pipeline_schedule=table)
  step, args = _stacked_two_stage_step()
  with pytest.raises(mpmd.errors.ScheduleParseError,
                     match="a line for mesh 'm2', which is not in the topology"):
    mpmd.jit(step, config).lower(*args)


def test_schedule_function_that_returns_no_schedule():
  def no_schedule(num_meshes, num_microbatches, virtual_stages):
    return None

  config = mpmd.make_config(make_topology(2, 4), {"stage0": "m0", "stage1": "m1"},
                            pipeline_schedule=no_schedule)
  step, args = _stacked_two_stage_step()
  with pytest.raises(mpmd.PartitionError, match="'no_schedule' returned NoneType, not an "
                                                "mpmd.schedule.Schedule"):
    mpmd.jit(step, config).lower(*args)


def test_schedule_placement_mismatch_is_reported():
  config = mpmd.make_config(make_topology(P, 2), {f"stage{s}": f"m{s % P}" for s in range(8)},
                            name_to_stage_assignment={f"stage{s}": s for s in range(8)},
                            pipeline_schedule="ZBV")
  with pytest.raises(mpmd.PartitionError, match="stage 4 runs on mesh 'm0' in the program but the "
                                                "schedule ZBV places it on 'm3'"):
    mpmd.jit(microbatched_step, config).lower(*_data(8))


def test_schedule_without_microbatches_is_an_error():
  config = mpmd.make_config(make_topology(2, 4), {"stage0": "m0", "stage1": "m1"},
                            pipeline_schedule="1F1B")
  params = init_mlp(2, width=16)

  def step(params, x, y):
    return jax.value_and_grad(mlp_loss)(params, x, y)

  with pytest.raises(mpmd.PartitionError, match="needs microbatches"):
    mpmd.jit(step, config).lower(params, jnp.ones((4, 16)), jnp.ones((4, 4)))


def test_unknown_schedule_name():
  with pytest.raises(mpmd.ConfigError, match="1F1B"):
    mpmd.make_config(make_topology(2, 4), {"stage0": "m0"}, pipeline_schedule="OneFOneBee")


@pytest.mark.parametrize("options", [
    {"mpmd_fragment_remat": True},
    {"mpmd_fragment_remat": True, "mpmd_merge_remat_fragments": True},
    {"mpmd_merge_forward_with_backward": True},
    {"mpmd_split_bwd_fragments": True},
])
def test_optimize_options_keep_numerics(options):
  compiled = _run_and_compare("1F1B", partitioning_options=options)
  names = {i.fragment.name for i in compiled.instructions if hasattr(i, "fragment")}
  if options.get("mpmd_merge_forward_with_backward"):
    # The last stage runs each forward right before its backward: merged.
    assert any("fwd_bwd" in n for n in names), names
  forwards_on_m0 = sum(1 for i in compiled.instructions
                       if getattr(i, "unit", "").startswith("F") and i.mesh == "m0")
  if options.get("mpmd_fragment_remat") and not options.get("mpmd_merge_remat_fragments"):
    # Forwards of mesh 0 not followed by their backward are recomputed.
    assert forwards_on_m0 > M, forwards_on_m0
  else:
    assert forwards_on_m0 == M, forwards_on_m0
  if options.get("mpmd_split_bwd_fragments"):
    assert sum(1 for i in compiled.instructions if getattr(i, "unit", "").startswith("W")) == P * M


@pytest.mark.parametrize("schedule", [None, "1F1B"])
@pytest.mark.parametrize("merge", [None, False])
def test_last_forward_merges_with_its_backward_by_default(merge, schedule):
  """A microbatch's forward and backward on the last mesh run back to back
  (without a schedule, and in 1F1B): merged by default into one program whose
  call runs both units, apart with the option set False."""
  options = None if merge is None else {"mpmd_merge_forward_with_backward": merge}
  config = mpmd.make_config(make_topology(P, 2), {f"stage{s}": f"m{s}" for s in range(P)},
                            partitioning_options=options, pipeline_schedule=schedule)
  params, xs, ys = _data(P)
  compiled = mpmd.jit(microbatched_step, config).lower(params, xs, ys).compile()
  ref_loss, ref_params = jax.jit(microbatched_step)(params, xs, ys)
  loss, params = compiled(params, xs, ys)
  np.testing.assert_allclose(loss, ref_loss, rtol=RTOL)
  for got, want in zip(jax.tree.leaves(params), jax.tree.leaves(ref_params)):
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
  on_last = [i.fragment.name for i in compiled.instructions
             if hasattr(i, "fragment") and i.mesh == f"m{P - 1}"]
  fused = [n for n in on_last if "fwd_bwd" in n]
  assert len(fused) == (M if merge is None else 0), on_last
  units = [i.unit for i in compiled.instructions if i.mesh == f"m{P - 1}" and getattr(i, "unit", "")]
  if merge is None:
    assert units == [f"F{k}+B{k}" for k in range(M)], units
  else:
    assert units == [u for k in range(M) for u in (f"F{k}", f"B{k}")], units


def test_fragment_merge_rules_fuse_units():
  rules = [mpmd.FragmentMergeRule(f"m{P - 1}", [f"F{i}", f"B{i}"]) for i in range(M)]
  compiled = _run_and_compare("1F1B", fragment_merge_rules=rules)
  on_last = [i for i in compiled.instructions if hasattr(i, "fragment") and i.mesh == f"m{P - 1}"]
  fused = [i for i in on_last if "fwd_bwd" in i.fragment.name]
  assert len(fused) == M, [i.fragment.name for i in on_last]


def test_fragment_merge_rule_errors():
  with pytest.raises(mpmd.ConfigError, match="must name at least two units"):
    mpmd.make_config(make_topology(2, 4), {"stage0": "m0"},
                     fragment_merge_rules=[mpmd.FragmentMergeRule("m0", ["F0", "Q1"])])
  with pytest.raises(mpmd.ConfigError, match="fragment merge rule is assigned to mesh 'm5'"):
    mpmd.make_config(make_topology(2, 4), {"stage0": "m0"},
                     fragment_merge_rules=[mpmd.FragmentMergeRule("m5", ["F0", "B0"])])


def test_parallel_pipelines_with_wrap_around():
  """Forward-only inference where microbatch k enters at mesh k and wraps."""
  ws = [jax.random.normal(jax.random.key(j), (8, 8)) * 0.3 for j in range(P)]
  xs = [jax.random.normal(jax.random.key(10 + k), (2, 8)) for k in range(P)]

  def infer(ws, xs):
    outs = []
    for k, x in enumerate(xs):
      def microbatch(ws, h, k=k):
        for j in range(P):
          h = mpmd.named_computation(lambda w, h: jnp.tanh(h @ w), name=f"mb{k}_layer{j}")(ws[j], h)
        return h
      outs.append(mpmd.call(microbatch, call_counter=k)(ws, x))
    return outs

  assignment = {f"mb{k}_layer{j}": f"m{(k + j) % P}" for k in range(P) for j in range(P)}
  config = mpmd.make_config(make_topology(P, 2), assignment,
                            pipeline_schedule="ParallelPipelinesWithWrapAround")
  compiled = mpmd.jit(infer, config).lower(ws, xs).compile()
  for got, want in zip(compiled(ws, xs), jax.jit(infer)(ws, xs)):
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
  for m in range(P):
    ran = [i.unit for i in compiled.instructions if getattr(i, "unit", "") and i.mesh == f"m{m}"]
    assert ran == [_unit_name(u, m) for u in compiled.schedule.orders[m]]


def _fori_step(params, xs, ys):
  def body(i, carry):
    loss_acc, grad_acc = carry
    x = jax.lax.dynamic_index_in_dim(xs, i, keepdims=False)
    y = jax.lax.dynamic_index_in_dim(ys, i, keepdims=False)
    loss, grads = jax.value_and_grad(mlp_loss)(params, x, y)
    return loss_acc + loss, jax.tree.map(jnp.add, grad_acc, grads)

  init = (jnp.zeros(()), jax.tree.map(jnp.zeros_like, params))
  loss, grads = mpmd.fori_loop(M, body, init)
  return loss / M, jax.tree.map(lambda p, g: p - 0.1 * g / M, params, grads)


def test_fori_loop_is_an_mpmd_for_unrolled_by_the_compiler():
  from mpmd.trace.tracing import trace_and_lower
  params, xs, ys = _data(P)
  text = trace_and_lower(_fori_step, (params, xs, ys)).text
  assert text.count('"mpmd.for"') == 1 and text.count('"mpmd.call"') == 1
  assert "iterations = 8 : ui32" in text
  config = mpmd.make_config(make_topology(P, 2), {f"stage{s}": f"m{s}" for s in range(P)},
                            pipeline_schedule="1F1B")
  compiled = mpmd.jit(_fori_step, config).lower(params, xs, ys).compile()
  loss, new_params = compiled(params, xs, ys)
  ref_loss, ref_params = jax.jit(_fori_step)(params, xs, ys)
  np.testing.assert_allclose(loss, ref_loss, rtol=RTOL)
  for got, want in zip(jax.tree.leaves(new_params), jax.tree.leaves(ref_params)):
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
  ran = [i.unit for i in compiled.instructions if getattr(i, "unit", "") and i.mesh == "m0"]
  assert ran == [_unit_name(u, 0) for u in compiled.schedule.orders[0]]


def test_fori_loop_cannot_be_differentiated():
  with pytest.raises(NotImplementedError, match="compute the gradient inside the loop body"):
    jax.grad(lambda x: mpmd.fori_loop(2, lambda i, c: c * 2.0, x))(1.0)


def forward_step(params, xs):
  """Inference: the model's output for each microbatch (no backward)."""
  def microbatch(x):
    h = x
    for s, p in enumerate(params):
      last = s == len(params) - 1
      h = mpmd.named_computation(lambda p, h, last=last: layer(p, h, last), name=f"stage{s}")(p, h)
    return h

  return [mpmd.call(microbatch, call_counter=i)(x) for i, x in enumerate(xs)]


@pytest.mark.parametrize("name", ["GPipe", "1F1B", "ZeroBubbleH1", "Interleaved1F1B"])
def test_training_schedules_run_forward_only_programs(name):
  """A built-in training schedule runs an inference program in its forward
  order (its B and W units dropped), matching jax.jit."""
  num_stages, config = _config(name)
  params, xs, _ = _data(num_stages)
  xs = list(xs)
  compiled = mpmd.jit(forward_step, config).lower(params, xs).compile()
  assert compiled.schedule.forward_only and compiled.schedule.name.endswith("(forward only)")
  expected = sched.get_schedule(name)(P, M, 2 if _virtual(name) else None)
  for m in range(P):
    assert list(compiled.schedule.orders[m]) == [u for u in expected.orders[m] if u.kind == "F"]
  outs = compiled(params, xs)
  ref_outs = jax.jit(forward_step)(params, xs)
  assert len(outs) == M
  for a, b in zip(outs, ref_outs):
    np.testing.assert_allclose(a, b, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("name", ["ZeroBubbleH1", "ZeroBubbleH2ZeroTxLatency"])
def test_split_backward_with_several_blocks_in_a_stage(name):
  """Zero-bubble schedules when a stage holds several labelled blocks: the
  activation gradient between blocks of one stage belongs to B (it used to
  go to W, and the schedule deadlocked)."""
  topology = {f"m{i}": jax.sharding.Mesh(np.array(jax.devices()[i:i + 1]), ("x",))
              for i in range(2)}
  config = mpmd.make_config(topology, {"block0": "m0", "block1": "m1", "block2": "m1"},
                            pipeline_schedule=name)

  def loss(params, x):
    h = x
    for k, w in enumerate(params):
      h = mpmd.named_computation(lambda w, h: jnp.tanh(h @ w), name=f"block{k}")(w, h)
    return jnp.sum(h ** 2)

  def step(params, xs):
    grads, total = jax.tree.map(jnp.zeros_like, params), jnp.zeros(())
    for i, x in enumerate(xs):
      value, g = mpmd.call(jax.value_and_grad(loss), call_counter=i)(params, x)
      grads, total = jax.tree.map(jnp.add, grads, g), total + value
    return total, grads

  keys = jax.random.split(jax.random.key(0), 3)
  params = [jax.random.normal(k, (8, 8)) / np.sqrt(8) for k in keys]
  xs = list(jax.random.normal(jax.random.key(1), (4, 2, 8)))
  got, want = mpmd.jit(step, config)(params, xs), jax.jit(step)(params, xs)
  num = np.sqrt(sum(float(np.sum((np.asarray(a) - np.asarray(b)) ** 2))
                    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want))))
  den = np.sqrt(sum(float(np.sum(np.asarray(b) ** 2)) for b in jax.tree.leaves(want)))
  assert num <= 1e-5 * den
