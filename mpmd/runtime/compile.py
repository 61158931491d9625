"""Compiles the fragments of a partitioned program into a runnable `Program`.

The partitioner returns an ordered instruction list: fragment calls (a
compiled SPMD program on one mesh) and transfers (between meshes). Compiling
walks the list in program order, so every fragment is compiled with the
shardings its inputs really have (those of the program's inputs, or read back
from the executable that produces them), once per distinct (function, mesh,
shardings). `compile_program` runs these steps (methods of `_ProgramCompiler`):

1. set-up: the meshes this process runs, the shardings known so far and the
   ones the outputs must have;
2. wave-parallel compile (`compile_in_waves`): resolve every instruction whose
   input shardings are known, compile the distinct programs that blocks in
   parallel, and let their output shardings (sharding propagation,
   `_call_instruction` / `_transfer_target`) unblock the next wave; in a
   multi-process run the target sharding of a transfer between processes
   goes through JAX's key-value store (`_transfer_target`), and each transfer
   is planned (`_transfer_instruction`);
3. the instructions this process runs (`local_instructions`);
4. output fix-ups (`output_fixups`): copies for outputs whose sharding is not
   the requested one, and placeholders for outputs on other processes' meshes.
"""

from __future__ import annotations

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
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec, Sharding

from mpmd import distributed as dist
from mpmd._jax import executable as jx
from mpmd.errors import MpmdError
from mpmd.runtime import crossprocess, warmup
from mpmd.runtime.fragment import (FragmentExecutable, calls_host, compile_fragment,
                                   has_side_effects)
from mpmd.runtime.program import (CallInstruction, CrossProcessTransferInstruction, Instruction,
                                  Program, TransferInstruction, eager_sends, max_inflight)

__all__ = ["compile_program"]

logger = logging.getLogger("mpmd")

#: Most fragment programs compiled at once (XLA compiles without the GIL).
_COMPILE_THREADS = int(os.environ.get("MPMD_COMPILE_THREADS", "8"))

#: Marks instructions of meshes this process does not take part in.
_SKIPPED = object()


def _on_mesh(sharding: Sharding, mesh: Mesh) -> Sharding:
  """The same layout as `sharding`, on the devices of `mesh`."""
  if isinstance(sharding, NamedSharding) and sharding.mesh.axis_names == mesh.axis_names:
    return NamedSharding(mesh, sharding.spec, memory_kind=sharding.memory_kind)
  return NamedSharding(mesh, PartitionSpec())


class _Progress:
  """A progress line on stderr for compiles that take more than
  `_PROGRESS_AFTER` seconds: programs ready / expected, how many of them
  were loaded from another mesh instead of compiled, and the time so far.

  Shown when the `mpmd` logger is at INFO, or with `MPMD_PROGRESS=1`, or on
  a terminal that shows warnings; never with `MPMD_PROGRESS=0`. On a
  terminal it is one line rewritten in place; elsewhere (a log file) a line
  every `_PROGRESS_AFTER` seconds. Every compile is also logged to the
  `mpmd` logger at INFO.
  """

  def __init__(self, total: int):
    self.total = total
    self.start = self.last = time.perf_counter()
    self.tty = sys.stderr.isatty()
    setting = os.environ.get("MPMD_PROGRESS", "")
    self.enabled = setting != "0" and (setting == "1" or logger.isEnabledFor(logging.INFO) or
                                       (self.tty and logger.isEnabledFor(logging.WARNING)))
    self.shown = False

  def update(self, done: int, loaded: int, name: str) -> None:
    now = time.perf_counter()
    if not self.enabled or now - self.start < _PROGRESS_AFTER:
      return
    if not self.tty and now - self.last < _PROGRESS_AFTER:
      return
    self.last = now
    text = (f"[mpmd] fragment programs {done}/{self.total} ({loaded} loaded from another mesh), "
            f"{now - self.start:.0f}s: {name[:40]}")
    sys.stderr.write(f"\r{text:<110}" if self.tty else text + "\n")
    sys.stderr.flush()
    self.shown = True

  def close(self) -> None:
    if self.enabled and self.shown and self.tty:
      sys.stderr.write("\r" + " " * 110 + "\r")
      sys.stderr.flush()


