"""Where a pipelined step's host time goes: the cost of a call per buffer.

Prints, on the default backend:

1. `jax.jit` of n arrays in and n out, dispatched back to back: host time per
   dispatch (the cost of buffers to any program, ours or not);
2. for each model of `benchmarks/gpt2.py` asked for (4 meshes of one device,
   8 microbatches, 1F1B), with `mpmd_pack_fragment_values` on and off: the
   mpmd step, the buffers its fragment calls take and make per step, and the
   host time spent inside the calls (each call timed where it is issued); the
   two forms take their steps in turns, and the median of the per-step ratios
   is printed;
3. with `--cpu-split`, for the same models: the mpmd step (packing as by
   default) and `jax.jit` of the whole batch taking steps in turns, each step's
   wall time, CPU time of the whole process (every thread: XLA's workers run
   the programs) and CPU time of the thread that issues the step (dispatch,
   the runtime's loop): what the device work costs and what the host adds;
4. with `--gil`, for the same models and the same two steps: how much a second
   Python thread (a training loop's data or logging thread) gets done while
   steps run back to back, as a share of what it does alone in the same time.
   Where the calls hold the GIL the share drops; the step's own CPU work on
   the machine's cores lowers it for both compilers alike. A busy Python
   thread keeps the GIL for CPython's switch interval (5 ms) each time the
   step's thread asks for it back, so the step's slowdown divided by that
   interval counts how often a step takes the GIL back from C++.

    python benchmarks/call_overhead.py [--models small,gpt2] [--steps 10] [--cpu-split | --gil]

Meshes share the one device where there are fewer than four (a GPU).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time

import gpt2  # (first: it sets XLA_FLAGS for 8 virtual CPU devices)
import jax
import jax.numpy as jnp
import mpmd
from mpmd.compile.fragment import FragmentExecutable


def jit_dispatch(n: int, donate: bool, calls: int = 100) -> float:
  """Host microseconds per dispatch of `jax.jit` over n arrays -> n arrays."""
  f = jax.jit(lambda xs: [x + 1 for x in xs], donate_argnums=(0,) if donate else ())
  xs = jax.block_until_ready(f([jnp.ones((64,)) + i for i in range(n)]))
  start = time.perf_counter()
  for _ in range(calls):
    xs = f(xs)
  seconds = time.perf_counter() - start
  jax.block_until_ready(xs)
  return seconds / calls * 1e6


class CallTimer:
  """Times each fragment call where the runtime issues it (host time only)."""

  def __init__(self):
    self.seconds: list[float] = []
    self.on = False
    self._call = FragmentExecutable.call_trusted
    timer = self

    def timed(fragment, args):
      if not timer.on:
        return timer._call(fragment, args)
      start = time.perf_counter()
      outs = timer._call(fragment, args)
      timer.seconds.append(time.perf_counter() - start)
      return outs

    FragmentExecutable.call_trusted = timed


def side(model: str, pack: bool) -> gpt2.Side:
  """The mpmd side of `gpt2.py`'s equal setting, packing on or off."""
  run = argparse.Namespace(model=model, microbatches=8, schedule="1F1B", steps=3,
                           **gpt2.SIZES[model])
  make_config = mpmd.make_config

  def config(*args, **kwargs):
    options = dict(kwargs.get("partitioning_options") or {})
    options["mpmd_pack_fragment_values"] = pack
    return make_config(*args, **{**kwargs, "partitioning_options": options})

  mpmd.make_config = config
  try:
    return gpt2.Side(run, "equal", "mpmd")
  finally:
    mpmd.make_config = make_config


def buffers(s: gpt2.Side) -> int:
  """Buffers the step's fragment calls take and make."""
  return sum(len(inst.operands) + len(inst.results) for inst in s.compiled.program.instructions
             if hasattr(inst, "fragment"))


def _warm_sides(model: str) -> tuple[dict, dict]:
  """gpt2.py's equal-setting mpmd and whole-batch jax.jit steps of `model`
  (8 microbatches, 1F1B), compiled, and their states after 2 warm-up steps."""
  run = argparse.Namespace(model=model, microbatches=8, schedule="1F1B", steps=3,
                           **gpt2.SIZES[model])
  sides = {c: gpt2.Side(run, "equal", c) for c in ("mpmd", "jax")}
  states = {c: s.state for c, s in sides.items()}
  for c, s in sides.items():
    for _ in range(2):
      states[c], _ = s.run(states[c])
  return sides, states


def cpu_split(model: str, steps: int) -> None:
  """Medians of wall, process CPU and issuing-thread CPU per step, mpmd and
  jax.jit of the whole batch in turns (see the module docstring, 3)."""
  sides, states = _warm_sides(model)
  taken = {c: [] for c in sides}
  for _ in range(steps):
    for c, s in sides.items():
      wall, cpu, thread = time.perf_counter(), time.process_time(), time.thread_time()
      states[c], _ = s.run(states[c])
      taken[c].append((time.perf_counter() - wall, time.process_time() - cpu,
                       time.thread_time() - thread))
  for c, rows in taken.items():
    wall, cpu, thread = (statistics.median(r[k] for r in rows) * 1e3 for k in range(3))
    print(f"{model}, {c:4s}: step {wall:8.2f} ms wall, {cpu:8.2f} ms CPU of the process, "
          f"{thread:7.2f} ms of it in the issuing thread, {cpu - thread:8.2f} ms in the "
          f"others", flush=True)
  del sides, states


