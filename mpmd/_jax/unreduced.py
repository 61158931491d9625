"""Partial sums held unreduced over a mesh's axes (JAX's ``unreduced``).

A data-parallel mesh computes each microbatch's gradient as one partial sum
per device; reducing it at once costs an all-reduce per microbatch, where
`jax.jit` of the whole batch reduces once per step. A gradient accumulator
held *unreduced* (``PartitionSpec(unreduced={...})``: the value is the sum of
the devices' buffers) lets every microbatch add its partial sums locally; the
one all-reduce happens where the accumulator is first read as a whole (the
optimizer update). `mpmd.partition.partial` reads which values are held so;
this module speaks JAX's and Shardy's language for it:

* :func:`partial_sharding` -- the unreduced form of a layout, and
  :func:`unreduced_sharding` -- a layout held unreduced over given axes;
* :func:`constrain_partial_results` -- the ``sdy.sharding_constraint`` ops
  that keep such a result's term and sum unreduced inside the program
  (Shardy propagates shardings, not unreducedness: without them the
  partitioner reduces the term before the add).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec, Sharding
from jax.extend.mlir import passmanager as _passmanager
from jax._src.lib.mlir import ir

from mpmd._jax.annotation import parse_tensor_sharding, propagated
from mpmd._jax.parsing import find_main

_CONSTRAINT = "sdy.sharding_constraint"


@functools.lru_cache(maxsize=None)
def _explicit(mesh: Mesh) -> Mesh:
  """`mesh` with every axis of type Explicit (JAX admits unreduced axes only
  there); the same devices in the same positions."""
  return Mesh(mesh.devices, mesh.axis_names, axis_types=(AxisType.Explicit,) * len(mesh.axis_names))


def is_partial(sharding: Sharding | None) -> bool:
  """Whether `sharding` holds its value as unreduced partial sums."""
  return isinstance(sharding, NamedSharding) and bool(sharding.spec.unreduced)


def partial_sharding(base: Sharding) -> NamedSharding | None:
  """`base`'s layout with the value held unreduced over every axis of its
  mesh (of size > 1) that `base` does not already split the value over;
  None when there is no such axis or `base` is not a `NamedSharding`."""
  if not isinstance(base, NamedSharding) or base.spec.unreduced or base.spec.reduced:
    return None
  used = set()
  for entry in base.spec.partitions:
    used.update(entry if isinstance(entry, tuple) else () if entry is None else (entry,))
  axes = frozenset(a for a, n in base.mesh.shape.items() if n > 1 and a not in used)
  if not axes:
    return None
  return NamedSharding(_explicit(base.mesh), PartitionSpec(*base.spec.partitions, unreduced=axes),
                       memory_kind=base.memory_kind)


def unreduced_sharding(mesh: Mesh, partitions: Sequence[Any], axes: Iterable[str]) -> NamedSharding:
  """The layout `PartitionSpec(*partitions)` on `mesh` with the value held
  unreduced over `axes`."""
  return NamedSharding(_explicit(mesh), PartitionSpec(*partitions, unreduced=frozenset(axes)))


def on_mesh(sharding: NamedSharding, mesh: Mesh) -> NamedSharding:
  """A partial `sharding` with the same spec on `mesh`'s devices."""
  return NamedSharding(_explicit(mesh), sharding.spec, memory_kind=sharding.memory_kind)


def _returned(main: Any) -> Any:
  return main.regions[0].blocks[0].operations[len(main.regions[0].blocks[0].operations) - 1]


def _defining_op(value: Any) -> Any:
  """The operation that defines `value`; None for a block argument."""
  owner = value.owner
  if isinstance(owner, ir.Block):
    return None
  return owner.operation if hasattr(owner, "operation") else owner


_LINEAR_UNARY = ("stablehlo.transpose", "stablehlo.reshape", "stablehlo.convert",
                 "stablehlo.negate")
_LINEAR_BINARY = ("stablehlo.add", "stablehlo.subtract")
_UID = "mpmd.partial_uid"
#: The ops whose result can be a sum over a split dimension.
_SOURCES = ("stablehlo.dot_general", "stablehlo.reduce", "stablehlo.scatter")


