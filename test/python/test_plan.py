"""`mpmd.plan`: the search on synthetic costs (no timing), the unit analysis
of a traced step, and a planned config training like `jax.jit`."""

from __future__ import annotations

import dataclasses
import itertools
import json
import random

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import mpmd
from mpmd import schedule as sched
from mpmd.plan import (PlanError, ProgramCosts, TransferCost, UnitCost, min_max_partition,
                       predict, search, stage_costs, trace_units)
from mpmd.plan.predict import peak_bytes
from mpmd.plan.search import _lower_bound
from models import accumulating, make_topology


# ----------------------------------------------------------------- synthetic
def _costs(forward, m=8, *, backward=None, stash=0, params=0, split=False, cut=0,
           state_factor=2.0):
  backward = backward or [2 * f for f in forward]
  units = tuple(UnitCost(f"block{i}", f, b, b / 2 if split else None, b / 2 if split else None,
                         params, stash, 0)
                for i, (f, b) in enumerate(zip(forward, backward)))
  return ProgramCosts(m, units, (cut,) * (len(units) - 1), state_factor=state_factor)


def _compositions(n, parts):
  """Every grouping of n units into `parts` non-empty contiguous groups."""
  for cuts in itertools.combinations(range(1, n), parts - 1):
    bounds = (0, *cuts, n)
    yield tuple(zip(bounds[:-1], bounds[1:]))


def test_min_max_partition_matches_exhaustive_search():
  rng = random.Random(0)
  for _ in range(300):
    n = rng.randint(1, 9)
    parts = rng.randint(1, n)
    w = [rng.choice([rng.random(), rng.randint(1, 5)]) for _ in range(n)]
    cost = lambda s, i, j: sum(w[i:j])  # noqa: E731
    got = min_max_partition(n, parts, cost)
    want = min(max(cost(0, i, j) for i, j in g) for g in _compositions(n, parts))
    assert got is not None and len(got) == parts
    assert got[0][0] == 0 and got[-1][1] == n and all(a[1] == b[0] for a, b in zip(got, got[1:]))
    assert max(cost(0, i, j) for i, j in got) == pytest.approx(want)


def test_min_max_partition_with_a_constraint_matches_exhaustive_search():
  rng = random.Random(1)
  for _ in range(200):
    n = rng.randint(2, 8)
    parts = rng.randint(1, n)
    w = [rng.randint(1, 6) for _ in range(n)]
    mem = [rng.randint(1, 4) for _ in range(n)]
    cap = rng.randint(3, 10)
    allowed = lambda s, i, j: sum(mem[i:j]) <= cap  # noqa: E731
    cost = lambda s, i, j: sum(w[i:j])  # noqa: E731
    feasible = [g for g in _compositions(n, parts) if all(allowed(0, i, j) for i, j in g)]
    got = min_max_partition(n, parts, cost, allowed)
    if not feasible:
      assert got is None
      continue
    assert all(allowed(0, i, j) for i, j in got)
    assert max(cost(0, i, j) for i, j in got) == min(max(cost(0, i, j) for i, j in g)
                                                     for g in feasible)


def test_min_max_partition_edge_cases():
  assert min_max_partition(3, 4, lambda s, i, j: 1.0) is None
  assert min_max_partition(3, 3, lambda s, i, j: 1.0) == ((0, 1), (1, 2), (2, 3))
  assert min_max_partition(4, 1, lambda s, i, j: 1.0) == ((0, 4),)


@pytest.mark.parametrize("name", ["GPipe", "1F1B", "ZeroBubbleH1", "Interleaved1F1B", "ZBV"])
def test_prediction_is_the_simulator_for_uniform_stages(name):
  """Equal stages: `predict` gives what `mpmd.schedule.simulate` gives, also
  with a latency (every cut carries the same bytes)."""
  s = sched.get_schedule(name)(4, 8, None)
  split = s.split_backward
  n = s.num_stages
  costs = _costs([1.0] * n, split=split, cut=1000)
  groups = tuple((i, i + 1) for i in range(n))
  for per_byte in (0.0, 5e-4):
    p = predict(s, stage_costs(costs, groups, TransferCost(0.0, per_byte)))
    ref = sched.simulate(s, sched.CostModel(forward=1, backward=1 if split else 2, weight=1,
                                            latency=1000 * per_byte))
    assert p.makespan == pytest.approx(ref.makespan)
    assert p.bubble_fraction == pytest.approx(ref.bubble_fraction)


