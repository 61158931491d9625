"""The picture of a plan: its schedule's predicted timeline with the measured
costs (one row per mesh, labelled with its units; milliseconds on the x
axis). Boxes are coloured as in `mpmd.schedule.render` (forward blue,
backward green, weight gradient purple, lighter for later virtual stages);
grey boxes are the work outside the units (the update)."""

from __future__ import annotations

import os
from typing import Any

from mpmd.schedule.render import unit_color

__all__ = ["render_plan"]

_UPDATE = (0.6, 0.6, 0.6)


def render_plan(plan: Any, path: str | os.PathLike[str], *, dpi: int = 110) -> str:
  """Draws ``plan`` (an `mpmd.plan.Plan`) to a PNG file; returns the path."""
  from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: PLC0415
  from matplotlib.figure import Figure  # noqa: PLC0415
  from matplotlib.patches import Patch, Rectangle  # noqa: PLC0415

  prediction, schedule = plan.prediction, plan.schedule
  meshes = list(plan.predicted_peak_bytes)
  num = schedule.num_meshes
  span_ms = max(prediction.makespan * 1e3, 1e-9)
  width = min(max(9.0, 0.05 * sum(len(prediction.schedule.order(k)) for k in range(num))), 28.0)
  fig = Figure(figsize=(width, 1.2 + 0.5 * num), dpi=dpi)
  FigureCanvasAgg(fig)
  ax = fig.add_subplot()
  pts_per_ms = width * 0.75 * 72.0 / span_ms
  for k in range(num):
    y = num - 1 - k
    for u, t0, t1 in prediction.timeline(k):
      x0, w = t0 * 1e3, (t1 - t0) * 1e3
      ax.add_patch(Rectangle((x0, y + 0.08), w, 0.84, facecolor=unit_color(schedule, u),
                             edgecolor="white", linewidth=0.6))
      label = str(u.microbatch)
      if w * pts_per_ms >= 7 * len(label):
        ax.text(x0 + w / 2, y + 0.5, label, ha="center", va="center", fontsize=7, color="white")
    if prediction.updates and prediction.updates[k][1] > prediction.updates[k][0]:
      t0, t1 = prediction.updates[k]
      ax.add_patch(Rectangle((t0 * 1e3, y + 0.08), (t1 - t0) * 1e3, 0.84, facecolor=_UPDATE,
                             edgecolor="white", linewidth=0.6))
  labels = []
  for k in range(num):
    stages = [s for s in range(schedule.num_stages) if schedule.mesh_of(s) == k]
    units = " + ".join(f"{g[0]}" + (f"..{g[-1]}" if len(g) > 1 else "")
                       for g in (plan.groups[s] for s in stages))
    busy = prediction.busy[k] / prediction.makespan if prediction.makespan else 0.0
    labels.append(f"{meshes[k]}: {units}  ({1 - busy:.0%} idle)")
  ax.set_xlim(0, span_ms)
  ax.set_ylim(0, num)
  ax.set_yticks([num - 1 - k + 0.5 for k in range(num)])
  ax.set_yticklabels(labels, fontsize=8)
  ax.set_xlabel("predicted time (ms), from the measured unit costs", fontsize=8)
  ax.tick_params(axis="x", labelsize=7)
  for side in ("top", "right", "left"):
    ax.spines[side].set_visible(False)
  ax.set_title(f"{schedule.name}: {plan.microbatches} microbatches, "
               f"{plan.virtual_stages} stage(s) per mesh; predicted step "
               f"{prediction.makespan * 1e3:.2f} ms, bubble {prediction.bubble_fraction:.1%}",
               fontsize=9)
  names = {"F": "forward", "B": "backward (act. grad)" if schedule.split_backward else "backward",
           "W": "weight grad"}
  handles = [Patch(facecolor=unit_color(schedule, sched_unit), label=names[kind])
             for kind, sched_unit in _first_of_each_kind(schedule)]
  handles.append(Patch(facecolor=_UPDATE, label="update (outside the units)"))
  ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.12 - 0.25 / num),
            ncol=len(handles), fontsize=7, frameon=False)
  fig.savefig(path, dpi=dpi, bbox_inches="tight", pad_inches=0.1)
  return os.fspath(path)


def _first_of_each_kind(schedule: Any) -> list[tuple[str, Any]]:
  seen: dict[str, Any] = {}
  for u in schedule.order(0):
    if u.kind not in seen and schedule.stages_on(0).index(u.stage) == 0:
      seen[u.kind] = u
  return sorted(seen.items(), key=lambda kv: "FBW".index(kv[0]))
