"""Regenerates the schedule pictures and figures table of docs/schedules.md.

    python -m mpmd.schedule.make_docs [--docs DIR] [--meshes 4] [--microbatches 8]

Writes ``DIR/img/schedule-<name>.png`` for every built-in schedule (P=4, M=8,
V=2 for virtual-stage schedules, default cost model) and replaces the text
between the ``BEGIN/END GENERATED TABLE`` markers of ``DIR/schedules.md``.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Sequence

from mpmd.schedule.builtin import SCHEDULES
from mpmd.schedule.render import render_png
from mpmd.schedule.simulate import simulate

BEGIN = "<!-- BEGIN GENERATED TABLE (python -m mpmd.schedule.make_docs) -->"
END = "<!-- END GENERATED TABLE -->"


def image_name(name: str) -> str:
  """File name of a schedule's picture."""
  return "schedule-" + re.sub(r"[^a-z0-9]+", "-", name.lower()) + ".png"


def figures_table(num_meshes: int, num_microbatches: int) -> str:
  """Markdown table: bubble fraction and peak activations per schedule."""
  lines = [
      f"P = {num_meshes} meshes, M = {num_microbatches} microbatches, default "
      "cost model (F = 1, B = 2, or B = W = 1 with a split backward, no "
      "latency). Peak activations are per mesh, mesh 0 first, in (stage, "
      "microbatch) stashes (a stash of a virtual stage is 1/V of a mesh's "
      "layers); for split schedules the second figure keeps a stash until W.",
      "",
      "| schedule | V | backward | makespan | bubble | per-mesh bubble "
      "| peak activations (until B) | until W |",
      "|---|---|---|---|---|---|---|---|",
  ]
  for name, entry in SCHEDULES.items():
    s = entry(num_meshes, num_microbatches)
    r = simulate(s)
    v = s.virtual_stages or "-"
    kind = ("forward only" if s.forward_only else
            "split" if s.split_backward else "full")
    per_mesh = " ".join(f"{b:.0%}" for b in r.bubble_fractions)
    peaks = " ".join(map(str, r.peak_activations))
    until_w = "-"
    if s.split_backward:
      until_w = " ".join(
          map(str, simulate(s, activation_release="W").peak_activations))
    lines.append(f"| [{name}](#{name.lower()}) | {v} | {kind} | "
                 f"{r.makespan:g} | {r.bubble_fraction:.1%} | {per_mesh} | "
                 f"{peaks} | {until_w} |")
  return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
  here = os.path.dirname(os.path.abspath(__file__))
  default_docs = os.path.normpath(os.path.join(here, "..", "..", "docs"))
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--docs", default=default_docs)
  p.add_argument("--meshes", type=int, default=4)
  p.add_argument("--microbatches", type=int, default=8)
  args = p.parse_args(argv)
  img = os.path.join(args.docs, "img")
  os.makedirs(img, exist_ok=True)
  for name, entry in SCHEDULES.items():
    s = entry(args.meshes, args.microbatches)
    path = os.path.join(img, image_name(name))
    render_png(s, simulate(s), path)
    print(f"wrote {path}")
  md = os.path.join(args.docs, "schedules.md")
  table = figures_table(args.meshes, args.microbatches)
  if os.path.exists(md):
    text = open(md, encoding="utf-8").read()
    if BEGIN in text and END in text:
      head, rest = text.split(BEGIN, 1)
      _, tail = rest.split(END, 1)
      with open(md, "w", encoding="utf-8") as f:
        f.write(f"{head}{BEGIN}\n{table}\n{END}{tail}")
      print(f"updated the table in {md}")
      return 0
  print(f"{md} has no generated-table markers; the table is:\n{table}",
        file=sys.stderr)
  return 0


if __name__ == "__main__":
  sys.exit(main())