def test_planned_grouping_matches_exhaustive_search_of_predicted_step_time():
  """Small cases: the chosen grouping is the best of every grouping (each
  simulated) for the chosen schedule and microbatch count."""
  rng = random.Random(2)
  for trial in range(6):
    n, p = rng.randint(4, 7), rng.choice([2, 3])
    costs = _costs([rng.choice([0.5, 1.0, 2.0, 4.0]) for _ in range(n)], m=6,
                   cut=rng.choice([0, 100]))
    transfer = TransferCost(0.0, 1e-3)
    result = search([costs], p, ["1F1B", "GPipe"], transfer=transfer)
    s = result.ranked[0][1]
    best = min(predict(s, stage_costs(costs, g, transfer)).makespan
               for g in _compositions(n, p))
    assert result.best.predicted_seconds == pytest.approx(best), trial


def test_lower_bounds_never_exceed_predictions():
  rng = random.Random(3)
  for name in ["GPipe", "1F1B", "Eager1F1B", "ZeroBubbleH1", "ZeroBubbleH2ZeroTxLatency",
               "Interleaved1F1B", "ZBV", "DualPipeV"]:
    for _ in range(4):
      s = sched.get_schedule(name)(rng.choice([2, 3, 4]), rng.choice([2, 4, 8]), None)
      n = s.num_stages + rng.randint(0, 3)
      costs = _costs([rng.uniform(0.2, 3) for _ in range(n)], m=s.num_microbatches,
                     split=s.split_backward, cut=rng.choice([0, 1000]))
      if s.split_backward:  # B + W need not add up to the whole backward
        costs = dataclasses.replace(costs, units=tuple(
            dataclasses.replace(u, backward_input=rng.uniform(0.1, 2), weight=rng.uniform(0.1, 2))
            for u in costs.units))
      groups = min_max_partition(n, s.num_stages,
                                 lambda st, i, j: sum(u.total for u in costs.units[i:j]))
      costs = dataclasses.replace(costs, update_seconds_per_byte=rng.choice([0.0, 1e-3]),
                                  units=tuple(dataclasses.replace(u, param_bytes=100)
                                              for u in costs.units))
      pred = predict(s, stage_costs(costs, groups, TransferCost(1e-3, 1e-5)))
      assert _lower_bound(s, costs, groups) <= pred.makespan * (1 + 1e-9), name


def test_search_prunes_with_its_bound_and_reports_every_candidate():
  costs = [_costs([1.0] * 8, m=m) for m in (4, 8, 16)]
  result = search(costs, 4, ["1F1B", "GPipe", "Interleaved1F1B"])
  statuses = {c.status for c in result.candidates}
  assert len(result.candidates) == 9 and "chosen" in statuses
  assert sum(c.status == "chosen" for c in result.candidates) == 1
  for c in result.candidates:
    if c.status == "pruned":
      assert c.lower_bound > result.best.predicted_seconds
  text = str(result.candidates)
  assert "schedule" in text and "chosen" in text and text.count("\n") >= 10


def test_split_schedules_need_split_costs():
  result = search([_costs([1.0] * 4, split=False)], 2, ["ZeroBubbleH1", "1F1B"])
  assert result.best.schedule == "1F1B"
  zb = [c for c in result.candidates if c.schedule == "ZeroBubbleH1"][0]
  assert zb.status == "invalid" and "split" in zb.note


