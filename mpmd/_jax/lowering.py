"""Primitives and their lowering rules: how a traced step becomes StableHLO.

Written against jax/jaxlib 0.10.2 and 0.11.2; the only JAX internals used
while a step is traced and lowered (see :mod:`mpmd._jax`).

What lives here:

* **Call primitives** (:func:`make_call_primitive`, :func:`bind_call`): JAX
  call primitives whose equation carries a closed jaxpr (``call_jaxpr``) plus
  arbitrary hashable parameters.  On jax 0.10 they are "final style"
  subclasses of JAX's ``ClosedCallPrimitive``; jax 0.11 has none, and they
  are primitives bound on a traced jaxpr with the rules of
  ``jax._src.lax.eval_jaxpr`` (the same equations either way).  JAX's
  generic call machinery gives them JVP, linearize (``jax.grad``/
  ``jax.vjp``), partial evaluation, batching and staging for free, always
  re-binding the *same* primitive with the *same* parameters.  This module
  adds what the generic machinery does not provide for a primitive other
  than ``closed_call``: transposition (with a parameter update hook, e.g.
  ``transpose_count + 1``), the ``partial_eval_jaxpr_custom`` rule used by
  ``jax.checkpoint``, dead-code elimination, type checking and lowering.
* **Identity primitives** (:func:`make_identity_primitive`,
  :func:`define_linear_transpose`): single-operand primitives that are the
  identity on values (labels such as ``named_tensor``).
* **Marker primitives** (:func:`make_marker_primitive`): multi-operand
  identity primitives whose transpose re-binds them with updated params (the
  stage markers of :mod:`mpmd.jaxpp`).
* **Lowering** (:func:`register_default_lowering`,
  :func:`register_mpmd_lowering`, :func:`lower_for_mpmd`,
  :func:`lower_jaxpr_inline`, :func:`lower_jaxpr_in_block`,
  :func:`module_to_text`, :func:`parse_module`): every primitive has a default
  lowering used by plain ``jax.jit`` and, optionally, an MPMD lowering that is
  installed only through ``mlir.LoweringParameters(override_lowering_rules=...)``
  by :func:`lower_for_mpmd`.  Because the lowering parameters are part of
  JAX's lowering cache keys, plain ``jax.jit`` lowerings and MPMD lowerings of
  the same function never share cache entries.
* **User tracebacks** (:func:`exclude_from_user_tracebacks`): the frames of the
  ``mpmd`` package are library code, so op locations point at the model.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import jax
import jax.numpy  # noqa: F401  (used by the eager impls)
from jax._src import api_util
from jax._src import core
from jax._src import effects as effects_lib
from jax._src import linear_util as lu
from jax._src import source_info_util
from jax._src.interpreters import ad
from jax._src.interpreters import batching
from jax._src.interpreters import mlir
from jax._src.interpreters import partial_eval as pe
from jax._src.lib.mlir import ir
from jax._src.named_sharding import UnspecifiedValue
from jax._src.tree_util import tree_flatten, tree_unflatten
from jax.extend.core import ClosedJaxpr  # (a Jaxpr with its consts on jax >= 0.12)

__all__ = [
    "CallPrimitive",
    "LoweringRuleContext",
    "Primitive",
    "bind_call",
    "define_linear_transpose",
    "exclude_from_user_tracebacks",
    "ir_types_for_avals",
    "kept_var_indices",
    "key_impl_of_dtype",
    "define_unsupported_jvp",
    "lower_for_mpmd",
    "lowering_from_impl",
    "lower_jaxpr_as_function",
    "lower_jaxpr_in_block",
    "lower_jaxpr_inline",
    "make_call_primitive",
    "make_identity_primitive",
    "make_ir_context",
    "make_marker_primitive",
    "module_to_text",
    "mpmd_lowering_parameters",
    "parse_module",
    "register_default_lowering",
    "register_mpmd_lowering",
]

Primitive = core.Primitive
LoweringRuleContext = mlir.LoweringRuleContext
#: A lowering rule: ``rule(ctx, *ir_values, **params) -> Sequence[ir.Value]``.
LoweringRule = Callable[..., Sequence[Any]]
#: Maps the params of a primitive to the params of its transpose.
ParamsUpdate = Callable[[dict[str, Any]], dict[str, Any]]


def under_transformation() -> bool:
  """Whether JAX is tracing now (inside jax.jit, grad, vmap, ...), even if
  no traced value is at hand (e.g. jax.jit of a function of no arguments)."""
  return not core.trace_state_clean()


def exclude_from_user_tracebacks(path: str) -> None:
  """Treats frames from files under ``path`` as library code, not user code.

  JAX attaches the innermost *user* frame to every equation and emits it as
  the op's MLIR location; excluded frames are skipped, so locations point at
  the model code rather than at this package.
  """
  source_info_util.register_exclusion(os.path.abspath(path) + os.sep)


# The mpmd package itself (the parent of this `_jax` package) is library code.
exclude_from_user_tracebacks(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# ---------------------------------------------------------------------------
# Call primitives
# ---------------------------------------------------------------------------


#: jax <= 0.10 has "final style" call primitives (``core.ClosedCallPrimitive``,
#: bound on a Python function); jax 0.11 removed them: a call primitive is
#: bound on a traced jaxpr and gets its rules from ``jax._src.lax.eval_jaxpr``.
_FINAL_STYLE_CALLS = hasattr(core, "ClosedCallPrimitive")

if _FINAL_STYLE_CALLS:
  class CallPrimitive(core.ClosedCallPrimitive):
    """A call primitive whose equations carry ``call_jaxpr`` (a ClosedJaxpr).

    Binding happens with ``subfuns=(wrapped_fun,)`` (see :func:`bind_call`);
    once staged into a jaxpr the equation has params
    ``{"call_jaxpr": ClosedJaxpr, **user_params}``.
    """
else:
  from jax._src.lax import eval_jaxpr as _eval_jaxpr  # noqa: PLC0415 (jax >= 0.11)

  class CallPrimitive(core.Primitive):  # type: ignore[no-redef]
    """A call primitive whose equations carry ``call_jaxpr`` (a closed jaxpr).

    Bound with ``call_jaxpr=`` (see :func:`bind_call`); the equation has
    params ``{"call_jaxpr": ClosedJaxpr, **user_params}``.
    """
    multiple_results = True


def _call_abstract_eval(*_, call_jaxpr: ClosedJaxpr, **__):
  return call_jaxpr.out_avals, core.positional_effects(call_jaxpr)


def _call_typecheck(_, *in_atoms, call_jaxpr: ClosedJaxpr, **__):
  in_avals = [x.aval for x in in_atoms]
  if not all(map(core.typecompat, call_jaxpr.in_avals, in_avals)):
    raise core.JaxprTypeError("call primitive in_avals mismatch")
  return call_jaxpr.out_avals, core.positional_effects(call_jaxpr)


def _as_arrays(outs: Sequence[Any]) -> list[Any]:
  # Outputs that are not arrays (e.g. a Python scalar argument returned as
  # is) become arrays, as they would under jit.
  return [x if isinstance(x, jax.Array) else jax.numpy.asarray(x) for x in outs]


def _call_impl(f: lu.WrappedFun, *args, **params):
  # Eager evaluation simply runs the body (op by op).
  del params
  return _as_arrays(f.call_wrapped(*args))


def _call_jaxpr_impl(*args, call_jaxpr: ClosedJaxpr, **_):
  # The same for a primitive bound on its jaxpr (jax >= 0.11).
  return _as_arrays(core.jaxpr_as_fun(call_jaxpr)(*args))


def _call_transpose(prim: CallPrimitive, cts, *args,
                    call_jaxpr: ClosedJaxpr, **params):
  # The closed jaxpr's consts become leading (non-linear) arguments so that
  # JAX's generic call transpose can trace the backward pass into a new call
  # of `prim`; the parameter update hook (registered in
  # `ad.call_transpose_param_updaters`) adjusts the params of that new call.
  jaxpr = pe.convert_constvars_jaxpr(call_jaxpr.jaxpr)
  ad.call_transpose_fancy(prim, cts, *call_jaxpr.consts, *args,
                          call_jaxpr=jaxpr, **params)


def _keep_params_pe_custom(_unks_in, _inst_in, _kept_outs_known,
                           _kept_outs_staged, _num_res_out, _num_res_in,
                           params_known, params_staged):
  # Known and staged halves of a partially evaluated call keep all params.
  return params_known, params_staged


def make_call_primitive(
    name: str, *, transpose_params: ParamsUpdate | None = None
) -> CallPrimitive:
  """Creates a call primitive with every rule JAX transformations need.

  Args:
    name: The primitive's name (shown in jaxprs).
    transpose_params: Maps the params (without ``call_jaxpr``) of a call to
      the params of its transpose.  ``None`` keeps them unchanged.

  Returns:
    The primitive.  Eager evaluation runs the body; JVP, linearize,
    partial evaluation and batching re-bind the same primitive with the same
    params; transposition binds it with ``transpose_params(params)``;
    ``jax.checkpoint`` (``partial_eval_jaxpr_custom``) splits it into a known
    and a staged call with the same params; DCE prunes unused outputs and
    inputs.  The default lowering inlines the body (see
    :func:`register_default_lowering` to override it).
  """
  prim = CallPrimitive(name)
  update = transpose_params or (lambda p: p)
  if _FINAL_STYLE_CALLS:
    prim.def_impl(_call_impl)
    prim.def_effectful_abstract_eval(_call_abstract_eval)
    ad.fancy_transposes[prim] = partial(_call_transpose, prim)
    ad.call_transpose_param_updaters[prim] = (
        lambda params, _undef_primals, _nz_cts: update(dict(params)))
  else:
    # JAX's rules for call primitives bound on a jaxpr: JVP, linearize,
    # batching, partial evaluation, DCE; the transpose binds `prim` again
    # with the updated params.
    def transpose(ct, *args, call_jaxpr, **params):
      return _eval_jaxpr.eval_jaxpr_transpose(prim, ct, *args, call_jaxpr=call_jaxpr,
                                              **update(dict(params)))
    _eval_jaxpr.register_call_primitive_rules(prim, name=None, transpose_rule=transpose)
    prim.def_impl(_call_jaxpr_impl)
  core.custom_typechecks[prim] = _call_typecheck
  pe.partial_eval_jaxpr_custom_rules[prim] = partial(
      pe.closed_call_partial_eval_custom_rule, "call_jaxpr",
      _keep_params_pe_custom)
  pe.dce_rules[prim] = pe.dce_jaxpr_closed_call_rule
  register_default_lowering(prim, _inline_call_lowering)
  return prim


def bind_call(prim: CallPrimitive, fun: Callable[..., Any], args: Sequence[Any],
              *, debug_name: str, **params: Any) -> Any:
  """Calls ``fun(*args)`` through the call primitive ``prim``.

  Args:
    prim: A primitive made by :func:`make_call_primitive`.
    fun: A Python callable taking ``*args`` (pytrees of arrays) and returning a
      pytree of arrays.
    args: The positional arguments.
    debug_name: Name used in JAX debug info (error messages).
    **params: The primitive's params (everything but ``call_jaxpr``).

  Returns:
    The pytree returned by ``fun``.
  """
  args_flat, in_tree = tree_flatten(tuple(args))
  dbg = api_util.debug_info(debug_name, fun, tuple(args), {})
  wrapped = lu.wrap_init(fun, debug_info=dbg)
  flat_fun, out_tree = api_util.flatten_fun_nokwargs(wrapped, in_tree)
  if _FINAL_STYLE_CALLS:
    outs = prim.bind(*args_flat, subfuns=(flat_fun,), **params)
  else:
    # Trace the body first; the values it closes over become leading
    # operands (as the final-style bind of jax <= 0.10 staged them).
    jaxpr, _, consts = pe.trace_to_jaxpr_dynamic(
        flat_fun, [jax.typeof(x) for x in args_flat])
    outs = prim.bind(*consts, *args_flat, call_jaxpr=pe.convert_constvars_jaxpr(jaxpr),
                     **params)
  return tree_unflatten(out_tree(), outs)


# ---------------------------------------------------------------------------
# Identity primitives
# ---------------------------------------------------------------------------


def make_identity_primitive(name: str) -> Primitive:
  """Creates a one-operand primitive that is the identity on values.

  It has an identity impl and abstract eval, a vectorized batching rule and an
  identity default lowering.  Differentiation rules are added with
  :func:`define_linear_transpose`.
  """
  prim = core.Primitive(name)
  prim.def_impl(
      lambda x, **_: x if isinstance(x, jax.Array) else jax.numpy.asarray(x))
  prim.def_abstract_eval(lambda aval, **_: aval)
  batching.defvectorized(prim)
  register_default_lowering(prim, lambda ctx, x, **_: [x])
  return prim


def define_linear_transpose(prim: Primitive,
                            transpose: Callable[..., Any]) -> None:
  """Declares ``prim`` linear, with ``transpose(ct, **params) -> ct_in``.

  The JVP applies ``prim`` to the tangent; symbolic-zero cotangents stay zero.
  """
  ad.deflinear(prim, lambda ct, **params: [transpose(ct, **params)])


# ---------------------------------------------------------------------------
# Lowering
# ---------------------------------------------------------------------------

_MPMD_LOWERINGS: dict[core.Primitive, LoweringRule] = {}
_MPMD_PARAMS_CACHE: list[Any] = [None, None]  # [key, LoweringParameters]


def register_default_lowering(prim: Primitive, rule: LoweringRule) -> None:
  """Registers ``rule`` as the lowering of ``prim`` under plain ``jax.jit``.

  The rule is not cached by JAX's per-module lowering cache, so that emitted
  ops keep the equation's own source location.
  """
  mlir.register_lowering(prim, rule, cacheable=False)


def lowering_from_impl(impl: Callable[..., Sequence[Any]]) -> LoweringRule:
  """A lowering rule that traces the Python function ``impl`` (as JAX lowers
  primitives defined by their implementation)."""
  return mlir.lower_fun(impl, multiple_results=True)


def define_unsupported_jvp(prim: Primitive, message: str) -> None:
  """Differentiating ``prim`` raises ``NotImplementedError(message)``."""
  def rule(*_, **__):
    raise NotImplementedError(message)
  ad.primitive_jvps[prim] = rule


def register_mpmd_lowering(prim: Primitive, rule: LoweringRule) -> None:
  """Registers ``rule`` as the lowering of ``prim`` under :func:`lower_for_mpmd`."""
  _MPMD_LOWERINGS[prim] = rule


def mpmd_lowering_parameters() -> Any:
  """The ``mlir.LoweringParameters`` that activate the MPMD lowerings.

  The object is reused while the set of registered MPMD rules is unchanged so
  that JAX's lowering caches (keyed on it) hit across calls.  Constants are
  never hoisted into module arguments, so the lowered module's arguments are
  exactly the (kept) flat user arguments.
  """
  key = tuple(_MPMD_LOWERINGS.items())
  if _MPMD_PARAMS_CACHE[0] != key:
    _MPMD_PARAMS_CACHE[0] = key
    _MPMD_PARAMS_CACHE[1] = mlir.LoweringParameters(
        override_lowering_rules=key, hoist_constants_as_args=False)
  return _MPMD_PARAMS_CACHE[1]


def lower_for_mpmd(traced: jax.stages.Traced) -> jax.stages.Lowered:
  """Lowers a ``jax.jit(...).trace(...)`` result with the MPMD lowerings.

  Plain ``traced.lower()`` (and ``jax.jit``) is unaffected: the MPMD rules are
  passed as lowering parameters, never registered globally.
  """
  return traced.lower(_private_parameters=mpmd_lowering_parameters())


def kept_var_indices(lowered: jax.stages.Lowered) -> tuple[int, ...]:
  """Indices of the flat arguments that survived JAX's unused-arg pruning.

  Only valid for lowerings made by :func:`lower_for_mpmd` (no hoisted
  constants) or any lowering without hoisted constants.
  """
  kept = lowered._lowering.compile_args["kept_var_idx"]  # pylint: disable=protected-access
  return tuple(sorted(kept))


def ir_types_for_avals(ctx: mlir.LoweringRuleContext,
                       avals: Sequence[Any]) -> list[Any]:
  """Flat MLIR types for a sequence of avals, in a lowering rule's context."""
  return [t for a in avals
          for t in mlir.aval_to_ir_types(ctx.module_context, a)]


