"""Splitting a traced step at its stage markers into named computations.

`plan_stages` takes the jaxpr of a `treduce` body (or of a whole function under
`mpmd_jit_by_yield`) and assigns its equations to the named computations
``stage_k`` (forward, transpose count 0) and ``stage_k`` (backward, count 1):

* forward markers ``f_0 < ... < f_{n-1}`` (in program order) cut the forward:
  equations up to ``f_k`` belong to stage k's forward; the loss and its
  gradient (between ``f_{n-1}`` and the first backward marker) join the last
  stage's forward;
* backward markers come in reverse, ``b_{n-1} < ... < b_0``: each starts the
  backward of its stage, up to the next backward marker (after ``b_0``: the
  end of the body);
* after the last marker, only equations that depend on its outputs (or that
  such equations need) join its stage part; the others (e.g. an optimizer
  update in a step without a loop) are left unlabelled, for the compiler to
  place where their data lives;
* equations that depend only on the body's inputs (no stage value) and are
  not needed for stage 0's boundary are computed where they are used: in the
  one stage computation that uses them, or, when several do (or the body
  returns them), left unlabelled for the compiler's mesh inference (which
  clones input-only computations to every mesh that needs them).

`StagePlan.run` evaluates the body that way: unlabelled input-only equations
first, then one named computation per stage part in pipeline order, then the
unlabelled equations after the last marker.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from typing import Any

import jax
import jax.extend.core as jex

from mpmd.trace import ops as mpmd_ops
from mpmd._jax import jaxpr as jj
from mpmd._jax import lowering as jl
from mpmd.errors import StageError
from mpmd.jaxpp.markers import is_marker, marker_p

__all__ = ["StageError", "StagePart", "StagePlan", "plan_stages", "stage_name"]


def stage_name(stage: int) -> str:
  """The name of stage ``stage``'s named computations."""
  return f"stage_{stage}"


@dataclasses.dataclass(frozen=True)
class StagePart:
  """One named computation (``stage`` is None: unlabelled equations)."""

  stage: int | None
  backward: bool
  jaxpr: Any  # ClosedJaxpr
  invars: tuple[Any, ...]
  outvars: tuple[Any, ...]

  @property
  def label(self) -> str:
    if self.stage is None:
      return "unlabelled"
    return f"{stage_name(self.stage)}({int(self.backward)})"


@dataclasses.dataclass(frozen=True)
class StagePlan:
  """The body split into stage computations (see the module docstring)."""

  num_stages: int
  has_backward: bool
  parts: tuple[StagePart, ...]
  invars: tuple[Any, ...]
  outvars: tuple[Any, ...]
  consts: tuple[tuple[Any, Any], ...]

  def run(self, args: Sequence[Any]) -> list[Any]:
    """Evaluates the body on ``args`` with one named computation per part."""
    env: dict[Any, Any] = dict(self.consts)
    env.update(zip(self.invars, args))

    def read(v):
      return v.val if isinstance(v, jex.Literal) else env[v]

    for part in self.parts:
      ins = [env[v] for v in part.invars]
      fun = jex.jaxpr_as_fun(part.jaxpr)
      if part.stage is None:
        outs = fun(*ins)
      else:
        outs = jl.bind_call(mpmd_ops.named_computation_p, fun, ins,
                            debug_name=f"jaxpp {part.label}", name=stage_name(part.stage),
                            transpose_count=int(part.backward))
      env.update(zip(part.outvars, outs))
    return [read(v) for v in self.outvars]

  def describe(self) -> str:
    """One line per part: its label and number of equations."""
    return "\n".join(f"{p.label}: {len(p.jaxpr.jaxpr.eqns)} equations" for p in self.parts)


def _has_nested_marker(eqn) -> bool:
  return any(jj.contains_primitive(j, marker_p) for j in jex.jaxprs_in_params(eqn.params))


