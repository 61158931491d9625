"""JaxPP-style task lists: ``Task``, ``FusedTask``, the schedule classes whose
``tasks(n)`` returns them, and their conversion to and from `Schedule`.

JaxPP describes a schedule as ``tasks(n_microbatches)``: one list per MPMD
rank (mesh) of `Task` (one stage's forward or backward of one microbatch),
`FusedTask` (tasks run as one program, e.g. the last stage's forward and
backward) and ``None`` (an idle slot of a time-step grid). Tasks print as in
JaxPP: ``fwd_2__0`` is the forward of stage 2 for microbatch 0; ``bwd_`` a full
backward, ``bwdA_`` / ``bwdW_`` the activation- and weight-gradient parts of a
split backward; ``FusedTask(fwd_3__0, bwd_3__0)``.

The classes below reproduce JaxPP's schedules (its documentation and the
task lists its tutorial prints), written from their definitions:
`Std1F1B`, `Eager1F1B`, `GPipe` and `ZeroBubble` return fixed-length time-step
grids with ``None`` in idle slots; `Interleaved1F1B`, `KimiK2` and `DualPipeV`
return compact lists. `from_tasks` turns any such lists into a `Schedule`
(a fused task = its tasks back to back; ``None`` dropped), and
``schedule.to_schedule(n)`` does it with the schedule's placement.
"""

from __future__ import annotations

import abc
import dataclasses
import enum
import re
from collections.abc import Iterable, Iterator, Sequence

from mpmd.schedule import builtin
from mpmd.schedule.core import Schedule, ScheduleError, Unit, v_placement


class TaskType(enum.Enum):
  """Kind of a JaxPP task (the values are JaxPP's)."""

  FWD = 1
  BWD = 2
  BWD_I = 3
  BWD_W = 4

  @property
  def prefix(self) -> str:
    """Name prefix: ``fwd``, ``bwd``, ``bwdA`` or ``bwdW``."""
    return _PREFIX[self]

  @property
  def default_latency(self) -> int:
    """JaxPP's list-scheduling latency: FWD 1, BWD 2, BWD_I 1, BWD_W 1."""
    return 2 if self is TaskType.BWD else 1


_PREFIX = {TaskType.FWD: "fwd", TaskType.BWD: "bwd", TaskType.BWD_I: "bwdA",
           TaskType.BWD_W: "bwdW"}
_BY_NAME = {
    "fwd": TaskType.FWD, "f": TaskType.FWD, "forward": TaskType.FWD,
    "bwd": TaskType.BWD, "b": TaskType.BWD, "backward": TaskType.BWD,
    "bwda": TaskType.BWD_I, "bwd_i": TaskType.BWD_I, "bwdi": TaskType.BWD_I,
    "bwdw": TaskType.BWD_W, "bwd_w": TaskType.BWD_W, "w": TaskType.BWD_W,
}
_TASK_NAME = re.compile(r"(fwd|bwd|bwdA|bwdW)_(\d+)__(\d+)")


@dataclasses.dataclass(frozen=True)
class Task:
  """One JaxPP task: ``kind`` of ``stage`` for ``microbatch``.

  ``kind`` is a `TaskType` or one of ``"fwd"``, ``"bwd"``, ``"bwdA"``,
  ``"bwdW"`` (also the enum names). ``str(Task(TaskType.FWD, 2, 0))`` is
  ``fwd_2__0``.
  """

  kind: TaskType
  stage: int
  microbatch: int

  def __post_init__(self):
    kind = self.kind
    if isinstance(kind, str):
      key = kind.lower()
      kind = _BY_NAME.get(key) or TaskType.__members__.get(kind.upper())
      if kind is None:
        raise ScheduleError(f"unknown task kind {self.kind!r}; expected fwd, "
                            "bwd, bwdA or bwdW")
      object.__setattr__(self, "kind", kind)
    elif not isinstance(kind, TaskType):
      raise ScheduleError(f"task kind must be a TaskType; got {kind!r}")
    for field in ("stage", "microbatch"):
      v = getattr(self, field)
      if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise ScheduleError(f"task {field} must be a non-negative int; "
                            f"got {v!r}")

  @property
  def latency(self) -> int:
    """JaxPP's default latency of the task kind."""
    return self.kind.default_latency

  @property
  def name(self) -> str:
    """JaxPP's name, e.g. ``fwd_2__0``."""
    return f"{self.kind.prefix}_{self.stage}__{self.microbatch}"

  def __str__(self) -> str:
    return self.name

  def __repr__(self) -> str:
    return self.name

  @classmethod
  def parse(cls, name: str) -> "Task":
    """Parses a JaxPP task name such as ``bwdA_3__1``."""
    match = _TASK_NAME.fullmatch(name.strip())
    if not match:
      raise ScheduleError(f"bad task name {name!r}; expected "
                          "<fwd|bwd|bwdA|bwdW>_<stage>__<microbatch>")
    return cls(match.group(1), int(match.group(2)), int(match.group(3)))

  def units(self, split_backward: bool) -> tuple[Unit, ...]:
    """The schedule units this task stands for.

    ``fwd`` -> F; ``bwdA`` -> B; ``bwdW`` -> W; ``bwd`` -> B, or B then W
    when the schedule's backward is split.
    """
    s, m = self.stage, self.microbatch
    if self.kind is TaskType.FWD:
      return (Unit("F", m, s),)
    if self.kind is TaskType.BWD_I:
      return (Unit("B", m, s),)
    if self.kind is TaskType.BWD_W:
      return (Unit("W", m, s),)
    if split_backward:
      return (Unit("B", m, s), Unit("W", m, s))
    return (Unit("B", m, s),)


