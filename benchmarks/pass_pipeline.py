"""(d) C++ pass-pipeline time for programs of 8 to 256 named computations.

Programs with N named computations are lowered by JAX once; then only the C++
partitioner (`mpmd._mpmd.import_program` and `ImportedProgram.finish`, given
exactly what `mpmd.jit` gives them) is run on them, several times, and the
fastest run is reported, both as the whole calls (parse, passes, printing of
the fragment programs) and as the pipelines' share (the seconds each call
reports: the import with its parse, then optimize and export). It should grow
about linearly in N. Families of programs (4 meshes of 2 CPU devices):

* chain: N labelled stages in a chain, N/4 consecutive stages per mesh, forward only;
* chain+grad: the gradient of that chain and an SGD update (N forward and N
  backward named computations, N inferred update fragments);
* microbatched: 4 stages x N/4 microbatches (`mpmd.call`), forward and
  backward, gradient accumulation and update, no schedule (inferred fragments
  are merged during import);
* microbatched 1F1B: the same under the 1F1B schedule (import, then
  scheduling, merging and export).

With `--per-pass` (default when `mpmd-opt` is found) the passes of the
microbatched programs are also timed one by one with `mpmd-opt -mlir-timing`
(`--baseline-mpmd-opt` adds the same tables for a second binary, e.g. one
built before a change).

  python benchmarks/pass_pipeline.py                # writes section (d) of RESULTS.md
  python benchmarks/pass_pipeline.py --sizes 8 16 --output /tmp/r.md
"""

from __future__ import annotations

import argparse
import math
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common  # noqa: E402  pylint: disable=wrong-import-position

import mpmd  # noqa: E402  pylint: disable=wrong-import-position,wrong-import-order
from mpmd.schedule import format_line, format_unit  # noqa: E402  pylint: disable=wrong-import-position

NUM_MESHES = 4


def chain_problem(n: int, grad: bool) -> _common.Problem:
  """N labelled stages `s0..s{N-1}` in a chain; stage i on mesh m{4i/N}."""
  width = 8
  def stage(w, h):
    return jnp.tanh(h @ w)

  def forward(ws, x):
    h = x
    for i, w in enumerate(ws):
      h = mpmd.named_computation(stage, name=f"s{i}")(w, h)
    return jnp.sum(h)

  def sgd(ws, x):
    loss, grads = jax.value_and_grad(forward)(ws, x)
    return loss, [w - 0.1 * g for w, g in zip(ws, grads)]

  config = mpmd.make_config(_common.topology(NUM_MESHES, 2),
                            {f"s{i}": f"m{i * NUM_MESHES // n}" for i in range(n)})
  ws = [jnp.full((width, width), 0.1)] * n
  return _common.Problem(sgd if grad else forward, (ws, jnp.ones((4, width))), config, n)


FAMILIES: dict[str, Callable[[int], _common.Problem]] = {
    "chain": lambda n: chain_problem(n, grad=False),
    "chain+grad": lambda n: chain_problem(n, grad=True),
    "microbatched": lambda n: _common.mlp_problem(NUM_MESHES, n // NUM_MESHES, width=16,
                                                  batch=4, schedule=None),
    "microbatched 1F1B": lambda n: _common.mlp_problem(NUM_MESHES, n // NUM_MESHES, width=16,
                                                       batch=4, schedule="1F1B"),
}


def lower_partition(problem: _common.Problem) -> tuple[_common.PartitionCall, int]:
  """The partition `mpmd.jit` runs for `problem`, and its fragment calls."""
  jitted = _common.TimedMpmdJit(problem.step, problem.config)
  jitted.lower(*problem.args)
  call = jitted.calls[-1]
  calls = sum(1 for inst in call.result.program if inst.kind == "call")
  return call, calls


