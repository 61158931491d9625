"""Resolve a `pipeline_schedule` against a program's scheduling units.

`make_config(pipeline_schedule=...)` accepts a built-in name ("1F1B",
"Interleaved1F1B", ...), a text table (one line per mesh, e.g.
``"m0: F0 F1 B0 B1\\nm1: F0 B0 F1 B1"``), an `mpmd.schedule.Schedule`, or a
JaxPP-style object with ``tasks(n_microbatches)``. The number of microbatches
(and of stages per mesh) is only known once the program is traced, so
resolution happens between import and scheduling.

Used by `mpmd.jit` (and lazily by `make_config`, to check the value early). It
imports the schedule library; `mpmd.schedule` does not import it, and neither
imports `mpmd.config` or `mpmd.jit`.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Sequence
from typing import Any

from mpmd import schedule as sched
from mpmd.errors import ConfigError, PartitionError


def check_spec(spec: Any) -> None:
  """Validates a `pipeline_schedule` value at `make_config` time."""
  if spec is None or isinstance(spec, sched.Schedule) or hasattr(spec, "tasks"):
    return
  if callable(spec):
    _check_schedule_function(spec)
    return
  if isinstance(spec, str):
    if ":" in spec:
      return  # A text table; parsed (with errors naming the line) when resolved.
    try:
      sched.get_schedule(spec)
    except (KeyError, ValueError) as e:
      raise ConfigError(str(e.args[0] if e.args else e)) from None
    return
  raise ConfigError(f"pipeline_schedule must be a schedule name, a text table, an "
                    f"mpmd.schedule.Schedule or an object with tasks(n), got {spec!r}")


def _spec_name(spec: Any) -> str:
  return getattr(spec, "__name__", None) or type(spec).__name__


def _check_schedule_function(spec: Any) -> None:
  """A schedule function must take (num_meshes, num_microbatches, virtual_stages)."""
  try:
    signature = inspect.signature(spec)
  except (TypeError, ValueError):
    return  # (no readable signature: found out when it is called)
  try:
    signature.bind(2, 4, None)
  except TypeError as e:
    raise ConfigError(
        f"pipeline_schedule {_spec_name(spec)!r} is a function of {signature}, which cannot be "
        f"called as a schedule function ({e}): it must take (num_meshes, num_microbatches, "
        "virtual_stages) and return an mpmd.schedule.Schedule; or pass a schedule name, a "
        "text table or a Schedule") from None


def _task_lists(spec: Any, num_microbatches: int) -> Any:
  """`spec.tasks(num_microbatches)`, checked to be one task list per mesh."""
  tasks = spec.tasks(num_microbatches)
  if tasks is None or isinstance(tasks, (str, bytes)) or not isinstance(tasks, Iterable):
    raise PartitionError(
        f"pipeline_schedule {_spec_name(spec)}.tasks({num_microbatches}) returned "
        f"{type(tasks).__name__}, not task lists: tasks(n_microbatches) must return one list "
        "of tasks per mesh (rank), e.g. [[Task('fwd', 0, 0), ...], [...]]")
  return tasks


def resolve(spec: Any, units: Sequence[Any], mesh_names: Sequence[str]) -> sched.Schedule:
  """The Schedule `spec` denotes for a program with these scheduling units.

  Args:
    spec: the `pipeline_schedule` of the config.
    units: the program's units (`mpmd._mpmd.Unit`: mesh, kind, microbatch, stage).
    mesh_names: topology order.
  """
  if not units:
    raise PartitionError("a pipeline_schedule needs microbatches: call the microbatch function "
                         "with mpmd.call(f, call_counter=i) (or mpmd.fori_loop / "
                         "mpmd.enumerated_for) so that named computations get a microbatch index")
  index = {name: i for i, name in enumerate(mesh_names)}
  num_meshes = len(mesh_names)
  num_microbatches = 1 + max(u.microbatch for u in units)
  stages = sorted({u.stage for u in units})
  num_stages = len(stages)
  if stages != list(range(num_stages)):
    raise PartitionError(f"stage ids of the program must be 0..{num_stages - 1}, got {stages}: "
                         "check name_to_stage_assignment")
  virtual = num_stages // num_meshes if num_stages % num_meshes == 0 else None
  if virtual is None:
    raise PartitionError(f"the program has {num_stages} stages on {num_meshes} meshes: a schedule "
                         "needs the same number of stages on every mesh")
  if isinstance(spec, sched.Schedule):
    schedule = spec
  elif isinstance(spec, str) and ":" in spec:
    schedule = sched.Schedule.from_text(spec, mesh_names=mesh_names)
  elif isinstance(spec, str):
    builder = sched.get_schedule(spec)
    schedule = builder(num_meshes, num_microbatches, virtual if virtual > 1 else None)
  elif hasattr(spec, "tasks"):
    schedule = sched.from_tasks(_task_lists(spec, num_microbatches),
                                num_microbatches=num_microbatches)
  else:
    schedule = spec(num_meshes, num_microbatches, virtual if virtual > 1 else None)
    if not isinstance(schedule, sched.Schedule):
      raise PartitionError(
          f"pipeline_schedule {getattr(spec, '__name__', spec)!r} returned "
          f"{type(schedule).__name__}, not an mpmd.schedule.Schedule: a schedule function "
          "takes (num_meshes, num_microbatches, virtual_stages) and returns a Schedule")
  if not isinstance(spec, sched.Schedule) and not (isinstance(spec, str) and ":" in spec):
    if all(u.kind == "F" for u in units) and not schedule.forward_only:
      schedule = forward_only(schedule)
  _check_placement(schedule, units, index, mesh_names)
  return schedule


def forward_only(schedule: sched.Schedule) -> sched.Schedule:
  """The schedule's forward units in its order: how a training schedule
  runs a forward-only (inference) program. Dropping units removes only
  constraints, so the result is deadlock-free when the schedule is."""
  orders = [[u for u in schedule.orders[m] if u.kind == "F"] for m in range(schedule.num_meshes)]
  return sched.Schedule(orders, num_microbatches=schedule.num_microbatches,
                        stage_to_mesh=schedule.stage_to_mesh, forward_only=True,
                        name=f"{schedule.name or 'schedule'} (forward only)")


def _check_placement(schedule: sched.Schedule, units, index, mesh_names) -> None:
  if schedule.num_meshes != len(mesh_names):
    raise PartitionError(f"the schedule {schedule.name or ''} has {schedule.num_meshes} meshes but "
                         f"the topology has {len(mesh_names)}")
  for u in units:
    mesh = index[u.mesh]
    if u.stage >= schedule.num_stages:
      raise PartitionError(f"the program has stage {u.stage} but the schedule has "
                           f"{schedule.num_stages} stages")
    want = schedule.stage_to_mesh[u.stage]
    if want != mesh:
      raise PartitionError(
          f"stage {u.stage} runs on mesh {u.mesh!r} in the program but the schedule "
          f"{schedule.name or ''} places it on {mesh_names[want]!r} ({schedule.placement} "
          "placement): fix name_to_mesh_assignment / name_to_stage_assignment")


def with_weight_after_backward(schedule: sched.Schedule) -> sched.Schedule:
  """The schedule with each W unit right after its B (for split backward
  fragments under a schedule that does not place W units itself)."""
  if schedule.split_backward:
    return schedule
  orders = [[v for u in schedule.orders[m]
             for v in ((u, sched.Unit("W", u.microbatch, u.stage)) if u.kind == "B" else (u,))]
            for m in range(schedule.num_meshes)]
  return sched.Schedule(orders, num_microbatches=schedule.num_microbatches,
                        stage_to_mesh=schedule.stage_to_mesh, split_backward=True,
                        name=f"{schedule.name or 'schedule'} (W after B)")
