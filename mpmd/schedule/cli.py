"""Command line: ``python -m mpmd.schedule SCHEDULE --meshes P --microbatches M``.

Builds (or reads) a schedule, validates and simulates it, and prints its
table, bubble fraction and peak live activations; optionally writes a PNG
timeline and a Chrome trace.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from mpmd.schedule.builtin import SCHEDULES, get_schedule
from mpmd.schedule.core import Schedule, ScheduleError
from mpmd.schedule.simulate import CostModel, simulate


def _parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(
      prog="python -m mpmd.schedule",
      description="Build, validate, simulate and draw a pipeline schedule.",
      epilog="Built-in schedules: " + ", ".join(SCHEDULES))
  p.add_argument("schedule", nargs="?",
                 help="a built-in schedule name (case-insensitive), or a text "
                      "schedule file ('-' for stdin; see docs/schedules.md)")
  p.add_argument("-p", "--meshes", type=int, help="number of meshes P")
  p.add_argument("-m", "--microbatches", type=int,
                 help="number of microbatches M")
  p.add_argument("-v", "--virtual-stages", type=int, default=None,
                 help="virtual stages per mesh V (virtual-stage schedules)")
  p.add_argument("-o", "--output", metavar="PNG", help="write a PNG timeline")
  p.add_argument("--trace", metavar="JSON", help="write a Chrome trace")
  p.add_argument("--text", action="store_true",
                 help="print the text form instead of the table")
  p.add_argument("--forward", type=float, default=1.0, help="F time (1)")
  p.add_argument("--backward", type=float, default=None,
                 help="B time (2, or 1 with a split backward)")
  p.add_argument("--weight", type=float, default=1.0, help="W time (1)")
  p.add_argument("--latency", type=float, default=0.0,
                 help="transfer latency between meshes (0)")
  p.add_argument("--release-at-w", action="store_true",
                 help="count activations live until W (split backward) "
                      "instead of until B")
  p.add_argument("--list", action="store_true",
                 help="list the built-in schedules and exit")
  return p


def _load(args: argparse.Namespace, parser: argparse.ArgumentParser) -> Schedule:
  src = args.schedule
  if src == "-" or os.path.isfile(src):
    text = sys.stdin.read() if src == "-" else open(src, encoding="utf-8").read()
    name = None if src == "-" else os.path.basename(src)
    schedule = Schedule.from_text(text)
    if schedule.name is None:
      schedule.name = name
    return schedule
  entry = get_schedule(src)
  if args.meshes is None or args.microbatches is None:
    parser.error(f"{entry.name} needs --meshes and --microbatches")
  return entry(args.meshes, args.microbatches, args.virtual_stages)


def main(argv: Sequence[str] | None = None) -> int:
  """Runs the command line; returns the exit status."""
  parser = _parser()
  args = parser.parse_args(argv)
  if args.list:
    width = max(len(n) for n in SCHEDULES)
    for name, entry in SCHEDULES.items():
      v = {"1": "", "2": " [V=2]", "any": " [V>=1, default 2]"}[
          entry.virtual_stages]
      print(f"{name.ljust(width)}  {entry.summary}{v}")
    return 0
  if args.schedule is None:
    parser.error("give a schedule name or file (or --list)")
  try:
    schedule = _load(args, parser)
    schedule.validate()
    cost = CostModel(forward=args.forward, backward=args.backward,
                     weight=args.weight, latency=args.latency)
    result = simulate(schedule, cost,
                      activation_release="W" if args.release_at_w else "B")
  except (ScheduleError, OSError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  print(schedule.to_text().rstrip("\n") if args.text else schedule.table())
  print(result.summary())
  if args.output:
    from mpmd.schedule.render import render_png
    render_png(schedule, result, args.output)
    print(f"wrote {args.output}")
  if args.trace:
    from mpmd.schedule.render import write_chrome_trace
    write_chrome_trace(schedule, result, args.trace)
    print(f"wrote {args.trace}")
  return 0