def _inline_call_lowering(ctx: mlir.LoweringRuleContext, *args,
                          call_jaxpr: ClosedJaxpr, **params):
  name = params.get("name")
  return lower_jaxpr_inline(ctx, call_jaxpr, args,
                            name_stack_suffix=name if isinstance(name, str)
                            else None)


def lower_jaxpr_inline(ctx: mlir.LoweringRuleContext,
                       call_jaxpr: ClosedJaxpr, args: Sequence[Any], *,
                       name_stack_suffix: str | None = None) -> Sequence[Any]:
  """Lowers ``call_jaxpr`` inline at the current insertion point.

  Used by default (plain ``jax.jit``) lowerings of call primitives: the call
  has the semantics of its body.  Tokens for ordered effects are threaded.
  """
  consts = [mlir.ir_constant(c, const_lowering=ctx.const_lowering)
            for c in call_jaxpr.consts]
  name_stack = ctx.name_stack
  if name_stack_suffix:
    name_stack = name_stack.extend(name_stack_suffix)
  outs, tokens = mlir.jaxpr_subcomp(
      ctx.module_context, call_jaxpr.jaxpr, name_stack, ctx.tokens_in,
      consts, *args, dim_var_values=ctx.dim_var_values,
      const_lowering=ctx.const_lowering, outer_traceback=ctx.traceback)
  ctx.set_tokens_out(tokens)
  return outs


