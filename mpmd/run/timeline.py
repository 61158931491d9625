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
import os
import threading
import time
from collections.abc import Sequence

import jax

from mpmd.run.program import CallInstruction, Program


@dataclasses.dataclass(frozen=True)
class TraceEvent:
  """One fragment call (mesh, name: unit or function) or transfer (from
  `source` to `mesh`), with start/end seconds from the beginning of the step."""
  mesh: str
  name: str
  function: str
  start: float
  end: float
  #: For a transfer: the mesh it copies from ("" for a fragment call).
  source: str = ""

  @property
  def is_transfer(self) -> bool:
    return bool(self.source)


@dataclasses.dataclass(frozen=True)
class RuntimeTrace:
  """The fragment calls and transfers of one traced step."""
  events: tuple[TraceEvent, ...]
  meshes: tuple[str, ...]

  @property
  def calls(self) -> tuple[TraceEvent, ...]:
    return tuple(e for e in self.events if not e.is_transfer)

  @property
  def transfers(self) -> tuple[TraceEvent, ...]:
    return tuple(e for e in self.events if e.is_transfer)

  @property
  def span(self) -> float:
    """Seconds from the first start to the last end of a fragment call."""
    calls = self.calls
    if not calls:
      return 0.0
    return max(e.end for e in calls) - min(e.start for e in calls)

  def busy(self, mesh: str) -> float:
    """Seconds the fragment calls of `mesh` ran."""
    return sum(e.end - e.start for e in self.calls if e.mesh == mesh)

  @property
  def bubble_fraction(self) -> float:
    """Idle share of the meshes over the step: 1 - busy / (meshes x span)."""
    span = self.span
    if span <= 0:
      return 0.0
    return 1.0 - sum(self.busy(m) for m in self.meshes) / (len(self.meshes) * span)

  def to_chrome_trace(self) -> dict:
    """Chrome trace-event JSON, times in µs: one row (thread) per mesh for
    its fragment calls, one row per (source, destination) pair of meshes for
    the transfers between them, and a flow arrow from each transfer to its
    destination row."""
    t0 = min((e.start for e in self.events), default=0.0)
    rows = list(self.meshes)
    for e in self.transfers:
      row = f"transfers {e.source} -> {e.mesh}"
      if row not in rows:
        rows.append(row)
    tid = {name: i for i, name in enumerate(rows)}
    events = [{"name": "thread_name", "ph": "M", "pid": 0, "tid": i, "args": {"name": name}}
              for i, name in enumerate(rows)]
    for k, e in enumerate(self.events):
      ts, dur = (e.start - t0) * 1e6, (e.end - e.start) * 1e6
      if not e.is_transfer:
        events.append({"name": e.name, "cat": "fragment", "ph": "X", "pid": 0,
                       "tid": tid[e.mesh], "ts": ts, "dur": dur,
                       "args": {"function": e.function}})
        continue
      row = tid[f"transfers {e.source} -> {e.mesh}"]
      events.append({"name": e.name, "cat": "transfer", "ph": "X", "pid": 0, "tid": row,
                     "ts": ts, "dur": dur, "args": {"from": e.source, "to": e.mesh}})
      events.append({"name": e.name, "cat": "transfer", "ph": "s", "id": k, "pid": 0,
                     "tid": row, "ts": ts})
      events.append({"name": e.name, "cat": "transfer", "ph": "f", "bp": "e", "id": k,
                     "pid": 0, "tid": tid[e.mesh], "ts": ts + dur})
    return {"traceEvents": events, "displayTimeUnit": "ms"}

  def write_chrome_trace(self, path: str) -> None:
    """Writes `to_chrome_trace()` as JSON to `path` (its folder is created)."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    with open(path, "w") as f:
      json.dump(self.to_chrome_trace(), f)


def trace_run(program: Program, inputs: Sequence[jax.Array],
              meshes: Sequence[str]) -> tuple[list[jax.Array], RuntimeTrace]:
  """Runs `program` once and records when each fragment call ran."""
  calls = [(index, inst) for index, inst in enumerate(program.instructions)
           if isinstance(inst, CallInstruction)]
  transfers = [(index, inst) for index, inst in enumerate(program.instructions)
               if not isinstance(inst, CallInstruction)]
  transfer_of: dict[int, int] = {inst.results[0]: index for index, inst in transfers}
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

  def watch(mesh: str | None) -> None:
    """Stamps when the results of `mesh`'s calls (None: of the transfers)
    become ready, in program order."""
    for index, inst in (transfers if mesh is None else calls):
      if mesh is not None and inst.mesh != mesh:
        continue
      with cond:
        cond.wait_for(lambda: index in results)
        outs = results[index]
      jax.block_until_ready(outs)
      with cond:
        ready[index] = time.perf_counter()
        cond.notify_all()

  threads = [threading.Thread(target=watch, args=(m,), daemon=True) for m in (*meshes, None)]
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
      waits += [transfer_of[inst.operands[k]] for k in inst.donated
                if inst.operands[k] in transfer_of]
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
      with cond:
        dispatched[index] = time.perf_counter()
        results[index] = [env[inst.results[0]]]
        cond.notify_all()
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
  for index, inst in transfers:
    source = producer.get(inst.operands[0], -1)
    begin = max(dispatched[index], ready[source] if source >= 0 else start)
    end = max(ready[index], begin)
    events.append(TraceEvent(inst.mesh, f"transfer {inst.src_mesh} -> {inst.mesh}", "",
                             begin - start, end - start, source=inst.src_mesh))
  return outputs, RuntimeTrace(tuple(events), tuple(meshes))
