"""Compiles the fragments of a partitioned program and runs the program.

The partitioner returns an ordered instruction list: fragment calls (a
compiled SPMD program on one mesh) and transfers (between meshes). Compiling
walks the list once in program order, so every fragment is compiled with the
shardings its inputs really have (those of the program's inputs, or read back
from the executable that produces them), once per distinct (function, mesh,
shardings). Running walks it again, dispatching asynchronously with no host
synchronisation: each value is dropped after its last use, buffers the
compiler marked as donated are consumed by the fragment that uses them last,
and arguments the caller donated are deleted at their last use.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import hashlib
import logging
import os
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec, Sharding

from mpmd import _jax_internals as _ji
from mpmd import _pjrt, crossprocess
from mpmd import distributed as dist
from mpmd.errors import MpmdError

logger = logging.getLogger("mpmd")

#: Most fragment programs compiled at once (XLA compiles without the GIL).
_COMPILE_THREADS = int(os.environ.get("MPMD_COMPILE_THREADS", "8"))


class FragmentRuntimeError(MpmdError, RuntimeError):
  """A fragment (or transfer) of a running program failed.

  The message names the fragment, its mesh, its scheduling unit and origins
  and the source location of the computation. Arrays the caller passed
  without donating them are left intact.
  """


@dataclasses.dataclass(frozen=True)
class CallInstruction:
  """Run fragment `fragment` on `mesh`: values `operands` -> `results`."""
  fragment: _pjrt.FragmentExecutable
  mesh: str
  operands: tuple[int, ...]
  results: tuple[int, ...]
  origins: tuple[str, ...]
  location: str
  unit: str = ""
  #: Operand positions whose buffers the call consumes.
  donated: tuple[int, ...] = ()
  #: Values whose last use this is (dropped after it).
  frees: tuple[int, ...] = ()

  def __str__(self) -> str:
    unit = f" [{self.unit}]" if self.unit else ""
    return (f"call {self.fragment.name}{unit} on {self.mesh}: "
            f"{list(self.operands)} -> {list(self.results)}")

  def execute(self, env: list) -> jax.Array | None:
    """Dispatches the call on the values in `env` and stores its results
    there; returns one of them (ready when the call is done), if any."""
    outs = self.fragment(*[env[i] for i in self.operands])
    for i, x in zip(self.results, outs):
      env[i] = x
    return outs[0] if outs else None

  @property
  def meshes(self) -> tuple[str, ...]:
    return (self.mesh,)

  def describe(self) -> str:
    """How errors name this call: function, unit, origins, mesh, source."""
    parts = [f"fragment {self.fragment.name!r}"]
    if self.unit:
      parts.append(f"(unit {self.unit})")
    parts.append(f"of {', '.join(self.origins)}" if self.origins else "(inferred)")
    parts.append(f"on mesh {self.mesh!r}")
    if self.location:
      parts.append(f"at {self.location}")
    return " ".join(parts)


@dataclasses.dataclass(frozen=True)
class _Transfer:
  """What both kinds of transfer have: `operands[0]` on `src_mesh` becomes
  `results[0]` on `mesh`."""
  src_mesh: str
  mesh: str
  operands: tuple[int, ...]
  results: tuple[int, ...]
  location: str
  #: The transfer is the last use of its operand (the compiler's `mpmd.donate`):
  #: the source is released as soon as the copy is issued. (It is not passed
  #: to `jax.device_put(donate=True)`: with jaxlib 0.10.2 on CPU, touching the
  #: source array after such a cross-device put crashes the process.)
  donate: bool = False
  frees: tuple[int, ...] = ()

  @property
  def meshes(self) -> tuple[str, ...]:
    return (self.src_mesh, self.mesh)

  def _where(self) -> str:
    return (f"from mesh {self.src_mesh!r} to mesh {self.mesh!r}"
            + (f" at {self.location}" if self.location else ""))


@dataclasses.dataclass(frozen=True)
class TransferInstruction(_Transfer):
  """Move a value between two meshes of this process (`jax.device_put`)."""
  sharding: Sharding = dataclasses.field(kw_only=True)

  def __str__(self) -> str:
    return f"transfer {self.operands[0]} from {self.src_mesh} to {self.mesh} -> {self.results[0]}"

  def execute(self, env: list) -> jax.Array:
    """Issues the copy of the value in `env` and stores the result there."""
    y = env[self.results[0]] = jax.device_put(env[self.operands[0]], self.sharding)
    return y

  def describe(self) -> str:
    return f"transfer {self._where()}"


@dataclasses.dataclass(frozen=True)
class CrossProcessTransferInstruction(_Transfer):
  """This process's part of a transfer between meshes of different processes
  (one collective over both meshes' devices; see `mpmd.crossprocess`)."""
  transfer: crossprocess.CrossProcessTransfer = dataclasses.field(kw_only=True)

  @property
  def sharding(self) -> Sharding:
    return self.transfer.plan.target

  def __str__(self) -> str:
    role = "/".join(r for r, on in (("send", self.transfer.sends),
                                    ("receive", self.transfer.receives)) if on)
    return (f"transfer {self.operands[0]} from {self.src_mesh} to {self.mesh} -> "
            f"{self.results[0]} (cross-process, {role})")

  def execute(self, env: list) -> jax.Array:
    """Joins the collective; stores the value where this process receives it."""
    env[self.results[0]], done = self.transfer.exchange(env[self.operands[0]])
    return done

  def describe(self) -> str:
    return f"cross-process transfer {self._where()}"


Instruction = CallInstruction | TransferInstruction | CrossProcessTransferInstruction

#: Marks instructions of meshes this process does not take part in.
_SKIPPED = object()


def _on_mesh(sharding: Sharding, mesh: Mesh) -> Sharding:
  """The same layout as `sharding`, on the devices of `mesh`."""
  if isinstance(sharding, NamedSharding) and sharding.mesh.axis_names == mesh.axis_names:
    return NamedSharding(mesh, sharding.spec, memory_kind=sharding.memory_kind)
  return NamedSharding(mesh, PartitionSpec())


def _with_frees(instructions: list[Instruction], keep: set[int]) -> list[Instruction]:
  """Adds to each instruction the values whose last use it is."""
  last_use: dict[int, int] = {}
  for index, inst in enumerate(instructions):
    for v in inst.operands:
      last_use[v] = index
  frees: dict[int, list[int]] = {}
  for v, index in last_use.items():
    if v not in keep:
      frees.setdefault(index, []).append(v)
  return [dataclasses.replace(inst, frees=tuple(frees.get(i, ()))) for i, inst in enumerate(instructions)]


class Program:
  """A compiled MPMD program: fragment executables and the instruction list.

  Attributes:
    instructions: the program in execution order.
    input_ids / output_ids: value ids of the entry function's inputs/outputs.
    input_shardings: the sharding each input must have.
    output_shardings: the sharding of each output.
    fragments: (function name, mesh, variant) -> executable, one per compile.
    ownership: the `mpmd.distributed.Ownership` of the meshes.
  """

  def __init__(self, instructions: list[Instruction], input_ids: Sequence[int],
               output_ids: Sequence[int], num_values: int,
               fragments: Mapping[tuple, _pjrt.FragmentExecutable],
               input_shardings: Sequence[Sharding], output_shardings: Sequence[Sharding],
               output_fixups: Mapping[int, Sharding] | None = None,
               donated_inputs: Sequence[bool] = (),
               remote_outputs: Mapping[int, dist.RemoteArray] | None = None,
               max_inflight: int = 0, ownership: dist.Ownership | None = None):
    self.instructions = _with_frees(instructions, set(output_ids))
    # Inputs the caller donated that XLA did not consume (it aliases only
    # buffers it can reuse for an output) are deleted at their last use.
    donated = {v for v, d in zip(input_ids, donated_inputs) if d}
    self._delete_at = {index: tuple(v for v in inst.frees if v in donated)
                       for index, inst in enumerate(self.instructions)
                       if any(v in donated for v in inst.frees)}
    self.input_ids = tuple(input_ids)
    self.output_ids = tuple(output_ids)
    self.num_values = num_values
    self.fragments = dict(fragments)
    self.input_shardings = tuple(input_shardings)
    self.output_shardings = tuple(output_shardings)
    self._output_fixups = dict(output_fixups or {})
    #: Output index -> placeholder, for outputs on meshes of other processes.
    self.remote_outputs = dict(remote_outputs or {})
    #: The meshes this process takes part in (all of them in a single-process run).
    self.ownership = ownership
    #: Most dispatched, unfinished instructions per mesh (0: no bound); see
    #: `max_inflight()`. The windows persist across calls.
    self.max_inflight = max_inflight
    self._inflight: dict[str, collections.deque] = collections.defaultdict(collections.deque)

  def initial_env(self, inputs: Sequence[jax.Array]) -> list:
    """The value table of a run: the inputs at their ids, None elsewhere."""
    env: list = [None] * self.num_values
    for i, x in zip(self.input_ids, inputs):
      env[i] = x
    return env

  def run(self, inputs: Sequence[jax.Array]) -> list[jax.Array]:
    """Runs the program on inputs already placed as `input_shardings`.

    Dispatches everything asynchronously. Raises `FragmentRuntimeError`
    (naming the fragment) if a fragment or transfer fails to dispatch.
    """
    env = self.initial_env(inputs)
    inst = None
    delete_at = self._delete_at
    limit = self.max_inflight
    try:
      for index, inst in enumerate(self.instructions):
        done = inst.execute(env)
        if limit and done is not None:
          self._bound_inflight(inst.meshes, done, limit)
        if index in delete_at:
          for i in delete_at[index]:
            if env[i] is not None and not env[i].is_deleted():
              env[i].delete()
        for i in inst.frees:
          env[i] = None
    except Exception as e:  # noqa: BLE001 -- re-raised naming the instruction
      raise FragmentRuntimeError(f"{inst.describe()} failed: {type(e).__name__}: {e}") from e
    outputs = [env[i] for i in self.output_ids]
    for k, sharding in self._output_fixups.items():
      outputs[k] = jax.device_put(outputs[k], sharding)
    for k, placeholder in self.remote_outputs.items():
      outputs[k] = placeholder
    return outputs

  def _bound_inflight(self, meshes: Sequence[str], done: jax.Array, limit: int) -> None:
    """Waits for the oldest unfinished instruction of a mesh once `limit`
    are in flight there."""
    for mesh in meshes:
      window = self._inflight[mesh]
      window.append(done)
      if len(window) > limit:
        oldest = window.popleft()
        try:
          oldest.block_until_ready()
        except Exception as e:  # noqa: BLE001
          # Donated to a later instruction since: that one is in the window.
          if not (oldest.is_deleted() or "deleted or donated" in str(e)):
            raise


def max_inflight(platform: str) -> int:
  """How many instructions may be dispatched and unfinished per mesh.

  `MPMD_MAX_INFLIGHT` when set (0: no bound). Otherwise 16 on CPU: with
  jaxlib 0.10.2, more than about 32 multi-device executions with
  collectives in flight on the same CPU devices deadlock (seen with plain
  `jax.jit` too, in one process or several), so the runtime waits for the
  oldest one before it gets there. No bound on other platforms.
  """
  value = os.environ.get("MPMD_MAX_INFLIGHT")
  if value is not None and value != "":
    return max(0, int(value))
  return 16 if platform == "cpu" else 0


class _Progress:
  """A progress line on stderr while many fragments compile (TTY only);
  every compile is also logged to the `mpmd` logger."""

  def __init__(self, total: int):
    self.total = total
    self.enabled = total >= 4 and sys.stderr.isatty() and logger.isEnabledFor(logging.WARNING)

  def update(self, done: int, name: str) -> None:
    if self.enabled:
      sys.stderr.write(f"\r[mpmd] compiling fragment programs {done}/{self.total}: {name[:48]:<48}")
      sys.stderr.flush()

  def close(self) -> None:
    if self.enabled:
      sys.stderr.write("\r" + " " * 100 + "\r")
      sys.stderr.flush()


def _fingerprint(partition, input_shardings: Sequence[Sharding],
                 wanted: Mapping[int, Sharding]) -> str:
  """Names one compile of one program identically on every process."""
  h = hashlib.sha256(partition.exported_text.encode())
  for s in (*input_shardings, *(wanted[k] for k in sorted(wanted))):
    h.update(repr(s.spec if isinstance(s, NamedSharding) else s).encode())
  return h.hexdigest()[:24]


def compile_program(partition, topology: Mapping[str, Mesh],
                    input_shardings: Sequence[Sharding],
                    output_shardings: Mapping[int, Sharding] | None = None,
                    donated_inputs: Sequence[bool] = (),
                    output_avals: Sequence[Any] = ()) -> Program:
  """Compiles each distinct (fragment function, mesh, shardings) once, in
  parallel where the output shardings they depend on are known
  (`MPMD_COMPILE_THREADS`, default 8, bounded by the number of CPUs).

  In a multi-process run only the fragments of meshes with devices of this
  process are compiled; transfers between meshes of different processes
  become collectives (`mpmd.crossprocess`), and the sharding of a value a
  process receives but does not produce is published by the process that
  produces it (JAX's coordination service).

  Args:
    partition: the `mpmd._mpmd.PartitionResult` of the partitioner.
    topology: mesh name -> mesh.
    input_shardings: the sharding of each input of the entry function.
    output_shardings: output index -> the sharding it must have (the
      fragment or transfer producing it is compiled for it; inputs returned
      as they are get copied).
    donated_inputs: per input, whether the caller donated it: it is
      consumed (deleted) at its last use in the program.
    output_avals: per output, its shape and dtype (for the `RemoteArray`
      placeholders of outputs on other processes' meshes).
  """
  functions = {f.name: f for f in partition.functions}
  owner = dist.Ownership(topology)
  sharding_of: dict[int, Sharding] = {
      v: s for v, s, m in zip(partition.input_ids, input_shardings, partition.input_meshes)
      if owner.runs(m)}
  wanted: dict[int, Sharding] = {}
  for k, sharding in (output_shardings or {}).items():
    wanted.setdefault(partition.output_ids[k], sharding)
  fingerprint = _fingerprint(partition, input_shardings, output_shardings or {}) \
      if owner.multiprocess else ""
  cache: dict[tuple, _pjrt.FragmentExecutable] = {}
  program = list(partition.program)
  resolved: list[Any] = [None] * len(program)
  local_calls = [inst for inst in program if inst.kind == "call" and owner.runs(inst.mesh)]
  num_calls = len(local_calls)
  progress = _Progress(len({inst.callee for inst in local_calls}))
  start = time.perf_counter()
  compile_seconds = 0.0
  awaited: dict[str, str] = {}  # metadata key -> what it is, for a timeout error
  deadline = time.monotonic() + dist.timeout_seconds()

  def call_key(inst) -> tuple | None:
    if any(v not in sharding_of for v in inst.operands):
      return None
    return (inst.callee, inst.mesh, tuple(sharding_of[v] for v in inst.operands),
            tuple(wanted.get(v) for v in inst.results))

  def compile_one(key: tuple) -> tuple[_pjrt.FragmentExecutable, float]:
    callee, mesh_name, in_shardings, out_shardings = key
    t0 = time.perf_counter()
    fragment = _pjrt.compile_fragment(
        functions[callee].module_text, topology[mesh_name], name=callee,
        in_shardings=list(in_shardings), donated_args=list(functions[callee].donated_args),
        out_shardings=list(out_shardings) if any(out_shardings) else None)
    return fragment, time.perf_counter() - t0

  def resolve_transfer(index: int, inst) -> Any:
    """The instruction of a transfer: `_SKIPPED` when this process owns
    neither mesh, None while the target sharding is not known here yet."""
    if not (owner.runs(inst.src_mesh) or owner.runs(inst.mesh)):
      return _SKIPPED
    result, source = inst.results[0], inst.operands[0]
    across = not (owner.owns_all(inst.src_mesh) and owner.owns_all(inst.mesh))
    key = f"mpmd/{fingerprint}/transfer/{index}"
    target = wanted.get(result)
    if target is None and owner.runs(inst.src_mesh):
      if source not in sharding_of:  # produced here, not compiled yet
        return None
      target = _on_mesh(sharding_of[source], topology[inst.mesh])
      if across and owner.process == owner.owner(inst.src_mesh):
        dist.publish(key, dist.encode_sharding(target))
    elif target is None:  # produced by another process, which publishes it
      text = dist.try_fetch(key)
      if text is None:
        awaited[key] = (f"the sharding of the value transferred from mesh {inst.src_mesh!r} "
                        f"(process {owner.owner(inst.src_mesh)}) to mesh {inst.mesh!r}"
                        + (f" at {inst.location}" if inst.location else ""))
        return None
      awaited.pop(key, None)
      target = dist.decode_sharding(text, topology[inst.mesh])
    elif not across and source not in sharding_of:  # wait for the producer
      return None
    sharding_of[result] = target
    fields = (inst.src_mesh, inst.mesh, tuple(inst.operands), tuple(inst.results),
              inst.location)
    if not across:
      return TransferInstruction(*fields, donate=inst.donate, sharding=target)
    # The partitioner's type of the value: a receiving process need not
    # have compiled its producer.
    aval = _ji.aval_of_tensor_type(inst.value_type)
    plan = crossprocess.make_plan(topology[inst.src_mesh], topology[inst.mesh], aval.shape,
                                  aval.dtype, target)
    return CrossProcessTransferInstruction(*fields, donate=inst.donate,
                                           transfer=crossprocess.CrossProcessTransfer(plan))

  # Waves: resolve, in program order, every instruction whose input shardings
  # are known; compile the distinct programs that blocks in parallel (XLA
  # compiles without the GIL); their output shardings unblock the next wave.
  workers = max(1, min(_COMPILE_THREADS, os.cpu_count() or 1))
  try:
    with concurrent.futures.ThreadPoolExecutor(workers, "mpmd-compile") as pool:
      while True:
        waiting: dict[tuple, None] = {}
        for index, inst in enumerate(program):
          if resolved[index] is not None:
            continue
          if inst.kind == "transfer":
            resolved[index] = resolve_transfer(index, inst)
            continue
          if not owner.runs(inst.mesh):
            resolved[index] = _SKIPPED
            continue
          key = call_key(inst)
          if key is None:
            continue
          fragment = cache.get(key)
          if fragment is None:
            waiting[key] = None
            continue
          for v, sharding in zip(inst.results, fragment.output_shardings):
            sharding_of[v] = sharding
          resolved[index] = CallInstruction(
              fragment, inst.mesh, tuple(inst.operands), tuple(inst.results), tuple(inst.origins),
              inst.location, inst.unit, donated=tuple(functions[inst.callee].donated_args))
        if not waiting:
          if awaited and any(r is None for r in resolved):
            dist.wait_for_any(awaited, deadline)  # another process's compile
            continue
          break
        for key, (fragment, seconds) in zip(waiting, pool.map(compile_one, waiting)):
          cache[key] = fragment
          compile_seconds += seconds
          logger.info("[%d] compiled %s for mesh %r (%d devices) in %.2fs", len(cache), key[0],
                      key[1], topology[key[1]].size, seconds)
          progress.update(len(cache), key[0])
  finally:
    progress.close()
  if any(r is None for r in resolved):  # cannot happen for a verified program
    raise MpmdError("the partitioned program uses a value before defining it")
  instructions = [r for r in resolved if r is not _SKIPPED]
  logger.info("compiled %d distinct fragment programs for %d calls on %d meshes in %.2fs "
              "(XLA: %.2fs over %d threads)", len(cache), num_calls, len({k[1] for k in cache}),
              time.perf_counter() - start, compile_seconds, workers)
  if owner.multiprocess:
    crossing = sum(isinstance(r, CrossProcessTransferInstruction) for r in instructions)
    logger.info("process %d runs meshes %s: %d of %d instructions, %d cross-process transfers",
                owner.process, [m for m in topology if owner.runs(m)], len(instructions),
                len(program), crossing)
  num_values = 1 + max([*partition.input_ids, *partition.output_ids,
                        *(v for inst in partition.program for v in (*inst.operands, *inst.results))],
                       default=-1)
  final = [sharding_of.get(v) for v in partition.output_ids]
  fixups = {}
  remote = {}
  for k, (v, mesh) in enumerate(zip(partition.output_ids, partition.output_meshes)):
    if not owner.runs(mesh):
      aval = output_avals[k]
      remote[k] = dist.RemoteArray(aval.shape, aval.dtype, mesh, owner.processes[mesh])
  for k, sharding in (output_shardings or {}).items():
    if k not in remote and final[k] != sharding:  # an input returned as is, or returned twice
      fixups[k] = sharding
      final[k] = sharding
  fragments = {(k[0], k[1], i): f for i, (k, f) in enumerate(cache.items())}
  platform = next(iter(topology.values())).devices.flat[0].platform
  return Program(instructions, partition.input_ids, partition.output_ids, num_values, fragments,
                 input_shardings, final, fixups, donated_inputs, remote, max_inflight(platform),
                 owner)