def _axes_of(sharding_text: str) -> list[set[str]]:
  """Per dimension, the mesh axes of one sdy tensor sharding's text
  (`<@mesh, [{"x"}, {}]>`; a sub-axis `"x":(1)2` counts as its axis)."""
  dims = parse_tensor_sharding(sharding_text)[0]
  return [{a.split(":")[0] for a in d} if d else set() for d in dims]


def _operand_axes(value: Any, arg_axes: Sequence[list[set[str]]]) -> list[set[str]]:
  """Per dimension, the mesh axes `value` is split over after propagation."""
  op = _defining_op(value)
  if op is None:
    return arg_axes[ir.BlockArgument(value).arg_number]
  if "sdy.sharding" not in op.attributes:
    return []
  text = str(op.attributes["sdy.sharding"])
  per_value = re.findall(r"<@[^,]+,\s*\[[^\]]*\][^>]*>", text)
  index = next(i for i, r in enumerate(op.results) if r == value)
  return _axes_of(per_value[index]) if index < len(per_value) else []


def _contracted_dims(op: Any) -> tuple[list[int], list[int]] | None:
  """For a dot_general: (lhs, rhs) contracting dimensions; for a reduce
  whose body only adds: (its dimensions, []); else None."""
  if op.name == "stablehlo.dot_general":
    text = str(op.attributes["dot_dimension_numbers"])
    lhs = re.search(r"lhs_contracting_dimensions = \[([\d, ]*)\]", text)
    rhs = re.search(r"rhs_contracting_dimensions = \[([\d, ]*)\]", text)
    parse = lambda m: [int(x) for x in m.group(1).split(",") if x.strip()] if m else []
    return parse(lhs), parse(rhs)
  if op.name == "stablehlo.reduce" and len(op.operands) == 2:
    body = [o.name for o in op.regions[0].blocks[0].operations]
    if body[:-1] != ["stablehlo.add"]:
      return None
    dims = re.findall(r"-?\d+", str(op.attributes["dimensions"]).split(":", 1)[-1])
    return [int(d) for d in dims], []
  return None


def _is_zeros(value: Any) -> bool:
  """Whether `value` is a constant of zeros (possibly broadcast)."""
  op = _defining_op(value)
  while op is not None and op.name == "stablehlo.broadcast_in_dim":
    op = _defining_op(op.operands[0])
  if op is None or op.name not in ("stablehlo.constant", "sdy.constant"):
    return False
  return re.fullmatch(r"dense<(-?0\.0+e\+00|0)>", str(op.attributes["value"]).split(" :")[0]) \
      is not None


def _scattered_dims(op: Any) -> list[tuple[int, int]] | None:
  """For a scatter that adds its updates into zeros-or-anything (one
  operand): the dimensions of its updates that are scattered (each update
  slice summed into the result, as an embedding's gradient is), each with the
  dimension of the indices that gives its slices' positions; else None."""
  if op.name != "stablehlo.scatter" or len(op.operands) != 3:
    return None
  body = [o.name for o in op.regions[0].blocks[0].operations]
  if body[:-1] != ["stablehlo.add"]:
    return None
  text = str(op.attributes["scatter_dimension_numbers"])
  window = re.search(r"update_window_dims = \[([\d, ]*)\]", text)
  vector = re.search(r"index_vector_dim = (\d+)", text)
  rank = op.operands[2].type.maybe_downcast().rank
  index_rank = op.operands[1].type.maybe_downcast().rank
  windows = {int(x) for x in window.group(1).split(",") if x.strip()} if window else set()
  index_dims = [d for d in range(index_rank) if not vector or d != int(vector.group(1))]
  return list(zip([d for d in range(rank) if d not in windows], index_dims))


#: The unreduced axes of an sdy sharding's text (`, unreduced={"data"}`).
_UNREDUCED_AXES = re.compile(r',\s*unreduced=\{[^}]*\}')


