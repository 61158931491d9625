"""The cost of a program call on this machine's platform: the row of
`mpmd.partition.dispatch_cost.MEASURED` (what the partitioner merges units by).

    python benchmarks/dispatch_cost.py            # the first device's platform
    python benchmarks/dispatch_cost.py --write    # also writes RESULTS.md section (n)
    python benchmarks/dispatch_cost.py --compare --write   # and checks the decision

`--compare` checks the row's decision on benchmarks/gpt2.py's small remat'd model
(8 microbatches, 1F1B, 4 meshes of one device, 4 devices in the process): its step
with nothing merged (`MPMD_DISPATCH_COST=0`), with the platform's row, and with every
back-to-back unit merged (a call costing 1 s), in turns; calls per step and the
best and median step times.

Prints the figures and the `MPMD_DISPATCH_COST` value that gives them; with
`--repeat N`, N measurements (their spread says how far a row is to be trusted).
Uses one device: a virtual CPU device count above 1 would enlarge XLA's CPU
thread pools (set `XLA_FLAGS` yourself to measure that setting).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

if "--compare" in sys.argv and "XLA_FLAGS" not in os.environ:
  os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"

import jax  # noqa: E402

from mpmd import knobs  # noqa: E402
from mpmd.partition import dispatch_cost  # noqa: E402

#: The settings `--compare` runs the small model in: (name, MPMD_DISPATCH_COST).
SETTINGS = (("nothing merged", "0"), ("the platform's row", None),
            ("every back-to-back unit merged", "1000000,0,0"))


def compare(rounds: int = 5, steps: int = 20) -> list[list]:
  """The small model's step in each of `SETTINGS`, in turns: rows of (setting,
  calls a step, best ms, median ms)."""
  import argparse as ap  # noqa: PLC0415
  sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
  import gpt2  # noqa: PLC0415
  sizes = ap.Namespace(model="small", layers=8, width=32, heads=4, vocab=64, seq=16, batch=16,
                       microbatches=8, schedule="1F1B")
  given = os.environ.get(knobs.MPMD_DISPATCH_COST)
  sides = {}
  try:
    for name, value in SETTINGS:
      value = given if value is None else value  # (None: the platform's row)
      if value is None:
        os.environ.pop(knobs.MPMD_DISPATCH_COST, None)
      else:
        os.environ[knobs.MPMD_DISPATCH_COST] = value
      sides[name] = gpt2.Side(sizes, "equal", "mpmd")
  finally:
    if given is None:
      os.environ.pop(knobs.MPMD_DISPATCH_COST, None)
    else:
      os.environ[knobs.MPMD_DISPATCH_COST] = given
  times = {name: [] for name in sides}
  for _ in range(rounds):
    for name, side in sides.items():
      state = side.state
      t = time.perf_counter()
      for _ in range(steps):
        state, _ = side.run(state)
      times[name].append((time.perf_counter() - t) / steps * 1e3)
      side.state = state
  return [[name, side.counts()["calls"], f"{min(times[name]):.1f}",
           f"{statistics.median(times[name]):.1f}"] for name, side in sides.items()]


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--repeat", type=int, default=3, help="measurements (default 3)")
  parser.add_argument("--write", action="store_true", help="write RESULTS.md section (n)")
  parser.add_argument("--compare", action="store_true",
                      help="also check the row's decision on the small model (see above)")
  args = parser.parse_args(argv)
  device = jax.devices()[0]
  compared = compare() if args.compare else None
  if compared:
    for row in compared:
      print(f"  small model, {row[0]}: {row[1]} calls a step, best {row[2]} ms, median {row[3]} ms")
  rows = [dispatch_cost.measure(device) for _ in range(args.repeat)]
  table = [(i + 1, f"{r.call_us:.1f}", f"{r.kernel_us:.2f}", f"{r.gflops:.1f}", str(r))
           for i, r in enumerate(rows)]
  listed = dispatch_cost.MEASURED.get(device.platform)
  print(f"{device.platform} ({device.device_kind}), jax {jax.__version__}")
  for row in table:
    print(f"  run {row[0]}: call {row[1]} us, kernel {row[2]} us, {row[3]} GFLOP/s  "
          f"(MPMD_DISPATCH_COST={row[4]})")
  print(f"  listed row: {listed if listed is not None else 'none (no merging)'}")
  if args.write:
    import _common  # noqa: PLC0415 (sets nothing up; only the writer)
    body = "\n".join([
        _common.provenance(_common.command_line(__file__, argv)), "",
        f"Platform {device.platform} ({device.device_kind}), measured on its first device "
        f"({len(jax.devices())} in the process). Microseconds per call of a "
        "one-op program (calls following each other), per further op in a program (32 small "
        "matrix products and their tanh), and the arithmetic rate of a 512^3 product; "
        "`MPMD_DISPATCH_COST` is the "
        "value that gives the same figures.", "",
        _common.markdown_table(["run", "call (us)", "kernel (us)", "GFLOP/s",
                                "MPMD_DISPATCH_COST"], table), "",
        f"Listed for {device.platform} in `mpmd.partition.dispatch_cost.MEASURED`: "
        f"{listed if listed is not None else 'none'}.",
    ] + ([] if not compared else [
        "", "The decision checked on benchmarks/gpt2.py's small remat'd model (8 microbatches "
        "of 2 x 16 tokens, 1F1B, 4 meshes of one device each, 4 devices in the process), "
        "20 steps per round, 5 rounds in turns:", "",
        _common.markdown_table(["setting", "calls a step", "best step (ms)", "median step (ms)"],
                               compared)]))
    _common.write_section("n", body)
  return 0


if __name__ == "__main__":
  sys.exit(main())
