"""Pictures and traces of a simulated schedule.

- `render_png`: a timeline, one row per mesh, one box per unit (F blue,
  B green, W purple; lighter shades for later virtual stages), labelled with
  the microbatch; the title carries the bubble fraction. Uses matplotlib's
  Agg backend (no display needed).
- `chrome_trace` / `write_chrome_trace`: Chrome trace-event JSON (open in
  ``chrome://tracing`` or https://ui.perfetto.dev): one process, one thread per
  mesh, one complete ("X") event per unit.
"""

from __future__ import annotations

import json
import os
from typing import Any

from mpmd.schedule.core import Schedule, Unit
from mpmd.schedule.simulate import SimulationResult, simulate

_BASE = {"F": (0.20, 0.45, 0.75), "B": (0.22, 0.62, 0.35),
         "W": (0.55, 0.40, 0.70)}


def _chunk(schedule: Schedule, stage: int) -> int:
  """Index of ``stage`` among the stages of its mesh (its virtual stage)."""
  return schedule.stages_on(schedule.mesh_of(stage)).index(stage)


def unit_color(schedule: Schedule, unit: Unit) -> tuple[float, float, float]:
  """RGB of a unit's box: by kind, lightened for later virtual stages."""
  base = _BASE[unit.kind]
  per_mesh = max(len(schedule.stages_on(k)) for k in range(schedule.num_meshes))
  if per_mesh <= 1:
    return base
  t = 0.55 * _chunk(schedule, unit.stage) / (per_mesh - 1)
  return tuple(c + (1.0 - c) * t for c in base)  # type: ignore[return-value]


def _title(schedule: Schedule, result: SimulationResult) -> str:
  v = schedule.virtual_stages
  shape = f"P={schedule.num_meshes}, M={schedule.num_microbatches}"
  if schedule.num_stages != schedule.num_meshes:
    shape += f", V={v}" if v else f", S={schedule.num_stages}"
  return (f"{schedule.name or 'schedule'} ({shape}): bubble "
          f"{result.bubble_fraction:.1%}, makespan {result.makespan:g}, peak "
          f"activations {result.peak_activation}")


def render_png(schedule: Schedule, result: SimulationResult | None,
               path: str | os.PathLike[str], *, dpi: int = 110) -> str:
  """Draws ``schedule``'s simulated timeline to a PNG file.

  Args:
    schedule: the schedule.
    result: its simulation; ``simulate(schedule)`` when None.
    path: output file.
    dpi: resolution.

  Returns:
    The path written.
  """
  # The object-oriented API with the Agg canvas: no pyplot global state.
  from matplotlib.backends.backend_agg import FigureCanvasAgg
  from matplotlib.figure import Figure
  from matplotlib.patches import Patch, Rectangle

  if result is None:
    result = simulate(schedule)
  P = schedule.num_meshes
  span = result.makespan or 1.0
  width = min(max(8.0, 0.22 * span + 2.0), 30.0)
  height = 0.9 + 0.45 * P
  fig = Figure(figsize=(width, height), dpi=dpi)
  FigureCanvasAgg(fig)
  ax = fig.add_subplot()
  pts_per_unit = (width * 0.82 * 72.0) / span
  vs = max(len(schedule.stages_on(k)) for k in range(P))
  for k in range(P):
    y = P - 1 - k
    for u, t0, t1 in result.timeline(k):
      w = t1 - t0
      ax.add_patch(Rectangle((t0, y + 0.08), w, 0.84,
                             facecolor=unit_color(schedule, u),
                             edgecolor="white", linewidth=0.8))
      label = str(u.microbatch)
      size = min(9.0, w * pts_per_unit / (0.62 * len(label) + 0.6))
      if size >= 4.5:
        ax.text(t0 + w / 2, y + 0.5, label, ha="center", va="center",
                fontsize=size, color="white" if _chunk(schedule, u.stage) == 0
                or vs == 1 else "black")
  ax.set_xlim(0, span)
  ax.set_ylim(0, P)
  ax.set_yticks([P - 1 - k + 0.5 for k in range(P)])
  ax.set_yticklabels([f"mesh {k}  ({result.bubble_fractions[k]:.0%} idle)"
                      for k in range(P)], fontsize=8)
  ax.set_xlabel("time (cost-model units)", fontsize=8)
  ax.tick_params(axis="x", labelsize=7)
  for side in ("top", "right", "left"):
    ax.spines[side].set_visible(False)
  ax.set_title(_title(schedule, result), fontsize=9)
  names = {"F": "forward", "B": "backward (act. grad)" if
           schedule.split_backward else "backward", "W": "weight grad"}
  handles = [Patch(facecolor=_BASE[k], label=names[k]) for k in schedule.kinds]
  if vs > 1:
    handles.append(Patch(facecolor=(0.85, 0.85, 0.85),
                         label="lighter = later virtual stage"))
  ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.12 - 0.6 / P),
            ncol=len(handles), fontsize=7, frameon=False)
  fig.savefig(path, dpi=dpi, bbox_inches="tight", pad_inches=0.1)
  return os.fspath(path)


def chrome_trace(schedule: Schedule, result: SimulationResult | None = None, *,
                 time_scale_us: float = 1000.0) -> dict[str, Any]:
  """The simulated timeline as a Chrome trace-event dict.

  Args:
    schedule: the schedule.
    result: its simulation; ``simulate(schedule)`` when omitted.
    time_scale_us: microseconds per cost-model time unit (default: 1 unit =
      1 ms).

  Returns:
    ``{"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}``
    with process 0 = the schedule, thread k = mesh k, one ``"X"`` event per
    unit (name ``F3.s1``; args: kind, microbatch, stage, mesh).
  """
  if result is None:
    result = simulate(schedule)
  events: list[dict[str, Any]] = [{
      "name": "process_name", "ph": "M", "pid": 0, "tid": 0,
      "args": {"name": schedule.name or "schedule"}}]
  for k in range(schedule.num_meshes):
    events.append({"name": "thread_name", "ph": "M", "pid": 0, "tid": k,
                   "args": {"name": f"mesh {k}"}})
    events.append({"name": "thread_sort_index", "ph": "M", "pid": 0,
                   "tid": k, "args": {"sort_index": k}})
  for k in range(schedule.num_meshes):
    for u, t0, t1 in result.timeline(k):
      events.append({
          "name": str(u), "cat": u.kind, "ph": "X", "pid": 0, "tid": k,
          "ts": t0 * time_scale_us, "dur": (t1 - t0) * time_scale_us,
          "args": {"kind": u.kind, "microbatch": u.microbatch,
                   "stage": u.stage, "mesh": k}})
  return {
      "traceEvents": events,
      "displayTimeUnit": "ms",
      "otherData": {
          "schedule": schedule.name or "schedule",
          "num_meshes": schedule.num_meshes,
          "num_microbatches": schedule.num_microbatches,
          "num_stages": schedule.num_stages,
          "makespan": result.makespan,
          "bubble_fraction": result.bubble_fraction,
          "peak_activations": list(result.peak_activations),
      },
  }


def write_chrome_trace(schedule: Schedule, result: SimulationResult | None,
                       path: str | os.PathLike[str], *,
                       time_scale_us: float = 1000.0) -> str:
  """Writes `chrome_trace` as JSON to ``path`` (``result`` None: simulate
  with the default cost model); returns the path."""
  with open(path, "w", encoding="utf-8") as f:
    json.dump(chrome_trace(schedule, result, time_scale_us=time_scale_us), f)
  return os.fspath(path)