#: Seconds a compile runs before its progress is shown.
_PROGRESS_AFTER = float(os.environ.get("MPMD_PROGRESS_AFTER", "2"))


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
                    output_avals: Sequence[Any] = (),
                    callbacks: jx.HostCallbacks | None = None) -> Program:
  """Compiles each distinct (fragment function, mesh, shardings) once, in
  parallel where the output shardings they depend on are known
  (`MPMD_COMPILE_THREADS`, default 8, bounded by the number of CPUs).

  In a multi-process run only the fragments of meshes with devices of this
  process are compiled; transfers between meshes of different processes
  become collectives (`mpmd.runtime.crossprocess`), and the sharding of a value a
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
    callbacks: the host callbacks of the lowered step (`jax.debug.print`,
      `jax.pure_callback`, ...), which the fragment programs that call them
      are compiled with.
  """
  steps = _ProgramCompiler(partition, topology, input_shardings, output_shardings or {},
                           output_avals, callbacks)
  steps.compile_in_waves()
  instructions = steps.local_instructions()
  final, fixups, remote = steps.output_fixups()
  program = Program(instructions, partition.input_ids, partition.output_ids, steps.num_values(),
                    steps.fragments(), input_shardings, final, fixups, donated_inputs, remote,
                    max_inflight(steps.platform()), steps.owner, steps.constants,
                    {name for name, mesh in topology.items() if mesh.size > 1})
  program.num_xla_compiles = steps.num_compiled
  program.num_loaded = steps.num_loaded
  program.num_warmed_up = steps.num_warmed_up
  program.fingerprint = steps.fingerprint
  return program


def _constant_value(constant: Any) -> tuple[Any, np.dtype]:
  """The Python value and dtype of a `_mpmd.ConstantInput`."""
  dtype = jax.numpy.dtype(constant.dtype)
  kind = dtype.kind
  value = (bool(int(constant.value)) if kind == "b" else
           int(constant.value) if kind in "iu" else float(constant.value))
  return value, dtype


def place_constant(constant: Any, mesh: Mesh) -> jax.Array:
  """A `_mpmd.ConstantInput` (a splat of its shape) as an array replicated on
  `mesh`."""
  value, dtype = _constant_value(constant)
  return jax.device_put(np.full(tuple(constant.shape), value, dtype=dtype),
                        NamedSharding(mesh, PartitionSpec()))


def make_filler(constants: Sequence[tuple[Any, Sharding]]) -> Any:
  """A compiled program of no arguments that returns new arrays holding
  `constants` (`_mpmd.ConstantInput`s), each laid out as its sharding: the
  operands a call consumes, made afresh for each call in one dispatch."""
  specs = [(tuple(c.shape), *_constant_value(c)) for c, _ in constants]

  def fill():
    return [jax.numpy.full(shape, value, dtype) for shape, value, dtype in specs]

  return jax.jit(fill, out_shardings=[s for _, s in constants]).lower().compile()


