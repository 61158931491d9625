"""Stage markers: `mark_stage_end` (and its older name `pipeline_enter_stage`).

A marker is an identity primitive over the leaves of its anchor that carries
the index of the stage it ends. Inside a `treduce` body (or a function under
`mpmd_jit_by_yield`) the k-th marker call ends stage k; elsewhere markers have
no stage and are plain identities. Markers are linear: the transpose of a
marker is a marker of the same stage with ``backward=True``, which is how the
backward stage boundaries appear under `jax.grad`. (The splitter numbers
stages by the markers' program order and uses the carried index as a check:
JAX may reuse a trace, and the index in it, for a function called twice.)
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, TypeVar

import jax

from mpmd._jax import lowering as jl

__all__ = ["mark_stage_end", "marker_p", "pipeline_enter_stage", "stage_scope"]

T = TypeVar("T")

marker_p = jl.make_marker_primitive(
    "jaxpp_stage_marker", lambda p: dict(p, backward=not p["backward"]))


class _Scope:
  """Counts the marker calls of one traced function."""

  def __init__(self) -> None:
    self.count = 0


_SCOPES: list[_Scope] = []


@contextlib.contextmanager
def stage_scope() -> Iterator[_Scope]:
  """While active, each marker call gets the next stage index (from 0)."""
  scope = _Scope()
  _SCOPES.append(scope)
  try:
    yield scope
  finally:
    _SCOPES.pop()


def mark_stage_end(anchor: T, name: str | None = None) -> T:
  """Marks the end of the current pipeline stage at ``anchor`` (identity).

  Call it once per stage, after the stage's last layer (the last stage too):
  ``n`` calls make ``n`` stages. The arrays of ``anchor`` are the values that
  cross into the next stage; the split point is exact (everything computed
  before the call, in program order, is in the stage, with values that only
  depend on inputs placed where they are used).

  Args:
    anchor: a pytree of arrays (at least one).
    name: an optional label (kept on the marker, for debugging).

  Returns:
    ``anchor``, unchanged in value.
  """
  leaves, tree = jax.tree.flatten(anchor)
  if not leaves:
    raise ValueError("mark_stage_end needs an anchor with at least one array (the values that "
                     f"cross into the next stage); got {anchor!r}")
  if name is not None and not isinstance(name, str):
    raise TypeError(f"mark_stage_end name must be a str or None, got {name!r}")
  stage = None
  if _SCOPES:
    stage = _SCOPES[-1].count
    _SCOPES[-1].count += 1
  outs = marker_p.bind(*leaves, stage=stage, backward=False, name=name)
  return jax.tree.unflatten(tree, outs)


def pipeline_enter_stage(anchor: T, name: str | None = None) -> T:
  """JaxPP's former name of `mark_stage_end` (same behaviour)."""
  return mark_stage_end(anchor, name)


def is_marker(eqn: Any) -> bool:
  """Whether a jaxpr equation is a stage marker."""
  return eqn.primitive is marker_p