def _summed_over(module: Any, axes: frozenset[str]) -> set[int]:
  """The ops of `@main` (by their `_UID` tag) that sum over a dimension split
  over every axis in `axes`, as Shardy will partition the annotated module:
  their results are per-device partial sums over `axes`. Runs Shardy's
  propagation on a copy of the module, without the unreduced axes of its
  shardings: which dimensions are split does not depend on them, and
  Shardy's verifier (jax 0.11) rejects an op that reads an unreduced value
  into a result not marked unreduced, as the unrewritten accumulations do."""
  copy = propagated(module, _UNREDUCED_AXES.sub("", str(module)))
  main = find_main(copy)
  block = main.regions[0].blocks[0]
  arg_attrs = ir.ArrayAttr(main.attributes["arg_attrs"]) if "arg_attrs" in main.attributes else []
  arg_axes = []
  for i in range(len(block.arguments)):
    text = str(ir.DictAttr(arg_attrs[i])["sdy.sharding"]) if i < len(arg_attrs) and \
        "sdy.sharding" in ir.DictAttr(arg_attrs[i]) else ""
    arg_axes.append(_axes_of(text) if text else [])
  found = set()
  for op in block.operations:
    op = op.operation
    if _UID not in op.attributes:
      continue
    scattered = _scattered_dims(op)
    if scattered is not None:  # the updates' scattered dimensions are summed
      # ... over the axes that split both the updates and their indices along
      # them: with replicated indices (positions made by `arange` on every
      # device) Shardy would not keep the split, and XLA aborts on a result
      # marked unreduced whose operands are not split along its sum.
      updates = _operand_axes(op.operands[2], arg_axes)
      indices = _operand_axes(op.operands[1], arg_axes)
      over = set().union(*(updates[d] & indices[i] for d, i in scattered
                           if d < len(updates) and i < len(indices)))
      # ... and the result is the operand plus them: the operand must be zeros
      # or itself be split the same way (here: a constant, as JAX's
      # gradient of a gather starts from zeros).
      if not _is_zeros(op.operands[0]):
        over = set()
      if axes <= over:
        found.add(ir.IntegerAttr(op.attributes[_UID]).value)
      continue
    dims = _contracted_dims(op)
    lhs = _operand_axes(op.operands[0], arg_axes)
    over = set().union(*(lhs[d] for d in dims[0] if d < len(lhs))) if dims else set()
    if dims and dims[1]:
      rhs = _operand_axes(op.operands[1], arg_axes)
      over &= set().union(*(rhs[d] for d in dims[1] if d < len(rhs)))
    if axes <= over:
      found.add(ir.IntegerAttr(op.attributes[_UID]).value)
  return found


class _PartialBuilder:
  """Rewrites a value of `@main` into per-device partial sums over the
  unreduced axes of a sharding, soundly: a sum over a dimension split over
  those axes (`_summed_over`) is kept as Shardy partitions it; sums,
  differences, negations, transposes, reshapes and conversions of partial
  sums are partial sums; anything else is made whole (reduced, if it was
  not) and scaled by 1 / (devices summed over), so that the devices' values
  add up to it."""

  def __init__(self, module: Any, partial_args: dict[int, Sharding]):
    self.module = module
    self.partial_args = partial_args
    self.summed: dict[frozenset, set[int]] = {}
    self.tagged = 0

  def sources(self, axes: frozenset[str]) -> set[int]:
    if axes not in self.summed:
      main = find_main(self.module)
      i32 = ir.IntegerType.get_signless(32)
      for op in main.regions[0].blocks[0].operations:
        op = op.operation
        if op.name in _SOURCES and _UID not in op.attributes:
          op.attributes[_UID] = ir.IntegerAttr.get(i32, self.tagged)
          self.tagged += 1
      self.summed[axes] = _summed_over(self.module, axes)
    return self.summed[axes]

  def constrain(self, value: Any, sharding: Sharding, before: Any) -> Any:
    attr = sharding._to_sdy_sharding(value.type.maybe_downcast().rank).build({})  # pylint: disable=protected-access
    return ir.Operation.create(_CONSTRAINT, results=[value.type], operands=[value],
                               attributes={"sharding": attr}, ip=ir.InsertionPoint(before)).result

  def partial(self, value: Any, sharding: NamedSharding, before: Any) -> Any:
    axes = frozenset(sharding.spec.unreduced)
    op = _defining_op(value)
    if op is None:
      if self.partial_args.get(ir.BlockArgument(value).arg_number) == sharding:
        return value
    elif op.name in _LINEAR_UNARY or op.name in _LINEAR_BINARY:
      operands = [self.partial(v, sharding, before) for v in op.operands]
      attrs = {op.attributes[i].name: op.attributes[i].attr for i in range(len(op.attributes))}
      new = ir.Operation.create(op.name, results=[value.type], operands=operands,
                                attributes=attrs, ip=ir.InsertionPoint(before)).result
      return self.constrain(new, sharding, before)
    elif _UID in op.attributes and \
        ir.IntegerAttr(op.attributes[_UID]).value in self.sources(axes):
      return self.constrain(value, sharding, before)  # Shardy leaves it partial
    # Made whole, then each device's share.
    whole = self.constrain(value, _whole(sharding), before)
    n = 1
    for a in axes:
      n *= sharding.mesh.shape[a]
    element = value.type.maybe_downcast().element_type
    scalar = ir.RankedTensorType.get([], element)
    factor = ir.Operation.create(
        "stablehlo.constant", results=[scalar],
        attributes={"value": ir.DenseElementsAttr.get_splat(scalar, ir.FloatAttr.get(element, 1.0 / n))},
        ip=ir.InsertionPoint(before)).result
    wide = ir.Operation.create(
        "stablehlo.broadcast_in_dim", results=[value.type], operands=[factor],
        attributes={"broadcast_dimensions": ir.DenseI64ArrayAttr.get([])},
        ip=ir.InsertionPoint(before)).result
    share = ir.Operation.create("stablehlo.multiply", results=[value.type],
                                operands=[whole, wide], ip=ir.InsertionPoint(before)).result
    return self.constrain(share, sharding, before)

  def untag(self) -> None:
    for op in find_main(self.module).regions[0].blocks[0].operations:
      if _UID in op.operation.attributes:
        del op.operation.attributes[_UID]


