"""(m) One issuing thread per mesh: does it help? Measured side by side.

The runtime issues a step's instructions from the calling thread, in program
order (`Program.run`). A mesh whose next call is ready may then wait while the
host issues another mesh's work. This benchmark runs the same compiled
program's instructions three ways, in turns in one process, with the same
inputs:

* `Program.run` as users get it (one thread, program order, with its
  bookkeeping: values dropped at their last use, the windows that find
  where a failure began);
* the steps alone in program order from the calling thread (no bookkeeping);
* the steps alone from one worker thread (the hand-off's cost);
* the steps from one worker thread per mesh, each in its mesh's order,
  waiting only for what it reads (the step that makes each operand, and,
  before a call consumes a buffer, every earlier reader of it);

and `jax.jit` of the whole step on one device for scale. The model is
section (c)'s equal-arithmetic transformer (8 blocks, width 32, sequence 16,
AdamW) on 4 meshes of one CPU device each, 8 microbatches, 1F1B, in a
process with the 4 devices it uses.

    python benchmarks/issue_threads.py                 # writes section (m)
    python benchmarks/issue_threads.py --quick --output /tmp/r.md
"""

from __future__ import annotations

import argparse
import os
import pathlib
import queue
import statistics
import sys
import threading
import time

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import jax  # noqa: E402

import _common  # noqa: E402
import mpmd  # noqa: E402
import runtime as runtime_bench  # noqa: E402
from mpmd.run.program import CallInstruction  # noqa: E402


class PerMeshIssuer:
  """Issues a program's steps from one thread per mesh (or from `threads=1`
  thread), each step once the steps that make what it reads are issued.
  Values live until the run ends (no frees: a value's last use in program
  order need not be its last use in time)."""

  def __init__(self, program, threads_per_mesh: bool = True):
    self.program = program
    steps = program._steps  # (execute, slots, deletes, frees, first instruction)
    instructions = program.instructions
    sizes = program._batched_sizes
    producer: dict[int, int] = {}
    readers: dict[int, list[int]] = {}
    self.deps: list[tuple[int, ...]] = []
    owner: list[str] = []
    for s, (_, _, deletes, _, first) in enumerate(steps):
      if deletes:
        raise ValueError("compile without donating the caller's arguments")
      group = instructions[first:first + sizes.get(first, 1)]
      deps = {producer[v] for inst in group for v in inst.operands if v in producer}
      for inst in group:
        if isinstance(inst, CallInstruction):
          for k in inst.donated:  # (every earlier reader of a consumed buffer first)
            deps.update(r for r in readers.get(inst.operands[k], ()) if r != s)
      for inst in group:
        for v in inst.operands:
          readers.setdefault(v, []).append(s)
        for v in inst.results:
          producer[v] = s
      deps.discard(s)
      self.deps.append(tuple(sorted(deps)))
      first_inst = group[0]
      owner.append(first_inst.mesh if isinstance(first_inst, CallInstruction)
                   else first_inst.src_mesh)
    meshes = sorted(set(owner)) if threads_per_mesh else ["all"]
    self.plan = [[s for s, m in enumerate(owner) if not threads_per_mesh or m == mesh]
                 for mesh in meshes]
    self.executes = [step[0] for step in steps]
    self.issued = [threading.Lock() for _ in steps]
    self.inboxes = [queue.SimpleQueue() for _ in self.plan]
    self.finished: queue.SimpleQueue = queue.SimpleQueue()
    self.threads = [threading.Thread(target=self._worker, args=(k,), daemon=True)
                    for k in range(len(self.plan))]
    for t in self.threads:
      t.start()

  def _worker(self, k: int) -> None:
    mine, deps, executes, issued = self.plan[k], self.deps, self.executes, self.issued
    while True:
      env = self.inboxes[k].get()
      if env is None:
        return
      error = None
      try:
        for s in mine:
          for d in deps[s]:
            issued[d].acquire()
            issued[d].release()
          executes[s](env)
          issued[s].release()
      except BaseException as e:  # noqa: BLE001 -- handed to the caller
        error = e
      self.finished.put(error)

  def run(self, inputs):
    for lock in self.issued:
      lock.acquire()
    env = self.program.initial_env(inputs)
    for inbox in self.inboxes:
      inbox.put(env)
    errors = [self.finished.get() for _ in self.inboxes]
    for error in errors:
      if error is not None:
        raise error
    return [env[i] for i in self.program.output_ids]

  def close(self) -> None:
    for inbox in self.inboxes:
      inbox.put(None)
    for t in self.threads:
      t.join()


