"""The cost of a program call on this machine's platform: the row of
`mpmd.partition.dispatch_cost.MEASURED` (what the partitioner merges units by).

    python benchmarks/dispatch_cost.py            # the first device's platform
    python benchmarks/dispatch_cost.py --write    # also writes RESULTS.md section (n)

Prints the figures and the `MPMD_DISPATCH_COST` value that gives them; with
`--repeat N`, N measurements (their spread says how far a row is to be trusted).
Uses one device: a virtual CPU device count above 1 would enlarge XLA's CPU
thread pools (set `XLA_FLAGS` yourself to measure that setting).
"""

from __future__ import annotations

import argparse
import sys

import jax

from mpmd.partition import dispatch_cost


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--repeat", type=int, default=3, help="measurements (default 3)")
  parser.add_argument("--write", action="store_true", help="write RESULTS.md section (n)")
  args = parser.parse_args(argv)
  device = jax.devices()[0]
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
        f"Platform {device.platform} ({device.device_kind}), one device. Microseconds per call of a "
        "one-op program (calls following each other), per further small matrix product in a "
        "program, and the arithmetic rate of a 512^3 product; `MPMD_DISPATCH_COST` is the "
        "value that gives the same figures.", "",
        _common.markdown_table(["run", "call (us)", "kernel (us)", "GFLOP/s",
                                "MPMD_DISPATCH_COST"], table), "",
        f"Listed for {device.platform} in `mpmd.partition.dispatch_cost.MEASURED`: "
        f"{listed if listed is not None else 'none'}.",
    ])
    _common.write_section("n", body)
  return 0


if __name__ == "__main__":
  sys.exit(main())
