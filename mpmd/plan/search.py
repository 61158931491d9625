"""The search: which units form each stage, which schedule, how many
microbatches.

For every allowed microbatch count ``M`` and schedule (with its number of
stages ``S = P x V``), the units are grouped into ``S`` contiguous stages by
`min_max_partition`: an exact dynamic programme (``O(S N^2)``) minimising the
largest stage cost (forward + backward), ties broken towards even stages,
subject to the memory budget of each stage's mesh. Every candidate gets a
lower bound on its step time (its busiest mesh's work, plus, for one stage
per mesh, the forward that must reach the mesh first and the backward that
must leave it last); candidates are simulated (`mpmd.plan.predict`) in order
of their bounds and those whose bound is above the best prediction so far
are skipped (ties are simulated: the one with less memory wins). The best
few are then refined by moving stage boundaries one unit at a time while the
prediction improves.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Iterable, Sequence

from mpmd import schedule as sched
from mpmd.plan.costs import ProgramCosts, TransferCost
from mpmd.plan.errors import PlanError
from mpmd.plan.predict import Grouping, Prediction, memory_profile, peak_bytes, predict, stage_costs

__all__ = ["Candidate", "Candidates", "SearchResult", "TRAINING_SCHEDULES", "format_bytes",
           "format_groups", "min_max_partition", "search"]

#: The built-in schedules that train (every one but the forward-only one).
TRAINING_SCHEDULES = tuple(n for n in sched.SCHEDULES
                           if n != "ParallelPipelinesWithWrapAround")

#: What `mpmd.plan` searches by default: the training schedules without a
#: split backward. Measured on two pinned processes, a split-backward
#: schedule ran about 25% slower than predicted from its units' B and W
#: costs (the split's own overheads are not in the cost model yet), so it is
#: tried only when named in `schedules=`.
DEFAULT_SCHEDULES = tuple(n for n in TRAINING_SCHEDULES
                          if not sched.get_schedule(n).split_backward)

StageCost = Callable[[int, int, int], float]  # (stage, first unit, end) -> cost


def min_max_partition(num_units: int, num_parts: int, cost: StageCost,
                      allowed: Callable[[int, int, int], bool] | None = None
                      ) -> Grouping | None:
  """The contiguous grouping of ``num_units`` units into ``num_parts`` non-empty
  groups minimising the largest ``cost(part, i, j)`` (group ``i <= unit < j``).

  Exact for the largest cost (dynamic programme over prefixes); among
  groupings with the same largest cost it prefers a smaller sum of squared
  costs (a heuristic tie-break towards even groups). ``allowed(part, i, j)``
  rules groups out (e.g. over the memory budget); None when no grouping is
  allowed or ``num_parts > num_units``.
  """
  n, p = num_units, num_parts
  if p < 1 or p > n:
    return None
  inf = (math.inf, math.inf)
  # best[k][j]: (largest, sum of squares) of the first j units in k groups.
  best = [[inf] * (n + 1) for _ in range(p + 1)]
  back = [[-1] * (n + 1) for _ in range(p + 1)]
  best[0][0] = (0.0, 0.0)
  for k in range(1, p + 1):
    # Group k-1 ends at j; the k-1 groups before it hold at least k-1 units and
    # the groups after it need at least p-k units.
    for j in range(k, n - (p - k) + 1):
      for i in range(k - 1, j):
        prev = best[k - 1][i]
        if prev[0] == math.inf:
          continue
        if allowed is not None and not allowed(k - 1, i, j):
          continue
        c = cost(k - 1, i, j)
        cand = (max(prev[0], c), prev[1] + c * c)
        if cand < best[k][j]:
          best[k][j], back[k][j] = cand, i
  if best[p][n][0] == math.inf:
    return None
  groups, j = [], n
  for k in range(p, 0, -1):
    i = back[k][j]
    groups.append((i, j))
    j = i
  return tuple(reversed(groups))


def format_groups(groups: Grouping | None) -> str:
  """``0-2 | 3 | 4-7``: the unit indices of each stage."""
  if not groups:
    return "-"
  return " | ".join(f"{i}" if j - i == 1 else f"{i}-{j - 1}" for i, j in groups)


def format_bytes(n: float | None) -> str:
  """Bytes in KiB / MiB / GiB."""
  if n is None:
    return "-"
  for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
    if abs(n) >= size:
      return f"{n / size:.1f} {unit}"
  return f"{int(n)} B"


@dataclasses.dataclass
class Candidate:
  """One (schedule, virtual stages, microbatches) alternative.

  Attributes:
    schedule: built-in schedule name.
    virtual_stages: stages per mesh.
    microbatches: number of microbatches.
    groups: the grouping evaluated (stage -> units ``i <= u < j``), or None.
    lower_bound: seconds no run of this candidate can beat (None: not bounded).
    predicted_seconds: predicted step time, None when not simulated.
    bubble: predicted bubble fraction.
    peak_bytes: predicted peak per mesh (bytes per device).
    status: ``"chosen"``, ``"ok"``, ``"rejected"`` (the compiler refused its
      config), ``"pruned"`` (bound > best), ``"over budget"``, ``"invalid"``.
    note: why, for the last four.
  """

  schedule: str
  virtual_stages: int
  microbatches: int
  groups: Grouping | None = None
  lower_bound: float | None = None
  predicted_seconds: float | None = None
  bubble: float | None = None
  peak_bytes: tuple[int, ...] | None = None
  status: str = "ok"
  note: str = ""

  @property
  def max_peak_bytes(self) -> int | None:
    return max(self.peak_bytes) if self.peak_bytes else None


_STATUS_ORDER = {"chosen": 0, "ok": 1, "rejected": 2, "pruned": 3, "over budget": 4,
                 "invalid": 5}


def _short(text: str, limit: int = 72) -> str:
  return text if len(text) <= limit else text[:limit - 3] + "..."


class Candidates(tuple):
  """Every candidate of a search (a tuple of `Candidate`); prints as a table,
  best first."""

  def __new__(cls, items: Iterable[Candidate] = (), names: Sequence[str] = ()):
    self = super().__new__(cls, items)
    self.names = tuple(names)
    return self

  def ranked(self) -> list[Candidate]:
    """Chosen first, then by status and predicted time."""
    return sorted(self, key=lambda c: (
        _STATUS_ORDER[c.status], c.predicted_seconds if c.predicted_seconds is not None
        else math.inf, c.lower_bound or 0.0))

  def table(self, limit: int | None = None) -> str:
    """The candidates as a text table, best first (at most ``limit`` rows)."""
    rows = self.ranked()
    shown = rows if limit is None else rows[:limit]
    header = ["schedule", "V", "M", "stages (units)", "step (ms)", "bound (ms)", "bubble",
              "peak/device", "status"]
    lines = [header]
    for c in shown:
      lines.append([
          c.schedule, str(c.virtual_stages), str(c.microbatches), format_groups(c.groups),
          f"{c.predicted_seconds * 1e3:.2f}" if c.predicted_seconds is not None else "-",
          f"{c.lower_bound * 1e3:.2f}" if c.lower_bound is not None else "-",
          f"{c.bubble:.1%}" if c.bubble is not None else "-",
          format_bytes(c.max_peak_bytes),
          c.status + (f": {_short(c.note)}" if c.note else "")])
    widths = [max(len(r[i]) for r in lines) for i in range(len(header))]
    out = ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in lines]
    out.insert(1, "  ".join("-" * w for w in widths))
    if limit is not None and len(rows) > limit:
      out.append(f"... {len(rows) - limit} more")
    if self.names:
      out.append("units: " + ", ".join(f"{i}={n}" for i, n in enumerate(self.names)))
    return "\n".join(out)

  def __str__(self) -> str:
    return self.table()


@dataclasses.dataclass
class SearchResult:
  """What `search` found.

  Attributes:
    best: the candidate with the least predicted step time (status "chosen").
    candidates: every candidate.
    ranked: the simulated candidates, best first, with their schedules and
      costs (to fall back on when the best one cannot be used).
    transfer: the transfer cost the predictions used.
    seconds: how long the search took.
    simulations: how many schedules it simulated.
  """

  best: Candidate
  candidates: Candidates
  ranked: list[tuple[Candidate, sched.Schedule, ProgramCosts]]
  transfer: TransferCost
  seconds: float
  simulations: int

  def prediction(self, candidate: Candidate | None = None) -> Prediction:
    """The predicted run of ``candidate`` (default: the best)."""
    candidate = candidate or self.best
    for c, schedule, pc in self.ranked:
      if c is candidate:
        return predict(schedule, stage_costs(pc, c.groups, self.transfer))
    raise PlanError(f"{candidate.schedule} (M={candidate.microbatches}) was not simulated")

  def choose(self, candidate: Candidate) -> None:
    """Makes ``candidate`` the chosen one (the best was rejected)."""
    if self.best.status == "chosen":
      self.best.status = "ok"
    candidate.status = "chosen"
    self.best = candidate


def _expand(schedules: Iterable[str], virtual_stages: Sequence[int]) -> list[tuple[str, int]]:
  out = []
  for name in schedules:
    entry = sched.get_schedule(name)
    if entry.virtual_stages == "1":
      out.append((entry.name, 1))
    elif entry.virtual_stages == "2":
      out.append((entry.name, 2))
    else:
      out.extend((entry.name, v) for v in virtual_stages)
  seen, unique = set(), []
  for item in out:
    if item not in seen:
      seen.add(item)
      unique.append(item)
  return unique


def _lower_bound(schedule: sched.Schedule, costs: ProgramCosts, groups: Grouping) -> float:
  m, split = schedule.num_microbatches, schedule.split_backward
  totals = [sum(u.work(split) for u in costs.units[i:j]) for i, j in groups]
  loads = [sum(totals[s] for s in schedule.stages_on(k)) for k in range(schedule.num_meshes)]
  extra = max(costs.state_factor - 1.0, 0.0) * costs.update_seconds_per_byte
  updates = [extra * sum(u.param_bytes for s in schedule.stages_on(k)
                         for u in costs.units[groups[s][0]:groups[s][1]])
             for k in range(schedule.num_meshes)]
  bound = max(m * load + update for load, update in zip(loads, updates))
  if schedule.num_stages == schedule.num_meshes and schedule.placement == "looped":
    fwd = [sum(u.forward for u in costs.units[i:j]) for i, j in groups]
    bwd = [sum(u.backward for u in costs.units[i:j]) for i, j in groups]  # (not split)
    for k in range(schedule.num_meshes):
      tail = 0.0 if schedule.split_backward else sum(bwd[:k])
      bound = max(bound, sum(fwd[:k]) + m * loads[k] + max(tail, updates[k]))
  return bound


class _Evaluator:
  """Groups, bounds and simulates candidates of one search."""

  def __init__(self, num_meshes: int, budget: int | None, transfer: TransferCost):
    self.num_meshes, self.budget, self.transfer = num_meshes, budget, transfer
    self.simulations = 0

  def memory_of_stage(self, schedule: sched.Schedule, costs: ProgramCosts) -> StageCost:
    """An upper estimate of one stage's share of its mesh's memory."""
    counts = memory_profile(schedule).counts
    v = max(1, schedule.num_stages // schedule.num_meshes)
    units = costs.units

    def memory(stage: int, i: int, j: int) -> float:
      count = math.ceil(counts[schedule.mesh_of(stage)] / v)
      return (costs.state_factor * sum(u.param_bytes for u in units[i:j])
              + count * sum(u.stash_bytes for u in units[i:j])
              + max(u.temp_bytes for u in units[i:j]) / v)
    return memory

  def group(self, schedule: sched.Schedule, costs: ProgramCosts) -> Grouping | None:
    prefix = [0.0]
    for u in costs.units:
      prefix.append(prefix[-1] + u.work(schedule.split_backward))
    time_cost = lambda s, i, j: prefix[j] - prefix[i]  # noqa: E731
    n, s = len(costs.units), schedule.num_stages
    if self.budget is None:
      return min_max_partition(n, s, time_cost)
    memory = self.memory_of_stage(schedule, costs)
    v = max(1, s // schedule.num_meshes)
    limit = self.budget / v
    groups = min_max_partition(n, s, time_cost, lambda st, i, j: memory(st, i, j) <= limit)
    if groups is None and v > 1:  # the per-stage share is conservative: try unconstrained
      groups = min_max_partition(n, s, time_cost)
    return groups

  def smallest_memory(self, schedule: sched.Schedule, costs: ProgramCosts
                      ) -> tuple[Grouping | None, int | None]:
    """The grouping with the least peak memory found, and that peak."""
    groups = min_max_partition(len(costs.units), schedule.num_stages,
                               self.memory_of_stage(schedule, costs))
    if groups is None:
      return None, None
    return groups, max(self.peak(schedule, costs, groups))

  def peak(self, schedule: sched.Schedule, costs: ProgramCosts, groups: Grouping
           ) -> tuple[int, ...]:
    return peak_bytes(schedule, stage_costs(costs, groups, self.transfer))

  def fits(self, peaks: Sequence[int]) -> bool:
    return self.budget is None or max(peaks) <= self.budget

  def simulate(self, schedule: sched.Schedule, costs: ProgramCosts, groups: Grouping
               ) -> Prediction:
    self.simulations += 1
    return predict(schedule, stage_costs(costs, groups, self.transfer))

  def refine(self, schedule: sched.Schedule, costs: ProgramCosts, groups: Grouping,
             current: Prediction, max_steps: int = 60) -> tuple[Grouping, Prediction]:
    """Moves single stage boundaries by one unit while the prediction improves."""
    steps = 0
    improved = True
    while improved and steps < max_steps:
      improved = False
      for b in range(len(groups) - 1):
        for delta in (-1, 1):
          cut = groups[b][1] + delta
          if not groups[b][0] < cut < groups[b + 1][1]:
            continue
          trial = list(groups)
          trial[b] = (groups[b][0], cut)
          trial[b + 1] = (cut, groups[b + 1][1])
          trial_groups = tuple(trial)
          steps += 1
          p = self.simulate(schedule, costs, trial_groups)
          if p.makespan < current.makespan * (1 - 1e-9) and self.fits(p.peak_bytes):
            groups, current, improved = trial_groups, p, True
            break
        if improved or steps >= max_steps:
          break
    return groups, current


def _key(c: Candidate) -> tuple:
  return (c.predicted_seconds, c.max_peak_bytes or 0)


def search(costs: Sequence[ProgramCosts], num_meshes: int, schedules: Iterable[str] | None = None,
           *, virtual_stages: Sequence[int] | int = 2, memory_budget: int | None = None,
           transfer: TransferCost | None = None, refine: int = 3) -> SearchResult:
  """Finds the candidate with the least predicted step time within the budget.

  Args:
    costs: one `ProgramCosts` per allowed microbatch count.
    num_meshes: meshes of the topology (P).
    schedules: built-in schedule names; default `TRAINING_SCHEDULES`. Split
      backward schedules need split costs (skipped otherwise).
    virtual_stages: stages per mesh tried for schedules that take any number.
    memory_budget: bytes per device, None for no limit.
    transfer: the cost of moving a boundary's bytes between meshes.
    refine: how many of the best candidates get their boundaries refined.

  Raises:
    PlanError: nothing can run (no candidate, or none within the budget: the
      message names the smallest budget that fits).
  """
  t0 = time.perf_counter()
  transfer = transfer or TransferCost()
  vs = (virtual_stages,) if isinstance(virtual_stages, int) else tuple(virtual_stages)
  specs = _expand(TRAINING_SCHEDULES if schedules is None else schedules, vs)
  ev = _Evaluator(num_meshes, memory_budget, transfer)
  candidates: list[Candidate] = []
  pending: list[tuple[float, Candidate, sched.Schedule, ProgramCosts]] = []
  over: list[tuple[int, Candidate, sched.Schedule, ProgramCosts, Grouping]] = []
  for pc in costs:
    n = len(pc.units)
    for name, v in specs:
      c = Candidate(name, v, pc.microbatches)
      candidates.append(c)
      try:
        schedule = sched.get_schedule(name)(num_meshes, pc.microbatches, v)
      except sched.ScheduleError as e:
        c.status, c.note = "invalid", str(e)
        continue
      if schedule.forward_only:
        c.status, c.note = "invalid", "forward only"
        continue
      if schedule.split_backward and not pc.splits:
        c.status, c.note = "invalid", "no split-backward (B/W) costs"
        continue
      if schedule.num_stages > n:
        c.status, c.note = "invalid", f"{schedule.num_stages} stages > {n} units"
        continue
      groups = ev.group(schedule, pc)
      if groups is None or not ev.fits(ev.peak(schedule, pc, groups)):
        small_groups, small = ev.smallest_memory(schedule, pc)
        c.groups = small_groups
        c.status = "over budget"
        c.note = f"needs {format_bytes(small)}" if small is not None else "no grouping"
        if small is not None:
          over.append((small, c, schedule, pc, small_groups))
        continue
      c.groups = groups
      c.lower_bound = _lower_bound(schedule, pc, groups)
      pending.append((c.lower_bound, c, schedule, pc))
  if not pending:
    if over:
      small, c, schedule, pc, groups = min(over, key=lambda o: o[0])
      raise PlanError(
          f"no candidate fits the memory budget of {format_bytes(memory_budget)} "
          f"({memory_budget} bytes) per device; the smallest budget that fits is "
          f"{format_bytes(small)} ({small} bytes): {c.schedule} with {c.microbatches} "
          f"microbatches, stages {format_groups(groups)}")
    reasons = sorted({f"{c.schedule}: {c.note}" for c in candidates})
    raise PlanError("no schedule can run this program: " + "; ".join(reasons[:8]))
  pending.sort(key=lambda p: p[0])
  best: Candidate | None = None
  evaluated: list[tuple[Candidate, sched.Schedule, ProgramCosts, Prediction]] = []
  for bound, c, schedule, pc in pending:
    if best is not None and bound > best.predicted_seconds * (1 + 1e-9):
      c.status = "pruned"
      c.note = f"bound {bound * 1e3:.2f} ms > best {best.predicted_seconds * 1e3:.2f} ms"
      continue
    p = ev.simulate(schedule, pc, c.groups)
    c.predicted_seconds, c.bubble, c.peak_bytes = p.makespan, p.bubble_fraction, p.peak_bytes
    evaluated.append((c, schedule, pc, p))
    if best is None or _key(c) < _key(best):
      best = c
  evaluated.sort(key=lambda e: _key(e[0]))
  if refine > 0:
    for c, schedule, pc, p in evaluated[:refine]:
      groups, p = ev.refine(schedule, pc, c.groups, p)
      c.groups, c.predicted_seconds = groups, p.makespan
      c.bubble, c.peak_bytes = p.bubble_fraction, p.peak_bytes
      c.lower_bound = _lower_bound(schedule, pc, groups)
    evaluated.sort(key=lambda e: _key(e[0]))
  evaluated[0][0].status = "chosen"
  return SearchResult(evaluated[0][0], Candidates(candidates, costs[0].names),
                      [(c, schedule, pc) for c, schedule, pc, _ in evaluated], transfer,
                      time.perf_counter() - t0, ev.simulations)