class FusedTask:
  """Tasks run as one program, in the given order.

  ``str(FusedTask(a, b))`` is ``FusedTask(fwd_3__0, bwd_3__0)``. Nested fused
  tasks are flattened.
  """

  __slots__ = ("tasks",)

  def __init__(self, *tasks: Task | FusedTask):
    flat: list[Task] = []
    for t in tasks:
      if isinstance(t, FusedTask):
        flat.extend(t.tasks)
      elif isinstance(t, Task):
        flat.append(t)
      else:
        raise ScheduleError(f"FusedTask takes Tasks; got {t!r}")
    if not flat:
      raise ScheduleError("a FusedTask needs at least one task")
    self.tasks: tuple[Task, ...] = tuple(flat)

  @property
  def latency(self) -> int:
    """Sum of the tasks' latencies."""
    return sum(t.latency for t in self.tasks)

  def __iter__(self) -> Iterator[Task]:
    return iter(self.tasks)

  def __len__(self) -> int:
    return len(self.tasks)

  def __getitem__(self, i: int) -> Task:
    return self.tasks[i]

  def __eq__(self, other: object) -> bool:
    return isinstance(other, FusedTask) and self.tasks == other.tasks

  def __hash__(self) -> int:
    return hash(("FusedTask", self.tasks))

  def __str__(self) -> str:
    return f"FusedTask({', '.join(t.name for t in self.tasks)})"

  __repr__ = __str__


TaskEntry = Task | FusedTask | None
ScheduleTasks = list[list[TaskEntry]]
"""One list per MPMD rank (mesh) of tasks, fused tasks and idle slots."""


def _flatten(entry: object, where: str) -> list[Task]:
  if entry is None:
    return []
  if isinstance(entry, Task):
    return [entry]
  if isinstance(entry, FusedTask):
    return list(entry.tasks)
  if isinstance(entry, str):
    return [Task.parse(entry)]
  if isinstance(entry, (tuple, list)):
    return [t for e in entry for t in _flatten(e, where)]
  raise ScheduleError(f"{where}: expected a Task, FusedTask or None; "
                      f"got {entry!r}")


