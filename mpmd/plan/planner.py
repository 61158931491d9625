"""`mpmd.plan`: choose the stages, the schedule and the number of microbatches
of a labelled training step from its measured costs.

    plan = mpmd.plan(step, topology, params, x, y, batch_argnums=(1, 2),
                     microbatches=(4, 8, 16))
    print(plan.candidates)                   # every alternative with its prediction
    train = mpmd.jit(step, plan.config)
    loss, params = train(*plan.split_batch(params, x, y))

The steps (see docs/planning.md): trace the step once per microbatch count
(`mpmd.plan.units`), measure each distinct unit's forward and backward on one
device and the transfer cost between two meshes (`mpmd.plan.costs`), search
groupings x schedules x microbatch counts (`mpmd.plan.search`, predictions
from `mpmd.plan.predict`), and build the config.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import numpy as np

from mpmd import schedule as sched
from mpmd.config import MpmdConfig, make_config
from mpmd.errors import MpmdError
from mpmd.jit import jit as mpmd_jit
from mpmd.plan import costs as costs_lib
from mpmd.plan.costs import ProgramCosts, Roofline, TransferCost
from mpmd.plan.errors import PlanError
from mpmd.plan.predict import Prediction
from mpmd.plan.search import (DEFAULT_SCHEDULES, TRAINING_SCHEDULES, Candidate, Candidates, SearchResult,
                              format_bytes, format_groups, search)
from mpmd.plan.units import TracedUnits, aval_bytes, trace_units

__all__ = ["Plan", "Problem", "config_from_dict", "parse_bytes", "plan", "split_batch"]

logger = logging.getLogger("mpmd")


def parse_bytes(value: Any) -> int | None:
  """``None``/``"none"`` -> None; an int; or text such as ``"512MiB"``, ``"2GB"``."""
  if value is None or (isinstance(value, str) and value.strip().lower() in ("none", "")):
    return None
  if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
    if value <= 0:
      raise PlanError(f"memory_budget must be positive, got {value}")
    return int(value)
  if isinstance(value, float) and value > 0:
    return int(value)
  m = re.fullmatch(r"\s*([0-9.]+)\s*([kmgt]?)(i?)b?\s*", str(value), re.I)
  if not m:
    raise PlanError(f"memory_budget must be bytes (an int, or text like '8GiB'), got {value!r}")
  power = " kmgt".index(m.group(2).lower() or " ")
  base = 1024 if m.group(3) else 1000
  return int(float(m.group(1)) * base**power)


@dataclasses.dataclass(frozen=True)
class Problem:
  """A step to plan and how to get its arguments: what a function named on
  ``python -m mpmd.plan module:function`` returns (the arguments of `plan`
  that describe the program; the command line gives the rest).

  Attributes:
    step: the training step.
    args: its arguments (with ``batch_argnums``: holding the global batch).
    batch_argnums: positions of the batch arguments (cut into microbatches).
    args_for: ``M -> args`` instead of ``args``.
    units: unit names in pipeline order (default: their forward order).
    microbatches: the allowed counts (the command line's
      ``--microbatches`` overrides them).
    static_argnums: static arguments of ``step``.
  """

  step: Callable[..., Any]
  args: tuple[Any, ...] = ()
  batch_argnums: tuple[int, ...] = ()
  args_for: Callable[[int], Sequence[Any]] | None = None
  units: Sequence[str] | None = None
  microbatches: Sequence[int] | None = None
  static_argnums: tuple[int, ...] = ()

  def plan(self, topology: Mapping[str, jax.sharding.Mesh], **options: Any) -> Plan:
    """`plan` of this problem on ``topology`` (``options``: `plan`'s others)."""
    kwargs = {"units": self.units, "args_for": self.args_for,
              "batch_argnums": self.batch_argnums, "microbatches": self.microbatches,
              "static_argnums": self.static_argnums} | options
    return plan(self.step, topology, *self.args, **kwargs)


@dataclasses.dataclass(frozen=True)
class Plan:
  """A planned pipeline.

  Attributes:
    config: a ready `MpmdConfig`: each unit mapped to its stage's mesh (and
      stage, with several stages per mesh), the chosen schedule, the given
      partitioning options.
    schedule: the chosen `mpmd.schedule.Schedule` (``schedule.name``).
    microbatches: the chosen number of microbatches.
    virtual_stages: stages per mesh.
    units: the unit names in pipeline order.
    groups: per stage, the names of its units.
    stage_meshes: per stage, its mesh.
    predicted_step_seconds: predicted time of one step.
    predicted_peak_bytes: per mesh, predicted peak bytes per device.
    predicted_bubble: predicted idle fraction.
    candidates: every alternative with its prediction (prints as a table).
    costs: the measured costs at the chosen microbatch count (all counts:
      `all_costs`).
    transfer: the transfer cost used.
    memory_budget: bytes per device (None: no limit).
    planning_seconds: wall time of `plan` (``measure_seconds`` of it tracing
      and measuring, ``search_seconds`` searching).
    compiles: unit programs compiled to measure.
    prediction: the chosen candidate's predicted timeline.
  """

  config: MpmdConfig
  schedule: sched.Schedule
  microbatches: int
  virtual_stages: int
  units: tuple[str, ...]
  groups: tuple[tuple[str, ...], ...]
  stage_meshes: tuple[str, ...]
  predicted_step_seconds: float
  predicted_peak_bytes: dict[str, int]
  predicted_bubble: float
  candidates: Candidates
  costs: ProgramCosts
  all_costs: tuple[ProgramCosts, ...]
  transfer: TransferCost
  memory_budget: int | None
  planning_seconds: float
  measure_seconds: float
  search_seconds: float
  compiles: int
  prediction: Prediction
  batch_argnums: tuple[int, ...] = ()

  @property
  def assignment(self) -> dict[str, str]:
    """Unit name -> mesh name."""
    return {u: mesh for group, mesh in zip(self.groups, self.stage_meshes) for u in group}

  @property
  def stage_assignment(self) -> dict[str, int] | None:
    """Unit name -> stage id, when meshes hold several stages (else None)."""
    if self.virtual_stages == 1:
      return None
    return {u: s for s, group in enumerate(self.groups) for u in group}

  def make_config(self, topology: Mapping[str, jax.sharding.Mesh] | None = None,
                  **make_config_kwargs: Any) -> MpmdConfig:
    """The plan as a config over another topology with the same mesh names
    (e.g. the global devices of a multi-process run), or with other
    `make_config` arguments."""
    if topology is None and not make_config_kwargs:
      return self.config
    kwargs = {"partitioning_options": self.config.partitioning_options} | make_config_kwargs
    return make_config(topology if topology is not None else self.config.topology,
                       self.assignment, name_to_stage_assignment=self.stage_assignment,
                       pipeline_schedule=self.schedule.name, **kwargs)

  def split_batch(self, *args: Any) -> tuple[Any, ...]:
    """``args`` with the batch arguments (``batch_argnums``) cut into
    ``microbatches`` slices: every leaf ``[B, ...]`` becomes ``[M, B/M, ...]``."""
    return split_batch(args, self.batch_argnums, self.microbatches)

  def write_png(self, path: str | os.PathLike[str], *, dpi: int = 110) -> str:
    """Draws the chosen schedule's predicted timeline (measured costs, in ms)."""
    from mpmd.plan.render import render_plan  # noqa: PLC0415 (matplotlib)
    return render_plan(self, path, dpi=dpi)

  def to_dict(self) -> dict[str, Any]:
    """A JSON-compatible summary (rebuild the config with `config_from_dict`)."""
    return {
        "schedule": self.schedule.name, "microbatches": self.microbatches,
        "virtual_stages": self.virtual_stages, "units": list(self.units),
        "groups": [list(g) for g in self.groups], "stage_meshes": list(self.stage_meshes),
        "predicted_step_seconds": self.predicted_step_seconds,
        "predicted_peak_bytes": dict(self.predicted_peak_bytes),
        "predicted_bubble": self.predicted_bubble, "memory_budget": self.memory_budget,
        "planning_seconds": self.planning_seconds,
        "transfer": dataclasses.asdict(self.transfer),
        "unit_costs": [dataclasses.asdict(u) for u in self.costs.units],
    }

  def summary(self) -> str:
    """A few lines: the choice, its prediction and the planning time."""
    stages = "; ".join(f"{mesh}: {', '.join(g)}" for g, mesh in zip(self.groups, self.stage_meshes))
    peaks = ", ".join(f"{m} {format_bytes(b)}" for m, b in self.predicted_peak_bytes.items())
    budget = format_bytes(self.memory_budget) if self.memory_budget else "none"
    ran = sum(c.predicted_seconds is not None for c in self.candidates)
    pruned = sum(c.status == "pruned" for c in self.candidates)
    rejections = sum(c.status == "rejected" for c in self.candidates)
    rejected = f" ({rejections} rejected by the compiler)" if rejections else ""
    return "\n".join([
        f"schedule {self.schedule.name}, {self.microbatches} microbatches, "
        f"{self.virtual_stages} stage(s) per mesh",
        f"stages: {stages}",
        f"predicted step {self.predicted_step_seconds * 1e3:.2f} ms, bubble "
        f"{self.predicted_bubble:.1%}; peak per device: {peaks} (budget {budget})",
        f"planned in {self.planning_seconds:.2f} s: {self.measure_seconds:.2f} s tracing and "
        f"measuring ({self.compiles} compiles), {self.search_seconds:.2f} s searching "
        f"({len(self.candidates)} candidates, {ran} simulated, {pruned} pruned by their bound), "
        f"{max(0.0, self.planning_seconds - self.measure_seconds - self.search_seconds):.2f} s "
        f"lowering the choice{rejected}",
    ])

  def __str__(self) -> str:
    return self.summary()


def config_from_dict(data: Mapping[str, Any], topology: Mapping[str, jax.sharding.Mesh],
                     **make_config_kwargs: Any) -> MpmdConfig:
  """The config of a plan saved with `Plan.to_dict` (e.g. sent to the other
  processes of a run), over ``topology``."""
  assignment = {u: mesh for group, mesh in zip(data["groups"], data["stage_meshes"])
                for u in group}
  stages = ({u: s for s, group in enumerate(data["groups"]) for u in group}
            if data["virtual_stages"] > 1 else None)
  return make_config(topology, assignment, name_to_stage_assignment=stages,
                     pipeline_schedule=data["schedule"], **make_config_kwargs)


def split_batch(args: Sequence[Any], batch_argnums: Sequence[int], m: int) -> tuple[Any, ...]:
  """Every leaf ``[B, ...]`` of the arguments at ``batch_argnums`` reshaped to
  ``[m, B/m, ...]``."""
  out = list(args)
  for i in batch_argnums:
    def cut(x, i=i):
      if not hasattr(x, "shape") or len(x.shape) == 0:
        raise PlanError(f"argument {i} has a leaf without a batch dimension: {x!r}")
      if x.shape[0] % m:
        raise PlanError(f"argument {i}: batch {x.shape[0]} is not divisible by {m} microbatches")
      return x.reshape((m, x.shape[0] // m) + tuple(x.shape[1:]))
    out[i] = jax.tree.map(cut, args[i])
  return tuple(out)


def _batch_size(args: Sequence[Any], batch_argnums: Sequence[int]) -> int:
  sizes = {leaf.shape[0] for i in batch_argnums for leaf in jax.tree.leaves(args[i])
           if hasattr(leaf, "shape") and len(leaf.shape)}
  if len(sizes) != 1:
    raise PlanError(f"the batch arguments {tuple(batch_argnums)} must share one leading (batch) "
                    f"dimension; found {sorted(sizes)}")
  return sizes.pop()


def _leaf_bytes(tree: Any) -> int:
  return sum(aval_bytes(x) for x in jax.tree.leaves(tree) if hasattr(x, "shape"))


def _state_bytes(args_by_m: Mapping[int, tuple], batch_argnums: Sequence[int]) -> int | None:
  """Bytes of the arguments that do not scale with the batch: the non-batch
  arguments, or (with ``args_for``) the leaves whose shapes do not change with
  the microbatch count."""
  first = next(iter(args_by_m.values()))
  if batch_argnums:
    return sum(_leaf_bytes(a) for i, a in enumerate(first) if i not in batch_argnums)
  if len(args_by_m) < 2:
    return None
  shapes = [[getattr(x, "shape", None) for x in jax.tree.leaves(a)] for a in args_by_m.values()]
  leaves = jax.tree.leaves(first)
  return sum(aval_bytes(x) for k, x in enumerate(leaves)
             if hasattr(x, "shape") and all(s[k] == shapes[0][k] for s in shapes))


def _device(topology: Mapping[str, jax.sharding.Mesh]) -> Any:
  for mesh in topology.values():
    for d in mesh.devices.flat:
      if d.process_index == jax.process_index():
        return d
  raise PlanError("no mesh of the topology has a device of this process")


def _default_budget(device: Any) -> int | None:
  try:
    stats = device.memory_stats()
  except Exception:  # noqa: BLE001 - backends without memory statistics
    return None
  limit = (stats or {}).get("bytes_limit")
  return int(limit) if limit else None


def _config_of(c: Candidate, schedule: sched.Schedule, names: Sequence[str],
               topology: Mapping[str, jax.sharding.Mesh],
               partitioning_options: Mapping[str, bool] | None,
               make_config_kwargs: Mapping[str, Any]
               ) -> tuple[MpmdConfig, tuple[tuple[str, ...], ...], tuple[str, ...]]:
  """The config of a candidate: (config, unit names per stage, mesh per stage)."""
  mesh_names = list(topology)
  groups = tuple(tuple(names[i:j]) for i, j in c.groups)
  stage_meshes = tuple(mesh_names[schedule.mesh_of(s)] for s in range(schedule.num_stages))
  assignment = {u: mesh for g, mesh in zip(groups, stage_meshes) for u in g}
  stage_ids = ({u: s for s, g in enumerate(groups) for u in g}
               if schedule.num_stages > len(mesh_names) else None)
  config = make_config(topology, assignment, name_to_stage_assignment=stage_ids,
                       pipeline_schedule=c.schedule, partitioning_options=partitioning_options,
                       **make_config_kwargs)
  return config, groups, stage_meshes


def _rejection(fun: Callable[..., Any], config: MpmdConfig, args: Sequence[Any],
               static_argnums: Sequence[int]) -> str | None:
  """None if the step lowers with ``config`` (traced and partitioned, not
  compiled), else the compiler's first error line."""
  try:
    mpmd_jit(fun, config, static_argnums=tuple(static_argnums)).lower(*args)
  except MpmdError as e:
    lines = [line for line in str(e).splitlines() if line.strip()]
    return next((line for line in lines if line.startswith("error:")), lines[0] if lines else
                type(e).__name__)
  return None


def _microbatch_arguments(args: Sequence[Any], args_for: Callable[[int], Sequence[Any]] | None,
                          batch_argnums: tuple[int, ...],
                          microbatches: Sequence[int] | int | None, num_meshes: int
                          ) -> tuple[list[int], Callable[[int], Sequence[Any]]]:
  """The allowed microbatch counts and ``M -> the step's arguments``."""
  if isinstance(microbatches, int):
    microbatches = (microbatches,)
  default = (num_meshes, 2 * num_meshes, 4 * num_meshes)
  if args_for is not None and args:
    raise PlanError("give the step's arguments either as *args or through args_for, not both")
  if args_for is None and not batch_argnums:
    if microbatches is None or len(microbatches) != 1:
      raise PlanError("to vary the number of microbatches give batch_argnums= (the arguments "
                      "holding the global batch) or args_for=M -> args; with the arguments as "
                      "they are, give microbatches= their one microbatch count")
    fixed = tuple(args)
    args_for = lambda m: fixed  # noqa: E731
  elif args_for is None:
    batch = _batch_size(args, batch_argnums)
    given = tuple(microbatches) if microbatches is not None else default
    microbatches = [m for m in given if batch % m == 0]
    if not microbatches:
      raise PlanError(f"no microbatch count in {list(given)} divides the batch of {batch}")
    whole = tuple(args)
    args_for = lambda m: split_batch(whole, batch_argnums, m)  # noqa: E731
  counts = sorted(set(microbatches if microbatches is not None else default))
  if any(not isinstance(m, (int, np.integer)) or isinstance(m, bool) or m < 1 for m in counts):
    raise PlanError(f"microbatches must be positive ints, got {counts}")
  return counts, args_for


def _search_and_verify(fun, topology, program_costs, args_by_m, names, schedules, budget,
                       transfer, *, virtual_stages, refine, verify, static_argnums,
                       partitioning_options, make_config_kwargs
                       ) -> tuple[SearchResult, list[Candidate], float]:
  """Searches; lowers the best candidate's config and, while the compiler
  rejects it (at most ``verify`` times), drops its schedule and searches
  again. Returns the last search, the rejected candidates and the search time
  (lowering excluded)."""
  remaining = list(schedules if schedules is not None else DEFAULT_SCHEDULES)
  rejected: list[Candidate] = []
  seconds = 0.0
  while True:
    result = search(program_costs, len(topology), remaining, virtual_stages=virtual_stages,
                    memory_budget=budget, transfer=transfer, refine=refine)
    seconds += result.seconds
    best, schedule = result.best, result.ranked[0][1]
    if len(rejected) >= verify:
      return result, rejected, seconds
    config, _, _ = _config_of(best, schedule, names, topology, partitioning_options,
                              make_config_kwargs)
    error = _rejection(fun, config, args_by_m[best.microbatches], static_argnums)
    if error is None:
      return result, rejected, seconds
    best.status, best.note = "rejected", error
    rejected.append(best)
    logger.info("mpmd.plan: the compiler rejected %s with %d microbatches: %s; trying the "
                "next schedule", best.schedule, best.microbatches, error)
    remaining = [n for n in remaining if sched.get_schedule(n).name != best.schedule]
    if not remaining:
      raise PlanError("the compiler rejected every schedule:\n  " + "\n  ".join(
          f"{c.schedule} M={c.microbatches} stages {format_groups(c.groups)}: {c.note}"
          for c in rejected))


def _check_uniform(topology: Mapping[str, jax.sharding.Mesh]) -> None:
  """The planner measures one mesh's costs for all: their shapes must agree."""
  (first_name, first), *rest = topology.items()
  for name, mesh in rest:
    if dict(mesh.shape) != dict(first.shape):
      raise PlanError(f"mesh {name!r} has axes {dict(mesh.shape)} but mesh {first_name!r} has "
                      f"{dict(first.shape)}: the planner measures the costs of one mesh for all "
                      "of them, so it needs meshes of one shape; plan on such a topology, or "
                      "label the stages yourself (mpmd.make_config takes meshes of different "
                      "shapes)")


def plan(fun: Callable[..., Any], topology: Mapping[str, jax.sharding.Mesh], *args: Any,
         units: Sequence[str] | None = None,
         args_for: Callable[[int], Sequence[Any]] | None = None,
         batch_argnums: Sequence[int] | int = (),
         microbatches: Sequence[int] | int | None = None,
         schedules: Sequence[str] | None = None,
         virtual_stages: Sequence[int] | int = 2,
         memory_budget: int | str | None = "device",
         estimate: str = "time",
         repeats: int = 5,
         transfer: TransferCost | None = None,
         roofline: Roofline | None = None,
         optimizer_state_factor: float | None = None,
         partitioning_options: Mapping[str, bool] | None = None,
         static_argnums: Sequence[int] = (),
         refine: int = 3,
         verify: int = 6,
         count_outside: bool = False,
         **make_config_kwargs: Any) -> Plan:
  """Chooses stages, schedule and microbatch count for ``fun`` on ``topology``.

  ``fun`` is a training step whose model is cut into small units, each a
  named computation (``block0`` ... ``blockN-1``), whose microbatches are
  iterated with `mpmd.fori_loop` / `mpmd.enumerated_for` / `mpmd.call`.
  The planner groups consecutive units into stages, picks a built-in schedule
  and a microbatch count, minimising the predicted step time within a memory
  budget per device, and returns a `Plan` whose ``config`` is ready for
  `mpmd.jit`.

  Args:
    fun: the step.
    topology: mesh name -> mesh, in pipeline order.
    *args: the step's arguments with the global batch (with
      ``batch_argnums``), or as they are (one fixed ``microbatches``).
    units: unit names in pipeline order (default: the order their forwards
      run in). Every named computation of the step must be a unit.
    args_for: ``args_for(M)`` returns the step's arguments for ``M``
      microbatches (instead of ``*args``).
    batch_argnums: positions of the arguments holding the global batch: each
      leaf ``[B, ...]`` is cut into ``[M, B/M, ...]`` for ``M`` microbatches
      (`Plan.split_batch` does the same for the chosen ``M``).
    microbatches: the allowed counts (default: ``P``, ``2P``, ``4P`` that
      divide the batch).
    schedules: built-in schedule names (default: every training schedule without a
      split backward, `mpmd.plan.DEFAULT_SCHEDULES`; name ZeroBubbleH1 etc. to try them).
    virtual_stages: stages per mesh for schedules that take any number.
    memory_budget: bytes per device (int or text like ``"8GiB"``); ``"device"``
      (default) the device's memory limit when JAX reports one, else no
      limit; None: no limit.
    estimate: ``"time"`` (run each unit program, median of ``repeats``) or
      ``"cost_analysis"`` (nothing runs: XLA's flops and bytes through
      ``roofline``).
    repeats: timed runs per program.
    transfer: the cost of moving bytes between meshes (default: measured with
      `jax.device_put` between the first two meshes; with
      ``"cost_analysis"``, bytes over the roofline's bandwidth).
    roofline: device rates for ``"cost_analysis"``.
    optimizer_state_factor: resident bytes per parameter byte; default
      inferred from the arguments that do not scale with the batch
      (parameters and optimizer state) plus one for the gradient accumulator.
    partitioning_options: passed to `make_config`.
    static_argnums: static arguments of ``fun``.
    refine: how many of the best candidates get their stage boundaries refined.
    verify: lower the step with the chosen config (traced and partitioned, not
      compiled); if the compiler rejects it, drop that schedule and search
      again; at most this many rejections (0: no check).
    count_outside: also measure the unlabelled work that feeds only the
      first unit, follows only from its backward, or follows only from the
      last unit's forward (an embedding, a head and loss that are not units)
      and count it with that unit (`mpmd.auto_stages` does; by default such
      work is not measured: put it in a unit).
    **make_config_kwargs: other `make_config` arguments.

  Raises:
    PlanError: the step cannot be planned, or no candidate fits the memory
      budget (the message names the smallest budget that fits).
  """
  # One piece (over 80 lines): the public entry point reads and checks its
  # many options in one place, then calls the steps, each code of its own
  # (trace_units, the cost measurer, the search over candidates, the
  # result's summary).
  t0 = time.perf_counter()
  if not topology:
    raise PlanError("the topology has no mesh")
  mesh_names = list(topology)
  _check_uniform(topology)
  p = len(mesh_names)
  batch_argnums = (batch_argnums,) if isinstance(batch_argnums, int) else tuple(batch_argnums)
  counts, args_for = _microbatch_arguments(args, args_for, batch_argnums, microbatches, p)
  if memory_budget != "device":
    parse_bytes(memory_budget)  # (fails before anything is measured)
  args_by_m = {m: tuple(args_for(m)) for m in counts}
  traced: dict[int, TracedUnits] = {m: trace_units(fun, a, units, static_argnums=static_argnums,
                                                    outside=count_outside)
                                    for m, a in args_by_m.items()}
  names = next(iter(traced.values())).names
  for m, t in traced.items():
    if t.names != names:
      raise PlanError(f"the units differ between microbatch counts: {names} vs {t.names} (M={m})")
  param_bytes = sum(u.param_bytes for u in next(iter(traced.values())).units)
  if optimizer_state_factor is None:
    state = _state_bytes(args_by_m, batch_argnums)
    factor = max(2.0, 1.0 + state / param_bytes) if state and param_bytes else 2.0
  else:
    factor = float(optimizer_state_factor)

  device = _device(topology)
  budget = _default_budget(device) if memory_budget == "device" else parse_bytes(memory_budget)
  names_tried = list(schedules) if schedules is not None else None
  split = any(sched.get_schedule(s).split_backward for s in (names_tried or DEFAULT_SCHEDULES))
  measurer = costs_lib.make_measurer(device, estimate, repeats, roofline)
  update = measurer.update(param_bytes) if param_bytes else 0.0
  outside = [u for m in counts if traced[m].outside is not None
             for u in traced[m].outside.programs()]
  measurer.units([u for m in counts for u in traced[m].units] + outside, split)  # all at once
  program_costs = tuple(costs_lib.measure_units(traced[m], m, measurer, split=split,
                                                state_factor=factor,
                                                update_seconds_per_byte=update)
                        for m in counts)
  if transfer is None:
    if p == 1:
      transfer = TransferCost()
    elif estimate == "cost_analysis":
      transfer = TransferCost(0.0, 1.0 / measurer.roofline.bytes_per_second)
    else:
      sizes = {b for t in traced.values() for b in (*t.forward_cut_bytes, *t.backward_cut_bytes)}
      transfer = costs_lib.measure_transfer(topology[mesh_names[0]], topology[mesh_names[1]],
                                            sorted(sizes), repeats)
  measure_seconds = time.perf_counter() - t0

  result, rejected, search_seconds = _search_and_verify(
      fun, topology, program_costs, args_by_m, names, names_tried, budget, transfer,
      virtual_stages=virtual_stages, refine=refine, verify=verify,
      static_argnums=static_argnums, partitioning_options=partitioning_options,
      make_config_kwargs=make_config_kwargs)
  best, schedule = result.best, result.ranked[0][1]
  config, groups, stage_meshes = _config_of(best, schedule, names, topology,
                                            partitioning_options, make_config_kwargs)
  candidates = Candidates([*rejected, *result.candidates], names)
  chosen_costs = program_costs[counts.index(best.microbatches)]
  planning_seconds = time.perf_counter() - t0
  result_plan = Plan(
      config=config, schedule=schedule, microbatches=best.microbatches,
      virtual_stages=best.virtual_stages, units=names, groups=groups, stage_meshes=stage_meshes,
      predicted_step_seconds=best.predicted_seconds,
      predicted_peak_bytes=dict(zip(mesh_names, best.peak_bytes)),
      predicted_bubble=best.bubble, candidates=candidates, costs=chosen_costs,
      all_costs=program_costs, transfer=transfer, memory_budget=budget,
      planning_seconds=planning_seconds, measure_seconds=measure_seconds,
      search_seconds=search_seconds, compiles=measurer.compiles,
      prediction=result.prediction(best),
      batch_argnums=batch_argnums)
  logger.info("mpmd.plan: %s (stages %s)", result_plan.summary().replace("\n", "; "),
              format_groups(best.groups))
  return result_plan
