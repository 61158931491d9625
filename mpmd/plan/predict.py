"""Predicted step time and memory of one candidate: a schedule, a grouping of
the units into its stages, and the measured costs.

A stage costs the sum of its units (forward, backward, and for a split
backward its ``B`` and ``W`` parts). The schedule runs as in
`mpmd.schedule.simulate` (each mesh runs its units in order, a unit starts
when its mesh is free and its inputs have arrived) except that durations are
per stage and the latency of a dependency between meshes is the transfer cost
of the bytes that cross that stage boundary.

After its last unit each mesh updates its parameters (and zeroed their
gradient accumulators at the start): ``update_seconds_per_byte x
(state_factor - 1) x`` its parameter bytes, added at the end of its timeline.

Memory per mesh (bytes per device): the resident state of its stages
(``state_factor`` x parameter bytes: parameters, gradient accumulator,
optimizer state), plus the activation stashes alive at the schedule's peak,
plus the largest scratch (XLA temp) of its programs. The stashes alive are
counted on the schedule's timeline under the default cost model (F = 1,
B = 2, or B = W = 1), a stash living from the end of its F to the end of its
B (of its W with a split backward), each weighted by its stage's stash bytes:
a figure that depends on the schedule and the grouping, not on the measured
times, so that a grouping search can use it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from mpmd import schedule as sched
from mpmd.schedule.core import run_in_order
from mpmd.schedule.simulate import stash_events
from mpmd.plan.costs import ProgramCosts, TransferCost
from mpmd.plan.errors import PlanError

__all__ = ["Grouping", "Prediction", "StageCosts", "memory_profile", "predict", "stage_costs"]

#: Stage ``s`` holds units ``groups[s][0] <= i < groups[s][1]``.
Grouping = tuple[tuple[int, int], ...]


@dataclasses.dataclass(frozen=True)
class StageCosts:
  """Per-stage costs of a grouping (index = stage)."""

  forward: tuple[float, ...]
  backward: tuple[float, ...]
  backward_input: tuple[float, ...] | None
  weight: tuple[float, ...] | None
  forward_latency: tuple[float, ...]   # stage s -> s + 1
  backward_latency: tuple[float, ...]  # stage s + 1 -> s
  resident_bytes: tuple[int, ...]
  stash_bytes: tuple[int, ...]
  temp_bytes: tuple[int, ...]
  update: tuple[float, ...] = ()       # seconds of the work outside the units

  @property
  def total(self) -> tuple[float, ...]:
    return tuple(f + b for f, b in zip(self.forward, self.backward))


def stage_costs(costs: ProgramCosts, groups: Grouping, transfer: TransferCost) -> StageCosts:
  """Sums the units of each group."""
  units = costs.units

  def total(attr: str, i: int, j: int) -> float:
    return sum(getattr(u, attr) for u in units[i:j])

  split = costs.splits
  cuts = [j - 1 for _, j in groups[:-1]]
  return StageCosts(
      forward=tuple(total("forward", i, j) for i, j in groups),
      backward=tuple(total("backward", i, j) for i, j in groups),
      backward_input=tuple(total("backward_input", i, j) for i, j in groups) if split else None,
      weight=tuple(total("weight", i, j) for i, j in groups) if split else None,
      forward_latency=tuple(transfer(costs.forward_cut_bytes[c]) for c in cuts),
      backward_latency=tuple(transfer(costs.backward_cut_bytes[c]) for c in cuts),
      resident_bytes=tuple(int(costs.state_factor * sum(u.param_bytes for u in units[i:j]))
                           for i, j in groups),
      stash_bytes=tuple(sum(u.stash_bytes for u in units[i:j]) for i, j in groups),
      temp_bytes=tuple(max(u.temp_bytes for u in units[i:j]) for i, j in groups),
      update=tuple(costs.update_seconds_per_byte * max(costs.state_factor - 1.0, 0.0)
                   * sum(u.param_bytes for u in units[i:j]) for i, j in groups),
  )


@dataclasses.dataclass(frozen=True)
class Prediction:
  """A candidate's predicted run.

  Attributes:
    schedule: the schedule.
    stages: the per-stage costs.
    start, end: predicted start and end (seconds) of every unit.
    makespan: predicted step time (seconds).
    busy: per mesh, seconds of work (its update included).
    updates: per mesh, (start, end) of its update after its last unit.
    peak_bytes: per mesh, predicted peak bytes per device.
  """

  schedule: sched.Schedule
  stages: StageCosts
  start: Mapping[sched.Unit, float]
  end: Mapping[sched.Unit, float]
  makespan: float
  busy: tuple[float, ...]
  peak_bytes: tuple[int, ...]
  updates: tuple[tuple[float, float], ...] = ()

  @property
  def bubble_fraction(self) -> float:
    """Idle time over meshes x makespan."""
    if self.makespan <= 0:
      return 0.0
    return 1.0 - sum(self.busy) / (len(self.busy) * self.makespan)

  def timeline(self, mesh: int) -> list[tuple[sched.Unit, float, float]]:
    return [(u, self.start[u], self.end[u]) for u in self.schedule.order(mesh)]


def _duration(schedule: sched.Schedule, stages: StageCosts):
  split = schedule.split_backward
  if split and stages.backward_input is None:
    raise PlanError(f"{schedule.name} has a split backward but the costs have no B/W split")
  f, b = stages.forward, stages.backward_input if split else stages.backward
  w = stages.weight

  def duration(u: sched.Unit) -> float:
    return f[u.stage] if u.kind == "F" else b[u.stage] if u.kind == "B" else w[u.stage]
  return duration


def run(schedule: sched.Schedule, stages: StageCosts
        ) -> tuple[dict[sched.Unit, float], dict[sched.Unit, float]]:
  """Start and end of every unit (`mpmd.schedule.core.run_in_order` with
  per-boundary latencies: an activation crossing forward from stage s costs
  `forward_latency[s]`, a gradient crossing back into stage s
  `backward_latency[s]`). Raises `ScheduleError` when the orders deadlock."""
  fwd_lat, bwd_lat = stages.forward_latency, stages.backward_latency

  def latency(d: sched.Unit, u: sched.Unit) -> float:
    if d.kind == "F" and d.stage < u.stage:
      return fwd_lat[d.stage]
    if d.kind == "B" and d.stage > u.stage:
      return bwd_lat[u.stage]
    return 0.0

  return run_in_order(schedule, _duration(schedule, stages), latency)


class MemoryProfile:
  """When each stage's stashes live on each mesh, under the default costs."""

  def __init__(self, schedule: sched.Schedule):
    release = "W" if schedule.split_backward else "B"
    result = sched.simulate(schedule, activation_release=release)
    self.events: list[list[tuple[float, int, int]]] = [
        stash_events(schedule, result.end, k, release) for k in range(schedule.num_meshes)]
    self.counts = result.peak_activations

  def peak_stash(self, stash_bytes: Sequence[int]) -> tuple[int, ...]:
    """Per mesh: the most stash bytes alive at once."""
    peaks = []
    for events in self.events:
      live = peak = 0
      for _, delta, stage in events:
        live += delta * stash_bytes[stage]
        peak = max(peak, live)
      peaks.append(peak)
    return tuple(peaks)


