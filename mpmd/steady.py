"""The steady-state check of a compiled program's arguments.

A training loop calls a compiled step again and again with the previous
step's outputs: the same array classes, the same avals and the same
sharding objects every time. `SteadyInputs.accept` recognises such a call
with a few passes over the flat arguments that run in C (`map` over
attribute getters, list comparisons that succeed on identity), instead of
a Python loop of checks per argument. Anything it does not recognise (a new
sharding, a Python scalar, a deleted array, a donated array passed twice)
returns None, and the caller takes the checked path, which says what is
wrong or places the argument.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any

import jax
from jax.sharding import Sharding

__all__ = ["SteadyInputs"]

_AVAL = operator.attrgetter("aval")
_SHARDING = operator.attrgetter("sharding")
_IS_DELETED = operator.methodcaller("is_deleted")


def _getter(indices: Sequence[int]) -> Callable[[Sequence[Any]], Sequence[Any]]:
  """`seq -> [seq[i] for i in indices]`, as one C call where it can be."""
  indices = tuple(indices)
  if len(indices) >= 2:
    return operator.itemgetter(*indices)
  if len(indices) == 1:
    (i,) = indices
    return lambda seq: (seq[i],)
  return lambda seq: ()


class SteadyInputs:
  """Recognises a call whose arguments are laid out as a checked call left them.

  Args:
    kept: per program input, its flat argument index.
    shardings: per program input, the sharding it must have.
    donated: per program input, whether the caller donates it.
    avals: per program input, the aval it must have (shape and dtype count).
    unused: (flat index, shape, dtype) of the arguments the program does
      not read, which must still have the shape and dtype it was compiled for.
  """

  def __init__(self, kept: Sequence[int], shardings: Sequence[Sharding],
               donated: Sequence[bool], avals: Sequence[Any],
               unused: Sequence[tuple[int, tuple[int, ...], Any]] = ()):
    self._take = _getter(kept)
    self._shardings = list(shardings)
    self._expected = [(tuple(a.shape), a.dtype) for a in avals]
    self._take_donated = _getter([k for k, d in enumerate(donated) if d])
    self._take_others = _getter([k for k, d in enumerate(donated) if not d])
    self._num_donated = sum(map(bool, donated))
    self._unused = tuple(unused)
    #: Array classes the checked path accepted as they were (a class not
    #: here, e.g. a Tracer or a NumPy array, takes the checked path).
    self.array_types: set[type] = set()
    #: The avals and shardings of the last accepted call: the next step's
    #: arguments usually carry the very same objects.
    self._known_avals: list | None = None
    self._known_shardings = list(self._shardings)

  def take(self, leaves: Sequence[Any]) -> Sequence[Any]:
    """The program inputs among the flat arguments, unchecked."""
    return self._take(leaves)

  def accept_taken(self, xs: Sequence[Any], leaves: Sequence[Any]) -> bool:
    """Whether the inputs `xs` (`take(leaves)`) are live arrays of accepted
    classes with the compiled shapes, dtypes and shardings, no donated
    array is passed twice or also undonated, and the unread arguments keep
    their shapes and dtypes."""
    if not self.array_types.issuperset(map(type, xs)) or any(map(_IS_DELETED, xs)):
      return False
    avals = list(map(_AVAL, xs))
    if avals != self._known_avals:
      if not all(a.shape == shape and a.dtype == dtype
                 for a, (shape, dtype) in zip(avals, self._expected)):
        return False
      self._known_avals = avals
    shardings = list(map(_SHARDING, xs))
    if shardings != self._known_shardings:
      if shardings != self._shardings:
        return False
      self._known_shardings = shardings
    if self._num_donated:
      donated = set(map(id, self._take_donated(xs)))
      if (len(donated) != self._num_donated  # a donated array passed twice
          or not donated.isdisjoint(map(id, self._take_others(xs)))):  # or also undonated
        return False
    for i, shape, dtype in self._unused:
      x = leaves[i]
      if getattr(x, "shape", None) != shape or getattr(x, "dtype", None) != dtype:
        return False
    return True

  def accept(self, leaves: Sequence[Any]) -> list[jax.Array] | None:
    """The program's inputs (the kept arguments, as they are) when
    `accept_taken` holds; else None."""
    xs = self._take(leaves)
    return list(xs) if self.accept_taken(xs, leaves) else None
