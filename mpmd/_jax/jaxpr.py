"""Jaxpr surgery for the JaxPP front end (:mod:`mpmd.jaxpp`).

Written against jax/jaxlib 0.10.2 (also runs on 0.11.2 and 0.12.0.1). Tracing a function
to a jaxpr whose closed-over values become leading inputs (the body of
``treduce``), a jaxpr made of some equations of another (one stage of a
step), finding a primitive in nested jaxprs, and inlining nested ``jit`` /
``closed_call`` equations.

Uses ``jax._src.core`` (Jaxpr construction, ``jaxprs_in_params``,
``join_effects``), ``partial_eval.trace_to_jaxpr_dynamic`` /
``convert_constvars_jaxpr``, ``source_info_util`` (re-binding equations with
their source locations) and ``jax._src.pjit.jit_p``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from jax._src import api_util
from jax._src import core
from jax._src import linear_util as lu
from jax._src import source_info_util
from jax._src.interpreters import partial_eval as pe
from jax._src.pjit import jit_p as _jit_p
from jax.extend.core import ClosedJaxpr  # (a Jaxpr with its consts on jax >= 0.12)

__all__ = [
    "contains_primitive",
    "inline_calls",
    "jaxpr_of_equations",
    "nested_call_jaxpr",
    "trace_to_jaxpr",
]


def trace_to_jaxpr(fun: Callable[..., Sequence[Any]], in_avals: Sequence[Any], *,
                   debug_name: str) -> tuple[ClosedJaxpr, list[Any]]:
  """Traces ``fun(*flat_args) -> flat outputs`` at ``in_avals``.

  Returns ``(closed, consts)``: ``closed`` has no consts; its inputs are the
  values ``fun`` closed over (``consts``: arrays, or tracers of an enclosing
  trace) followed by the arguments. Bind a primitive on
  ``(*consts, *args)`` to stage it, as JAX's control flow does.
  """
  dbg = api_util.debug_info(debug_name, fun, tuple(in_avals), {})
  jaxpr, _, consts = pe.trace_to_jaxpr_dynamic(lu.wrap_init(fun, debug_info=dbg),
                                               list(in_avals))
  return ClosedJaxpr(pe.convert_constvars_jaxpr(jaxpr), ()), list(consts)


def jaxpr_of_equations(eqns: Sequence[core.JaxprEqn], invars: Sequence[core.Var],
                       outvars: Sequence[Any]) -> ClosedJaxpr:
  """The closed jaxpr ``invars -> outvars`` made of ``eqns`` (in order)."""
  effects = core.join_effects(*(e.effects for e in eqns)) if eqns else core.no_effects
  dbg = core.DebugInfo("mpmd.jaxpp", "stage", tuple(f"x{i}" for i in range(len(invars))),
                       tuple(f"[{i}]" for i in range(len(outvars))))
  return ClosedJaxpr(
      core.Jaxpr((), list(invars), list(outvars), list(eqns), effects, dbg), ())


def contains_primitive(jaxpr: core.Jaxpr, prim: core.Primitive) -> bool:
  """Whether ``prim`` occurs in ``jaxpr`` or any jaxpr nested in its params."""
  return any(e.primitive is prim or any(contains_primitive(j, prim)
                                        for j in core.jaxprs_in_params(e.params))
             for e in jaxpr.eqns)


def nested_call_jaxpr(eqn: core.JaxprEqn) -> ClosedJaxpr | None:
  """The body of a nested ``jit`` / ``closed_call`` equation (else None):
  the calls :func:`inline_calls` can inline without changing semantics."""
  if eqn.primitive is _jit_p:
    return eqn.params["jaxpr"]
  if eqn.primitive is core.closed_call_p:
    return eqn.params["call_jaxpr"]
  return None


def inline_calls(closed: ClosedJaxpr,
                 should_inline: Callable[[core.JaxprEqn], bool]) -> ClosedJaxpr:
  """Re-traces ``closed`` with the nested ``jit``/``closed_call`` equations
  for which ``should_inline`` holds evaluated inline (recursively); every
  other equation is re-bound as is, with its source location. The result
  has no consts (they become literals or constants of the trace)."""

  def run(jaxpr: core.Jaxpr, consts: Sequence[Any], args: Sequence[Any]) -> list[Any]:
    env: dict[Any, Any] = dict(zip((*jaxpr.constvars, *jaxpr.invars), (*consts, *args)))

    def read(v):
      return v.val if isinstance(v, core.Literal) else env[v]

    for eqn in jaxpr.eqns:
      invals = [read(v) for v in eqn.invars]
      inner = nested_call_jaxpr(eqn)
      if inner is not None and should_inline(eqn):
        outs = run(inner.jaxpr, inner.consts, invals)
      else:
        params = eqn.primitive.get_bind_params(eqn.params)
        name_stack = source_info_util.current_name_stack() + eqn.source_info.name_stack
        with source_info_util.user_context(eqn.source_info.traceback,
                                           name_stack=name_stack), eqn.ctx.manager:
          outs = eqn.primitive.bind(*invals, **params)
        if not eqn.primitive.multiple_results:
          outs = [outs]
      for v, x in zip(eqn.outvars, outs):
        if not isinstance(v, core.DropVar):
          env[v] = x
    return [read(v) for v in jaxpr.outvars]

  traced, consts = trace_to_jaxpr(lambda *a: run(closed.jaxpr, closed.consts, a),
                                  closed.in_avals, debug_name="inline_calls")
  if consts:  # Array constants: bake them back in as the closed jaxpr's consts.
    jaxpr = traced.jaxpr
    n = len(consts)
    return ClosedJaxpr(core.Jaxpr(jaxpr.invars[:n], jaxpr.invars[n:], jaxpr.outvars,
                                       jaxpr.eqns, jaxpr.effects, jaxpr.debug_info), consts)
  return traced