def _scaling_costs(m, n=8):
  """Units whose cost per microbatch is a fixed 0.2 plus 4/M (so more
  microbatches shrink the bubble but pay the fixed part more often) and whose
  stash shrinks with the microbatch (8000/M bytes)."""
  f = 0.2 + 4.0 / m
  units = tuple(UnitCost(f"block{i}", f, 2 * f, param_bytes=100, stash_bytes=8000 // m)
                for i in range(n))
  return ProgramCosts(m, units)


def _exhaustive(costs, p, names, budget=None):
  """(best predicted time, smallest peak) over every schedule, microbatch
  count and grouping."""
  best, smallest = None, None
  for pc in costs:
    for name in names:
      s = sched.get_schedule(name)(p, pc.microbatches, None)
      for g in _compositions(len(pc.units), s.num_stages):
        pred = predict(s, stage_costs(pc, g, TransferCost()))
        peak = max(pred.peak_bytes)
        smallest = peak if smallest is None else min(smallest, peak)
        if budget is None or peak <= budget:
          best = pred.makespan if best is None else min(best, pred.makespan)
  return best, smallest


def test_memory_budget_moves_to_a_lower_memory_choice():
  """1F1B with 8 microbatches is fastest; with a budget below its peak the
  plan moves to the fastest choice that fits (here: more, smaller
  microbatches), as an exhaustive search of every grouping says."""
  costs = [_scaling_costs(m) for m in (4, 8, 16)]
  names = ["GPipe", "1F1B"]
  free = search(costs, 4, names, memory_budget=None)
  assert (free.best.schedule, free.best.microbatches) == ("1F1B", 8)
  assert free.best.predicted_seconds == pytest.approx(_exhaustive(costs, 4, names)[0])
  budget = free.best.max_peak_bytes - 1
  tight = search(costs, 4, names, memory_budget=budget)
  assert tight.best.max_peak_bytes <= budget
  assert (tight.best.schedule, tight.best.microbatches) != ("1F1B", 8)
  assert tight.best.predicted_seconds > free.best.predicted_seconds
  assert tight.best.predicted_seconds == pytest.approx(
      _exhaustive(costs, 4, names, budget)[0])
  assert any(c.status == "over budget" for c in tight.candidates)


def test_impossible_budget_names_the_smallest_budget_that_fits():
  costs = [_scaling_costs(m) for m in (4, 8)]
  names = ["GPipe", "1F1B"]
  with pytest.raises(PlanError, match="smallest budget that fits is") as e:
    search(costs, 4, names, memory_budget=1000)
  smallest = int(str(e.value).split("fits is ")[1].split("(")[1].split(" bytes")[0])
  assert smallest == _exhaustive(costs, 4, names)[1]
  fits = search(costs, 4, names, memory_budget=smallest)
  assert fits.best.max_peak_bytes <= smallest
  with pytest.raises(PlanError):
    search(costs, 4, names, memory_budget=smallest - 1)


def test_memory_model_counts_resident_state_stashes_and_scratch():
  s = sched.one_f_one_b(2, 4)
  units = tuple(UnitCost(f"u{i}", 1.0, 2.0, param_bytes=10, stash_bytes=100, temp_bytes=7)
                for i in range(4))
  costs = ProgramCosts(4, units, state_factor=3.0)
  peaks = peak_bytes(s, stage_costs(costs, ((0, 1), (1, 4)), TransferCost()))
  # mesh 0: 1 unit, 2 stashes alive (1F1B: P - i); mesh 1: 3 units, 1 stash.
  assert peaks == (3 * 10 + 2 * 100 + 7, 3 * 30 + 1 * 300 + 7)


# ------------------------------------------------------------------ programs
def _block(p, h):
  return jnp.tanh(h @ p["w"] + p["b"])


def _loss(params, x, y):
  h = x
  for i, p in enumerate(params):
    h = mpmd.named_computation(_block, name=f"block{i}")(p, h)
  return jnp.mean((h - y) ** 2)


_step = accumulating(_loss)


def _problem(n=8, width=16, batch=32):
  keys = jax.random.split(jax.random.key(0), n)
  params = [{"w": jax.random.normal(k, (width, width)) / np.sqrt(width),
             "b": jnp.full((width,), 0.01 * i)} for i, k in enumerate(keys)]
  x = jax.random.normal(jax.random.key(1), (batch, width))
  y = jax.random.normal(jax.random.key(2), (batch, width))
  return params, x, y


def test_trace_units_reads_programs_stashes_and_cuts():
  params, x, y = _problem(n=4, width=16, batch=8)
  xs, ys = x.reshape(2, 4, 16), y.reshape(2, 4, 16)
  traced = trace_units(_step, (params, xs, ys))
  assert traced.names == ("block0", "block1", "block2", "block3")
  act = 4 * 16 * 4  # one [4, 16] float32 activation
  assert traced.forward_cut_bytes == (act,) * 3
  assert traced.backward_cut_bytes == (act,) * 3
  for i, u in enumerate(traced.units):
    assert u.param_bytes == (16 * 16 + 16) * 4
    assert len(u.weight_grads) == 2
    assert len(u.activation_grads) == (0 if i == 0 else 1)
    assert act <= u.stash_bytes <= 3 * act
  with pytest.raises(PlanError, match="not planning units"):
    trace_units(_step, (params, xs, ys), units=["block0", "block1"])
  with pytest.raises(PlanError, match="not named computations"):
    trace_units(_step, (params, xs, ys), units=["block0", "block1", "block2", "nope"])


def _tree_relative_difference(a, b):
  diff = sum(float(jnp.sum((jnp.asarray(x) - y) ** 2)) for x, y in
             zip(jax.tree.leaves(a), jax.tree.leaves(b)))
  norm = sum(float(jnp.sum(jnp.asarray(y) ** 2)) for y in jax.tree.leaves(b))
  return (diff / norm) ** 0.5


@pytest.mark.slow
def test_planned_config_trains_like_jax_jit(tmp_path):
  """8 tiny blocks on 4 meshes of 2 CPU devices: the plan's config, run for 2
  steps, gives the parameters of `jax.jit` (normwise over the whole tree)."""
  params, x, y = _problem()
  topology = make_topology(4, 2)
  plan = mpmd.plan(_step, topology, params, x, y, batch_argnums=(1, 2), microbatches=(4, 8),
                   schedules=["1F1B", "GPipe", "Interleaved1F1B"], repeats=2)
  assert isinstance(plan, mpmd.Plan)
  assert plan.microbatches in (4, 8) and plan.schedule.name in ("1F1B", "GPipe",
                                                                "Interleaved1F1B")
  assert sorted(plan.assignment) == [f"block{i}" for i in range(8)]
  assert [u for g in plan.groups for u in g] == [f"block{i}" for i in range(8)]
  assert plan.predicted_step_seconds > 0 and set(plan.predicted_peak_bytes) == set(topology)
  assert plan.planning_seconds < 60 and "chosen" in str(plan.candidates)
  args = plan.split_batch(params, x, y)
  got, want = args[0], args[0]
  train, reference = mpmd.jit(_step, plan.config), jax.jit(_step)
  for _ in range(2):
    loss, got = train(got, *args[1:])
    ref_loss, want = reference(want, *args[1:])
    np.testing.assert_allclose(loss, ref_loss, rtol=1e-5)
  assert _tree_relative_difference(got, want) < 1e-5
  path = plan.write_png(tmp_path / "plan.png")
  assert (tmp_path / "plan.png").stat().st_size > 1000 and str(path).endswith("plan.png")
  saved = json.loads(json.dumps(plan.to_dict()))
  assert saved["schedule"] == plan.schedule.name
  from mpmd.plan import config_from_dict
  assert config_from_dict(saved, topology).cache_key() == plan.config.cache_key()


def test_interleaved_plan_with_virtual_stages_trains_like_jax_jit():
  params, x, y = _problem()
  plan = mpmd.plan(_step, make_topology(2, 2), params, x, y, batch_argnums=(1, 2),
                   microbatches=4, schedules=["Interleaved1F1B"], estimate="cost_analysis")
  assert plan.virtual_stages == 2 and len(plan.groups) == 4
  assert plan.config.name_to_stage_assignment == plan.stage_assignment
  args = plan.split_batch(params, x, y)
  loss, got = mpmd.jit(_step, plan.config)(*args)
  ref_loss, want = jax.jit(_step)(*args)
  np.testing.assert_allclose(loss, ref_loss, rtol=1e-5)
  assert _tree_relative_difference(got, want) < 1e-5


def test_plan_argument_errors():
  params, x, y = _problem(n=4, batch=6)
  topology = make_topology(2, 1)
  with pytest.raises(PlanError, match="divides the batch"):
    mpmd.plan(_step, topology, params, x, y, batch_argnums=(1, 2), microbatches=(4, 8))
  with pytest.raises(PlanError, match="batch_argnums"):
    mpmd.plan(_step, topology, params, x, y, microbatches=(2, 4))
  with pytest.raises(PlanError, match="8GiB"):
    mpmd.plan(_step, topology, params, x, y, batch_argnums=(1, 2), microbatches=2,
              memory_budget="lots")


def test_command_line_plans_the_example(tmp_path, capsys):
  from mpmd.plan.__main__ import main
  out = tmp_path / "plan.json"
  root = __import__("pathlib").Path(__file__).resolve().parents[2]
  assert main([f"{root}/examples/plan_blocks.py:problem", "--meshes", "2", "--microbatches",
               "4", "--schedules", "1F1B,GPipe", "--estimate", "cost_analysis",
               "--json", str(out)]) == 0
  text = capsys.readouterr().out
  assert "chosen" in text and "predicted step" in text
  saved = json.loads(out.read_text())
  assert saved["schedule"] in ("1F1B", "GPipe") and saved["microbatches"] == 4


@pytest.mark.multiprocess
@pytest.mark.slow
def test_benchmark_smallest(tmp_path):
  """benchmarks/plan.py at its tiniest: two pinned processes plan, then run the
  plan and the even split; it writes its own section (i)."""
  import importlib.util
  import os
  import pathlib
  import sys
  if len(os.sched_getaffinity(0)) < 2:
    pytest.skip("needs 2 CPUs")
  benchmarks = pathlib.Path(__file__).resolve().parents[2] / "benchmarks"
  sys.path.insert(0, str(benchmarks))
  try:
    spec = importlib.util.spec_from_file_location("plan_benchmark", benchmarks / "plan.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
  finally:
    sys.path.remove(str(benchmarks))
  out = tmp_path / "RESULTS.md"
  assert module.main(["--quick", "--output", str(out)]) == 0
  text = out.read_text()
  section = text[text.index("## (i) Automatic planning"):]
  assert "Command: `python benchmarks/plan.py --quick " in section
  assert "| plan " in section and "| even split, M=2 " in section and "chosen" in section
