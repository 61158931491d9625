"""Back-to-back units of a mesh merge into one program where a call costs
more than the second unit's work (`mpmd.partition.dispatch_cost`,
-mpmd-merge-back-to-back-units): which merges the figures decide, that the
merged step still equals `jax.jit`'s, the knob that replaces the figures, and
the measurement that produces them."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import mpmd
from mpmd.errors import KnobError
from mpmd.partition import dispatch_cost
from models import accumulating_step, init_mlp, make_topology

P, M = 4, 4


@pytest.fixture
def measured(monkeypatch):
  """The platform's measured row, as users get it (conftest sets the knob
  to 0 for the rest of the suite)."""
  monkeypatch.delenv("MPMD_DISPATCH_COST", raising=False)


def _compile(schedule: str):
  params = init_mlp(P, width=16)
  xs = jax.random.normal(jax.random.key(1), (M, 4, 16))
  ys = jax.random.normal(jax.random.key(2), (M, 4, 4))
  config = mpmd.make_config(make_topology(P, 1), {f"stage{s}": f"m{s}" for s in range(P)},
                            pipeline_schedule=schedule)
  compiled = mpmd.jit(accumulating_step, config).lower(params, xs, ys).compile()
  return compiled, (params, xs, ys)


def _units(compiled) -> dict[str, list[str]]:
  """Mesh -> the units its calls run, in program order."""
  out: dict[str, list[str]] = {}
  for inst in compiled.program.instructions:
    if type(inst).__name__ == "CallInstruction":
      out.setdefault(inst.mesh, []).append(inst.unit or "-")
  return out


def _equals_jax_jit(compiled, args) -> None:
  params, xs, ys = args
  reference = jax.jit(accumulating_step)
  ref_params = params
  for _ in range(2):
    loss, params = compiled(params, xs, ys)
    ref_loss, ref_params = reference(ref_params, xs, ys)
  np.testing.assert_allclose(loss, ref_loss, rtol=1e-5, atol=1e-6)
  got, want = jax.tree.leaves(params), jax.tree.leaves(ref_params)
  norm = np.sqrt(sum(float(np.sum((np.asarray(a) - np.asarray(b)) ** 2)) for a, b in zip(got, want)))
  assert norm <= 1e-5 * np.sqrt(sum(float(np.sum(np.asarray(b) ** 2)) for b in want))


def test_a_gpipe_forward_run_merges_where_a_call_costs_more_than_a_unit(monkeypatch):
  # A call costing 1 s outweighs any unit of this MLP: the first mesh's
  # forward run, which nothing from another mesh interrupts, is one program;
  # the others receive each microbatch's activation between their units.
  monkeypatch.setenv("MPMD_DISPATCH_COST", "1000000,0,0")
  compiled, args = _compile("GPipe")
  units = _units(compiled)
  assert units["m0"][0] == "F0+F1+F2+F3", units["m0"]
  assert all("+" not in u for u in units["m1"][:M]), units["m1"]
  monkeypatch.setenv("MPMD_DISPATCH_COST", "0")
  apart, _ = _compile("GPipe")
  assert sum(map(len, _units(apart).values())) > sum(map(len, units.values()))
  assert _units(apart)["m0"][:M] == [f"F{i}" for i in range(M)]
  _equals_jax_jit(compiled, args)


def test_units_stay_apart_where_their_work_outweighs_a_call(monkeypatch):
  # A call of 1 us against 1 ms per op: no unit is that small.
  monkeypatch.setenv("MPMD_DISPATCH_COST", "1,1000,0")
  compiled, _ = _compile("GPipe")
  assert not any("+" in u for us in _units(compiled).values() for u in us)


def test_the_cpu_row_merges_this_mlps_units_and_equals_jax_jit(measured):
  # The CPU's measured figures (a call: about 17 us) against units of a few
  # ops on 4 x 16 values: merged where nothing arrives in between; the step
  # equals jax.jit's.
  assert jax.devices()[0].platform == "cpu"
  assert dispatch_cost.for_platform("cpu") == dispatch_cost.MEASURED["cpu"]
  compiled, args = _compile("1F1B")
  assert any("+" in u for us in _units(compiled).values() for u in us), _units(compiled)
  _equals_jax_jit(compiled, args)


def test_the_figures_reach_the_replayed_pipeline(monkeypatch):
  monkeypatch.setenv("MPMD_DISPATCH_COST", "30,5,1000")
  params = init_mlp(P, width=16)
  xs = jax.random.normal(jax.random.key(1), (M, 4, 16))
  ys = jax.random.normal(jax.random.key(2), (M, 4, 4))
  config = mpmd.make_config(make_topology(P, 1), {f"stage{s}": f"m{s}" for s in range(P)},
                            pipeline_schedule="GPipe")
  args = mpmd.jit(accumulating_step, config).lower(params, xs, ys).mpmd_opt_args()
  assert any("dispatch-cost=30,5,1000" in a for a in args), args


def test_parse_and_for_platform(monkeypatch):
  assert dispatch_cost.parse("30,5,1000") == dispatch_cost.DispatchCost(30, 5, 1000)
  assert dispatch_cost.parse("0") == dispatch_cost.DispatchCost()
  for bad in ("30,5", "a,b,c", "30,-5,1000", ""):
    with pytest.raises(KnobError, match="MPMD_DISPATCH_COST=.*CALL_US,KERNEL_US,GFLOPS"):
      dispatch_cost.parse(bad)
  monkeypatch.delenv("MPMD_DISPATCH_COST", raising=False)
  assert dispatch_cost.for_platform("no-such-platform") == dispatch_cost.DispatchCost()
  monkeypatch.setenv("MPMD_DISPATCH_COST", "12,0.5,80")
  assert dispatch_cost.for_platform("cpu") == dispatch_cost.parse("12,0.5,80")


def test_measure_gives_positive_figures():
  cost = dispatch_cost.measure(jax.devices()[0], calls=20)
  assert cost.call_us > 0 and cost.kernel_us >= 0 and cost.gflops > 0
  assert dispatch_cost.parse(str(cost)).call_us == pytest.approx(cost.call_us, rel=1e-5)