def _flatten_nested_markers(closed, what: str):
  """Inlines nested jit calls that contain markers; rejects other nestings."""
  if not any(_has_nested_marker(e) for e in closed.jaxpr.eqns):
    return closed
  for e in closed.jaxpr.eqns:
    if _has_nested_marker(e) and jj.nested_call_jaxpr(e) is None:
      raise StageError(
          f"{what} calls a stage marker inside `{e.primitive}` ({_where(e)}); markers must be "
          "at the top level of the step or inside plain function calls / jax.jit, not inside "
          "jax.checkpoint, scan, cond, custom_vjp or similar: move the marker out of it")
  return _flatten_nested_markers(jj.inline_calls(closed, _has_nested_marker), what)


# Library code (this package and JAX), skipped when naming the user's line.
_LIBRARY_DIRS = (os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,
                 os.path.dirname(os.path.abspath(jax.__file__)) + os.sep)


def _where(eqn) -> str:
  tb = eqn.source_info.traceback
  frames = [f for f in (tb.frames if tb is not None else [])
            if not os.path.abspath(f.file_name).startswith(_LIBRARY_DIRS)]
  if not frames:
    return "unknown location"
  f = frames[0]
  return f"{f.file_name}:{f.line_num}"


def plan_stages(closed, *, what: str = "the treduce body",
                require_backward: bool = True) -> StagePlan:
  """Splits ``closed`` (a ClosedJaxpr) at its stage markers.

  Args:
    closed: the traced step; its markers carry stage indices 0, 1, ...
    what: how error messages name the step.
    require_backward: whether backward markers must be present (they are
      when the step differentiates through the markers).

  Raises:
    StageError: no markers, markers out of order, or forward and backward
      markers that do not match.
  """
  # One piece (over 80 lines): the markers' positions, the segments between
  # them and where each leftover equation goes all index one equation list;
  # split, each step would take and return that whole state. Its steps are
  # marked by the comments below.
  closed = _flatten_nested_markers(closed, what)
  jaxpr = closed.jaxpr
  eqns = list(jaxpr.eqns)
  fwd = [(i, e.params["stage"]) for i, e in enumerate(eqns)
         if is_marker(e) and not e.params["backward"]]
  bwd = [(i, e.params["stage"]) for i, e in enumerate(eqns)
         if is_marker(e) and e.params["backward"]]
  n = len(fwd)
  if n == 0:
    raise StageError(f"{what} has no stage markers: call mark_stage_end (pipeline_enter_stage) "
                     "once at the end of every stage, the last one included")
  # Stage k is the k-th forward marker in program order; backward markers come
  # in reverse. (The stage ids the markers were bound with are only a check:
  # a marker inside a function whose trace JAX reuses, e.g. a jax.jit called
  # for several stages, repeats the id of its first trace.)
  ids_consistent = [s for _, s in fwd] == list(range(n))
  if bwd or require_backward:
    if len(bwd) != n:
      missing = ""
      if bwd and ids_consistent:
        missing = (f"; stages without a backward marker: "
                   f"{sorted(set(range(n)) - {s for _, s in bwd})}")
      raise StageError(
          f"{what} has {n} forward stage markers but {len(bwd)} backward ones "
          f"({n + len(bwd)} stage boundaries; {n} stages need {2 * n}): every marked value "
          "must reach the differentiated loss (a marker whose output does not affect the loss "
          "has no backward), and the stages must be differentiated inside the body "
          f"(jax.grad / jax.value_and_grad){missing}")
    if ids_consistent and [s for _, s in bwd] != list(reversed(range(n))):
      raise StageError(f"{what} has backward stage markers for stages {[s for _, s in bwd]} "
                       f"in program order; expected {n - 1}..0")
    if bwd[0][0] < fwd[-1][0]:
      raise StageError(f"{what} runs a backward stage marker before the forward marker of the "
                       f"last stage ({n - 1}): differentiate the whole pipelined computation at "
                       "once")
  fwd_pos = [i for i, _ in fwd]
  bwd_pos = [i for i, _ in bwd]
  first_bwd = bwd_pos[0] if bwd_pos else len(eqns)

  def region(i: int) -> int:
    """Cluster id by program order: F0..F(n-1) = 0..n-1, B(n-1)..B0 = n..2n-1."""
    if i < first_bwd:
      return min(sum(p < i for p in fwd_pos), n - 1)
    return n - 1 + sum(p <= i for p in bwd_pos)

  defined_by: dict[Any, int] = {}
  for i, e in enumerate(eqns):
    for v in e.outvars:
      defined_by[v] = i
  # Stage 0's forward: everything its boundary (marker f_0) depends on.
  slice0: set[int] = set()
  stack = [fwd_pos[0]]
  while stack:
    i = stack.pop()
    for v in eqns[i].invars:
      j = defined_by.get(v) if not isinstance(v, jex.Literal) else None
      if j is not None and j not in slice0:
        slice0.add(j)
        stack.append(j)

  # After the last marker, only what depends on it belongs to its stage part;
  # the rest (e.g. an optimizer update under mpmd_jit_by_yield) is left to the
  # compiler, unless a stage part needs it.
  last = max(fwd_pos + bwd_pos)
  after_last = set(eqns[last].outvars)
  for e in eqns[last + 1:]:
    if any(v in after_last for v in e.invars if not isinstance(v, jex.Literal)):
      after_last.update(e.outvars)

  deferred, unlabelled, tail = -1, -2, -3
  cluster = [deferred] * len(eqns)
  for i, e in enumerate(eqns):
    if is_marker(e) or i in slice0:
      cluster[i] = region(i)
      continue
    ins = [defined_by.get(v) for v in e.invars if not isinstance(v, jex.Literal)]
    if any(j is not None and cluster[j] not in (deferred, unlabelled) for j in ins):
      depends_on_last = any(v in after_last for v in e.outvars)
      cluster[i] = region(i) if i < last or depends_on_last else tail
  users: dict[Any, list[int]] = {}
  for i, e in enumerate(eqns):
    for v in e.invars:
      if not isinstance(v, jex.Literal):
        users.setdefault(v, []).append(i)
  for i in reversed(range(last + 1, len(eqns))):
    if cluster[i] == tail and any(cluster[j] >= 0 for v in eqns[i].outvars
                                  for j in users.get(v, ())):
      cluster[i] = region(i)
  # Input-only equations go where they are used.
  returned = {v for v in jaxpr.outvars if not isinstance(v, jex.Literal)}
  for i in reversed(range(len(eqns))):
    if cluster[i] != deferred:
      continue
    where = {cluster[j] for v in eqns[i].outvars for j in users.get(v, ())}
    if any(v in returned for v in eqns[i].outvars):
      where.add(unlabelled)
    cluster[i] = where.pop() if len(where) == 1 and min(where) >= 0 else unlabelled

  num_clusters = 2 * n if bwd else n
  groups = [[i for i, c in enumerate(cluster) if c == unlabelled]]
  groups += [[i for i, c in enumerate(cluster) if c == k] for k in range(num_clusters)]
  groups.append([i for i, c in enumerate(cluster) if c == tail])
  parts = []
  for k, members in enumerate(groups):
    if not members:
      continue
    member_set = set(members)
    defined = {v for i in members for v in eqns[i].outvars}
    invars: dict[Any, None] = {}
    for i in members:
      for v in eqns[i].invars:
        if not isinstance(v, jex.Literal) and v not in defined:
          invars.setdefault(v)
    used_outside = {v for i, e in enumerate(eqns) if i not in member_set for v in e.invars
                    if not isinstance(v, jex.Literal)} | returned
    outvars = [v for i in members for v in eqns[i].outvars if v in used_outside]
    if k in (0, len(groups) - 1):
      stage, backward = None, False
    else:
      c = k - 1
      stage, backward = (c, False) if c < n else (2 * n - 1 - c, True)
    part_jaxpr = jj.jaxpr_of_equations([eqns[i] for i in members], list(invars), outvars)
    parts.append(StagePart(stage, backward, part_jaxpr, tuple(invars), tuple(outvars)))
  return StagePlan(num_stages=n, has_backward=bool(bwd), parts=tuple(parts),
                   invars=tuple(jaxpr.invars), outvars=tuple(jaxpr.outvars),
                   consts=tuple(zip(jaxpr.constvars, closed.consts)))