def from_tasks(task_lists: Sequence[Iterable[TaskEntry]], *,
               stage_to_mesh: Sequence[int] | None = None,
               num_microbatches: int | None = None,
               name: str | None = None) -> Schedule:
  """Turns JaxPP-style per-rank task lists into a `Schedule`.

  Rank ``k``'s list becomes mesh ``k``'s order. A `FusedTask` contributes its
  tasks back to back, ``None`` (an idle slot) nothing; task names (strings)
  are parsed. The backward is split iff some task is ``bwdA``/``bwdW``; then
  a plain ``bwd`` task means B followed by W.

  Args:
    task_lists: one iterable per rank.
    stage_to_mesh: placement; inferred from the ranks the stages appear on.
    num_microbatches: M; inferred as 1 + the largest microbatch.
    name: display name of the schedule.

  Raises:
    ScheduleError: bad entries, or lists that are not a valid schedule.
  """
  ranks = [[t for i, e in enumerate(lst)
            for t in _flatten(e, f"rank {k} entry {i}")]
           for k, lst in enumerate(task_lists)]
  if not ranks:
    raise ScheduleError("from_tasks: no ranks given")
  split = any(t.kind in (TaskType.BWD_I, TaskType.BWD_W)
              for r in ranks for t in r)
  orders = [[u for t in r for u in t.units(split)] for r in ranks]
  if stage_to_mesh is None:
    where: dict[int, int] = {}
    for k, r in enumerate(ranks):
      for t in r:
        if where.setdefault(t.stage, k) != k:
          raise ScheduleError(f"from_tasks: stage {t.stage} has tasks on rank "
                              f"{where[t.stage]} and rank {k} ({t})")
    num_stages = max(where, default=-1) + 1
    missing = [s for s in range(num_stages) if s not in where]
    if missing:
      raise ScheduleError(f"from_tasks: stages {missing} have no tasks; pass "
                          "stage_to_mesh=")
    stage_to_mesh = tuple(where[s] for s in range(num_stages))
  if num_microbatches is None:
    num_microbatches = 1 + max((t.microbatch for r in ranks for t in r),
                               default=0)
  forward_only = all(t.kind is TaskType.FWD for r in ranks for t in r)
  return Schedule(orders, num_microbatches=num_microbatches,
                  stage_to_mesh=stage_to_mesh, split_backward=split,
                  forward_only=forward_only, name=name)


def to_tasks(schedule: Schedule) -> ScheduleTasks:
  """A `Schedule` as JaxPP-style task lists (compact, nothing fused).

  ``B`` becomes ``bwd`` (``bwdA`` when the backward is split), ``W`` ``bwdW``.
  """
  kind = {"F": TaskType.FWD, "W": TaskType.BWD_W,
          "B": TaskType.BWD_I if schedule.split_backward else TaskType.BWD}
  return [[Task(kind[u.kind], u.stage, u.microbatch) for u in order]
          for _, order in schedule.items()]


def _positive(name: str, value: int) -> None:
  if not isinstance(value, int) or isinstance(value, bool) or value < 1:
    raise ScheduleError(f"the argument `{name}` must be a positive int; "
                        f"got {value!r}")


def _count(name: str, value: int) -> None:
  """Checks a schedule's size argument, worded as JaxPP words it."""
  if not isinstance(value, int) or isinstance(value, bool):
    raise ScheduleError(f"The argument `{name}` must be an int; got {value!r}")
  if value < 0:
    raise ScheduleError(f"The argument `{name}` must be `>= 0`; got {value} "
                        "(a schedule needs at least one)")
  if value == 0:
    raise ScheduleError(f"The argument `{name}` must be `>= 1`; got 0 "
                        "(a schedule needs at least one)")


@dataclasses.dataclass(frozen=True)
class BaseSchedule(abc.ABC):
  """A JaxPP-style schedule with one stage per rank (``stage == rank``).

  Subclasses implement ``tasks(n_microbatches)``.
  """

  num_stages: int

  def __post_init__(self):
    _count("num_stages", self.num_stages)

  @property
  def is_partial_bwd(self) -> bool:
    """Whether the backward is split into ``bwdA`` and ``bwdW`` tasks."""
    return False

  def get_mpmd_idx(self, stage_id: int) -> int:
    """The rank that runs ``stage_id``."""
    return stage_id

  @property
  def stage_to_mesh(self) -> tuple[int, ...]:
    """Rank of every stage."""
    return tuple(self.get_mpmd_idx(s) for s in range(self.num_stages))

  @abc.abstractmethod
  def tasks(self, n_microbatches: int) -> ScheduleTasks:
    """One list per rank of `Task` / `FusedTask` / ``None``."""

  def to_schedule(self, n_microbatches: int) -> Schedule:
    """``from_tasks(self.tasks(n))`` with this schedule's placement."""
    return from_tasks(self.tasks(n_microbatches),
                      stage_to_mesh=self.stage_to_mesh,
                      num_microbatches=n_microbatches,
                      name=type(self).__name__)


def _grid(ranks: int, length: int) -> ScheduleTasks:
  return [[None] * length for _ in range(ranks)]


