"""Shardy:MPMD's "must happen before" relations, and sorting by them.

Shardy orders the units of each mesh with a binary predicate
``must_happen_before(a, b)`` on pairs of units of the same mesh: for each pair
with no data-flow path between them either way, the predicate adds a control
dependency ``a -> b``; a topological sort then gives the mesh's order
(Shardy:MPMD's pipeline scheduler). The predicates below follow its
definitions, in its notation: ``cc`` is the
microbatch, ``t`` the transpose count (0 for ``F``, 1 for ``B``/``W``), ``N``
the number of meshes and ``i`` the mesh index. With a split backward ``Bᵃ`` is
our ``B`` and ``Bʷ`` our ``W``.

Every predicate takes two `UnitArrays` that broadcast against each other
(``a`` as a column, ``b`` as a row) and returns a boolean matrix, so a mesh of
``n`` units is related in one vectorised ``n x n`` evaluation.

The schedules the compiler builds in (GPipe, 1F1B, GPipeBut1F1BForLastMesh,
Circular, CircularWithReversedBackward) are not here: their orders are
defined once, as sort keys, in include/mpmd/BuiltinSchedules.h.

Where the relation leaves two units unordered (it only happens for ``M < N``,
and for some W-vs-F and W-vs-B pairs of ZeroBubbleH2), `order_by_relation`
breaks the tie with `kind_first` (forwards first, then lower microbatch)
instead of Shardy's original program order, which would run a microbatch's
forward and backward back to back.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from collections.abc import Callable, Sequence

import numpy as np

from mpmd.schedule.core import ScheduleError, Unit

F, B, W = 0, 1, 2
KIND_CODE = {"F": F, "B": B, "W": W}


@dataclasses.dataclass(frozen=True)
class UnitArrays:
  """Units as numpy arrays: ``kind`` (0=F, 1=B, 2=W), ``mb``, ``stage``."""

  kind: np.ndarray
  mb: np.ndarray
  stage: np.ndarray

  @classmethod
  def of(cls, units: Sequence[Unit]) -> "UnitArrays":
    return cls(np.array([KIND_CODE[u.kind] for u in units], dtype=np.int64),
               np.array([u.microbatch for u in units], dtype=np.int64),
               np.array([u.stage for u in units], dtype=np.int64))

  def column(self) -> "UnitArrays":
    return UnitArrays(self.kind[:, None], self.mb[:, None], self.stage[:, None])

  def row(self) -> "UnitArrays":
    return UnitArrays(self.kind[None, :], self.mb[None, :], self.stage[None, :])

  @property
  def t(self) -> np.ndarray:
    """Transpose count: 0 for forward, 1 for backward (B or W)."""
    return (self.kind != F).astype(np.int64)

  @property
  def is_f(self) -> np.ndarray:
    return self.kind == F

  @property
  def is_b(self) -> np.ndarray:
    return self.kind == B

  @property
  def is_w(self) -> np.ndarray:
    return self.kind == W


Relation = Callable[[UnitArrays, UnitArrays, int, int], np.ndarray]
"""``(a, b, mesh, num_meshes) -> bool matrix``: a must happen before b."""


def zero_bubble_h1(a: UnitArrays, b: UnitArrays, mesh: int, n: int) -> np.ndarray:
  """ZB-H1 (split backward), with i the microbatch:

  Bᵃ(i) < F(i+N-mesh); F(i+N-mesh-1) < Bᵃ(i); Bʷ(i) < F(i+N);
  Bᵃ(i+mesh) < Bʷ(i); Bʷ(i) < Bᵃ(i+mesh+1); same kind: ascending microbatch.
  """
  return (((a.kind == b.kind) & (a.mb < b.mb))
          | (a.is_b & b.is_f & (b.mb == a.mb + n - mesh))
          | (a.is_f & b.is_b & (a.mb == b.mb + n - mesh - 1))
          | (a.is_w & b.is_f & (b.mb == a.mb + n))
          | (a.is_b & b.is_w & (a.mb == b.mb + mesh))
          | (a.is_w & b.is_b & (b.mb == a.mb + mesh + 1)))


def zero_bubble_h2_init_fwd(mesh: int, n: int, latency_fraction: float) -> int:
  """Warm-up forwards of ZB-H2 on ``mesh``: floor(2(N-m)-1 + 2(N-m-1)λ)."""
  return math.floor((2 * (n - mesh) - 1) + 2 * (n - mesh - 1) * latency_fraction)


def zero_bubble_h2(latency_fraction: float) -> Relation:
  """ZB-H2 for a transfer latency of ``λ = latency_fraction`` (0, 0.5, 1).

  With ``init = init_fwd(mesh)`` and ``c = init_fwd(N - mesh - 1)``:
  F(i) < every backward for i < init; Bᵃ(i) < F(i+init);
  F(i+init-1) < Bᵃ(i); Bᵃ(i+c-1) < Bʷ(i); Bʷ(i) < Bᵃ(i+c);
  same kind: ascending microbatch.
  """

  def relation(a: UnitArrays, b: UnitArrays, mesh: int, n: int) -> np.ndarray:
    init = zero_bubble_h2_init_fwd(mesh, n, latency_fraction)
    c = zero_bubble_h2_init_fwd(n - mesh - 1, n, latency_fraction)
    return (((a.kind == b.kind) & (a.mb < b.mb))
            | (a.is_f & (a.mb < init) & ~b.is_f)
            | (a.is_b & b.is_f & (b.mb == a.mb + init))
            | (a.is_f & b.is_b & (a.mb == b.mb + init - 1))
            | (a.is_b & b.is_w & (a.mb == b.mb + c - 1))
            | (a.is_w & b.is_b & (b.mb == a.mb + c)))

  return relation


def parallel_pipelines_with_wrap_around(a: UnitArrays, b: UnitArrays,
                                        mesh: int, n: int) -> np.ndarray:
  """Forward only; microbatch k enters the pipeline at mesh k (Shardy's form,
  for M <= N): cc == mesh first; two microbatches on the same side of the
  pivot ``mesh`` run in descending cc order, otherwise ascending."""
  del n
  k = mesh
  same_side = ((a.mb < k) & (b.mb < k)) | ((a.mb > k) & (b.mb > k))
  return ((a.mb == k) & (b.mb != k)) | (
      (a.mb != k) & (b.mb != k)
      & ((same_side & (a.mb > b.mb)) | (~same_side & (a.mb < b.mb))))


def linear_data_path(a: UnitArrays, b: UnitArrays) -> np.ndarray:
  """``a`` reaches ``b`` through data flow (same microbatch, linear pipeline).

  F(s) -> F(s') for s < s'; F -> every B and W of the microbatch;
  B(s') -> B(s) for s < s'; B(s') -> W(s) for s <= s'.
  """
  same = a.mb == b.mb
  return same & ((a.is_f & b.is_f & (a.stage < b.stage))
                 | (a.is_f & ~b.is_f)
                 | (a.is_b & b.is_b & (a.stage > b.stage))
                 | (a.is_b & b.is_w & (a.stage >= b.stage)))


def kind_first(u: Unit) -> tuple[int, int, int]:
  """Tie-break key: forwards first, then lower microbatch, then stage."""
  return (KIND_CODE[u.kind], u.microbatch, u.stage)


def order_by_relation(units: Sequence[Unit], before: Relation, mesh: int,
                      num_meshes: int, *,
                      tie_key: Callable[[Unit], tuple] = kind_first,
                      data_path: Callable[[UnitArrays, UnitArrays], np.ndarray]
                      = linear_data_path) -> list[Unit]:
  """Sorts one mesh's units the way Shardy's scheduler does.

  Edges: every data-flow path between two units, plus ``before(a, b)`` for
  every pair with no data-flow path either way. The result is a topological
  order of those edges; among the units ready at each step the one with the
  smallest ``tie_key`` goes first.

  Raises:
    ScheduleError: the relation is cyclic (names two units on the cycle).
  """
  units = list(units)
  arr = UnitArrays.of(units)
  col, row = arr.column(), arr.row()
  path = data_path(col, row)
  edges = path | (before(col, row, mesh, num_meshes) & ~path & ~path.T)
  np.fill_diagonal(edges, False)
  indegree = edges.sum(axis=0)
  heap = [(tie_key(units[j]), j) for j in np.flatnonzero(indegree == 0)]
  heapq.heapify(heap)
  out: list[Unit] = []
  while heap:
    _, i = heapq.heappop(heap)
    out.append(units[i])
    for j in np.flatnonzero(edges[i]):
      indegree[j] -= 1
      if indegree[j] == 0:
        heapq.heappush(heap, (tie_key(units[j]), j))
  if len(out) < len(units):
    left = [j for j in range(len(units)) if indegree[j] > 0]
    walk: list[int] = []
    cur = left[0]
    while cur not in walk:  # walk back along unsatisfied edges to a cycle
      walk.append(cur)
      cur = next(i for i in left if edges[i, cur])
    cycle = walk[walk.index(cur):][::-1]
    chain = " -> ".join(str(units[i]) for i in cycle + cycle[:1])
    raise ScheduleError(
        f"the must-happen-before relation is cyclic on mesh {mesh}: {chain}")
  return out