def lower_jaxpr_in_block(ctx: mlir.LoweringRuleContext,
                         call_jaxpr: ClosedJaxpr,
                         block_args: Sequence[Any], *,
                         name_stack_suffix: str | None = None) -> list[Any]:
  """Lowers ``call_jaxpr`` into an isolated-from-above region block.

  The caller has created the block (with arguments ``block_args`` matching
  ``call_jaxpr.in_avals``) and set the insertion point inside it.  No value
  from outside the block is referenced: the jaxpr's constants and literals are
  materialised as constants inside the block.

  Raises:
    NotImplementedError: for bodies with ordered effects or under shape
      polymorphism (both would need values threaded from outside).
  """
  if ctx.dim_var_values:
    raise NotImplementedError(
        "mpmd ops with regions do not support shape polymorphism")
  if effects_lib.ordered_effects.filter_in(call_jaxpr.effects):
    raise NotImplementedError(
        "mpmd ops with regions do not support ordered effects (e.g. "
        f"jax.debug.print(ordered=True)); got {call_jaxpr.effects}")
  consts = [mlir.ir_constant(c) for c in call_jaxpr.consts]
  name_stack = ctx.name_stack
  if name_stack_suffix:
    name_stack = name_stack.extend(name_stack_suffix)
  outs, _ = mlir.jaxpr_subcomp(
      ctx.module_context, call_jaxpr.jaxpr, name_stack, mlir.TokenSet(),
      consts, *block_args, dim_var_values=[], const_lowering={},
      outer_traceback=ctx.traceback)
  flat, _ = mlir.ir_tree_registry.flatten(list(outs))
  return flat