def _whole(sharding: NamedSharding) -> NamedSharding:
  """`sharding` without its unreduced axes (the value reduced)."""
  return NamedSharding(sharding.mesh, PartitionSpec(*sharding.spec.partitions),
                       memory_kind=sharding.memory_kind)


def constrain_partial_results(module: Any, in_shardings: Sequence[Sharding],
                              out_shardings: Sequence[Sharding | None],
                              accumulated: Mapping[int, int]) -> int:
  """Rewrites `@main` of an annotated module (argument shardings set, as
  `annotate_module` leaves it) so that partial sums stay unreduced, and
  returns how many results it rewrote:

  * a result whose sharding in `out_shardings` is partial becomes per-device
    partial sums (`_PartialBuilder`: where it is ``argument + term`` with the
    argument held partial, only the term is rewritten);
  * a result that adds a term to an argument held partial
    (`accumulated`: result index -> argument index, as the compiler found
    them, `_mpmd.FragmentFunction.accumulated`) but is not itself partial (the last
    microbatch's, read elsewhere) is rewritten the same way with the
    argument's sharding: the terms add up unreduced and the sum is reduced
    once, as it is returned;
  * any other argument held partial is reduced once, where the program
    starts, and read whole from there.
  """
  main = find_main(module)
  ret = _returned(main)
  partial_args = {k: s for k, s in enumerate(in_shardings) if is_partial(s)}
  rewritten = 0
  with module.context, ir.Location.unknown():
    block = main.regions[0].blocks[0]
    builder = _PartialBuilder(module, partial_args)
    targets = []
    for j, value in enumerate(list(ret.operands)):
      sharding = out_shardings[j] if j < len(out_shardings) else None
      if not is_partial(sharding):
        k = accumulated.get(j)
        sharding = in_shardings[k] if k is not None else None
        if not is_partial(sharding):
          continue
      targets.append((j, value, sharding))
    kept = {accumulated[j] for j, _, _ in targets if j in accumulated}
    for axes in {frozenset(s.spec.unreduced) for _, _, s in targets}:
      builder.sources(axes)  # (Shardy's view of the program as it came)
    for j, value, sharding in targets:
      ret.operands[j] = builder.partial(value, sharding, ret)
      rewritten += 1
    builder.untag()
    for k, sharding in partial_args.items():
      if k in kept or not len(block.arguments):
        continue
      # Read as a whole here: reduced once, at the top (XLA would reduce it
      # once per reader).
      arg = block.arguments[k]
      attr = _whole(sharding)._to_sdy_sharding(arg.type.maybe_downcast().rank).build({})  # pylint: disable=protected-access
      c = ir.Operation.create(_CONSTRAINT, results=[arg.type], operands=[arg],
                              attributes={"sharding": attr},
                              ip=ir.InsertionPoint.at_block_begin(block))
      arg.replace_all_uses_except(c.result, c)
    _passmanager.PassManager.parse("builtin.module(sdy-lift-inlined-meshes)").run(module.operation)
  return rewritten