def _flat_inputs(compiled, args) -> list:
  """The flat, placed inputs `Program.run` gets for `compiled(*args)`."""
  seen = []
  program = compiled.program
  original = program.run
  def record(inputs, check=None):
    seen.append(list(inputs))
    return original(inputs, check)
  program.run = record
  try:
    jax.block_until_ready(compiled(*args))
  finally:
    del program.run
  return seen[0]


def measure(args) -> tuple[str, dict]:
  model = runtime_bench.Transformer(layers=args.layers, width=32, seq=16,
                                    batch=16 // args.microbatches,
                                    microbatches=args.microbatches, schedule="1F1B", meshes=4,
                                    per_mesh=1)
  state = model.state()
  compiled = mpmd.jit(model.step, model.config).lower(state, model.data).compile()
  inputs = _flat_inputs(compiled, (state, model.data))
  program = compiled.program
  threaded, single = PerMeshIssuer(program, True), PerMeshIssuer(program, False)
  device = jax.devices()[0]
  ref = jax.jit(model.step)
  ref_state, ref_data = jax.device_put(model.state(), device), jax.device_put(model.data, device)
  def bare() -> list:
    """The steps in program order from the calling thread, nothing else."""
    env = program.initial_env(inputs)
    for step in program._steps:
      step[0](env)
    return [env[i] for i in program.output_ids]

  sides = {"Program.run (one thread, program order)": lambda: program.run(inputs),
           "the steps alone, calling thread": bare,
           "the steps alone, one worker thread": lambda: single.run(inputs),
           "one worker thread per mesh": lambda: threaded.run(inputs),
           "jax.jit, whole step on one device": lambda: ref(ref_state, ref_data)}
  want = jax.tree.leaves(program.run(inputs))
  for name in list(sides)[1:4]:
    got = jax.tree.leaves(sides[name]())
    assert all(bool((a == b).all()) for a, b in zip(got, want)), f"{name}: not bit-equal"
  times = {name: [] for name in sides}
  returned = {name: [] for name in sides}  # (when the call returned: its host time)
  order = list(sides)
  for i in range(args.warmup + args.steps):
    for name in order[i % len(order):] + order[:i % len(order)]:  # (each side in each place)
      t0 = time.perf_counter()
      out = sides[name]()
      t1 = time.perf_counter()
      jax.block_until_ready(out)
      if i >= args.warmup:
        times[name].append(time.perf_counter() - t0)
        returned[name].append(t1 - t0)
      out = None
  threaded.close()
  single.close()
  base = times["Program.run (one thread, program order)"]
  rows = []
  for name, t in times.items():
    paired = statistics.median(a / b for a, b in zip(t, base))
    rows.append([name, f"{1e3 * statistics.median(t):.2f}",
                 f"{1e3 * statistics.median(returned[name]):.2f}", f"{paired:.3f}x"])
  table = _common.markdown_table(["issue", "step (ms)", "returned after (ms)",
                                  "median of step ratios to Program.run"], rows)
  meshes = len(threaded.plan)
  body = (f"{len(program.instructions)} instructions ({len(program._steps)} issue steps) on "
          f"{meshes} meshes of one CPU device, {args.microbatches} microbatches, 1F1B, "
          f"{args.layers} blocks; medians of {args.steps} steps after {args.warmup} warm-up "
          f"steps, the sides in turns each step (the first side rotating); the other runners' "
          f"results are bit-equal to `Program.run`'s. \"Returned after\": when the call "
          f"gave its outputs back (all issued, not all computed).\n\n{table}\n")
  return body, {name: statistics.median(t) for name, t in times.items()}


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--layers", type=int, default=8)
  parser.add_argument("--microbatches", type=int, default=8)
  parser.add_argument("--steps", type=int, default=300)
  parser.add_argument("--warmup", type=int, default=5)
  parser.add_argument("--quick", action="store_true", help="tiny sizes (a smoke run)")
  parser.add_argument("--output", default=None, help="results file (default RESULTS.md)")
  args = parser.parse_args(argv)
  if args.quick:
    args.layers, args.microbatches, args.steps, args.warmup = 4, 2, 2, 1
  head = _common.provenance(_common.command_line(__file__, argv))
  body, _ = measure(args)
  print(body)
  _common.write_section("m", head + "\n" + body, args.output)
  return 0


if __name__ == "__main__":
  sys.exit(main())