def _forwarded_jit_body(call_jaxpr: ClosedJaxpr) -> ClosedJaxpr:
  """The body of ``call_jaxpr`` when it only forwards its arguments to one
  ``jax.jit`` call and returns that call's results (no shardings, layouts,
  donation or compiler options on it); else ``call_jaxpr`` itself.

  A body traced again per call site (e.g. ``mpmd.call(jitted_fn)`` once per
  microbatch) is a new jaxpr each time, but the jitted function inside it is
  one: lowering that function instead gives every call site the same callee
  (JAX lowers one jaxpr once per module) rather than one wrapper function per
  call site around it.
  """
  jaxpr = call_jaxpr.jaxpr
  if call_jaxpr.consts or jaxpr.constvars or len(jaxpr.eqns) != 1:
    return call_jaxpr
  eqn = jaxpr.eqns[0]
  params = eqn.params
  inner = params.get("jaxpr")
  if (eqn.primitive.name not in ("jit", "pjit") or not isinstance(inner, ClosedJaxpr)
      or list(eqn.invars) != list(jaxpr.invars) or list(eqn.outvars) != list(jaxpr.outvars)
      or len(set(map(id, jaxpr.invars))) != len(jaxpr.invars)
      or any(params.get("donated_invars", ()))
      or params.get("compiler_options_kvs")
      or not all(isinstance(s, UnspecifiedValue) for s in (*params.get("in_shardings", ()),
                                                  *params.get("out_shardings", ())))
      or any(l is not None for l in (*params.get("in_layouts", ()),
                                     *params.get("out_layouts", ())))
      or inner.effects != call_jaxpr.effects):
    return call_jaxpr
  return inner


