"""``python -m mpmd.plan TARGET``: plan a step from the command line.

TARGET is ``module:name`` or ``path/to/file.py:name``; ``name`` is an
`mpmd.plan.Problem` or a function of no arguments returning one (the step,
its arguments, which of them hold the batch). The topology is ``--meshes``
meshes of ``--devices-per-mesh`` devices (in device order; on CPU that many
virtual devices are made when ``XLA_FLAGS`` does not say). Prints the
candidates table and the plan; ``--png`` draws the chosen schedule's
predicted timeline, ``--json`` saves the plan (`Plan.to_dict`: rebuild its
config with `mpmd.plan.config_from_dict`).

    python -m mpmd.plan examples/plan_mlp.py:problem --meshes 4 --devices-per-mesh 2 \\
        --microbatches 4,8,16 --png plan.png
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import pathlib
import sys
from collections.abc import Sequence
from typing import Any

_DEVICE_FLAG = "--xla_force_host_platform_device_count"


def _parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(
      prog="python -m mpmd.plan",
      description="Choose stages, schedule and microbatches for a labelled training step "
                  "from its measured costs.")
  p.add_argument("target", help="module:name or file.py:name: an mpmd.plan.Problem or a "
                                "function returning one")
  p.add_argument("-p", "--meshes", type=int, default=2, help="number of meshes (2)")
  p.add_argument("-k", "--devices-per-mesh", type=int, default=1, help="devices per mesh (1)")
  p.add_argument("--axis", default="data", help="the meshes' axis name (data)")
  p.add_argument("-m", "--microbatches", default=None,
                 help="allowed microbatch counts, e.g. 4,8,16 (default: the problem's, else "
                      "P, 2P, 4P)")
  p.add_argument("-s", "--schedules", default=None,
                 help="built-in schedules to try, comma-separated (default: all that train)")
  p.add_argument("-v", "--virtual-stages", default="2",
                 help="stages per mesh for schedules that take any number, e.g. 2,4 (2)")
  p.add_argument("--memory-budget", default="device",
                 help="bytes per device, e.g. 8GiB; 'none'; 'device' (default): the device's "
                      "limit when JAX reports one")
  p.add_argument("--estimate", choices=("time", "cost_analysis"), default="time",
                 help="time the unit programs (default) or use XLA's cost analysis (no run)")
  p.add_argument("--repeats", type=int, default=5, help="timed runs per unit program (5)")
  p.add_argument("--top", type=int, default=20, help="candidates to print (20; 0: all)")
  p.add_argument("--png", default=None, help="draw the plan's predicted timeline here")
  p.add_argument("--json", default=None, help="save the plan (Plan.to_dict) here")
  return p


def _ints(text: str | None) -> list[int] | None:
  if text is None:
    return None
  return [int(x) for x in text.replace(" ", "").split(",") if x]


def load_target(target: str) -> Any:
  """The object ``module:name`` or ``file.py:name`` names."""
  where, sep, name = target.rpartition(":")
  if not sep or not where or not name:
    raise SystemExit(f"target must be module:name or file.py:name, got {target!r}")
  if where.endswith(".py") or os.sep in where:
    path = pathlib.Path(where).resolve()
    spec = importlib.util.spec_from_file_location(path.stem, path)
    if spec is None or spec.loader is None:
      raise SystemExit(f"cannot load {where}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    sys.path.insert(0, str(path.parent))
    spec.loader.exec_module(module)
  else:
    sys.path.insert(0, os.getcwd())
    module = importlib.import_module(where)
  obj = module
  for part in name.split("."):
    obj = getattr(obj, part)
  return obj


def main(argv: Sequence[str] | None = None) -> int:
  args = _parser().parse_args(argv)
  devices = args.meshes * args.devices_per_mesh
  flags = os.environ.get("XLA_FLAGS", "")
  if _DEVICE_FLAG not in flags:  # before JAX makes its CPU client
    os.environ["XLA_FLAGS"] = f"{flags} {_DEVICE_FLAG}={devices}".strip()
  import jax  # noqa: PLC0415
  import numpy as np  # noqa: PLC0415

  from mpmd.plan.errors import PlanError  # noqa: PLC0415
  from mpmd.plan.planner import Problem  # noqa: PLC0415

  problem = load_target(args.target)
  if not isinstance(problem, Problem) and callable(problem):
    problem = problem()
  if not isinstance(problem, Problem):
    raise SystemExit(f"{args.target} is not an mpmd.plan.Problem (nor a function returning one)")
  available = jax.devices()
  if len(available) < devices:
    raise SystemExit(f"{args.meshes} meshes x {args.devices_per_mesh} devices need {devices} "
                     f"devices; JAX has {len(available)}")
  topology = {f"m{i}": jax.sharding.Mesh(
      np.array(available[i * args.devices_per_mesh:(i + 1) * args.devices_per_mesh]),
      (args.axis,)) for i in range(args.meshes)}
  options: dict[str, Any] = {
      "virtual_stages": _ints(args.virtual_stages), "memory_budget": args.memory_budget,
      "estimate": args.estimate, "repeats": args.repeats}
  if args.microbatches is not None:
    options["microbatches"] = _ints(args.microbatches)
  if args.schedules is not None:
    options["schedules"] = [s for s in args.schedules.split(",") if s]
  try:
    plan = problem.plan(topology, **options)
  except PlanError as e:
    print(f"mpmd.plan: {e}", file=sys.stderr)
    return 2
  print(plan.candidates.table(limit=args.top or None))
  print()
  print(plan.summary())
  if args.png:
    print(f"wrote {plan.write_png(args.png)}")
  if args.json:
    pathlib.Path(args.json).write_text(json.dumps(plan.to_dict(), indent=1))
    print(f"wrote {args.json}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
