"""The planning units of a traced step: each unit's forward and backward
computation, and what flows between them.

The step is traced with `jax.make_jaxpr`. Under differentiation every named
computation appears twice: its forward (transpose count 0, the residuals for
its backward among its outputs) and its backward (transpose count 1). These
are exactly the programs the pipeline runs for the unit, so they are what the
planner measures. The first jaxpr (depth first) holding forward named
computations is one microbatch's body; everything is read from it:

- forward / backward: the bodies (`ClosedJaxpr`) of the two calls;
- activation gradients: the backward's outputs that reach another unit's
  backward (directly or through unlabelled ops); the other outputs are weight
  gradients (their bytes are the unit's parameter bytes);
- stash: the backward's inputs that a forward produced (residuals and the
  incoming activation), kept from F to B for every microbatch in flight;
- cuts: the bytes that cross the boundary after unit ``c`` forwards
  (forward outputs of units ``<= c`` reaching forwards of units ``> c``) and
  backwards (backward outputs of units ``> c`` reaching backwards of
  units ``<= c``).

With ``outside=True`` the work outside the units is found too (`Outside`):
the unlabelled equations fed only by the last unit's forward (a head and
loss that are not a unit, with their backward and gradient accumulation),
those feeding only the first unit's forward (an embedding lookup) and those
fed only by the first unit's backward (the embedding's gradient). The
compiler places such code with the last or first unit, so the planner counts
it there (`mpmd.auto_stages` does: its units are the layers, not the embedding
or the head).

Only public JAX (`jax.extend.core`) is used.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import jax
import jax.extend.core as jcore
import numpy as np

from mpmd.trace.ops import named_computation_p
from mpmd.plan.errors import PlanError

__all__ = ["Outside", "UnitProgram", "TracedUnits", "aval_bytes", "trace_units"]


def aval_bytes(aval: Any) -> int:
  """Bytes of an array of this abstract value (0 for non-arrays)."""
  shape = getattr(aval, "shape", None)
  dtype = getattr(aval, "dtype", None)
  if shape is None or dtype is None:
    return 0
  try:
    itemsize = np.dtype(dtype).itemsize
  except TypeError:  # extended dtypes (PRNG keys): count their storage
    itemsize = getattr(dtype, "itemsize", 4) or 4
  return int(np.prod(shape, dtype=np.int64)) * int(itemsize)


@dataclasses.dataclass(frozen=True)
class UnitProgram:
  """One unit's programs as the traced step runs them.

  Attributes:
    name: the named computation.
    forward: body of its forward call.
    backward: body of its backward call (None: not differentiated).
    activation_grads: indices of `backward`'s outputs that are activation
      gradients (sent to the previous unit's backward).
    weight_grads: indices of the other outputs (gradients of its parameters).
    stash_bytes: bytes kept from its forward to its backward per microbatch.
    param_bytes: bytes of its parameters (of its weight gradients).
  """

  name: str
  forward: Any
  backward: Any | None
  activation_grads: tuple[int, ...]
  weight_grads: tuple[int, ...]
  stash_bytes: int
  param_bytes: int


@dataclasses.dataclass(frozen=True)
class Outside:
  """The work of one microbatch outside the units that goes with the first
  or the last unit (each a program measured as a forward-only `UnitProgram`,
  None when there is none).

  Attributes:
    before_forward: unlabelled equations that feed only the first unit's
      forward (and its backward: e.g. an embedding lookup whose result the
      backward also reads).
    before_backward: unlabelled equations fed only by the first unit's
      backward (e.g. the embedding's gradient), the accumulation of the
      unit's own weight gradients left out (measured with the unit).
    after: unlabelled equations fed only by the last unit's forward: a head
      and loss that are not a unit, their backward and the accumulation of
      their gradients.
    before_param_bytes: bytes of the gradients ``before_backward``
      accumulates (its parameters).
    after_param_bytes: the same for ``after``.
  """

  before_forward: UnitProgram | None = None
  before_backward: UnitProgram | None = None
  after: UnitProgram | None = None
  before_param_bytes: int = 0
  after_param_bytes: int = 0

  def programs(self) -> tuple[UnitProgram, ...]:
    """The programs there are (to measure)."""
    return tuple(p for p in (self.before_forward, self.before_backward, self.after)
                 if p is not None)


@dataclasses.dataclass(frozen=True)
class TracedUnits:
  """What `trace_units` found.

  Attributes:
    units: the units in pipeline order.
    forward_cut_bytes: per cut ``c`` (after unit ``c``, ``c < N-1``), bytes
      sent forward across it for one microbatch.
    backward_cut_bytes: the same for the backward (activation gradients).
    outside: the work outside the units that goes with the first or last
      unit (only with ``trace_units(..., outside=True)``).
  """

  units: tuple[UnitProgram, ...]
  forward_cut_bytes: tuple[int, ...]
  backward_cut_bytes: tuple[int, ...]
  outside: Outside | None = None

  @property
  def names(self) -> tuple[str, ...]:
    return tuple(u.name for u in self.units)


def _is_var(v: Any) -> bool:
  return isinstance(v, jcore.Var) and not isinstance(v, jcore.DropVar)


def _is_named(eqn: Any) -> bool:
  return eqn.primitive is named_computation_p


def _jaxprs(jaxpr: Any) -> Iterator[Any]:
  """`jaxpr` and every jaxpr nested in it (not inside named computations),
  depth first."""
  yield jaxpr
  for eqn in jaxpr.eqns:
    if _is_named(eqn):
      continue
    for sub in jcore.jaxprs_in_params(eqn.params):
      yield from _jaxprs(sub)


def _body(jaxpr: Any) -> Any:
  for j in _jaxprs(jaxpr):
    if any(_is_named(e) and e.params["transpose_count"] == 0 for e in j.eqns):
      return j
  raise PlanError("the step has no named computation: label each planning unit with "
                  "mpmd.named_computation(f, name='block0') (block0, block1, ... in order)")


def _reach(body: Any, unit_eqn: dict[int, tuple[str, int]]) -> Callable[[Any], frozenset[int]]:
  """`reach(var)`: indices of the unit equations `var` flows into, directly
  or through unlabelled equations (computed once, last equation first: a
  value's consumers come after it)."""
  consumers: dict[Any, list[int]] = {}
  for i, eqn in enumerate(body.eqns):
    for v in eqn.invars:
      if _is_var(v):
        consumers.setdefault(v, []).append(i)
  table: dict[Any, frozenset[int]] = {}

  def of(var: Any) -> frozenset[int]:
    found: set[int] = set()
    for i in consumers.get(var, ()):
      if i in unit_eqn:
        found.add(i)
      elif not _is_named(body.eqns[i]):
        for out in body.eqns[i].outvars:
          if _is_var(out):
            found |= table.get(out, frozenset())
    return frozenset(found)

  for eqn in reversed(body.eqns):
    for out in eqn.outvars:
      if _is_var(out):
        table[out] = of(out)
  return lambda var: table[var] if var in table else of(var)


def _sources(body: Any, unit_eqn: dict[int, tuple[str, int]]) -> list[frozenset[int]]:
  """Per equation of ``body``, the unit equations whose outputs it reads,
  directly or through unlabelled equations (a unit equation: itself)."""
  of_var: dict[Any, frozenset[int]] = {}
  out = []
  for i, eqn in enumerate(body.eqns):
    if i in unit_eqn or _is_named(eqn):
      found = frozenset({i}) if i in unit_eqn else frozenset()
    else:
      found = frozenset().union(*(of_var.get(v, frozenset()) for v in eqn.invars if _is_var(v)))
    out.append(found)
    for v in eqn.outvars:
      if _is_var(v):
        of_var[v] = found
  return out


def _subprogram(body: Any, picked: Sequence[int]) -> tuple[Any, list[Any]] | None:
  """The equations ``picked`` of ``body`` as a closed jaxpr (their free
  variables its inputs; the values they make that other equations or the
  body's results read, its outputs), and those outputs."""
  if not picked:
    return None
  inside = set(picked)
  made: set[Any] = set()
  invars: list[Any] = []
  for i in picked:
    for v in body.eqns[i].invars:
      if _is_var(v) and v not in made and v not in invars:
        invars.append(v)
    made.update(v for v in body.eqns[i].outvars if _is_var(v))
  read_elsewhere = {v for k, e in enumerate(body.eqns) if k not in inside
                    for v in e.invars if _is_var(v)}
  read_elsewhere |= {v for v in body.outvars if _is_var(v)}
  outvars = [v for i in picked for v in body.eqns[i].outvars
             if _is_var(v) and v in read_elsewhere]
  if not outvars:
    return None
  eqns = [body.eqns[i] for i in picked]
  effects = set().union(*(e.effects for e in eqns))
  info = jcore.DebugInfo("mpmd.plan", "the work outside the units", (None,) * len(invars),
                         (None,) * len(outvars))
  jaxpr = jcore.Jaxpr([], invars, outvars, eqns, effects, info)
  return jcore.ClosedJaxpr(jaxpr, []), outvars


def _outside(body: Any, unit_eqn: dict[int, tuple[str, int]], first: tuple[int, int | None],
             last: int, reach: Callable[[Any], frozenset[int]],
             weight_outputs: set[Any]) -> Outside:
  """The unlabelled work that goes with the first unit (its forward's
  feeders, its backward's consumers) and with the last unit's forward."""
  sources = _sources(body, unit_eqn)
  body_in = {v for v in body.invars if _is_var(v)}
  first_f, first_b = first
  before_f, before_b, after = [], [], []
  for i, eqn in enumerate(body.eqns):
    if i in unit_eqn or _is_named(eqn):
      continue
    src = sources[i]
    if src == {last}:
      after.append(i)
    elif first_b is not None and src == {first_b}:
      # The accumulation of the unit's own weight gradients was measured with it.
      if not (eqn.primitive.name in ("add", "add_any")
              and any(v in weight_outputs for v in eqn.invars if _is_var(v))
              and any(v in body_in for v in eqn.invars if _is_var(v))):
        before_b.append(i)
    elif not src:
      reached = frozenset().union(*(reach(v) for v in eqn.outvars if _is_var(v)))
      if first_f in reached and reached <= {first_f, first_b}:  # (also a residual of its B)
        before_f.append(i)

  def program(name: str, picked: list[int]) -> tuple[UnitProgram | None, int]:
    made = _subprogram(body, picked)
    if made is None:
      return None, 0
    closed, outvars = made
    body_out = {v for v in body.outvars if _is_var(v)}
    params = sum(aval_bytes(v.aval) for v in outvars if v in body_out and v.aval.shape)
    return UnitProgram(name, closed, None, (), (), 0, 0), params

  bf, _ = program("(before the units: forward)", before_f)
  bb, before_params = program("(before the units: backward)", before_b)
  af, after_params = program("(after the units)", after)
  return Outside(bf, bb, af, before_params, after_params)


def _order(names_in_body: Sequence[str], units: Sequence[str] | None,
           all_names: set[str]) -> list[str]:
  if units is None:
    return list(names_in_body)
  units = list(units)
  if len(set(units)) != len(units):
    raise PlanError(f"units lists a name twice: {units}")
  missing = [u for u in units if u not in all_names]
  if missing:
    raise PlanError(f"units {missing} are not named computations of the step; it has "
                    f"{sorted(all_names)}")
  extra = sorted(all_names - set(units))
  if extra:
    raise PlanError(f"the step has named computations {extra} that are not planning units: "
                    "list every named computation in units= (in pipeline order)")
  return units


def trace_units(fun: Callable[..., Any], args: Sequence[Any], units: Sequence[str] | None = None,
                *, static_argnums: Sequence[int] = (), outside: bool = False) -> TracedUnits:
  """Traces ``fun(*args)`` and returns its planning units.

  Args:
    fun: the training step.
    args: its arguments (arrays or `jax.ShapeDtypeStruct`s).
    units: the unit names in pipeline order; default: the order in which
      their forwards run.
    static_argnums: as for `jax.make_jaxpr`.
    outside: also find the work outside the units that goes with the first
      or last unit (`TracedUnits.outside`).

  Raises:
    PlanError: no named computation, a unit that is not in the step, or a
      named computation of the step that is not a unit.
  """
  # One piece (over 80 lines): one walk over the traced equations assigns
  # each to a unit (forward, backward, outside the layers); the walk's state
  # (what each value feeds) is shared by every rule in it.
  closed = jax.make_jaxpr(fun, static_argnums=tuple(static_argnums))(*args)
  body = _body(closed.jaxpr)
  forward: dict[str, int] = {}
  backward: dict[str, int] = {}
  for i, eqn in enumerate(body.eqns):
    if not _is_named(eqn):
      continue
    table = forward if eqn.params["transpose_count"] == 0 else backward
    table.setdefault(eqn.params["name"], i)
  names = _order(list(forward), units, set(forward) | set(backward))
  if not backward:
    raise PlanError("the step computes no gradient of its named computations: the planner "
                    "plans training steps (forward and backward of every unit)")
  unit_eqn = {i: (n, 0) for n, i in forward.items()} | {i: (n, 1) for n, i in backward.items()}
  position = {n: k for k, n in enumerate(names)}
  reach = _reach(body, unit_eqn)
  producer: dict[Any, int] = {}
  for i, eqn in enumerate(body.eqns):
    for v in eqn.outvars:
      if _is_var(v):
        producer[v] = i

  def kind_of(i: int) -> tuple[str, int]:
    return unit_eqn[i]

  programs = []
  for name in names:
    f_eqn = body.eqns[forward[name]] if name in forward else None
    if f_eqn is None:
      raise PlanError(f"unit {name!r} has no forward in the microbatch body")
    b_index = backward.get(name)
    if b_index is None:
      programs.append(UnitProgram(name, f_eqn.params["call_jaxpr"], None, (), (), 0, 0))
      continue
    b_eqn = body.eqns[b_index]
    act, weight = [], []
    for k, out in enumerate(b_eqn.outvars):
      into = reach(out) if _is_var(out) else set()
      if any(kind_of(i)[1] == 1 and kind_of(i)[0] != name for i in into):
        act.append(k)
      else:
        weight.append(k)
    stash = 0
    seen = set()
    for v in b_eqn.invars:
      if _is_var(v) and v not in seen and v in producer:
        p = producer[v]
        if p in unit_eqn and kind_of(p)[1] == 0:
          seen.add(v)
          stash += aval_bytes(v.aval)
    params = sum(aval_bytes(b_eqn.outvars[k].aval) for k in weight)
    programs.append(UnitProgram(name, f_eqn.params["call_jaxpr"], b_eqn.params["call_jaxpr"],
                                tuple(act), tuple(weight), stash, params))

  n = len(names)
  fwd_cut = [0] * max(n - 1, 0)
  bwd_cut = [0] * max(n - 1, 0)
  for name in names:
    for kind, table, cuts in ((0, forward, fwd_cut), (1, backward, bwd_cut)):
      if name not in table:
        continue
      src = position[name]
      for out in body.eqns[table[name]].outvars:
        if not _is_var(out):
          continue
        targets = [position[kind_of(i)[0]] for i in reach(out)
                   if kind_of(i)[1] == kind and kind_of(i)[0] in position]
        size = aval_bytes(out.aval)
        if kind == 0:
          far = max((t for t in targets if t > src), default=None)
          for c in range(src, far if far is not None else src):
            cuts[c] += size
        else:
          near = min((t for t in targets if t < src), default=None)
          for c in range(near if near is not None else src, src):
            cuts[c] += size
  found = None
  if outside:
    weight_outputs = {body.eqns[backward[u.name]].outvars[k] for u in programs
                      if u.name in backward for k in u.weight_grads}
    first, last = names[0], names[-1]
    found = _outside(body, unit_eqn, (forward[first], backward.get(first)), forward[last],
                     reach, weight_outputs)
  return TracedUnits(tuple(programs), tuple(fwd_cut), tuple(bwd_cut), found)
