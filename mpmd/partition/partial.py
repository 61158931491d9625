"""Which values a step holds as unreduced partial sums: the compiler's
decision, as the layout decision reads it.

On a mesh of several devices that splits each microbatch over an axis, a
backward program makes the gradient as one partial sum per device. Held
reduced, every microbatch's accumulator update costs an all-reduce inside
the backward call; `jax.jit` of the whole batch reduces once per step. Held
unreduced (`mpmd._jax.unreduced`), the partial sums of all microbatches add
up locally and the one reduction happens in the call that first reads the
accumulator as a whole (the optimizer update).

Which accumulator chains are held so is decided while partitioning, by the
pass -mpmd-mark-partial-sums (docs/passes.md), and written into the
partitioned program: each call's `partial_results` (result index, the
operand index it adds a term to or -1 where the call starts the chain) and
each constant's `partial` (an accumulator's zeros a chain starts from). This
module only reads those marks; the layout decision (`mpmd.partition.layouts`)
gives each marked value the unreduced form of its layout where its call splits
its work.

`MPMD_PARTIAL_SUMS=0` turns the pass off (every accumulator is reduced in
each call, as before).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping


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

  @classmethod
  def of(cls, program: Iterable, constants: Iterable) -> PartialSums:
    """The chains the compiler marked in `program` (the instructions: a call's
    `partial_results`) and `constants` (the `_mpmd.ConstantInput`s: `partial`)."""
    made: set[int] = set()
    adds: dict[int, int] = {}
    for inst in program:
      if inst.kind != "call":
        continue
      for j, k in inst.partial_results:
        if k < 0:
          made.add(inst.results[j])
        else:
          adds[inst.results[j]] = inst.operands[k]
    return cls(frozenset(c.id for c in constants if c.partial), frozenset(made), adds)