def _one_f_one_b_grid(S: int, M: int, warmup: Sequence[int]) -> ScheduleTasks:
  """Time-step grid of a 1F1B-family schedule with per-stage warm-up counts.

  Stage s runs its warm-up forwards from step s on; from step ``2S-1-s`` on
  its slots alternate backward, forward, backward, ... (a slot stays idle
  once that kind has no microbatch left). ``2(M+S-1)`` steps.
  """
  length = 2 * (M + S - 1)
  grid = _grid(S, length)
  for s in range(S):
    nw = min(warmup[s], M)
    for m in range(nw):
      grid[s][s + m] = Task(TaskType.FWD, s, m)
    nf, nb = nw, 0
    for k, step in enumerate(range(2 * S - 1 - s, length)):
      if k % 2 == 0 and nb < M:
        grid[s][step] = Task(TaskType.BWD, s, nb)
        nb += 1
      elif k % 2 == 1 and nf < M:
        grid[s][step] = Task(TaskType.FWD, s, nf)
        nf += 1
  return grid


@dataclasses.dataclass(frozen=True)
class Std1F1B(BaseSchedule):
  """1F1B (PipeDream-flush): stage s runs ``S-s`` forwards, then alternates
  backward and forward. Grid of ``2(M+S-1)`` time steps with ``None``s."""

  def tasks(self, n_microbatches: int) -> ScheduleTasks:
    _positive("n_microbatches", n_microbatches)
    S = self.num_stages
    return _one_f_one_b_grid(S, n_microbatches, [S - s for s in range(S)])


@dataclasses.dataclass(frozen=True)
class Eager1F1B(BaseSchedule):
  """1F1B with ``2(S-s)-1`` warm-up forwards on stage s (capped at M), which
  lets sends overlap compute; same grid as `Std1F1B` otherwise."""

  def tasks(self, n_microbatches: int) -> ScheduleTasks:
    _positive("n_microbatches", n_microbatches)
    S = self.num_stages
    return _one_f_one_b_grid(S, n_microbatches,
                             [2 * (S - s) - 1 for s in range(S)])


@dataclasses.dataclass(frozen=True)
class GPipe(BaseSchedule):
  """All forwards, then all backwards: forward of microbatch m on stage s at
  step ``s+m``, its backward at step ``(M+S-1) + (S-1-s) + m``."""

  def tasks(self, n_microbatches: int) -> ScheduleTasks:
    _positive("n_microbatches", n_microbatches)
    S, M = self.num_stages, n_microbatches
    half = M + S - 1
    grid = _grid(S, 2 * half)
    for s in range(S):
      for m in range(M):
        grid[s][s + m] = Task(TaskType.FWD, s, m)
        grid[s][half + (S - 1 - s) + m] = Task(TaskType.BWD, s, m)
    return grid


@dataclasses.dataclass(frozen=True)
class ZeroBubble(BaseSchedule):
  """ZB-H1 with a split backward, as a grid of ``3M+S-1`` steps.

  Stage s: forwards at steps ``s .. S-1``; from step ``2S-1-s`` on, ``s``
  pairs (bwdA, fwd); from step ``2S-1+s`` on, the kinds rotate
  bwdA -> bwdW -> fwd, skipping a kind with no microbatch left. Needs
  ``M >= S``.
  """

  @property
  def is_partial_bwd(self) -> bool:
    return True

  def tasks(self, n_microbatches: int) -> ScheduleTasks:
    _positive("n_microbatches", n_microbatches)
    S, M = self.num_stages, n_microbatches
    if M < S:
      raise ScheduleError(f"ZeroBubble needs at least as many microbatches as "
                          f"stages; got {M} microbatches for {S} stages")
    grid = _grid(S, 3 * M + S - 1)
    for s in range(S):
      nxt = {TaskType.FWD: 0, TaskType.BWD_I: 0, TaskType.BWD_W: 0}

      def put(step: int, kind: TaskType) -> None:
        grid[s][step] = Task(kind, s, nxt[kind])
        nxt[kind] += 1

      for step in range(s, S):
        put(step, TaskType.FWD)
      for i, step in enumerate(range(2 * S - 1 - s, 2 * S - 1 + s)):
        put(step, TaskType.BWD_I if i % 2 == 0 else TaskType.FWD)
      rotation = (TaskType.BWD_I, TaskType.BWD_W, TaskType.FWD)
      turn = 0
      for step in range(2 * S - 1 + s, 3 * M + S - 1):
        for j in range(3):
          kind = rotation[(turn + j) % 3]
          if nxt[kind] < M:
            put(step, kind)
            turn = (turn + j + 1) % 3
            break
    return grid


