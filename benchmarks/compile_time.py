"""(a) Compile time vs number of microbatches and layers: mpmd vs jax.jit.

For a pipelined MLP training step (4 stages, each a `mpmd.named_computation`
on its own mesh of 2 CPU devices; microbatches via `mpmd.call`; 1F1B schedule;
gradient accumulation and SGD update placed by the compiler) this measures,
side by side in one run, for each size:

* mpmd: `mpmd.jit(f, config).lower(*args)` split into JAX trace+lower and the
  C++ partitioner (`_mpmd.import_program` and `finish`), then `.compile()` (XLA
  compile of every distinct fragment program), and how many distinct fragment
  programs were compiled for how many fragment calls;
* `jax.jit(f).lower(*args)` and `.compile()` of the same function and
  arguments (all JAX caches cleared and a fresh function object each time);
* the ratio of the totals, mpmd / jax.jit.

  python benchmarks/compile_time.py                     # writes section (a) of RESULTS.md
  python benchmarks/compile_time.py --microbatches 2 4 --layers 4 --output /tmp/r.md
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import jax  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common  # noqa: E402  pylint: disable=wrong-import-position


def measure_mpmd(layers: int, microbatches: int, width: int, batch: int) -> dict:
  """One cold mpmd lower + compile; times in seconds."""
  jax.clear_caches()
  problem = _common.mlp_problem(layers, microbatches, width=width, batch=batch)
  jitted = _common.TimedMpmdJit(problem.step, problem.config)
  start = time.perf_counter()
  lowered = jitted.lower(*problem.args)
  lower_s = time.perf_counter() - start
  start = time.perf_counter()
  compiled = lowered.compile()
  compile_s = time.perf_counter() - start
  partition_s = jitted.partition_seconds
  calls = sum(1 for inst in compiled.instructions if hasattr(inst, "fragment"))
  return {"trace_lower": lower_s - partition_s, "partition": partition_s, "compile": compile_s,
          "total": lower_s + compile_s, "programs": len(compiled.program.fragments),
          "calls": calls, "named": problem.num_named}


def measure_jit(layers: int, microbatches: int, width: int, batch: int) -> dict:
  """One cold `jax.jit(f).lower(*args).compile()` of the same step; seconds."""
  jax.clear_caches()
  problem = _common.mlp_problem(layers, microbatches, width=width, batch=batch)
  start = time.perf_counter()
  lowered = jax.jit(problem.step).lower(*problem.args)
  lower_s = time.perf_counter() - start
  start = time.perf_counter()
  lowered.compile()
  compile_s = time.perf_counter() - start
  return {"lower": lower_s, "compile": compile_s, "total": lower_s + compile_s}


def measure(layers: int, microbatches: int, width: int, batch: int, repeats: int) -> dict:
  """The fastest of `repeats` cold runs of each side (taken alternately)."""
  best_mpmd, best_jit = None, None
  for _ in range(max(1, repeats)):
    m = measure_mpmd(layers, microbatches, width, batch)
    j = measure_jit(layers, microbatches, width, batch)
    if best_mpmd is None or m["total"] < best_mpmd["total"]:
      best_mpmd = m
    if best_jit is None or j["total"] < best_jit["total"]:
      best_jit = j
  return {"mpmd": best_mpmd, "jit": best_jit}


HEADERS = ["layers", "microbatches", "named comps", "trace+lower s", "partition s",
           "XLA compile s", "programs / calls", "mpmd total s", "jax.jit lower s",
           "jax.jit compile s", "jax.jit total s", "mpmd / jax.jit"]


def row(layers: int, microbatches: int, r: dict) -> list:
  m, j = r["mpmd"], r["jit"]
  return [layers, microbatches, m["named"], f"{m['trace_lower']:.2f}", f"{m['partition']:.3f}",
          f"{m['compile']:.2f}", f"{m['programs']} / {m['calls']}", f"{m['total']:.2f}",
          f"{j['lower']:.2f}", f"{j['compile']:.2f}", f"{j['total']:.2f}",
          f"{m['total'] / j['total']:.2f}x"]


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--microbatches", type=int, nargs="+", default=[2, 4, 8, 16, 32],
                      help="microbatch counts swept at --fixed-layers")
  parser.add_argument("--layers", type=int, nargs="+", default=[4, 8, 16, 32],
                      help="layer counts (multiples of 4) swept at --fixed-microbatches")
  parser.add_argument("--fixed-layers", type=int, default=8)
  parser.add_argument("--fixed-microbatches", type=int, default=8)
  parser.add_argument("--width", type=int, default=64)
  parser.add_argument("--batch", type=int, default=8, help="rows per microbatch")
  parser.add_argument("--repeats", type=int, default=2,
                      help="cold runs per size and side; the fastest is reported")
  parser.add_argument("--warmup", action=argparse.BooleanOptionalAction, default=True,
                      help="first compile a small size, unreported (first-use costs)")
  parser.add_argument("--output", default=None,
                      help="results file to update (default: benchmarks/RESULTS.md)")
  args = parser.parse_args(argv)
  command = _common.command_line(__file__, argv)

  cache_dir = jax.config.jax_compilation_cache_dir
  if cache_dir:
    print(f"warning: JAX's persistent compilation cache is on ({cache_dir}); compile times "
          "may be cache hits", file=sys.stderr)
  # Warm-up (not reported): first-use costs of JAX, PJRT and the partitioner.
  if args.warmup:
    measure(4, 2, args.width, args.batch, 1)

  results: dict[tuple[int, int], dict] = {}
  def get(layers: int, microbatches: int) -> dict:
    if (layers, microbatches) not in results:
      result = measure(layers, microbatches, args.width, args.batch, args.repeats)
      results[(layers, microbatches)] = result
      line = _common.markdown_table(HEADERS, [row(layers, microbatches, result)]).splitlines()[-1]
      print(line, flush=True)
    return results[(layers, microbatches)]

  print(_common.markdown_table(HEADERS, []), end="", flush=True)
  by_microbatches = [row(args.fixed_layers, m, get(args.fixed_layers, m))
                     for m in args.microbatches]
  by_layers = [row(layer, args.fixed_microbatches, get(layer, args.fixed_microbatches))
               for layer in args.layers]

  body = (
      _common.provenance(command) +
      f"\nModel: MLP of `layers` dense+gelu layers (width {args.width}, {args.batch} rows per "
      "microbatch) in 4 stages (`mpmd.named_computation`), one mesh of 2 CPU devices each, "
      "microbatches via `mpmd.call`, 1F1B schedule, gradient accumulation and SGD update "
      "placed by the compiler. Each figure is one cold run (all JAX caches cleared, fresh "
      f"function objects), fastest of {max(1, args.repeats)}. mpmd total = trace+lower + "
      "partition (C++ `import_program` + `finish`) + XLA compile of the distinct "
      "fragment programs (programs / calls: distinct programs compiled / fragment calls "
      "per step). jax.jit total = `jax.jit(f).lower(*args)` + `.compile()` of the same step. "
      "named comps: named-computation call sites in the forward pass (stages x microbatches).\n"
      f"\n### Microbatches (layers = {args.fixed_layers})\n\n" +
      _common.markdown_table(HEADERS, by_microbatches) +
      f"\n### Layers (microbatches = {args.fixed_microbatches})\n\n" +
      _common.markdown_table(HEADERS, by_layers))
  path = _common.write_section("a", body, args.output)
  print(f"\nwrote section (a) of {path}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