def lower_jaxpr_as_function(ctx: mlir.LoweringRuleContext, fn_name: str,
                            call_jaxpr: ClosedJaxpr) -> str:
  """Emits ``call_jaxpr`` as a private ``func.func`` and returns its symbol.

  For lowerings of call-like ops that reference a callee (e.g. ``mpmd.call
  @callee``).  The function takes exactly ``call_jaxpr.in_avals`` and returns
  ``call_jaxpr.out_avals``; identical jaxprs share one function per module.
  The symbol may differ from ``fn_name`` (JAX uniquifies names).

  Raises:
    NotImplementedError: for bodies with ordered effects, hoisted constants
      (``jax_use_simplified_jaxpr_constants``) or shape polymorphism.
  """
  if ctx.dim_var_values:
    raise NotImplementedError("shape polymorphism is not supported here")
  if effects_lib.ordered_effects.filter_in(call_jaxpr.effects):
    raise NotImplementedError(
        f"ordered effects are not supported here; got {call_jaxpr.effects}")
  if core.jaxpr_const_args(call_jaxpr.jaxpr):
    raise NotImplementedError("hoisted constants are not supported here")
  call_jaxpr = _forwarded_jit_body(call_jaxpr)
  func_op, _, _ = mlir.lower_called_computation(
      fn_name, call_jaxpr, ctx.module_context, 0, call_jaxpr.in_avals,
      call_jaxpr.out_avals, mlir.TokenSet())
  return func_op.name.value


