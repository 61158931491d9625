"""Which values a step holds as unreduced partial sums.

On a mesh of several devices that splits each microbatch over an axis, a
backward program makes the gradient as one partial sum per device. Held
reduced, every microbatch's accumulator update costs an all-reduce inside
the backward call; `jax.jit` of the whole batch reduces once per step. Held
unreduced (`mpmd._jax.unreduced`), the partial sums of all microbatches add
up locally and the one reduction happens in the call that first reads the
accumulator as a whole (the optimizer update).

An *accumulator chain* starts at the value a call adds a term to
(the compiler's `_mpmd.FragmentFunction.accumulated`: result = that argument + term): the zeros the
first microbatch's accumulator starts from (a constant operand, made one by
-mpmd-parameterize-fragment-constants), or the first microbatch's gradient
made by a call on the same mesh. It goes on through each call that adds a
term to the previous result. A chain is held
unreduced only when every value in it stays on its mesh and is read only by
calls there (no transfer, not a result of the step): a reduction can then
only happen inside a program, where XLA inserts it.

`MPMD_PARTIAL_SUMS=0` turns this off (every accumulator is reduced in each
call, as before).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Iterable, Mapping

from mpmd import knobs

#: The environment variable that turns partial sums off ("0").
ENV = knobs.MPMD_PARTIAL_SUMS


def enabled() -> bool:
  """Whether accumulators may be held as partial sums (`MPMD_PARTIAL_SUMS`)."""
  return knobs.flag(ENV)


@dataclasses.dataclass(frozen=True)
class PartialSums:
  """The accumulator chains of a program.

  `starts`: the constant operands chains start from (laid out unreduced);
  `made`: the call results chains start from (made unreduced by their call);
  `adds`: value id -> the value id it adds a term to, for the other values
  held unreduced (each gets the layout of that value).
  """
  starts: frozenset[int] = frozenset()
  made: frozenset[int] = frozenset()
  adds: Mapping[int, int] = dataclasses.field(default_factory=dict)

  def __bool__(self) -> bool:
    return bool(self.adds)


def plan(program: Iterable, accumulated: Callable[[str], Mapping[int, int]],
         constants: Collection[int], outputs: Collection[int],
         mesh_size: Callable[[str], int]) -> PartialSums:
  """The accumulator chains of `program` that may be held unreduced.

  Args:
    program: the instructions (`kind` "call" with `callee`, `mesh`,
      `operands`, `results`; or "transfer" with `operands`).
    accumulated: callee -> {result index: argument index} for each result
      that is that argument plus a term.
    constants: ids of the constant operands (chains may start there).
    outputs: ids of the step's results (never held unreduced).
    mesh_size: mesh name -> its number of devices.
  """
  chain_of: dict[int, int] = {}      # value -> its chain (the start's id)
  adds: dict[int, int] = {}          # value -> the value it adds a term to
  mesh_of: dict[int, str] = {}       # chain -> its mesh
  made_on: dict[int, str] = {}       # call result -> its mesh
  accumulating: set[tuple[int, int]] = set()  # (instruction, operand) the chains use
  instructions = list(program)
  for index, inst in enumerate(instructions):
    if inst.kind != "call":
      continue
    for j, k in (accumulated(inst.callee).items() if mesh_size(inst.mesh) > 1 else ()):
      source, result = inst.operands[k], inst.results[j]
      chain = chain_of.get(source)
      if chain is None and (source in constants or made_on.get(source) == inst.mesh):
        chain = chain_of[source] = source
      if chain is None or mesh_of.setdefault(chain, inst.mesh) != inst.mesh:
        continue
      chain_of[result], adds[result] = chain, source
      accumulating.add((index, k))
    made_on.update((v, inst.mesh) for v in inst.results)
  # A value read outside its mesh (a transfer, another mesh, a result of the
  # step) must be whole: the last of a chain is then reduced by the call
  # that makes it (an end); anywhere else the chain is held reduced.
  read_outside = {v for v in outputs if v in chain_of}
  for index, inst in enumerate(instructions):
    for k, v in enumerate(inst.operands):
      chain = chain_of.get(v)
      if chain is not None and (index, k) not in accumulating and (
          inst.kind != "call" or inst.mesh != mesh_of[chain]):
        read_outside.add(v)
  added_to = set(adds.values())
  broken = {chain_of[v] for v in read_outside if v in added_to or chain_of[v] == v}
  adds = {v: s for v, s in adds.items()
          if chain_of[v] not in broken and v not in read_outside}
  starts = {s for s in adds.values() if chain_of[s] == s}
  return PartialSums(frozenset(starts & set(constants)), frozenset(starts - set(constants)),
                     adds)