def _spin_rate(run, seconds: float | None = None) -> tuple[float, float]:
  """(increments per second a second Python thread makes while `run()` runs,
  or for `seconds` when `run` is None; the seconds it took)."""
  stop, count = threading.Event(), [0]

  def spin() -> None:
    n = 0
    while not stop.is_set():
      n += 1
    count[0] = n

  thread = threading.Thread(target=spin)
  start = time.perf_counter()
  thread.start()
  if run is None:
    time.sleep(seconds)
  else:
    run()
  stop.set()
  thread.join()
  elapsed = time.perf_counter() - start
  return count[0] / elapsed, elapsed


def gil_share(model: str, steps: int) -> None:
  """Part 4: a second Python thread's progress while mpmd's and jax.jit's
  steps run, as a share of its progress alone."""
  sides, states = _warm_sides(model)
  shares = {c: [] for c in sides}
  times = {c: [] for c in sides}
  for _ in range(3):
    for c, s in sides.items():
      def steps_of(c=c, s=s):
        for _ in range(steps):
          states[c], _ = s.run(states[c])
      rate, elapsed = _spin_rate(steps_of)
      idle_rate, _ = _spin_rate(None, elapsed)
      shares[c].append(rate / idle_rate)
      times[c].append(elapsed / steps)
  alone = {c: [] for c in sides}
  for c, s in sides.items():
    for _ in range(steps):
      start = time.perf_counter()
      states[c], _ = s.run(states[c])
      alone[c].append(time.perf_counter() - start)
  for c in sides:
    with_thread, by_itself = statistics.median(times[c]), statistics.median(alone[c])
    print(f"{model}, {c:4s}: step {by_itself * 1e3:8.2f} ms alone, {with_thread * 1e3:8.2f} ms "
          f"with the thread beside it (about {(with_thread - by_itself) / sys.getswitchinterval():.0f}"
          f" GIL hand-overs a step); the thread got {statistics.median(shares[c]):.0%} of its "
          f"progress alone", flush=True)
  del sides, states


def main(argv: list[str]) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--models", default="small,gpt2")
  parser.add_argument("--steps", type=int, default=10)
  parser.add_argument("--cpu-split", action="store_true",
                      help="only part 3: wall and CPU time per step, mpmd vs jax.jit")
  parser.add_argument("--gil", action="store_true",
                      help="only part 4: a second Python thread's progress beside the steps")
  args = parser.parse_args(argv)
  if args.gil:
    for model in args.models.split(","):
      gil_share(model, args.steps)
    return 0
  if args.cpu_split:
    for model in args.models.split(","):
      cpu_split(model, args.steps)
    return 0
  print(f"jax {jax.__version__}, {jax.devices()[0].device_kind} x {len(jax.devices())}")
  for n in (1, 16, 64, 128):
    print(f"jax.jit, {n:3d} arrays in and out: {jit_dispatch(n, False):7.1f} us per dispatch, "
          f"{jit_dispatch(n, True):7.1f} us donated", flush=True)
  timer = CallTimer()
  for model in args.models.split(","):
    # Both forms compiled first, then their steps taken in turns (a shared
    # machine's noise falls on both alike).
    sides = {pack: side(model, pack) for pack in (True, False)}
    states = {pack: s.state for pack, s in sides.items()}
    for pack, s in sides.items():
      for _ in range(2):
        states[pack], _ = s.run(states[pack])
    steps = {True: [], False: []}
    host = {True: [], False: []}
    for _ in range(args.steps):
      for pack, s in sides.items():
        timer.seconds = []
        timer.on = True
        start = time.perf_counter()
        states[pack], _ = s.run(states[pack])
        steps[pack].append(time.perf_counter() - start)
        timer.on = False
        host[pack].append(timer.seconds)
    ratio = statistics.median(a / b for a, b in zip(steps[True], steps[False]))
    for pack, s in sides.items():
      calls = [t for per_step in host[pack] for t in per_step]
      print(f"{model}, packing {'on ' if pack else 'off'}: step {statistics.median(steps[pack]) * 1e3:8.2f}"
            f" ms; {len(calls) // args.steps} calls, {buffers(s)} buffers; host in calls "
            f"{sum(calls) / args.steps * 1e3:7.2f} ms per step, median "
            f"{statistics.median(calls) * 1e6:6.0f} us per call", flush=True)
    print(f"{model}: median of per-step ratios, packing on / off: {ratio:.3f}x", flush=True)
    del sides, states
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