@dataclasses.dataclass(frozen=True)
class InterleavedBaseSchedule(BaseSchedule):
  """``num_stages`` stages over ``mpmd_dim`` ranks, stage s on rank
  ``s % mpmd_dim`` (``num_stages`` must be a multiple of ``mpmd_dim``)."""

  mpmd_dim: int

  def __post_init__(self):
    super().__post_init__()
    _count("mpmd_dim", self.mpmd_dim)
    if self.num_stages % self.mpmd_dim:
      raise ScheduleError(f"num_stages={self.num_stages} can not be evenly divided by "
                          f"mpmd_dim={self.mpmd_dim} ({type(self).__name__} puts stage s on "
                          f"rank s % mpmd_dim; num_stages is not a multiple of mpmd_dim)")

  @property
  def vp(self) -> int:
    """Virtual stages per rank."""
    return self.num_stages // self.mpmd_dim

  def get_mpmd_idx(self, stage_id: int) -> int:
    return stage_id % self.mpmd_dim


@dataclasses.dataclass(frozen=True)
class Interleaved1F1B(InterleavedBaseSchedule):
  """Interleaved 1F1B (see `builtin.interleaved_1f1b`), compact lists.

  In the steady state a forward of the last stage is fused with the backward
  that follows it, ``FusedTask(fwd_7__0, bwd_7__0)``; with
  ``fuse_steady_state=True`` every steady-state forward/backward pair is.
  """

  fuse_steady_state: bool = False

  _extra_warmup = 0

  def tasks(self, n_microbatches: int) -> ScheduleTasks:
    _positive("n_microbatches", n_microbatches)
    out: ScheduleTasks = []
    for rank in range(self.mpmd_dim):
      warm, steady, cool = builtin.interleaved_plan(
          self.mpmd_dim, n_microbatches, self.vp, rank, self._extra_warmup,
          type(self).__name__)
      row: list[TaskEntry] = [_task(u) for u in warm]
      for f, b in steady:
        if self.fuse_steady_state or f.stage == self.num_stages - 1:
          row.append(FusedTask(_task(f), _task(b)))
        else:
          row.extend([_task(f), _task(b)])
      row.extend(_task(u) for u in cool)
      out.append(row)
    return out


@dataclasses.dataclass(frozen=True)
class KimiK2(Interleaved1F1B):
  """`Interleaved1F1B` with one more warm-up forward per rank."""

  _extra_warmup = 1


@dataclasses.dataclass(frozen=True)
class InterleavedGPipe(InterleavedBaseSchedule):
  """GPipe over interleaved stages: every forward, then every backward.

  Stage s runs on rank ``s % mpmd_dim``. Microbatches go in rounds of
  ``mpmd_dim``: rank r runs, round by round, the forwards of its stages in
  ascending order for each microbatch of the round; then, round by round, the
  backwards of its stages in descending order. Every rank follows one global
  order in which a task comes after the tasks it depends on, so the lists
  honour the data dependencies for any number of microbatches.
  """

  def tasks(self, n_microbatches: int) -> ScheduleTasks:
    _positive("n_microbatches", n_microbatches)
    P, M = self.mpmd_dim, n_microbatches
    rounds = [range(start, min(start + P, M)) for start in range(0, M, P)]
    out: ScheduleTasks = []
    for rank in range(P):
      stages = list(range(rank, self.num_stages, P))
      row: list[TaskEntry] = [Task(TaskType.FWD, s, m)
                              for rnd in rounds for s in stages for m in rnd]
      row += [Task(TaskType.BWD, s, m)
              for rnd in rounds for s in reversed(stages) for m in rnd]
      out.append(row)
    return out


def _task(u: Unit) -> Task:
  kind = {"F": TaskType.FWD, "B": TaskType.BWD, "W": TaskType.BWD_W}[u.kind]
  return Task(kind, u.stage, u.microbatch)


