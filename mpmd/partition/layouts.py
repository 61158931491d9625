"""The layout decision: where every value of a partitioned program lives.

The last step of the partition stage, taken when the input shardings are
known (`Lowered.compile`). `lay_out_program` walks the instructions in
program order and decides, for every mesh of the program:

* a call: its input shardings are those of its operands; the constants it
  consumes (the first microbatch's accumulators) get the layout of the
  operand of the same shape; its result shardings are, in this order, the
  one the caller requires of an output, the unreduced layout of a gradient
  accumulator held as partial sums (`mpmd.partition.partial`, the marks of
  -mpmd-mark-partial-sums), the layout of the donated argument whose buffer
  the result reuses, and otherwise Shardy's propagation through the fragment
  (`sdy-propagation-pipeline`, the propagation XLA runs when it compiles a
  result left unspecified);
* a transfer: the sharding the caller requires of an output, else the
  source's layout on the target mesh (in the target's memory kind).

Each distinct (fragment function, mesh, layouts) becomes one
`FragmentLayout`: the fragment's text with every argument and result
annotated, the donation marks set and the partial-sum constraints written
in (`mpmd._jax.annotation`, `mpmd._jax.unreduced`). The compile stage
compiles those texts as they are. Every process decides the same for every
mesh, so processes exchange nothing to agree on a layout.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec, Sharding

from mpmd._jax import unreduced as ju
from mpmd._jax.annotation import (annotate_module, annotate_results, device_assignment,
                                  propagated_result_shardings, uses_shardy)
from mpmd._jax.parsing import (aliased_results, aval_of_tensor_type, main_signature,
                               parse_fragment_module)
from mpmd.errors import FragmentCompileError, MpmdError
from mpmd.partition import partial

if TYPE_CHECKING:
  from mpmd.partition.partitioner import PartitionedProgram

__all__ = ["CallLayout", "FragmentLayout", "LaidOutProgram", "TransferLayout", "avals",
           "describe_devices", "device_ids", "lay_out_fragment", "lay_out_program", "with_memory_kind"]

logger = logging.getLogger("mpmd")


@dataclasses.dataclass(frozen=True, eq=False)
class FragmentLayout:
  """One fragment program as it is compiled: its text annotated for the
  layouts decided here.

  Attributes:
    name: the fragment function's name.
    mesh: the mesh it runs on; `mesh_name` its name in the topology ("" for
      a fragment laid out on its own, `lay_out_fragment`).
    in_shardings / out_shardings: the sharding of every argument and result.
    donated_args: the arguments whose buffers a call consumes.
    in_avals / out_avals: the argument and result shapes and dtypes.
    module_text: the StableHLO module with every argument and result
      annotated (`sdy.sharding`), the donation marks and the partial-sum
      constraints written in.
    propagated: whether Shardy's propagation decided some of its results.
  """
  name: str
  mesh: Mesh
  mesh_name: str
  in_shardings: tuple[Sharding, ...]
  out_shardings: tuple[Sharding, ...]
  donated_args: tuple[int, ...]
  in_avals: tuple[Any, ...]
  out_avals: tuple[Any, ...]
  module_text: str
  propagated: bool = False

  @property
  def key(self) -> tuple:
    """(function, mesh name, input shardings, output shardings): equal for
    the same program."""
    return (self.name, self.mesh_name, self.in_shardings, self.out_shardings)


@dataclasses.dataclass(frozen=True)
class CallLayout:
  """A call's layouts: its program, and the constants it consumes (operand
  position, `_mpmd.ConstantInput`, sharding), made afresh for each call."""
  fragment: FragmentLayout
  consumed: tuple[tuple[int, Any, Sharding], ...] = ()


@dataclasses.dataclass(frozen=True)
class TransferLayout:
  """A transfer's layouts: the value's on the source mesh and on the
  target, and its shape and dtype (the partitioner's type of the value)."""
  source: Sharding
  target: Sharding
  aval: Any


@dataclasses.dataclass(frozen=True)
class LaidOutProgram:
  """A partitioned program with every value's layout decided.

  Attributes:
    partition: the partitioned program.
    input_shardings: the sharding of each program input.
    output_shardings: output index -> the sharding the caller requires.
    instructions: per instruction of `partition.program`, its `CallLayout`
      or `TransferLayout`.
    sharding_of: value id -> its sharding, for every value of every mesh.
    fragments: the distinct fragment programs, by `FragmentLayout.key`, in
      the order of their first call.
  """
  partition: PartitionedProgram
  input_shardings: tuple[Sharding, ...]
  output_shardings: Mapping[int, Sharding]
  instructions: tuple[CallLayout | TransferLayout, ...]
  sharding_of: Mapping[int, Sharding]
  fragments: Mapping[tuple, FragmentLayout]


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


# --- one fragment ---------------------------------------------------------------------------------

def device_ids(devices) -> list[int]:
  """The ids of `devices`, in order (for messages)."""
  return [d.id for d in devices]


def describe_devices(mesh: Mesh) -> str:
  """`mesh`'s shape and devices, as messages name a fragment's mesh."""
  return f"mesh {dict(mesh.shape)} on devices {device_ids(mesh.devices.flat)}"


def _aliased_layouts(module, in_shardings: Sequence[Sharding], in_avals: Sequence[Any],
                     donated: Sequence[bool], out_shardings: list[Sharding | None]
                     ) -> tuple[list[Sharding | None], set[int]]:
  """The result layouts with those of the results that reuse a donated
  argument's buffer (``tf.aliasing_output``, see -mpmd-lower-to-fragment-calls)
  fixed to that argument's layout (an accumulator keeps its layout; the
  buffers must have the same size on every device), and the arguments whose
  result must have another layout: those are left to XLA (buffer donors)."""
  out_shardings = list(out_shardings)
  unaliased = set()
  for i, j in aliased_results(module).items():
    if not donated[i] or j >= len(out_shardings):
      continue
    if out_shardings[j] is None and ju.is_partial(in_shardings[i]):
      unaliased.add(i)  # partial sums: the result is propagation's to lay out
    elif out_shardings[j] is None:
      out_shardings[j] = in_shardings[i]
    elif not out_shardings[j].is_equivalent_to(in_shardings[i], len(in_avals[i].shape)):
      unaliased.add(i)
  return out_shardings, unaliased


def _from_propagation(found, mesh: Mesh, ndim: int, where: str) -> Sharding:
  """The `NamedSharding` on `mesh` of one result of
  `propagated_result_shardings` (None: replicated)."""
  if found is None:
    return NamedSharding(mesh, PartitionSpec())
  dims, unreduced = found
  named = set(mesh.axis_names)
  if any(a not in named for d in dims if d for a in d) or not unreduced <= named:
    logger.info("%s: propagation split a result over axes the mesh does not name (%s); "
                "it is laid out replicated", where, found)
    return NamedSharding(mesh, PartitionSpec())
  spec = [None if not d else d[0] if len(d) == 1 else d for d in dims]
  while spec and spec[-1] is None:
    spec.pop()
  spec = spec[:ndim]
  if unreduced:
    return ju.unreduced_sharding(mesh, spec, unreduced)
  return NamedSharding(mesh, PartitionSpec(*spec))


def lay_out_fragment(mlir_text: str, mesh: Mesh, *, name: str,
                     in_shardings: Sequence[Sharding] | None = None,
                     donated_args: Sequence[int] = (),
                     out_shardings: Sequence[Sharding | None] | None = None,
                     accumulated: Mapping[int, int] | None = None,
                     mesh_name: str = "") -> FragmentLayout:
  """Decides the layouts of one fragment program and annotates it for them.

  Args:
    mlir_text: StableHLO module text with a public ``func.func @main`` over
      global tensor types (pretty or generic form; ``loc(...)`` allowed).
      Existing argument sharding/donation annotations are replaced by
      ``in_shardings``/``donated_args``; result annotations are kept.
    mesh: the devices it runs on, SPMD-partitioned over its axes.
    name: the fragment's name, used in errors and as the module name when the
      module has none.
    in_shardings: one ``Sharding`` per ``@main`` argument, all on
      ``mesh``'s devices; default fully replicated ``NamedSharding(mesh, P())``.
    donated_args: indices of arguments whose buffers the program may reuse
      for its outputs.
    out_shardings: per ``@main`` result, the sharding it must have (on
      ``mesh``'s devices), or None to decide here; default: all None. A
      result that reuses a donated argument's buffer (the argument's
      ``tf.aliasing_output``) gets that argument's sharding unless given
      another (the argument then is a plain buffer donor); the others get
      what Shardy's propagation gives them (replicated on a mesh of one
      device).
    accumulated: result index -> argument index, for the results that add a
      term to that argument (`_mpmd.FragmentFunction.accumulated`, as the
      compiler found them); needed only where a sharding is partial.
    mesh_name: the mesh's name in the topology, for `FragmentLayout.key`.

  Raises:
    FragmentCompileError: the text does not parse, or annotating it fails
      (the message names the fragment).
    ValueError: inconsistent arguments (shardings count/devices, donation
      indices).
  """
  if not isinstance(mesh, Mesh):
    raise TypeError(f"fragment {name!r}: mesh must be a jax.sharding.Mesh, got "
                    f"{type(mesh).__name__}")
  where = f"fragment {name!r} ({describe_devices(mesh)})"
  try:
    module = parse_fragment_module(mlir_text)
    in_avals, out_avals = main_signature(module)
  except ValueError as e:
    raise FragmentCompileError(f"{where}: invalid module: {e}") from e

  n = len(in_avals)
  if in_shardings is None:
    in_shardings = [NamedSharding(mesh, PartitionSpec())] * n
  in_shardings = list(in_shardings)
  if len(in_shardings) != n:
    raise ValueError(f"{where}: @main takes {n} arguments but "
                     f"{len(in_shardings)} in_shardings were given")
  mesh_devices = tuple(mesh.devices.flat)
  for i, s in enumerate(in_shardings):
    if not isinstance(s, Sharding):
      raise ValueError(f"{where}: in_shardings[{i}] is not a Sharding: {s!r}")
    s_devices = device_assignment(s)
    if s_devices != mesh_devices:
      raise ValueError(
          f"{where}: in_shardings[{i}] refers to devices {device_ids(s_devices)}; "
          f"it must use the mesh's devices in the mesh's order "
          f"{device_ids(mesh_devices)}")
  m = len(out_avals)
  out_shardings = list(out_shardings) if out_shardings is not None else [None] * m
  if len(out_shardings) != m:
    raise ValueError(f"{where}: @main returns {m} results but "
                     f"{len(out_shardings)} out_shardings were given")
  for i, s in enumerate(out_shardings):
    if s is not None and device_assignment(s) != mesh_devices:
      raise ValueError(
          f"{where}: out_shardings[{i}] refers to devices "
          f"{device_ids(device_assignment(s))}; it must use the mesh's devices in "
          f"the mesh's order {device_ids(mesh_devices)}")
  donated = [False] * n
  for i in donated_args:
    if not 0 <= i < n:
      raise ValueError(f"{where}: donated argument index {i} out of range "
                       f"for {n} arguments")
    donated[i] = True
  out_shardings, unaliased = _aliased_layouts(module, in_shardings, in_avals, donated,
                                              out_shardings)
  try:
    annotate_module(module, name=name, in_shardings=in_shardings, in_avals=in_avals,
                    donated=donated, num_devices=mesh.size, out_shardings=out_shardings,
                    out_avals=out_avals, unaliased=unaliased)
    if any(ju.is_partial(s) for s in (*in_shardings, *out_shardings)):
      ju.constrain_partial_results(module, in_shardings, out_shardings, accumulated or {})
    open_results = [j for j, s in enumerate(out_shardings) if s is None]
    propagate = bool(open_results) and mesh.size > 1 and uses_shardy()
    if open_results:
      found = propagated_result_shardings(module) if propagate else [None] * m
      for j in open_results:
        out_shardings[j] = _from_propagation(found[j], mesh, out_avals[j].ndim, where)
      annotate_results(module, out_shardings, out_avals)
    text = module.operation.get_asm(enable_debug_info=True)
  except Exception as e:  # noqa: BLE001 -- re-raised with the fragment name
    raise FragmentCompileError(
        f"{where}: laying out its shardings failed: {type(e).__name__}: {e}") from e
  return FragmentLayout(name, mesh, mesh_name, tuple(in_shardings), tuple(out_shardings),
                        tuple(i for i in range(n) if donated[i]), tuple(in_avals),
                        tuple(out_avals), text, propagate)


# --- a whole program ------------------------------------------------------------------------------

def lay_out_program(partition: PartitionedProgram, topology: Mapping[str, Mesh],
                    input_shardings: Sequence[Sharding],
                    output_shardings: Mapping[int, Sharding]) -> LaidOutProgram:
  """Decides the layout of every value of `partition` (see the module's
  docstring).

  Inputs and outputs are placed and returned in the memory kind the
  partitioner gave them (`m1#pinned_host`: host memory; else device memory,
  also for an argument that comes in host memory): `LaidOutProgram`'s
  `input_shardings` and `output_shardings` are in those kinds.

  Args:
    partition: the partitioned program.
    topology: mesh name -> mesh.
    input_shardings: the sharding of each program input.
    output_shardings: output index -> the sharding it must have.
  """
  input_shardings = [s if s is None else with_memory_kind(s, kind)
                     for s, kind in zip(input_shardings, partition.input_memory_kinds
                                        or [""] * len(input_shardings))]
  output_shardings = dict(output_shardings)
  for k, kind in enumerate(partition.output_memory_kinds):
    if kind and k in output_shardings:
      output_shardings[k] = with_memory_kind(output_shardings[k], kind)
  start = time.perf_counter()
  decision = _Decision(partition, topology, input_shardings, output_shardings)
  laid_out = decision.run()
  logger.info("laid out %d values on %d meshes: %d fragment programs (one per function, mesh "
              "and layouts) for %d calls (%d texts annotated, %d of them through Shardy's "
              "propagation) in %.2fs",
              len(laid_out.sharding_of), len(topology), len(laid_out.fragments),
              sum(isinstance(i, CallLayout) for i in laid_out.instructions),
              decision.annotated, decision.propagated, time.perf_counter() - start)
  return laid_out


class _Decision:
  """The state of one `lay_out_program` walk."""

  def __init__(self, partition: PartitionedProgram, topology: Mapping[str, Mesh],
               input_shardings: Sequence[Sharding], output_shardings: Mapping[int, Sharding]):
    self.partition = partition
    self.topology = topology
    self.input_shardings = tuple(input_shardings)
    self.output_shardings = dict(output_shardings)
    self.functions = {f.name: f for f in partition.functions}
    self.sharding_of: dict[int, Sharding] = dict(zip(partition.input_ids, input_shardings))
    #: value id -> a constant a call consumes, laid out at that call...
    self.unplaced: dict[int, Any] = {}
    #: ... then value id -> (the constant, its sharding).
    self.consumed: dict[int, tuple[Any, Sharding]] = {}
    for c in partition.constants:
      if c.donated:
        self.unplaced[c.id] = c
      else:  # placed once, replicated (`mpmd.compile.constants.place_constant`)
        self.sharding_of[c.id] = NamedSharding(topology[c.mesh], PartitionSpec())
    #: value id -> the sharding an output requires it to have.
    self.wanted: dict[int, Sharding] = {}
    for k, sharding in output_shardings.items():
      self.wanted.setdefault(partition.output_ids[k], sharding)
    self.partial = partial.PartialSums.of(partition.program, partition.constants)
    self.fragments: dict[tuple, FragmentLayout] = {}
    #: (function, mesh, input shardings, required output shardings) -> its layout.
    self._requested: dict[tuple, FragmentLayout] = {}
    self._avals: dict[str, tuple[list, list]] = {}
    #: How many fragment texts were annotated, and how many of them went
    #: through Shardy's propagation.
    self.annotated = 0
    self.propagated = 0

  def run(self) -> LaidOutProgram:
    instructions = []
    for inst in self.partition.program:
      if inst.kind == "transfer":
        instructions.append(self._transfer(inst))
      else:
        instructions.append(self._call(inst))
    used = {i.fragment.key: i.fragment for i in instructions if isinstance(i, CallLayout)}
    return LaidOutProgram(self.partition, self.input_shardings, self.output_shardings,
                          tuple(instructions), self.sharding_of, used)

  # --- calls ------------------------------------------------------------------------------------

  def _call(self, inst) -> CallLayout:
    self._place_consumed_constants(inst)
    in_shardings = tuple(self.sharding_of[v] for v in inst.operands)
    partial_outs = tuple(self._partial_layout(inst, j) for j in range(len(inst.results)))
    wanted = tuple(self.wanted.get(v) for v in inst.results)
    fragment = self._fragment(inst.callee, inst.mesh, in_shardings, partial_outs)
    if any(w is not None for w in wanted) and not all(
        w is None or w.is_equivalent_to(s, len(a.shape))
        for w, s, a in zip(wanted, fragment.out_shardings, fragment.out_avals)):
      # an output of the step that the program does not lay out as required
      fragment = self._fragment(inst.callee, inst.mesh, in_shardings,
                                tuple(w or p for w, p in zip(wanted, partial_outs)))
    for v, sharding in zip(inst.results, fragment.out_shardings):
      self.sharding_of[v] = sharding
    consumed = tuple((k, *self.consumed[v]) for k, v in enumerate(inst.operands)
                     if v in self.consumed)
    return CallLayout(fragment, consumed)

  def _fragment(self, callee: str, mesh: str, in_shardings: tuple,
                required: tuple) -> FragmentLayout:
    """The layout of `callee` on `mesh` for these input shardings and
    required result shardings (None: decided), once per distinct request."""
    request = (callee, mesh, in_shardings, required)
    fragment = self._requested.get(request)
    if fragment is None:
      function = self.functions[callee]
      fragment = lay_out_fragment(
          function.module_text, self.topology[mesh], name=callee, in_shardings=in_shardings,
          donated_args=function.donated_args,
          out_shardings=required if any(r is not None for r in required) else None,
          accumulated=dict(function.accumulated), mesh_name=mesh)
      self.annotated += 1
      self.propagated += fragment.propagated
      fragment = self.fragments.setdefault(fragment.key, fragment)
      self._requested[request] = fragment
    return fragment

  def _partial_layout(self, inst, j: int) -> Sharding | None:
    """The unreduced layout of result `j` of call `inst` when it is an
    accumulator held as partial sums (`mpmd.partition.partial`): that of the
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
    for v, aval in zip(inst.operands, self._signature(inst.callee)[0]):
      layout = self.sharding_of.get(v)
      if layout is None or ju.is_partial(layout) or not aval.shape:
        continue
      shard = layout.shard_shape(tuple(aval.shape))
      if np.prod(aval.shape) >= devices * np.prod(shard):  # one piece per device
        return True
    return False

  def _place_consumed_constants(self, inst) -> None:
    """Lays out the constant arrays `inst` consumes (the first microbatch's
    accumulators, which start from zeros, made operands by
    -mpmd-parameterize-fragment-constants so that it shares the program of
    the later microbatches). Each gets the layout of an operand of the same
    shape and dtype (the parameters a gradient accumulator goes with), so
    that the call compiles for the layouts the later microbatches' calls
    have; replicated when there is none; unreduced where the compiler marked
    it the start of an accumulator chain and the call splits its work. The
    call makes them afresh each time (`mpmd.compile.constants.make_filler`)."""
    pending = [(k, v) for k, v in enumerate(inst.operands) if v in self.unplaced]
    if not pending:
      return
    in_avals = self._signature(inst.callee)[0]
    for k, v in pending:
      like = [j for j, a in enumerate(in_avals)
              if j != k and inst.operands[j] not in self.unplaced
              and (a.shape, a.dtype) == (in_avals[k].shape, in_avals[k].dtype)]
      sharding = (self.sharding_of[inst.operands[like[0]]] if like
                  else NamedSharding(self.topology[inst.mesh], PartitionSpec()))
      if v in self.partial.starts and self._splits_its_work(inst):
        sharding = ju.partial_sharding(sharding) or sharding
      self.consumed[v] = (self.unplaced.pop(v), sharding)
      self.sharding_of[v] = sharding

  def _signature(self, callee: str) -> tuple[list, list]:
    """The argument and result shapes and dtypes of fragment function `callee`
    (as the compiler wrote them: `_mpmd.FragmentFunction.input_types`)."""
    if callee not in self._avals:
      function = self.functions[callee]
      self._avals[callee] = (avals(function.input_types, callee, "argument"),
                             avals(function.output_types, callee, "result"))
    return self._avals[callee]

  # --- transfers --------------------------------------------------------------------------------

  def _transfer(self, inst) -> TransferLayout:
    """The sharding a transfer's result must have (an output's), else the
    source's layout on the target mesh, in the target's memory kind."""
    source = self.sharding_of[inst.operands[0]]
    target = self.wanted.get(inst.results[0])
    if target is None:
      target = _on_mesh(source, self.topology[inst.mesh])
      if inst.memory_kind != inst.src_memory_kind:  # between device and host memory
        target = with_memory_kind(target, inst.memory_kind)
    self.sharding_of[inst.results[0]] = target
    return TransferLayout(source, target, aval_of_tensor_type(inst.value_type))