def time_partition(call: _common.PartitionCall, repeats: int) -> tuple[float, float]:
  """Fastest over `repeats` replays of `call`, in seconds: (CPU time of both
  partitioner calls, the seconds their pipelines report).

  The partitioner runs single-threaded (on a thread of its own, which this
  one waits for), so process CPU time is its own; on a shared machine it is
  steadier than wall time.
  """
  best_cpu, best_passes = math.inf, math.inf
  for _ in range(max(1, repeats)):
    start = time.process_time()
    imported, result = call.replay()
    cpu = time.process_time() - start
    if not result.ok:
      raise SystemExit(f"partition failed:\n{result.error}")
    best_cpu = min(best_cpu, cpu)
    best_passes = min(best_passes, imported.seconds + result.seconds)
  return best_cpu, best_passes


def loglog_slope(sizes: Sequence[int], seconds: Sequence[float]) -> float:
  """Least-squares exponent k of seconds ~ N^k."""
  xs = [math.log(n) for n in sizes]
  ys = [math.log(max(s, 1e-9)) for s in seconds]
  mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
  den = sum((x - mx) ** 2 for x in xs)
  return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / den if den else float("nan")


# ---------------------------------------------------------------------------
# Per-pass times through mpmd-opt -mlir-timing.

_TIMING_LINE = re.compile(r"^\s*[\d.]+ \(\s*[\d.]+%\)\s+([\d.]+) \(\s*[\d.]+%\)\s+(\S.*?)\s*$")
_WALL_ONLY_LINE = re.compile(r"^\s*([\d.]+) \(\s*[\d.]+%\)\s+(\S.*?)\s*$")


def mpmd_opt_run(call: _common.PartitionCall) -> tuple[str, list[str]]:
  """The input text and mpmd-opt flags that redo the passes of a partition.

  No schedule: the pipelines on the lowered module, with the arguments the
  C++ driver rendered for this partition (`PartitionResult.mpmd_opt_args`). A
  schedule: the optimize passes its options enable and the export pipeline
  on the imported module (the registered import pipeline always merges
  inferred fragments, which a scheduled import does not).
  """
  options = call.options
  unsupported = [name for name in ("fragment_remat", "merge_rules") if getattr(options, name)]
  if unsupported:
    raise SystemExit(f"per-pass timing does not replay the partitioning options {unsupported}")
  if not call.schedule:
    return call.module_text, list(call.result.mpmd_opt_args)
  flags = []
  if options.split_bwd_fragments:
    flags.append("-mpmd-split-bwd-fragments")
  order = "; ".join(format_line(units[0].mesh, (format_unit(u.kind, u.microbatch, u.stage, m)
                                                 for u in units))
                    for m, units in enumerate(call.schedule) if units)
  flags.append(f'-mpmd-pipeline-schedule=order="{order}"')
  if options.merge_inferred_after_scheduling:
    flags.append("-mpmd-merge-inferred-fragments")
  if options.merge_forward_with_backward:
    flags.append("-mpmd-merge-forward-with-backward")
  flags.append("-mpmd-export-pipeline")
  return call.imported_text, flags


