"""When each value's sharding is known: the order a program compiles in.

Every fragment is compiled with the shardings its inputs really have: those
of the program's inputs and constants, or read back from the executable that
produces them. `LayoutPlan.resolve` walks the partitioned program's
instructions in waves. A wave resolves, in program order, every instruction
whose input shardings are known: a call by the program of its compile key
(from the fragment cache, `mpmd.compile.fragment_cache`), whose output
shardings then become known; a transfer by the sharding its result gets on
the target mesh (an output's, else the source's layout there). The compile
keys of the calls still waiting go to the cache, and the programs compiled
for them unblock the next wave.

In a multi-process run only the instructions of meshes this process runs
are resolved, and the target sharding of a transfer between processes goes
through JAX's key-value store: the first process owning the source mesh
publishes it, a process that receives the value without producing it waits
for it (`MPMD_DISTRIBUTED_TIMEOUT`).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec, Sharding

from mpmd import distributed as dist
from mpmd.errors import MpmdError
from mpmd._jax.compiling import HostCallbacks
from mpmd._jax import unreduced as ju
from mpmd.compile import partial
from mpmd.compile.constants import place_constant
from mpmd.compile.fragment import FragmentExecutable
from mpmd.compile.fragment_cache import CompileKey, FragmentCache

if TYPE_CHECKING:
  from mpmd.partition.partitioner import PartitionedProgram

__all__ = ["LayoutPlan", "PlannedCall", "PlannedTransfer", "SKIPPED", "with_memory_kind"]

#: Marks instructions of meshes this process does not take part in.
SKIPPED = object()


@dataclasses.dataclass(frozen=True)
class PlannedCall:
  """A call whose program is known.

  Attributes:
    fragment: its compiled program.
    fresh: operand positions of the constants it consumes (made afresh for
      each call by the filler program `fill`, a `FragmentCache.filler` key).
  """
  fragment: FragmentExecutable
  fresh: tuple[int, ...] = ()
  fill: tuple | None = None


@dataclasses.dataclass(frozen=True)
class PlannedTransfer:
  """A transfer whose result's sharding is known.

  Attributes:
    target: the sharding of the result on the target mesh.
    source: the value's sharding on the source mesh (None where another
      process produces it).
    across: whether the meshes involve other processes (a collective).
  """
  target: Sharding
  source: Sharding | None
  across: bool


def with_memory_kind(sharding: Sharding, kind: str) -> Sharding:
  """`sharding` in memory kind `kind` of its devices ("" or "device":
  device memory; "pinned_host": host memory), the kind the partitioner gave
  the value (`m1#pinned_host` in an assignment)."""
  kind = kind or "device"
  if (sharding.memory_kind or "device") == kind:
    return sharding
  return sharding.with_memory_kind(kind)


def avals(types: Sequence[Any], callee: str, what: str) -> list[jax.core.ShapedArray]:
  """The shapes and dtypes of `types` (`_mpmd.TensorSpec`s of fragment
  function `callee`'s arguments or results, `what`)."""
  out = []
  for i, t in enumerate(types):
    if not t.dtype:
      raise MpmdError(f"fragment function {callee!r}: {what} {i} is not a tensor of a type "
                      f"JAX knows (a compiler bug: please report it)")
    out.append(jax.core.ShapedArray(tuple(t.shape), np.dtype(jax.numpy.dtype(t.dtype))))
  return out


def _on_mesh(sharding: Sharding, mesh: Mesh) -> Sharding:
  """The same layout as `sharding`, on the devices of `mesh`."""
  if isinstance(sharding, NamedSharding) and sharding.mesh.axis_names == mesh.axis_names:
    if ju.is_partial(sharding):
      return ju.on_mesh(sharding, mesh)
    return NamedSharding(mesh, sharding.spec, memory_kind=sharding.memory_kind)
  return NamedSharding(mesh, PartitionSpec())


class LayoutPlan:
  """The layouts of one `compile_program` call, found wave by wave.

  Args:
    program: the partitioned program.
    topology: mesh name -> mesh.
    owner: which meshes this process runs.
    input_shardings: the sharding of each program input.
    output_shardings: output index -> the sharding it must have.
    callbacks: the host callbacks of the lowered step (for the programs
      that call them).
    fingerprint: in a multi-process run, the name of this compile in the
      key-value store.

  Attributes:
    cache: the `FragmentCache` the programs come from.
    sharding_of: value id -> its sharding, once known on this process.
    constants: value id -> the constant inputs of this process's meshes
      that calls only read, placed once.
  """

  def __init__(self, program: PartitionedProgram, topology: Mapping[str, Mesh],
               owner: dist.Ownership, input_shardings: Sequence[Sharding],
               output_shardings: Mapping[int, Sharding],
               callbacks: HostCallbacks | None = None, fingerprint: str = ""):
    self.program = program
    self.topology = topology
    self.owner = owner
    self.fingerprint = fingerprint
    local_calls = {(inst.callee, inst.mesh) for inst in program.program
                   if inst.kind == "call" and owner.runs(inst.mesh)}
    self.cache = FragmentCache(program.functions, topology, callbacks, len(local_calls))
    #: fragment function -> its argument and result avals (parsed when needed).
    self._avals: dict[str, tuple[list, list]] = {}
    self.sharding_of: dict[int, Sharding] = {
        v: s for v, s, m in zip(program.input_ids, input_shardings, program.input_meshes)
        if owner.runs(m)}
    self.constants: dict[int, jax.Array] = {}
    #: value id -> a constant array a call consumes, laid out once the layout
    #: of that call's other operands is known (`_place_consumed_constants`)...
    self.unplaced: dict[int, Any] = {}
    #: ... then value id -> (the constant, its sharding).
    self.consumed: dict[int, tuple[Any, Sharding]] = {}
    for c in program.constants:
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
      self.wanted.setdefault(program.output_ids[k], sharding)
    #: The gradient accumulators held as unreduced partial sums (the
    #: compiler's marks, `partial`).
    self.partial = partial.PartialSums.of(program.program, program.constants)
    #: per instruction: a `PlannedCall`, `PlannedTransfer`, `SKIPPED`, or
    #: None while unresolved.
    self.resolved: list[Any] = [None] * len(program.program)
    #: metadata key -> what it is, for a timeout error.
    self.awaited: dict[str, str] = {}
    self.deadline = time.monotonic() + dist.timeout_seconds()

  def resolve(self) -> list[Any]:
    """Resolves every instruction, compiling in waves; returns `resolved`
    once every program (and filler program) is compiled.

    When nothing is left to compile but instructions still wait for
    metadata another process publishes, it waits for that.
    """
    with self.cache:
      while True:
        waiting = self._wave()
        if waiting:
          self.cache.compile(list(waiting))
        elif self.awaited and any(r is None for r in self.resolved):
          dist.wait_for_any(self.awaited, self.deadline)  # another process's compile
        else:
          break
      self.cache.finish()
    return self.resolved

  def _wave(self) -> dict[CompileKey, None]:
    """One pass over the unresolved instructions, in program order; returns
    the compile keys of the calls that wait for a compile (first use first)."""
    waiting: dict[CompileKey, None] = {}
    for index, inst in enumerate(self.program.program):
      if self.resolved[index] is not None:
        continue
      if inst.kind == "transfer":
        self.resolved[index] = self._resolve_transfer(index, inst)
        continue
      if not self.owner.runs(inst.mesh):
        self.resolved[index] = SKIPPED
        continue
      key = self._call_key(inst)
      if key is None:
        continue
      fragment = self.cache.lookup(key)
      if fragment is None:
        waiting[key] = None
        continue
      self.resolved[index] = self._resolve_call(inst, fragment)
    return waiting

  # --- calls ------------------------------------------------------------------------------------

  def _call_key(self, inst) -> CompileKey | None:
    """What a call compiles for: (callee, mesh, input shardings, required
    output shardings); None while an input sharding is unknown."""
    if self.unplaced and not self._place_consumed_constants(inst):
      return None
    if any(v not in self.sharding_of for v in inst.operands):
      return None
    return (inst.callee, inst.mesh, tuple(self.sharding_of[v] for v in inst.operands),
            tuple(self.wanted.get(v) or self._partial_layout(inst, j)
                  for j, v in enumerate(inst.results)))

  def _partial_layout(self, inst, j: int) -> Sharding | None:
    """The unreduced layout of result `j` of call `inst` when it is an
    accumulator held as partial sums (`mpmd.compile.partial`): that of the
    accumulator it adds a term to, when that one is held so; for the first
    microbatch's gradient a chain starts from, the unreduced form of the
    layout of the call's operand of the same shape (the parameter it is the
    gradient of)."""
    value = inst.results[j]
    if value in self.partial.made and self._splits_its_work(inst):
      ins, outs = self._signature(inst.callee)
      like = [k for k, a in enumerate(ins)
              if (a.shape, a.dtype) == (outs[j].shape, outs[j].dtype)]
      base = (self.sharding_of[inst.operands[like[0]]] if like
              else NamedSharding(self.topology[inst.mesh], PartitionSpec()))
      return base if ju.is_partial(base) else ju.partial_sharding(base)
    source = self.partial.adds.get(value)
    layout = None if source is None else self.sharding_of.get(source)
    return layout if ju.is_partial(layout) else None

  def _splits_its_work(self, inst) -> bool:
    """Whether call `inst` splits an operand over every axis of its mesh
    (of size > 1), as a data-parallel mesh splits its microbatch: only then
    do its gradients come as partial sums worth keeping. (On a mesh that
    computes replicated, holding them partial would add the reduction it
    saves.)"""
    devices = self.topology[inst.mesh].size
    if devices < 2:
      return False
    for v, aval in zip(inst.operands, self._in_avals(inst.callee)):
      layout = self.sharding_of.get(v)
      if layout is None or ju.is_partial(layout) or not aval.shape:
        continue
      shard = layout.shard_shape(tuple(aval.shape))
      if np.prod(aval.shape) >= devices * np.prod(shard):  # one piece per device
        return True
    return False

  def _place_consumed_constants(self, inst) -> bool:
    """Lays out the constant arrays `inst` consumes (the first microbatch's
    accumulators, which start from zeros, made operands by
    -mpmd-parameterize-fragment-constants so that it shares the program of
    the later microbatches). Each gets the layout of an operand of the same
    shape and dtype (the parameters a gradient accumulator goes with), so
    that the call compiles for the layouts the later microbatches' calls
    have; replicated when there is none. The call makes them afresh each
    time (`mpmd.compile.constants.make_filler`). False while the layout of
    one of the call's other operands is not known yet (whether the call
    splits its work decides whether its accumulators are partial sums)."""
    pending = [(k, v) for k, v in enumerate(inst.operands) if v in self.unplaced]
    if not pending:
      return True
    if any(v not in self.sharding_of for v in inst.operands if v not in self.unplaced):
      return False
    in_avals = self._in_avals(inst.callee)
    for k, v in pending:
      like = [j for j, a in enumerate(in_avals)
              if j != k and inst.operands[j] not in self.unplaced
              and (a.shape, a.dtype) == (in_avals[k].shape, in_avals[k].dtype)]
      if any(inst.operands[j] not in self.sharding_of for j in like):
        return False
      sharding = (self.sharding_of[inst.operands[like[0]]] if like
                  else NamedSharding(self.topology[inst.mesh], PartitionSpec()))
      if v in self.partial.starts and self._splits_its_work(inst):
        # an accumulator's zeros, held as partial sums
        sharding = ju.partial_sharding(sharding) or sharding
      self.consumed[v] = (self.unplaced.pop(v), sharding)
      self.sharding_of[v] = sharding
    return True

  def _in_avals(self, callee: str) -> list:
    """The argument shapes and dtypes of fragment function `callee`."""
    return self._signature(callee)[0]

  def _signature(self, callee: str) -> tuple[list, list]:
    """The argument and result shapes and dtypes of fragment function `callee`
    (as the compiler wrote them: `_mpmd.FragmentFunction.input_types`)."""
    if callee not in self._avals:
      function = self.cache.functions[callee]
      self._avals[callee] = (avals(function.input_types, callee, "argument"),
                             avals(function.output_types, callee, "result"))
    return self._avals[callee]

  def _resolve_call(self, inst, fragment: FragmentExecutable) -> PlannedCall:
    """Sharding propagation through a call: its results get the output
    shardings read back from its compiled program. The constants it consumes
    get their filler program compiling."""
    for v, sharding in zip(inst.results, fragment.output_shardings):
      self.sharding_of[v] = sharding
    fresh = tuple(k for k, v in enumerate(inst.operands) if v in self.consumed)
    if not fresh:
      return PlannedCall(fragment)
    fill = self.cache.request_filler(tuple(self.consumed[inst.operands[k]] for k in fresh))
    return PlannedCall(fragment, fresh, fill)

  # --- transfers --------------------------------------------------------------------------------

  def _resolve_transfer(self, index: int, inst) -> Any:
    """The plan of a transfer: `SKIPPED` when this process owns neither
    mesh, None while the target sharding is not known here yet."""
    owner = self.owner
    if not (owner.runs(inst.src_mesh) or owner.runs(inst.mesh)):
      return SKIPPED
    across = not (owner.owns_all(inst.src_mesh) and owner.owns_all(inst.mesh))
    target = self._transfer_target(index, inst, across)
    if target is None:
      return None
    self.sharding_of[inst.results[0]] = target
    return PlannedTransfer(target, self.sharding_of.get(inst.operands[0]), across)

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
      if inst.memory_kind != inst.src_memory_kind:  # between device and host memory
        target = with_memory_kind(target, inst.memory_kind)
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