def module_to_text(lowered: jax.stages.Lowered) -> str:
  """The StableHLO module of ``lowered`` as text.

  Generic op form, debug locations on, no elided constants: the form that
  crosses the Python/C++ boundary and that re-parses in any MLIR context that
  allows unregistered dialects (and in JAX's own context).
  """
  module = lowered.compiler_ir("stablehlo")
  return module.operation.get_asm(
      print_generic_op_form=True, enable_debug_info=True,
      large_elements_limit=None)


def make_ir_context() -> Any:
  """A fresh MLIR context with JAX's dialects (including ``mpmd``) loaded."""
  return mlir.make_ir_context()


def parse_module(text: str, context: Any | None = None) -> Any:
  """Parses ``text`` into an ``ir.Module`` in ``context`` (default: a new JAX context)."""
  ctx = context if context is not None else make_ir_context()
  with ctx:
    return ir.Module.parse(text)


# ---------------------------------------------------------------------------
# Marker primitives (the stage markers of mpmd.jaxpp)
# ---------------------------------------------------------------------------


def make_marker_primitive(name: str, transpose_params: ParamsUpdate) -> Primitive:
  """A primitive over any number of operands that is the identity on values.

  Linear: its JVP applies it to the tangents; its transpose binds it on the
  cotangents with ``transpose_params(params)`` (symbolic-zero cotangents are
  instantiated unless all are zero). Batching passes dimensions through; the
  default lowering is the identity.
  """
  prim = core.Primitive(name)
  prim.multiple_results = True
  prim.def_impl(lambda *xs, **_: [x if isinstance(x, jax.Array) else jax.numpy.asarray(x)
                                  for x in xs])
  prim.def_abstract_eval(lambda *avals, **_: list(avals))
  batching.primitive_batchers[prim] = lambda args, dims, **p: (prim.bind(*args, **p), dims)
  ad.primitive_jvps[prim] = partial(ad.linear_jvp, prim)

  def transpose(cts, *args, **params):
    if all(type(ct) is ad.Zero for ct in cts):
      return [ad.Zero(x.aval.to_tangent_aval()) if ad.is_undefined_primal(x) else None
              for x in args]
    cts = [ad.instantiate_zeros(ct) for ct in cts]
    return prim.bind(*cts, **transpose_params(dict(params)))

  ad.primitive_transposes[prim] = transpose
  register_default_lowering(prim, lambda ctx, *xs, **_: list(xs))
  return prim


def key_impl_of_dtype(dtype: Any) -> Any:
  """The PRNG implementation of a typed key dtype (``key<fry>``), as
  ``jax.random.wrap_key_data(..., impl=)`` takes it. JAX's public API reads
  it from a key array only (``jax.random.key_impl``); a traced output has
  just its dtype."""
  return dtype._impl  # pylint: disable=protected-access