@dataclasses.dataclass(frozen=True)
class DualPipeV(InterleavedBaseSchedule):
  """JaxPP's DualPipeV: ``num_stages == 2 * mpmd_dim``, V-shaped placement
  (rank r holds stages r and 2·mpmd_dim-1-r), split backward, ``M >= S``.

  With ``P = mpmd_dim``, chunk 0 = stage r and chunk 1 = stage 2P-1-r, and
  ``B`` = FusedTask(bwdA, bwdW) (a whole backward), rank r runs:
  1. ``2(P-r-1)`` forwards of chunk 0;  2. ``r+1`` x (fwd 0, fwd 1);
  3. ``P-r-1`` x (bwdA 1, bwdW 1, fwd 1);
  4. ``M-2P+r+1`` x (FusedTask(fwd 0, B 1), FusedTask(fwd 1, B 0)) -- on the
     last rank the first pair is fwd 0 then B 1, unfused;
  5. ``P-r-1`` x (B 1, FusedTask(fwd 1, B 0));
  6. ``r+1`` x (B 1, B 0), where from iteration ``(r+1)//2`` on odd ranks run
     only bwdA of chunk 1 and even ranks only bwdA of chunk 0 (never for
     stage 0, whose bwdA must be followed by its bwdW);
  7. ``P-r-1`` x bwdA of chunk 0 (B 0 on rank 0);
  8. every bwdW not run yet, by (microbatch, stage).

  This differs from DeepSeek's / PyTorch's DualPipeV (`builtin.dual_pipe_v`)
  in phases 6-8: there the split backwards switch on for both chunks, and
  phase 7 interleaves the deferred W's.
  """

  def __post_init__(self):
    super().__post_init__()
    if self.num_stages != 2 * self.mpmd_dim:
      name = type(self).__name__
      raise ScheduleError(f"{name} only supports 2 * mpmd_dim stages, "
                          f"self.num_stages={self.num_stages} requested with "
                          f"self.mpmd_dim={self.mpmd_dim}: it needs num_stages == 2 * mpmd_dim "
                          f"(two stages per rank, placed in a V); use "
                          f"num_stages={2 * self.mpmd_dim}")

  @property
  def is_partial_bwd(self) -> bool:
    return True

  def get_mpmd_idx(self, stage_id: int) -> int:
    return v_placement(self.mpmd_dim, 2)[stage_id]

  def tasks(self, n_microbatches: int) -> ScheduleTasks:
    _positive("n_microbatches", n_microbatches)
    if n_microbatches < self.num_stages:
      raise ScheduleError(f"{type(self).__name__} requires n_mubatches={n_microbatches} >= "
                          f"self.num_stages={self.num_stages}: it needs at least as many "
                          f"microbatches as stages")
    return [self._rank(r, n_microbatches) for r in range(self.mpmd_dim)]

  def _rank(self, r: int, M: int) -> list[TaskEntry]:
    P = self.mpmd_dim
    s0, s1 = r, 2 * P - 1 - r
    nxt: dict[tuple[int, TaskType], int] = {}
    row: list[TaskEntry] = []

    def task(stage: int, kind: TaskType) -> Task:
      m = nxt.get((stage, kind), 0)
      nxt[(stage, kind)] = m + 1
      return Task(kind, stage, m)

    def fwd(stage: int) -> Task:
      return task(stage, TaskType.FWD)

    def bwd_a(stage: int) -> Task:
      return task(stage, TaskType.BWD_I)

    def whole_bwd(stage: int) -> FusedTask:
      return FusedTask(bwd_a(stage), task(stage, TaskType.BWD_W))

    for _ in range(2 * (P - r - 1)):
      row.append(fwd(s0))
    for _ in range(r + 1):
      row += [fwd(s0), fwd(s1)]
    for _ in range(P - r - 1):
      row += [bwd_a(s1), task(s1, TaskType.BWD_W), fwd(s1)]
    for i in range(M - 2 * P + r + 1):
      if i == 0 and r == P - 1:
        row += [fwd(s0), whole_bwd(s1)]
      else:
        row.append(FusedTask(fwd(s0), whole_bwd(s1)))
      row.append(FusedTask(fwd(s1), whole_bwd(s0)))
    for _ in range(P - r - 1):
      row += [whole_bwd(s1), FusedTask(fwd(s1), whole_bwd(s0))]
    half = (r + 1) // 2
    for i in range(r + 1):
      row.append(bwd_a(s1) if i >= half and r % 2 == 1 else whole_bwd(s1))
      split0 = s0 != 0 and i >= half and r % 2 == 0
      row.append(bwd_a(s0) if split0 else whole_bwd(s0))
    for _ in range(P - r - 1):
      row.append(whole_bwd(s0) if s0 == 0 else bwd_a(s0))
    rest = [Task(TaskType.BWD_W, s, m) for s in (s0, s1)
            for m in range(nxt.get((s, TaskType.BWD_W), 0), M)]
    row += sorted(rest, key=lambda t: (t.microbatch, t.stage))
    return row


__all__ = [
    "BaseSchedule", "DualPipeV", "Eager1F1B", "FusedTask", "GPipe",
    "Interleaved1F1B", "InterleavedBaseSchedule", "InterleavedGPipe", "KimiK2", "ScheduleTasks",
    "Std1F1B", "Task", "TaskType", "ZeroBubble", "from_tasks", "to_tasks",
]
