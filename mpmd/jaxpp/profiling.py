"""`collect_task_times_ms`: how long each task of a compiled step ran.

While the context is active, every call of an `mpmd_jit_with_loop` /
`mpmd_jit_by_yield` function runs through `mpmd.Compiled.trace`, which records
when each fragment call started and ended on its mesh; the durations are
collected under JaxPP's task names (``fwd_1__0``, ``bwd_0__3``,
``bwdA_2__1``, ``bwdW_2__1``; a call that runs several units, such as a
forward merged with its backward, is ``FusedTask(fwd_1__3, bwd_1__3)``).
Fragment calls outside the microbatch loop (the optimizer update, ...) are
keyed by their program's name. Tracing waits for each call to finish, so a
traced step runs slower than an untraced one: use it to compare tasks, not
to time steps. Single process only.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator

import jax

from mpmd.schedule.task_lists import FusedTask, Task, TaskType

__all__ = ["collect_task_times_ms"]

_ACTIVE: list[dict[str, list[float]]] = []
_UNIT = re.compile(r"([FBW])(\d+)(?:\.s(\d+))?")


def active() -> bool:
  """Whether some `collect_task_times_ms` context is collecting."""
  return bool(_ACTIVE)


def _task_name(unit: str, mesh_index: int, split_backward: bool) -> str | None:
  """JaxPP's name of a call that ran ``unit`` (``F3``, ``B0.s2``, ``F3+B3``)
  on group ``mesh_index``; None when it is not a scheduling unit."""
  tasks = []
  for part in unit.split("+"):
    match = _UNIT.fullmatch(part)
    if match is None:
      return None
    kind, microbatch, stage = match.groups()
    stage = int(stage) if stage is not None else mesh_index
    task_type = {"F": TaskType.FWD, "W": TaskType.BWD_W,
                 "B": TaskType.BWD_I if split_backward else TaskType.BWD}[kind]
    tasks.append(Task(task_type, stage, int(microbatch)))
  return str(tasks[0]) if len(tasks) == 1 else str(FusedTask(*tasks))


def record(trace, mesh_index: dict[str, int], split_backward: bool) -> None:
  """Adds the fragment calls of ``trace`` (a `RuntimeTrace`) to every active
  collection."""
  for event in trace.calls:
    name = _task_name(event.name, mesh_index.get(event.mesh, 0), split_backward)
    ms = (event.end - event.start) * 1e3
    for times in _ACTIVE:
      times.setdefault(name or event.function, []).append(ms)


@contextlib.contextmanager
def collect_task_times_ms(enabled: bool = True) -> Iterator[dict[str, list[float]]]:
  """Collects the run time in milliseconds of every task of the compiled
  steps called inside the context.

  Yields a dict from task name to the list of its times (one per call; a
  task that runs in several steps has one entry per step). With
  ``enabled=False`` nothing is collected and steps run untraced.
  """
  times: dict[str, list[float]] = {}
  if not enabled:
    yield times
    return
  if jax.process_count() > 1:
    raise NotImplementedError("collect_task_times_ms runs in a single process (it traces "
                              "every fragment call of the step)")
  _ACTIVE.append(times)
  try:
    yield times
  finally:
    _ACTIVE.remove(times)