_PROFILES: dict[tuple, MemoryProfile] = {}


def memory_profile(schedule: sched.Schedule) -> MemoryProfile:
  """The `MemoryProfile` of a schedule (cached by its text and placement)."""
  key = (schedule.to_text(), schedule.stage_to_mesh, schedule.split_backward)
  profile = _PROFILES.get(key)
  if profile is None:
    if len(_PROFILES) > 256:
      _PROFILES.clear()
    profile = _PROFILES[key] = MemoryProfile(schedule)
  return profile


def peak_bytes(schedule: sched.Schedule, stages: StageCosts) -> tuple[int, ...]:
  """Per mesh: resident + peak live stashes + largest scratch (bytes per device)."""
  stash = memory_profile(schedule).peak_stash(stages.stash_bytes)
  out = []
  for k in range(schedule.num_meshes):
    on = schedule.stages_on(k)
    resident = sum(stages.resident_bytes[s] for s in on)
    temp = max((stages.temp_bytes[s] for s in on), default=0)
    out.append(resident + stash[k] + temp)
  return tuple(out)


def predict(schedule: sched.Schedule, stages: StageCosts) -> Prediction:
  """The predicted step of ``schedule`` with these stage costs."""
  start, end = run(schedule, stages)
  updates = []
  for k in range(schedule.num_meshes):
    last = max((end[u] for u in schedule.order(k)), default=0.0)
    seconds = sum(stages.update[s] for s in schedule.stages_on(k)) if stages.update else 0.0
    updates.append((last, last + seconds))
  makespan = max((e for _, e in updates), default=0.0)
  busy = tuple(sum(end[u] - start[u] for u in schedule.order(k)) + e - s
               for k, (s, e) in enumerate(updates))
  return Prediction(schedule, stages, start, end, makespan, busy, peak_bytes(schedule, stages),
                    tuple(updates))