class _ProgramCompiler:
  """The state of one `compile_program` call, with one method per step."""

  def __init__(self, partition, topology: Mapping[str, Mesh],
               input_shardings: Sequence[Sharding], output_shardings: Mapping[int, Sharding],
               output_avals: Sequence[Any], callbacks: jx.HostCallbacks | None = None):
    """Set-up: which meshes this process runs (`owner`), the shardings known
    so far (`sharding_of`: the inputs on those meshes), the ones values must
    have because outputs require them (`wanted`), and, in a multi-process
    run, the fingerprint that names this compile in the key-value store."""
    self.partition = partition
    self.topology = topology
    #: The step's host callbacks, for the programs that call them.
    self.callbacks = callbacks
    self.output_shardings = output_shardings
    self.output_avals = output_avals
    self.functions = {f.name: f for f in partition.functions}
    #: The functions whose programs call host callbacks (read once per text).
    self.calling_host = {f.name for f in partition.functions if calls_host(f.module_text)}
    #: The functions whose programs have effects outside them (host
    #: callbacks among them): their calls wait for the step's arguments to
    #: be checked (`Program.run`).
    self.effectful = {f.name for f in partition.functions
                      if f.name in self.calling_host or has_side_effects(f.module_text)}
    self.owner = dist.Ownership(topology)
    owner = self.owner
    #: value id -> its sharding, once known on this process.
    self.sharding_of: dict[int, Sharding] = {
        v: s for v, s, m in zip(partition.input_ids, input_shardings, partition.input_meshes)
        if owner.runs(m)}
    #: value id -> the constant inputs of this process's meshes, placed once.
    self.constants: dict[int, jax.Array] = {}
    #: value id -> a constant array a call consumes, laid out once the layout
    #: of that call's other operands is known (`_place_consumed_constants`)...
    self.unplaced: dict[int, Any] = {}
    #: ... then value id -> (the constant, its sharding): the call makes it
    #: afresh each time (`make_filler`).
    self.consumed: dict[int, tuple[Any, Sharding]] = {}
    #: (constants, shardings) -> the filler program making them.
    self.fillers: dict[tuple, Any] = {}
    #: Warm-up runs of new programs (`mpmd.runtime.warmup`) on the compile
    #: threads, the limit on their size, and how many ran.
    self.pool: concurrent.futures.Executor | None = None
    self.warming: list[concurrent.futures.Future] = []
    self.warmup_limit = warmup.warmup_bytes()
    self.num_warmed_up = 0
    #: The functions whose programs may be warmed up (read once per text).
    self.warmable = {f.name for f in partition.functions
                     if warmup.may_run_early(f.module_text)} if self.warmup_limit else set()
    for c in partition.constants:
      if not owner.runs(c.mesh):
        continue
      if c.donated:
        self.unplaced[c.id] = c
        continue
      x = self.constants[c.id] = place_constant(c, topology[c.mesh])
      self.sharding_of[c.id] = x.sharding
    #: value id -> the sharding an output requires it to have.
    self.wanted: dict[int, Sharding] = {}
    for k, sharding in output_shardings.items():
      self.wanted.setdefault(partition.output_ids[k], sharding)
    self.fingerprint = _fingerprint(partition, input_shardings, output_shardings) \
        if owner.multiprocess else ""
    #: compile key -> executable, in compile order.
    self.cache: dict[tuple, FragmentExecutable] = {}
    self.program = list(partition.program)
    #: per instruction of `program`: its runtime instruction, `_SKIPPED`, or
    #: None while unresolved.
    self.resolved: list[Any] = [None] * len(self.program)
    local_calls = [inst for inst in self.program if inst.kind == "call" and owner.runs(inst.mesh)]
    self.num_calls = len(local_calls)
    self.progress = _Progress(len({(inst.callee, inst.mesh) for inst in local_calls}))
    self.start = time.perf_counter()
    self.compile_seconds = 0.0
    #: XLA compiles, and programs loaded on another mesh instead of compiled.
    self.num_compiled = 0
    self.num_loaded = 0
    #: relative compile key (see `_relative_key`) -> the first executable.
    self.by_relative: dict[tuple, FragmentExecutable] = {}
    #: metadata key -> what it is, for a timeout error.
    self.awaited: dict[str, str] = {}
    self.deadline = time.monotonic() + dist.timeout_seconds()
    self.workers = max(1, min(_COMPILE_THREADS, os.cpu_count() or 1))
    #: fragment function -> its argument avals (parsed when needed).
    self._avals: dict[str, list] = {}

  # --- wave-parallel compile ---------------------------------------------------------------------

  def compile_in_waves(self) -> None:
    """Resolves every instruction, compiling fragments in waves.

    A wave resolves, in program order, every instruction whose input
    shardings are known; the distinct programs that blocks are compiled in
    parallel (XLA compiles without the GIL), and their output shardings
    unblock the next wave. When nothing is left to compile but instructions
    still wait for metadata another process publishes, it waits for that
    (`MPMD_DISTRIBUTED_TIMEOUT`).
    """
    try:
      with concurrent.futures.ThreadPoolExecutor(self.workers, "mpmd-compile") as pool:
        self.pool = pool
        while True:
          waiting = self._resolve_wave()
          if not waiting:
            if self.awaited and any(r is None for r in self.resolved):
              dist.wait_for_any(self.awaited, self.deadline)  # another process's compile
              continue
            break
          self._compile_wave(pool, waiting)
        self._finish_fillers()
        warmed = sum(f.result() for f in self.warming)
        if self.warmup_limit:
          warmed += warmup.run_fillers(self.fillers.values(), self.warmup_limit)
        self.num_warmed_up = warmed
        if warmed:
          logger.info("warmed up %d programs (ran each once on zeros, for XLA's first-run "
                      "set-up)", warmed)
    finally:
      self.pool = None
      self.progress.close()

  def _finish_fillers(self) -> None:
    """Waits for the filler programs compiled on the pool and gives each
    call that consumes constants its program."""
    self.fillers = {k: f.result() if isinstance(f, concurrent.futures.Future) else f
                    for k, f in self.fillers.items()}
    for index, inst in enumerate(self.resolved):
      if isinstance(inst, CallInstruction) and isinstance(inst.fill, concurrent.futures.Future):
        self.resolved[index] = dataclasses.replace(inst, fill=inst.fill.result())

  def _warm_up(self, callee: str, fragment: FragmentExecutable) -> None:
    """Runs a new program once on a compile thread (`mpmd.runtime.warmup`)."""
    if (self.pool is not None and callee in self.warmable and
        warmup.eligible(fragment, self.warmup_limit)):
      self.warming.append(self.pool.submit(warmup.run_once, fragment))

  def _resolve_wave(self) -> dict[tuple, None]:
    """One pass over the unresolved instructions, in program order; returns
    the compile keys of the calls that wait for a compile (first use first)."""
    waiting: dict[tuple, None] = {}
    for index, inst in enumerate(self.program):
      if self.resolved[index] is not None:
        continue
      if inst.kind == "transfer":
        self.resolved[index] = self._resolve_transfer(index, inst)
        continue
      if not self.owner.runs(inst.mesh):
        self.resolved[index] = _SKIPPED
        continue
      key = self._call_key(inst)
      if key is None:
        continue
      fragment = self.cache.get(key) or self._already_laid_out(key)
      if fragment is None:
        waiting[key] = None
        continue
      self.resolved[index] = self._call_instruction(inst, fragment)
    return waiting

  def _call_key(self, inst) -> tuple | None:
    """What a call compiles for: (callee, mesh, input shardings, required
    output shardings); None while an input sharding is unknown."""
    if self.unplaced and not self._place_consumed_constants(inst):
      return None
    if any(v not in self.sharding_of for v in inst.operands):
      return None
    return (inst.callee, inst.mesh, tuple(self.sharding_of[v] for v in inst.operands),
            tuple(self.wanted.get(v) for v in inst.results))

  def _already_laid_out(self, key: tuple) -> FragmentExecutable | None:
    """For a call whose results must have given layouts (they are outputs of
    the step): the program compiled for the same inputs without that
    requirement, when its results have those layouts anyway (e.g. the last
    microbatch's loss, a replicated scalar like every microbatch's), so
    that it is not compiled a second time."""
    callee, mesh, in_shardings, wanted = key
    if not any(w is not None for w in wanted):
      return None
    fragment = self.cache.get((callee, mesh, in_shardings, (None,) * len(wanted)))
    if fragment is None or not all(
        w is None or w.is_equivalent_to(s, len(a.shape))
        for w, s, a in zip(wanted, fragment.output_shardings, fragment.out_avals)):
      return None
    self.cache[key] = fragment
    return fragment

  def _place_consumed_constants(self, inst) -> bool:
    """Lays out the constant arrays `inst` consumes (the first microbatch's
    accumulators, which start from zeros, made operands by
    -mpmd-parameterize-fragment-constants so that it shares the program of
    the later microbatches). Each gets the layout of an operand of the same
    shape and dtype (the parameters a gradient accumulator goes with), so
    that the call compiles for the layouts the later microbatches' calls
    have; replicated when there is none. The call makes them afresh each
    time (`make_filler`). False while such an operand's layout is not known
    yet."""
    pending = [(k, v) for k, v in enumerate(inst.operands) if v in self.unplaced]
    if not pending:
      return True
    in_avals = self._in_avals(inst.callee)
    for k, v in pending:
      like = [j for j, a in enumerate(in_avals)
              if j != k and inst.operands[j] not in self.unplaced
              and (a.shape, a.dtype) == (in_avals[k].shape, in_avals[k].dtype)]
      if any(inst.operands[j] not in self.sharding_of for j in like):
        return False
      sharding = (self.sharding_of[inst.operands[like[0]]] if like
                  else NamedSharding(self.topology[inst.mesh], PartitionSpec()))
      self.consumed[v] = (self.unplaced.pop(v), sharding)
      self.sharding_of[v] = sharding
    return True

  def _in_avals(self, callee: str) -> list:
    """The argument shapes and dtypes of fragment function `callee`."""
    if callee not in self._avals:
      module = jx.parse_fragment_module(self.functions[callee].module_text)
      self._avals[callee] = jx.main_signature(module)[0]
    return self._avals[callee]

  def _compile_wave(self, pool: concurrent.futures.Executor, waiting: dict[tuple, None]) -> None:
    """Compiles the distinct programs of a wave in parallel (into `cache`).

    A program already compiled for another mesh of the same shape, with the
    same layouts relative to its mesh, is loaded on this mesh's devices
    instead of compiled again (`FragmentExecutable.on_mesh`)."""
    compile_keys: dict[Any, tuple[tuple, Any]] = {}  # relative key (or key) -> (key, rel)
    load_keys: list[tuple[tuple, Any]] = []
    for key in waiting:
      rel = self._relative_key(key)
      if rel is not None and (rel in self.by_relative or rel in compile_keys):
        load_keys.append((key, rel))
      else:
        compile_keys.setdefault(key if rel is None else rel, (key, rel))
    firsts = list(compile_keys.values())
    compiled = pool.map(self._compile_one, [key for key, _ in firsts])
    for (key, rel), (fragment, seconds) in zip(firsts, compiled):
      self.cache[key] = fragment
      self._warm_up(key[0], fragment)
      self.compile_seconds += seconds
      self.num_compiled += 1
      if rel is not None:
        self.by_relative[rel] = fragment
      logger.info("[%d] compiled %s for mesh %r (%d devices) in %.2fs", len(self.cache), key[0],
                  key[1], self.topology[key[1]].size, seconds)
      self.progress.update(self._num_done(), self.num_loaded, key[0])
    for key, rel in load_keys:
      self.cache[key] = self._load_one(key, self.by_relative[rel])
      self._warm_up(key[0], self.cache[key])
      self.progress.update(self._num_done(), self.num_loaded, key[0])

  def _num_done(self) -> int:
    """How many of the (function, mesh) pairs the progress line counts have
    a program."""
    return len({key[:2] for key in self.cache})

  def _relative_key(self, key: tuple) -> tuple | None:
    """A compile key with the mesh replaced by its shape and every layout by
    its spec: equal for the same program on meshes of the same shape. None
    when a layout is not a `NamedSharding` (then it is compiled per mesh)."""
    callee, mesh_name, in_shardings, out_shardings = key
    if callee in self.calling_host:
      return None  # host callbacks do not survive serialization
    specs = []
    for s in (*in_shardings, *out_shardings):
      if s is None:
        specs.append(None)
      elif isinstance(s, NamedSharding):
        specs.append((s.spec, s.memory_kind))
      else:
        return None
    mesh = self.topology[mesh_name]
    return (callee, tuple(mesh.shape.items()), tuple(specs))

  def _load_one(self, key: tuple, source: FragmentExecutable) -> FragmentExecutable:
    """`source` loaded on the mesh of `key` (compiled afresh if that fails)."""
    t0 = time.perf_counter()
    mesh = self.topology[key[1]]
    try:
      fragment = source.on_mesh(mesh)
    except Exception as e:  # noqa: BLE001 -- any failure: compile instead
      logger.info("could not load %s (compiled for mesh %r) on mesh %r, compiling it: %s",
                  key[0], source.mesh, key[1], e)
      fragment, seconds = self._compile_one(key)
      self.compile_seconds += seconds
      self.num_compiled += 1
      return fragment
    self.num_loaded += 1
    logger.info("[%d] loaded %s on mesh %r (compiled for another mesh of its shape) in %.3fs",
                len(self.cache) + 1, key[0], key[1], time.perf_counter() - t0)
    return fragment

  def _compile_one(self, key: tuple) -> tuple[FragmentExecutable, float]:
    """Compiles one fragment program for a compile key; returns it and the
    seconds it took."""
    callee, mesh_name, in_shardings, out_shardings = key
    functions = self.functions
    t0 = time.perf_counter()
    fragment = compile_fragment(
        functions[callee].module_text, self.topology[mesh_name], name=callee,
        in_shardings=list(in_shardings), donated_args=list(functions[callee].donated_args),
        out_shardings=list(out_shardings) if any(out_shardings) else None,
        callbacks=self.callbacks if callee in self.calling_host else None)
    return fragment, time.perf_counter() - t0

  # --- sharding propagation and transfer planning ------------------------------------------------

  def _call_instruction(self, inst, fragment: FragmentExecutable) -> CallInstruction:
    """Sharding propagation through a call: its results get the output
    shardings read back from the compiled fragment. Returns the call."""
    for v, sharding in zip(inst.results, fragment.output_shardings):
      self.sharding_of[v] = sharding
    fresh = tuple(k for k, v in enumerate(inst.operands) if v in self.consumed)
    fill = None
    if fresh:
      constants = tuple(self.consumed[inst.operands[k]] for k in fresh)
      key = tuple((c.dtype, c.value, tuple(c.shape), s) for c, s in constants)
      if key not in self.fillers:  # compiled on the pool, alongside the fragments
        self.fillers[key] = (self.pool.submit(make_filler, constants) if self.pool is not None
                             else make_filler(constants))
      fill = self.fillers[key]
    return CallInstruction(
        fragment, inst.mesh, tuple(inst.operands), tuple(inst.results), tuple(inst.origins),
        inst.location, inst.unit, donated=tuple(self.functions[inst.callee].donated_args),
        fresh=fresh, fill=fill, effects=inst.callee in self.effectful)

  def _resolve_transfer(self, index: int, inst) -> Any:
    """The instruction of a transfer: `_SKIPPED` when this process owns
    neither mesh, None while the target sharding is not known here yet."""
    owner = self.owner
    if not (owner.runs(inst.src_mesh) or owner.runs(inst.mesh)):
      return _SKIPPED
    across = not (owner.owns_all(inst.src_mesh) and owner.owns_all(inst.mesh))
    target = self._transfer_target(index, inst, across)
    if target is None:
      return None
    self.sharding_of[inst.results[0]] = target
    return self._transfer_instruction(index, inst, target, across)

  def _transfer_target(self, index: int, inst, across: bool) -> Sharding | None:
    """Sharding propagation through a transfer, with key-value coordination
    between processes: the sharding the result must have (an output's), else
    the source's layout on the target mesh. The first process owning the
    source mesh publishes it for a transfer between processes; a process
    that receives the value without producing it fetches it. None while it
    is not known here yet (the producer is not compiled yet, or the other
    process has not published it: recorded in `awaited`)."""
    owner = self.owner
    result, source = inst.results[0], inst.operands[0]
    key = f"mpmd/{self.fingerprint}/transfer/{index}"
    target = self.wanted.get(result)
    if target is None and owner.runs(inst.src_mesh):
      if source not in self.sharding_of:  # produced here, not compiled yet
        return None
      target = _on_mesh(self.sharding_of[source], self.topology[inst.mesh])
      if across and owner.process == owner.owner(inst.src_mesh):
        dist.publish(key, dist.encode_sharding(target))
    elif target is None:  # produced by another process, which publishes it
      text = dist.try_fetch(key)
      if text is None:
        self.awaited[key] = (f"the sharding of the value transferred from mesh {inst.src_mesh!r} "
                             f"(process {owner.owner(inst.src_mesh)}) to mesh {inst.mesh!r}"
                             + (f" at {inst.location}" if inst.location else ""))
        return None
      self.awaited.pop(key, None)
      target = dist.decode_sharding(text, self.topology[inst.mesh])
    elif not across and source not in self.sharding_of:  # wait for the producer
      return None
    return target

  def _transfer_instruction(self, index: int, inst, target: Sharding,
                            across: bool) -> Instruction:
    """Transfer planning: a `jax.device_put` between meshes of this process,
    else this process's part of a collective over both meshes' devices
    (`mpmd.runtime.crossprocess`)."""
    fields = (inst.src_mesh, inst.mesh, tuple(inst.operands), tuple(inst.results),
              inst.location)
    # The partitioner's type of the value: a receiving process need not
    # have compiled its producer.
    aval = jx.aval_of_tensor_type(inst.value_type)
    if not across:
      source = self.sharding_of.get(inst.operands[0])
      copier = None if source is None else jx.make_array_copier(source, target, len(aval.shape))
      return TransferInstruction(*fields, donate=inst.donate, sharding=target, copier=copier)
    plan = crossprocess.make_plan(self.topology[inst.src_mesh], self.topology[inst.mesh],
                                  aval.shape, aval.dtype, target)
    src, dst = (self.owner.processes[inst.src_mesh], self.owner.processes[inst.mesh])
    if crossprocess.pull_applies(plan, src, dst):
      transfer = crossprocess.PullTransfer(plan, f"{self.fingerprint}/transfer/{index}",
                                           src[0], dst[0])
    else:
      transfer = crossprocess.CrossProcessTransfer(plan)
    return CrossProcessTransferInstruction(*fields, donate=inst.donate, transfer=transfer)

  # --- the program -------------------------------------------------------------------------------

  def local_instructions(self) -> list[Instruction]:
    """The instructions this process runs, in program order (those of
    meshes it takes no part in dropped); logs what was compiled."""
    if any(r is None for r in self.resolved):  # cannot happen for a verified program
      raise MpmdError("the partitioned program uses a value before defining it")
    instructions = eager_sends([r for r in self.resolved if r is not _SKIPPED])
    owner, cache = self.owner, self.cache
    logger.info("compiled %d distinct fragment programs for %d calls on %d meshes in %.2fs: "
                "%d XLA compiles (%.2fs over %d threads), %d loaded on another mesh of the "
                "same shape; %d programs making the constants calls consume",
                len({id(f) for f in cache.values()}), self.num_calls, len({k[1] for k in cache}),
                time.perf_counter() - self.start, self.num_compiled, self.compile_seconds,
                self.workers, self.num_loaded, len(self.fillers))
    if owner.multiprocess:
      crossing = [r for r in instructions if isinstance(r, CrossProcessTransferInstruction)]
      pulls = sum(isinstance(r.transfer, crossprocess.PullTransfer) for r in crossing)
      logger.info("process %d runs meshes %s: %d of %d instructions, %d cross-process transfers "
                  "(%d pulls, %d collectives)", owner.process,
                  [m for m in self.topology if owner.runs(m)], len(instructions),
                  len(self.program), len(crossing), pulls, len(crossing) - pulls)
    return instructions

  def output_fixups(self) -> tuple[list[Sharding | None], dict[int, Sharding],
                                   dict[int, dist.RemoteArray]]:
    """Output fix-ups: (the sharding of each output, output index -> the
    sharding to copy it to, output index -> placeholder).

    An output gets copied where its sharding is not the one the caller asked
    for (an input returned as is, or a value returned twice); an output on a
    mesh of other processes becomes a `RemoteArray` placeholder.
    """
    partition, owner = self.partition, self.owner
    final = [self.sharding_of.get(v) for v in partition.output_ids]
    fixups = {}
    remote = {}
    for k, (v, mesh) in enumerate(zip(partition.output_ids, partition.output_meshes)):
      if not owner.runs(mesh):
        aval = self.output_avals[k]
        remote[k] = dist.RemoteArray(aval.shape, aval.dtype, mesh, owner.processes[mesh])
    for k, sharding in self.output_shardings.items():
      if k not in remote and final[k] != sharding:  # an input returned as is, or returned twice
        fixups[k] = sharding
        final[k] = sharding
    return final, fixups, remote

  def num_values(self) -> int:
    """The size of the value table: one more than the largest value id."""
    partition = self.partition
    return 1 + max([*partition.input_ids, *partition.output_ids,
                    *(v for inst in partition.program for v in (*inst.operands, *inst.results))],
                   default=-1)

  def fragments(self) -> dict[tuple, FragmentExecutable]:
    """(function name, mesh, variant) -> executable, one per compile."""
    return {(k[0], k[1], i): f for i, (k, f) in enumerate(self.cache.items())}

  def platform(self) -> str:
    """The platform of the topology's devices."""
    return next(iter(self.topology.values())).devices.flat[0].platform
