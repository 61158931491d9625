"""Simulating a schedule under a cost model: times, bubbles, live activations.

Every mesh runs its units one at a time, in its order; a unit starts as soon
as its mesh is free and its data dependencies have ended (plus the transfer
latency when a dependency ran on another mesh). See `core.Schedule` for the
dependencies. Orders that cannot run raise `DeadlockError`, naming the meshes
and units that wait on each other.

Figures:

- ``makespan``: end of the last unit (every mesh starts at time 0).
- bubble fraction of a mesh: its idle time / makespan; overall: total idle
  time / (P x makespan).
- live activations: the activation stash of unit (s, m) lives from the end of
  ``F(s, m)`` until the end of ``B(s, m)`` (by default), or until the end of
  ``W(s, m)`` with ``activation_release="W"`` (split backward: the weight
  gradient still needs the stage's inputs). Counted per mesh in (stage,
  microbatch) stashes: with V virtual stages each is 1/V of a mesh's layers.
  Forward-only schedules stash nothing (peak 0).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from mpmd.schedule.core import Schedule, ScheduleError, Unit, run_in_order


@dataclasses.dataclass(frozen=True)
class CostModel:
  """Durations of units and the transfer latency between meshes.

  Attributes:
    forward: time of one ``F``.
    backward: time of one ``B``; default 2 for a full backward and 1 for the
      activation-gradient part of a split backward.
    weight: time of one ``W`` (split backward only).
    latency: added between a unit and a dependency on another mesh.
  """

  forward: float = 1.0
  backward: float | None = None
  weight: float = 1.0
  latency: float = 0.0

  def __post_init__(self):
    for field in ("forward", "backward", "weight", "latency"):
      v = getattr(self, field)
      if v is not None and not v >= 0:
        raise ScheduleError(f"cost model: {field} must be >= 0; got {v!r}")

  def backward_time(self, split: bool) -> float:
    """Time of one ``B`` for a full (``split=False``) or split backward."""
    if self.backward is not None:
      return self.backward
    return 1.0 if split else 2.0

  def duration(self, unit: Unit, schedule: Schedule) -> float:
    """Time ``unit`` takes in ``schedule``."""
    if unit.kind == "F":
      return self.forward
    if unit.kind == "B":
      return self.backward_time(schedule.split_backward)
    return self.weight


@dataclasses.dataclass(frozen=True)
class SimulationResult:
  """What `simulate` computed.

  Attributes:
    schedule: the simulated schedule.
    cost: the cost model used.
    start, end: start and end time of every unit.
    makespan: end of the last unit.
    busy: per mesh, the sum of its units' durations.
    peak_activations: per mesh, the most activation stashes alive at once.
    activation_release: ``"B"`` or ``"W"``, see the module docstring.
  """

  schedule: Schedule
  cost: CostModel
  start: Mapping[Unit, float]
  end: Mapping[Unit, float]
  makespan: float
  busy: tuple[float, ...]
  peak_activations: tuple[int, ...]
  activation_release: str = "B"

  @property
  def idle(self) -> tuple[float, ...]:
    """Per mesh: makespan - busy."""
    return tuple(self.makespan - b for b in self.busy)

  @property
  def bubble_fractions(self) -> tuple[float, ...]:
    """Per mesh: idle / makespan."""
    if self.makespan == 0:
      return tuple(0.0 for _ in self.busy)
    return tuple(i / self.makespan for i in self.idle)

  @property
  def bubble_fraction(self) -> float:
    """Overall: total idle / (P x makespan)."""
    if self.makespan == 0:
      return 0.0
    return sum(self.idle) / (len(self.busy) * self.makespan)

  @property
  def peak_activation(self) -> int:
    """The largest per-mesh peak."""
    return max(self.peak_activations, default=0)

  def timeline(self, mesh: int) -> list[tuple[Unit, float, float]]:
    """``(unit, start, end)`` of ``mesh``'s units in order."""
    return [(u, self.start[u], self.end[u])
            for u in self.schedule.order(mesh)]

  def summary(self) -> str:
    """A few lines: makespan, bubble fractions, peak activations."""
    per_mesh = " ".join(f"{b:.1%}" for b in self.bubble_fractions)
    peaks = " ".join(str(p) for p in self.peak_activations)
    c = self.cost
    costs = (f"F={c.forward:g} B={c.backward_time(self.schedule.split_backward):g}"
             + (f" W={c.weight:g}" if self.schedule.split_backward else "")
             + (f" latency={c.latency:g}" if c.latency else ""))
    return "\n".join([
        f"cost model: {costs}",
        f"makespan: {self.makespan:g}",
        f"bubble fraction: {self.bubble_fraction:.1%} (per mesh: {per_mesh})",
        f"peak live activations per mesh: {peaks}"
        + (f" (released at {self.activation_release})"
           if self.schedule.split_backward else ""),
    ])


def simulate(schedule: Schedule, cost: CostModel | None = None, *,
             activation_release: str = "B") -> SimulationResult:
  """Runs ``schedule`` under ``cost`` (default `CostModel()`).

  Args:
    schedule: a structurally valid schedule.
    cost: durations and latency.
    activation_release: ``"B"`` (default) or ``"W"``: which unit's end frees
      a stage's activation stash (``"W"`` only matters for a split backward).

  Raises:
    DeadlockError: the orders cannot run; names the wait-for cycle.
  """
  cost = cost or CostModel()
  if activation_release not in ("B", "W"):
    raise ScheduleError("activation_release must be 'B' or 'W'")
  start, end = run_in_order(schedule, lambda u: cost.duration(u, schedule),
                            cost.latency)
  makespan = max(end.values(), default=0.0)
  busy = tuple(sum(end[u] - start[u] for u in schedule.order(k))
               for k in range(schedule.num_meshes))
  release = activation_release if schedule.split_backward else "B"
  peaks = tuple(_peak_live(schedule, end, k, release)
                for k in range(schedule.num_meshes))
  return SimulationResult(schedule, cost, start, end, makespan, busy, peaks,
                          release)


def stash_events(schedule: Schedule, end: Mapping[Unit, float], mesh: int,
                 release: str) -> list[tuple[float, int, int]]:
  """``(time, +1 or -1, stage)`` of ``mesh``: a stage's activation stash
  appears at the end of each ``F`` and goes at the end of each ``release``
  unit; sorted by time, releases first at equal times."""
  events = []
  for u in schedule.order(mesh):
    if u.kind == "F":
      events.append((end[u], 1, u.stage))
    elif u.kind == release:
      events.append((end[u], -1, u.stage))
  events.sort(key=lambda e: (e[0], e[1]))
  return events


def _peak_live(schedule: Schedule, end: Mapping[Unit, float], mesh: int,
               release: str) -> int:
  if schedule.forward_only:
    return 0
  live = peak = 0
  for _, delta, _ in stash_events(schedule, end, mesh, release):
    live += delta
    peak = max(peak, live)
  return peak