def per_pass_times(mpmd_opt: str, text: str, flags: Sequence[str]) -> dict[str, float]:
  """Seconds per entry of mpmd-opt's -mlir-timing report, on the CPU's clock.

  mpmd-opt runs single-threaded; its report is wall time, which on a shared
  machine includes time other processes held the CPU. Each entry is scaled by
  the run's CPU time / wall time, so that time is left out (the waits are
  spread over the run in time slices of a few ms, much shorter than the passes
  that matter).
  """
  with tempfile.NamedTemporaryFile("w", suffix=".mlir", delete=False) as f:
    f.write(text)
  try:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run([mpmd_opt, f.name, *flags, "-mlir-timing", "-mlir-disable-threading",
                           "-o", os.devnull],
                          capture_output=True, text=True, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
  finally:
    os.unlink(f.name)
  if proc.returncode:
    raise SystemExit(f"{mpmd_opt} {' '.join(flags)} failed:\n{proc.stderr[-4000:]}")
  wall: dict[str, float] = {}
  for line in proc.stderr.splitlines():
    match = _TIMING_LINE.match(line) or _WALL_ONLY_LINE.match(line)
    if match and not re.fullmatch(r"'.*' Pipeline", match.group(2)):
      name = match.group(2)
      wall[name] = wall.get(name, 0.0) + float(match.group(1))
  if not wall.get("Total"):
    raise SystemExit(f"no -mlir-timing report from {mpmd_opt}:\n{proc.stderr[-4000:]}")
  cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
  scale = min(1.0, cpu / wall["Total"])
  return {name: seconds * scale for name, seconds in wall.items()}


def per_pass_table(mpmd_opt: str, runs: dict[int, tuple[str, list[str]]], repeats: int) -> str:
  """Rows: passes; columns: N (the keys of `runs`); fastest of `repeats` mpmd-opt runs."""
  sizes = sorted(runs)
  columns: dict[int, dict[str, float]] = {}
  for n in sizes:
    text, flags = runs[n]
    best: dict[str, float] = {}
    for _ in range(max(1, repeats)):
      times = per_pass_times(mpmd_opt, text, flags)
      best = {k: min(v, best.get(k, math.inf)) for k, v in times.items()}
    columns[n] = best
  names = [name for name in columns[sizes[-1]] if name != "Total"] + ["Total"]
  headers = ["pass (ms)", *(f"N={n}" for n in sizes), f"N={sizes[-1]} / N={sizes[0]}"]
  rows = []
  for name in names:
    values = [columns[n].get(name, 0.0) * 1e3 for n in sizes]
    ratio = values[-1] / values[0] if values[0] > 0 else float("nan")
    rows.append([name, *(f"{v:.1f}" for v in values), f"{ratio:.1f}"])
  return _common.markdown_table(headers, rows)


def _display_path(path: str) -> str:
  """`path` relative to the repository root when inside it."""
  root = str(_common.RESULTS.parent.parent)
  full = os.path.abspath(path)
  return os.path.relpath(full, root) if full.startswith(root + os.sep) else path


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--sizes", type=int, nargs="+", default=[8, 16, 32, 64, 128, 256],
                      help="numbers of named computations N (multiples of 4)")
  parser.add_argument("--families", nargs="+", default=list(FAMILIES), choices=list(FAMILIES))
  parser.add_argument("--repeats", type=int, default=5,
                      help="partitioner replays per program; the fastest is reported")
  parser.add_argument("--per-pass", choices=["auto", "yes", "no"], default="auto",
                      help="per-pass table through mpmd-opt -mlir-timing (auto: if found)")
  parser.add_argument("--mpmd-opt", default=shutil.which("mpmd-opt"),
                      help="the mpmd-opt binary for --per-pass (default: from PATH)")
  parser.add_argument("--per-pass-sizes", type=int, nargs="+", default=None,
                      help="N for the per-pass tables (default: --sizes)")
  parser.add_argument("--baseline-mpmd-opt", default=None,
                      help="a second mpmd-opt (e.g. built before a change) for per-pass "
                           "tables side by side")
  parser.add_argument("--baseline-label", default="baseline",
                      help="what the baseline binary is, for the table titles")
  parser.add_argument("--output", default=None,
                      help="results file to update (default: benchmarks/RESULTS.md)")
  args = parser.parse_args(argv)
  command = _common.command_line(__file__, argv)
  bad = [n for n in args.sizes + (args.per_pass_sizes or []) if n % NUM_MESHES or n <= 0]
  if bad:
    parser.error(f"--sizes {bad}: each N must be a positive multiple of {NUM_MESHES}")
  sizes = sorted(args.sizes)

  # Warm-up (not reported): first use of JAX and of the partitioner.
  time_partition(lower_partition(FAMILIES["chain"](NUM_MESHES))[0], 1)

  headers = ["family", "N", "fragment calls", "partition CPU ms", "us/N", "x vs N/2",
             "passes ms", "us/N", "x vs N/2"]
  def growth(values: list[float], n: int) -> str:
    previous = sizes.index(n) - 1
    return (f"{values[-1] / values[-2]:.2f}" if previous >= 0 and sizes[previous] * 2 == n
            else "")
  sections, summary = [], []
  calls_of: dict[tuple[str, int], _common.PartitionCall] = {}
  for family in args.families:
    rows, cpu_s, passes_s = [], [], []
    for n in sizes:
      call, calls = lower_partition(FAMILIES[family](n))
      calls_of[(family, n)] = call
      cpu, passes = time_partition(call, args.repeats)
      cpu_s.append(cpu)
      passes_s.append(passes)
      rows.append([family, n, calls, f"{cpu * 1e3:.1f}", f"{cpu / n * 1e6:.0f}",
                   growth(cpu_s, n), f"{passes * 1e3:.1f}", f"{passes / n * 1e6:.0f}",
                   growth(passes_s, n)])
      print(" | ".join(str(x) for x in rows[-1]), flush=True)
    sections.append(_common.markdown_table(headers, rows))
    summary.append([family, f"{loglog_slope(sizes, cpu_s):.2f}",
                    f"{loglog_slope(sizes, passes_s):.2f}",
                    f"{cpu_s[-1] / cpu_s[0]:.1f}", f"{passes_s[-1] / passes_s[0]:.1f}"])

  body = (
      _common.provenance(command) +
      "\nN named computations per program (forward call sites; the grad families have as "
      "many backward ones besides); 4 meshes of 2 CPU devices. Each program is lowered by "
      "JAX once, then the partitioner (`import_program` + `finish`) is replayed on what "
      f"`mpmd.jit` gave it, fastest of {max(1, args.repeats)}. partition CPU = CPU time of "
      "both calls (parsing, passes, printing every fragment program; single-threaded, "
      "so steadier than wall time on a shared machine); passes = the seconds the calls "
      "report (`imported.seconds + result.seconds`: import with its parse, then optimize "
      "and export). fragment calls: in the final "
      "program. x vs N/2: growth when N doubles (2.00 is linear).\n\n" +
      "\n".join(sections) +
      "\nFitted exponent k of time ~ N^k over all sizes (1 is linear):\n\n" +
      _common.markdown_table(["family", "k partition CPU", "k passes",
                              f"partition N={sizes[-1]} / N={sizes[0]}",
                              f"passes N={sizes[-1]} / N={sizes[0]}"], summary))

  per_pass = args.per_pass == "yes" or (args.per_pass == "auto" and args.mpmd_opt)
  if per_pass:
    if not args.mpmd_opt:
      parser.error("--per-pass yes needs mpmd-opt on PATH or --mpmd-opt")
    binaries = [args.mpmd_opt] + ([args.baseline_mpmd_opt] if args.baseline_mpmd_opt else [])
    for family in ("microbatched", "microbatched 1F1B"):
      if family not in args.families:
        continue
      what = ("`finish` (`-mpmd-pipeline-schedule`, `-mpmd-merge-inferred-fragments`, "
              "`-mpmd-export-pipeline` on the imported module)" if "1F1B" in family else
              "the registered pipelines (`-mpmd-import-pipeline` then `-mpmd-export-pipeline`)")
      runs = {}
      for n in sorted(args.per_pass_sizes or sizes):
        if (family, n) not in calls_of:
          calls_of[(family, n)] = lower_partition(FAMILIES[family](n))[0]
        runs[n] = mpmd_opt_run(calls_of[(family, n)])
      for binary in binaries:
        table = per_pass_table(binary, runs, args.repeats)
        print(table)
        label = f"{args.baseline_label}, " if binary == args.baseline_mpmd_opt else ""
        body += (f"\nPer pass, family {family}, {label}`{_display_path(binary)}`: "
                 "`mpmd-opt -mlir-timing -mlir-disable-threading` time (ms, wall time scaled "
                 f"by the run's CPU time / wall time) of {what}, "
                 f"fastest of {max(1, args.repeats)}; Parser and Output are mpmd-opt reading "
                 "and printing the module:\n\n" + table)
  path = _common.write_section("d", body, args.output)
  print(f"\nwrote section (d) of {path}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
