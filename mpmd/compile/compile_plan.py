"""The programs a laid-out program needs, compiled: the compile plan.

The partition stage decided every value's layout (`mpmd.partition.layouts`).
`CompilePlan.resolve` compiles, in one go, the fragment programs of the calls
of meshes this process runs (one per distinct `FragmentLayout`, in parallel,
through the fragment cache `mpmd.compile.fragment_cache`), asks for the
filler programs of the constants calls consume, places the constants calls
only read, and plans each instruction: a `PlannedCall` (its program), a
`PlannedTransfer` (its layouts, and whether it crosses processes) or
`SKIPPED` (an instruction of meshes this process takes no part in).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import jax
from jax.sharding import Mesh, Sharding

from mpmd import distributed as dist
from mpmd.errors import MpmdError
from mpmd._jax.compiling import HostCallbacks
from mpmd.compile.constants import place_constant
from mpmd.compile.fragment import FragmentExecutable
from mpmd.compile.fragment_cache import FragmentCache
from mpmd.partition.layouts import CallLayout, FragmentLayout, LaidOutProgram

__all__ = ["CompilePlan", "PlannedCall", "PlannedTransfer", "SKIPPED"]

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
  """A transfer whose layouts are known.

  Attributes:
    target: the sharding of the result on the target mesh.
    source: the sharding of the value on the source mesh (None on a process
      that does not run the source mesh).
    across: whether it moves the value between processes.
    aval: the value's shape and dtype (as the partitioner typed it: a
      receiving process need not have compiled its producer).
  """
  target: Sharding
  source: Sharding | None
  across: bool
  aval: Any


class CompilePlan:
  """The compiled programs and instruction plans of one `compile_program` call.

  Args:
    laid_out: the program with its layouts decided.
    topology: mesh name -> mesh.
    owner: which meshes this process runs.
    callbacks: the host callbacks of the lowered step (for the programs
      that call them).
    fingerprint: in a multi-process run, the name of this compile on every
      process.

  Attributes:
    cache: the `FragmentCache` the programs come from.
    sharding_of: value id -> its sharding, for the values of this process's
      meshes.
    constants: value id -> the constant inputs of this process's meshes
      that calls only read, placed once.
    resolved: per instruction, a `PlannedCall`, `PlannedTransfer` or
      `SKIPPED` (after `resolve`).
  """

  def __init__(self, laid_out: LaidOutProgram, topology: Mapping[str, Mesh],
               owner: dist.Ownership, callbacks: HostCallbacks | None = None,
               fingerprint: str = ""):
    self.laid_out = laid_out
    self.program = laid_out.partition
    self.topology = topology
    self.owner = owner
    self.fingerprint = fingerprint
    local_calls = {(inst.callee, inst.mesh) for inst in self.program.program
                   if inst.kind == "call" and owner.runs(inst.mesh)}
    self.cache = FragmentCache(self.program.functions, topology, callbacks, len(local_calls))
    runs = owner.runs
    local = [v for v, m in zip(self.program.input_ids, self.program.input_meshes) if runs(m)]
    local += [c.id for c in self.program.constants if runs(c.mesh)]
    for inst in self.program.program:
      if runs(inst.mesh) or (inst.kind == "transfer" and runs(inst.src_mesh)):
        local += inst.results
    self.sharding_of: dict[int, Sharding] = {v: laid_out.sharding_of[v] for v in local}
    self.constants: dict[int, jax.Array] = {
        c.id: place_constant(c, topology[c.mesh]) for c in self.program.constants
        if runs(c.mesh) and not c.donated}
    self.resolved: list[Any] = []

  def resolve(self) -> list[Any]:
    """Compiles every program this process needs (and its filler programs)
    and plans every instruction; returns `resolved`."""
    owner = self.owner
    pairs = list(zip(self.program.program, self.laid_out.instructions))
    with self.cache:
      fills = {}
      for index, (inst, layout) in enumerate(pairs):
        if isinstance(layout, CallLayout) and owner.runs(inst.mesh) and layout.consumed:
          fills[index] = self.cache.request_filler(tuple((c, s) for _, c, s in layout.consumed))
      needed = list({layout.fragment.key: layout.fragment for inst, layout in pairs
                     if isinstance(layout, CallLayout) and owner.runs(inst.mesh)}.values())
      self.cache.compile(needed)
      for layout in needed:
        _check_outputs(layout, self.cache.compiled[layout.key])
      for index, (inst, layout) in enumerate(pairs):
        self.resolved.append(self._plan(index, inst, layout, fills))
      self.cache.finish()
    return self.resolved

  def _plan(self, index: int, inst, layout, fills: Mapping[int, tuple]) -> Any:
    owner = self.owner
    if not isinstance(layout, CallLayout):
      if not (owner.runs(inst.src_mesh) or owner.runs(inst.mesh)):
        return SKIPPED
      across = not (owner.owns_all(inst.src_mesh) and owner.owns_all(inst.mesh))
      return PlannedTransfer(layout.target,
                             layout.source if owner.runs(inst.src_mesh) else None, across,
                             layout.aval)
    if not owner.runs(inst.mesh):
      return SKIPPED
    fragment = self.cache.compiled[layout.fragment.key]
    fresh = tuple(k for k, _, _ in layout.consumed)
    return PlannedCall(fragment, fresh, fills.get(index))


def _check_outputs(layout: FragmentLayout, fragment: FragmentExecutable) -> None:
  """Raises if the compiled program does not lay out its results as the
  partition stage decided (the consumers were laid out for those)."""
  for j, (got, want) in enumerate(zip(fragment.output_shardings, layout.out_shardings)):
    if not got.is_equivalent_to(want, len(layout.out_avals[j].shape)):
      raise MpmdError(f"fragment {layout.name!r} on mesh {layout.mesh_name!r}: its program lays "
                      f"out result {j} as {got}, not as decided ({want}) (a bug: please "
                      "report it)")
