"""Runtime traces: when each fragment really ran on its mesh.

`trace_run(program, inputs)` dispatches the program as `Program.run` does
(asynchronously, from one thread) while one watcher thread per mesh waits
for that mesh's fragment results in program order and stamps the time each
becomes ready. (One difference: before dispatching a call that consumes a
donated value, the dispatcher waits until that value was seen ready, since
donation deletes it; the call could not start earlier anyway, but later
instructions are dispatched a little later than in an untraced run.) A mesh runs its fragments one after the
other, so a fragment starts when the previous one on its mesh has finished,
its inputs are ready and it has been dispatched; it ends when its results
are ready. From these intervals come the Chrome trace (open in
chrome://tracing or https://ui.perfetto.dev) and the measured bubble
fraction, to compare with the simulator's prediction.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Sequence

import jax

from mpmd.runtime.program import CallInstruction, Program


@dataclasses.dataclass(frozen=True)
class TraceEvent:
  """One fragment call: mesh, name (unit or function), start/end seconds
  from the beginning of the step."""
  mesh: str
  name: str
  function: str
  start: float
  end: float


@dataclasses.dataclass(frozen=True)
class RuntimeTrace:
  """The fragment calls of one traced step."""
  events: tuple[TraceEvent, ...]
  meshes: tuple[str, ...]

  @property
  def span(self) -> float:
    """Seconds from the first start to the last end."""
    if not self.events:
      return 0.0
    return max(e.end for e in self.events) - min(e.start for e in self.events)

  def busy(self, mesh: str) -> float:
    return sum(e.end - e.start for e in self.events if e.mesh == mesh)

  @property
  def bubble_fraction(self) -> float:
    """Idle share of the meshes over the step: 1 - busy / (meshes x span)."""
    span = self.span
    if span <= 0:
      return 0.0
    return 1.0 - sum(self.busy(m) for m in self.meshes) / (len(self.meshes) * span)

  def to_chrome_trace(self) -> dict:
    """Chrome trace-event JSON: one row (thread) per mesh, times in µs."""
    t0 = min((e.start for e in self.events), default=0.0)
    events = [{"name": "thread_name", "ph": "M", "pid": 0, "tid": i, "args": {"name": m}}
              for i, m in enumerate(self.meshes)]
    tid = {m: i for i, m in enumerate(self.meshes)}
    for e in self.events:
      events.append({"name": e.name, "cat": "fragment", "ph": "X", "pid": 0, "tid": tid[e.mesh],
                     "ts": (e.start - t0) * 1e6, "dur": (e.end - e.start) * 1e6,
                     "args": {"function": e.function}})
    return {"traceEvents": events, "displayTimeUnit": "ms"}

  def write_chrome_trace(self, path: str) -> None:
    with open(path, "w") as f:
      json.dump(self.to_chrome_trace(), f)


def trace_run(program: Program, inputs: Sequence[jax.Array],
              meshes: Sequence[str]) -> tuple[list[jax.Array], RuntimeTrace]:
  """Runs `program` once and records when each fragment call ran."""
  calls = [(index, inst) for index, inst in enumerate(program.instructions)
           if isinstance(inst, CallInstruction)]
  producer: dict[int, int] = {}  # value id -> index of the call producing it
  for index, inst in enumerate(program.instructions):
    if isinstance(inst, CallInstruction):
      for v in inst.results:
        producer[v] = index
    else:  # a transfer's result is ready when its source is (plus the copy)
      producer[inst.results[0]] = producer.get(inst.operands[0], -1)
  dispatched: dict[int, float] = {}
  ready: dict[int, float] = {}
  results: dict[int, list] = {}
  cond = threading.Condition()

  def watch(mesh: str) -> None:
    for index, inst in calls:
      if inst.mesh != mesh:
        continue
      with cond:
        cond.wait_for(lambda: index in results)
        outs = results[index]
      jax.block_until_ready(outs)
      with cond:
        ready[index] = time.perf_counter()
        cond.notify_all()

  threads = [threading.Thread(target=watch, args=(m,), daemon=True) for m in meshes]
  for t in threads:
    t.start()
  env = program.initial_env(inputs)
  start = time.perf_counter()
  for index, inst in enumerate(program.instructions):
    if isinstance(inst, CallInstruction):
      # A donated operand is consumed at dispatch: let its producer's watcher
      # see it ready first (the call could not start earlier anyway).
      waits = [producer[inst.operands[k]] for k in inst.donated
               if producer.get(inst.operands[k], -1) >= 0]
      if waits:
        with cond:
          cond.wait_for(lambda: all(w in ready for w in waits))
      inst.execute(env)
      with cond:
        dispatched[index] = time.perf_counter()
        results[index] = [env[i] for i in inst.results]
        cond.notify_all()
    else:
      inst.execute(env)
    for i in inst.frees:
      env[i] = None
  outputs = [env[i] for i in program.output_ids]
  for t in threads:
    t.join()
  events = []
  previous_end: dict[str, float] = {}
  for index, inst in calls:
    begin = max([dispatched[index], previous_end.get(inst.mesh, start)] +
                [ready[producer[v]] for v in inst.operands if producer.get(v, -1) >= 0])
    end = max(ready[index], begin)
    previous_end[inst.mesh] = end
    events.append(TraceEvent(inst.mesh, inst.unit or inst.fragment.name, inst.fragment.name,
                             begin - start, end - start))
  return outputs, RuntimeTrace(tuple(events), tuple(meshes))
