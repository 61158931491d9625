"""The one place where `mpmd` touches JAX internals (``jax._src``).

Every other module of the package uses public JAX APIs plus the helpers
exported here.  Keeping the internal surface in one file means a JAX upgrade
breaks (at most) this file.  Written against jax/jaxlib 0.10.2.

What lives here:

* **Call primitives** (:func:`make_call_primitive`, :func:`bind_call`): JAX
  "final style" call primitives whose equation carries a closed jaxpr
  (``call_jaxpr``) plus arbitrary hashable parameters.  They are subclasses of
  JAX's ``ClosedCallPrimitive``, so JAX's generic call machinery gives them
  JVP, linearize (``jax.grad``/``jax.vjp``), partial evaluation, batching and
  staging for free, always re-binding the *same* primitive with the *same*
  parameters.  This module adds what the generic machinery does not provide
  for a primitive other than ``closed_call``: transposition (with a parameter
  update hook, e.g. ``transpose_count + 1``), the ``partial_eval_jaxpr_custom``
  rule used by ``jax.checkpoint``, dead-code elimination, type checking and
  lowering.
* **Identity primitives** (:func:`make_identity_primitive`,
  :func:`define_linear_transpose`): single-operand primitives that are the
  identity on values (labels such as ``named_tensor``).
* **Lowering** (:func:`register_default_lowering`,
  :func:`register_mpmd_lowering`, :func:`lower_for_mpmd`,
  :func:`lower_jaxpr_inline`, :func:`lower_jaxpr_in_block`,
  :func:`module_to_text`, :func:`parse_module`): every primitive has a default
  lowering used by plain ``jax.jit`` and, optionally, an MPMD lowering that is
  installed only through ``mlir.LoweringParameters(override_lowering_rules=...)``
  by :func:`lower_for_mpmd`.  Because the lowering parameters are part of
  JAX's lowering cache keys, plain ``jax.jit`` lowerings and MPMD lowerings of
  the same function never share cache entries.

Runtime (fragment compile and dispatch, used by :mod:`mpmd._pjrt`):


* ``jax._src.interpreters.mlir.make_ir_context`` -- an MLIR context with the
  dialects JAX's compiler path understands (func, stablehlo, chlo, sdy, mpmd).
* ``jax._src.interpreters.mlir.dtype_to_ir_type`` -- dtype <-> MLIR element type.
* (public) ``jax.extend.mlir.ir`` / ``passmanager`` -- jaxlib's MLIR bindings;
  the ``sdy-lift-inlined-meshes`` pass, as jax's own lowering runs it.
* ``jax._src.config.use_shardy_partitioner`` -- which sharding annotation kind
  (``sdy.sharding`` or ``mhlo.sharding``) the compiler expects.
* ``Sharding._to_sdy_sharding`` / ``Sharding._to_xla_hlo_sharding`` -- the
  annotation for an input sharding, exactly as ``jax.jit`` writes it.
* ``jax._src.interpreters.pxla.UnloadedMeshExecutable.from_hlo`` -- compile an
  ``ir.Module`` on a device list through ``compiler.compile_or_get_cached``
  (persistent compilation cache included), read input/output shardings and
  layouts back from the executable, and build a ``pxla.MeshExecutable``.
* ``jax._src.interpreters.pxla.MeshExecutable.create_cpp_call`` and
  ``jax._src.stages.CompiledCallParams`` / ``stages.Compiled.call`` -- the C++
  dispatch fast path that ``jax.jit(...).lower(...).compile()`` objects use.
* ``MeshExecutable._in_shardings`` / ``._out_shardings`` (the latter as read
  back from XLA by ``from_hlo``), ``.as_text()``, ``.memory_analysis()``.
* ``Sharding._device_assignment`` -- the device order a sharding refers to.
* ``jax._src.named_sharding.UNSPECIFIED`` -- "let XLA choose" for outputs.
* ``jax._src.lib.xla_client.DeviceList`` -- the device list type ``from_hlo``
  takes.
* ``jax._src.tree_util.tree_structure`` -- pytree definitions for the call
  parameters (with the registry ``stages.Compiled.call`` compares against).
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
from jax._src.tree_util import tree_flatten, tree_unflatten
import numpy as np
import jax.extend.backend
from jax.extend.mlir import passmanager as _passmanager
from jax._src import config as _config
from jax._src import stages as _stages
from jax._src import tree_util as _tree_util
from jax._src.interpreters import pxla as _pxla
from jax._src.lib import xla_client as _xc
from jax._src.named_sharding import UNSPECIFIED as _UNSPECIFIED

__all__ = [
    "CallPrimitive",
    "LoweringRuleContext",
    "Primitive",
    "bind_call",
    "define_linear_transpose",
    "exclude_from_user_tracebacks",
    "ir_types_for_avals",
    "kept_var_indices",
    "define_unsupported_jvp",
    "lower_for_mpmd",
    "lowering_from_impl",
    "lower_jaxpr_as_function",
    "lower_jaxpr_in_block",
    "lower_jaxpr_inline",
    "make_call_primitive",
    "make_identity_primitive",
    "make_ir_context",
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


def exclude_from_user_tracebacks(path: str) -> None:
  """Treats frames from files under ``path`` as library code, not user code.

  JAX attaches the innermost *user* frame to every equation and emits it as
  the op's MLIR location; excluded frames are skipped, so locations point at
  the model code rather than at this package.
  """
  source_info_util.register_exclusion(os.path.abspath(path) + os.sep)


# The mpmd package itself is library code.
exclude_from_user_tracebacks(os.path.dirname(__file__))


# ---------------------------------------------------------------------------
# Call primitives
# ---------------------------------------------------------------------------


class CallPrimitive(core.ClosedCallPrimitive):
  """A call primitive whose equations carry ``call_jaxpr`` (a ClosedJaxpr).

  Binding happens with ``subfuns=(wrapped_fun,)`` (see :func:`bind_call`);
  once staged into a jaxpr the equation has params
  ``{"call_jaxpr": ClosedJaxpr, **user_params}``.
  """


def _call_abstract_eval(*_, call_jaxpr: core.ClosedJaxpr, **__):
  return call_jaxpr.out_avals, core.positional_effects(call_jaxpr)


def _call_typecheck(_, *in_atoms, call_jaxpr: core.ClosedJaxpr, **__):
  in_avals = [x.aval for x in in_atoms]
  if not all(map(core.typecompat, call_jaxpr.in_avals, in_avals)):
    raise core.JaxprTypeError("call primitive in_avals mismatch")
  return call_jaxpr.out_avals, core.positional_effects(call_jaxpr)


def _call_impl(f: lu.WrappedFun, *args, **params):
  # Eager evaluation simply runs the body (op by op).  Outputs that are not
  # arrays (e.g. a Python scalar argument returned as is) become arrays, as
  # they would under jit.
  del params
  return [x if isinstance(x, jax.Array) else jax.numpy.asarray(x)
          for x in f.call_wrapped(*args)]


def _call_transpose(prim: CallPrimitive, cts, *args,
                    call_jaxpr: core.ClosedJaxpr, **params):
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
  prim.def_impl(_call_impl)
  prim.def_effectful_abstract_eval(_call_abstract_eval)
  core.custom_typechecks[prim] = _call_typecheck
  ad.fancy_transposes[prim] = partial(_call_transpose, prim)
  update = transpose_params or (lambda p: p)
  ad.call_transpose_param_updaters[prim] = (
      lambda params, _undef_primals, _nz_cts: update(dict(params)))
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
  outs = prim.bind(*args_flat, subfuns=(flat_fun,), **params)
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
                          call_jaxpr: core.ClosedJaxpr, **params):
  name = params.get("name")
  return lower_jaxpr_inline(ctx, call_jaxpr, args,
                            name_stack_suffix=name if isinstance(name, str)
                            else None)


def lower_jaxpr_inline(ctx: mlir.LoweringRuleContext,
                       call_jaxpr: core.ClosedJaxpr, args: Sequence[Any], *,
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
                         call_jaxpr: core.ClosedJaxpr,
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


def lower_jaxpr_as_function(ctx: mlir.LoweringRuleContext, fn_name: str,
                            call_jaxpr: core.ClosedJaxpr) -> str:
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
# Runtime: parse, annotate, compile and dispatch fragment programs.
# ---------------------------------------------------------------------------

# Argument attributes that carry a sharding or a donation mark; annotate_module
# owns them (the caller's in_shardings / donated_args are the source of truth).
_SHARDING_ATTRS = ("sdy.sharding", "mhlo.sharding")
_DONATION_ATTRS = ("jax.buffer_donor", "tf.aliasing_output")


def parse_fragment_module(text: str) -> Any:
  """Parses MLIR module text (pretty or generic form, with or without
  ``loc(...)`` debug info) into an ``ir.Module`` in a JAX MLIR context.

  Unregistered dialects are allowed so that foreign attributes survive parsing;
  unregistered (and ``mpmd.*``) operations are rejected. Raises ``ValueError``
  with MLIR's diagnostics (message and location) on failure.
  """
  ctx = mlir.make_ir_context()
  ctx.allow_unregistered_dialects = True
  with ctx:
    try:
      module = ir.Module.parse(text)
    except ir.MLIRError as e:
      raise ValueError(str(e)) from e
    # XLA cannot compile unregistered ops (and jaxlib 0.10.2 crashes on them),
    # so they are rejected here with their locations.
    unknown = []

    def visit(op):
      if (not ctx.is_registered_operation(op.name) or
          op.name.startswith("mpmd.")):
        unknown.append(f"  '{op.name}' at {op.location}")
      return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    if unknown:
      raise ValueError("module contains operations XLA cannot compile "
                       "(unregistered dialect, or mpmd):\n" +
                       "\n".join(unknown[:10]))
  return module


def _find_main(module: Any) -> Any:
  """Returns the ``func.func @main`` operation of ``module``."""
  for op in module.body.operations:
    op = op.operation
    if op.name != "func.func":
      continue
    if ir.StringAttr(op.attributes["sym_name"]).value == "main":
      return op
  raise ValueError("module has no `func.func @main`")


_ELEMENT_TYPE_TO_DTYPE: dict[str, np.dtype] = {}


def _element_dtype(ir_type: Any) -> np.dtype:
  """Maps an MLIR element type (e.g. ``f32``, ``bf16``, ``ui8``) to a dtype."""
  if not _ELEMENT_TYPE_TO_DTYPE:
    names = ["int2", "uint2", "int4", "uint4", "float4_e2m1fn", "float6_e2m3fn",
             "float6_e3m2fn", "float8_e3m4", "float8_e4m3", "float8_e4m3b11fnuz",
             "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz",
             "float8_e8m0fnu", "bfloat16"]
    candidates = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16,
                  np.uint32, np.uint64, np.float16, np.float32, np.float64,
                  np.complex64, np.complex128]
    candidates += [getattr(jax.numpy, n) for n in names if hasattr(jax.numpy, n)]
    candidates.append(np.bool_)  # last: i1 means bool
    with ir.Context():
      for c in candidates:
        try:
          t = mlir.dtype_to_ir_type(np.dtype(c))
        except TypeError:
          continue
        _ELEMENT_TYPE_TO_DTYPE[str(t)] = np.dtype(c)
  key = str(ir_type)
  if key not in _ELEMENT_TYPE_TO_DTYPE:
    raise ValueError(f"unsupported element type {key}")
  return _ELEMENT_TYPE_TO_DTYPE[key]


def _tensor_aval(t: Any, what: str) -> jax.core.ShapedArray:
  """ShapedArray for a static ranked tensor type; ValueError otherwise."""
  if not isinstance(t, ir.RankedTensorType):
    raise ValueError(f"{what} has type {t}; only ranked tensors are supported")
  rt = t
  if not rt.has_static_shape:
    raise ValueError(f"{what} has dynamic type {t}; only static shapes are "
                     "supported")
  return jax.core.ShapedArray(tuple(rt.shape), _element_dtype(rt.element_type))


def aval_of_tensor_type(text: str) -> jax.core.ShapedArray:
  """ShapedArray of a tensor type printed by MLIR (e.g. ``tensor<4x8xbf16>``)."""
  with mlir.make_ir_context():
    return _tensor_aval(ir.Type.parse(text), f"type {text}")


def main_signature(module: Any) -> tuple[list[jax.core.ShapedArray],
                                         list[jax.core.ShapedArray]]:
  """Global input and output avals of ``@main`` (from its function type)."""
  main = _find_main(module)
  with module.context:
    ft = ir.FunctionType(ir.TypeAttr(main.attributes["function_type"]).value)
    ins = [_tensor_aval(t, f"@main argument {i}")
           for i, t in enumerate(ft.inputs)]
    outs = [_tensor_aval(t, f"@main result {i}")
            for i, t in enumerate(ft.results)]
  return ins, outs


def _sharding_attr(s: jax.sharding.Sharding, ndim: int, use_shardy: bool) -> tuple[str, Any]:
  """The (name, attribute) JAX writes to annotate a value with sharding ``s``."""
  if use_shardy:
    return "sdy.sharding", s._to_sdy_sharding(ndim).build({})
  return "mhlo.sharding", ir.StringAttr.get(str(s._to_xla_hlo_sharding(ndim)))


def annotate_module(module: Any, *, name: str,
                    in_shardings: Sequence[jax.sharding.Sharding],
                    in_avals: Sequence[jax.core.ShapedArray],
                    donated: Sequence[bool], num_devices: int,
                    out_shardings: Sequence[jax.sharding.Sharding | None] = (),
                    out_avals: Sequence[jax.core.ShapedArray] = ()) -> None:
  """Prepares ``module`` in place for compilation on ``num_devices`` devices.

  * ``@main``'s arguments get the sharding annotation JAX itself would write
    for ``in_shardings`` (``sdy.sharding`` with an ``sdy.mesh`` under Shardy,
    else ``mhlo.sharding``), replacing any annotation already there;
  * donated arguments get ``jax.buffer_donor``; donation marks on the other
    arguments are removed (``donated`` is the source of truth);
  * ``mhlo.num_partitions`` / ``mhlo.num_replicas`` are set to match;
  * an unnamed module is named ``name``.
  * results with a sharding in ``out_shardings`` get its annotation (the
    others are left alone: XLA chooses their sharding).
  """
  main = _find_main(module)
  use_shardy = _config.use_shardy_partitioner.value
  with module.context, ir.Location.unknown():
    old = (ir.ArrayAttr(main.attributes["arg_attrs"])
           if "arg_attrs" in main.attributes else None)
    new_attrs = []
    for i, (s, aval, d) in enumerate(zip(in_shardings, in_avals, donated)):
      attrs = {}
      if old is not None:
        for named in ir.DictAttr(old[i]):
          if named.name not in _SHARDING_ATTRS + _DONATION_ATTRS or (
              d and named.name == "tf.aliasing_output"):
            attrs[named.name] = named.attr
      key, value = _sharding_attr(s, aval.ndim, use_shardy)
      attrs[key] = value
      if d:
        attrs["jax.buffer_donor"] = ir.BoolAttr.get(True)
      new_attrs.append(ir.DictAttr.get(attrs))
    main.attributes["arg_attrs"] = ir.ArrayAttr.get(new_attrs)
    if any(o is not None for o in out_shardings):
      old_res = (ir.ArrayAttr(main.attributes["res_attrs"])
                 if "res_attrs" in main.attributes else None)
      new_res = []
      for i, (o, aval) in enumerate(zip(out_shardings, out_avals)):
        attrs = {named.name: named.attr for named in ir.DictAttr(old_res[i])} if old_res else {}
        if o is not None:
          for k in _SHARDING_ATTRS:
            attrs.pop(k, None)
          key, value = _sharding_attr(o, aval.ndim, use_shardy)
          attrs[key] = value
        new_res.append(ir.DictAttr.get(attrs))
      main.attributes["res_attrs"] = ir.ArrayAttr.get(new_res)
    mod_attrs = module.operation.attributes
    i32 = ir.IntegerType.get_signless(32)
    mod_attrs["mhlo.num_partitions"] = ir.IntegerAttr.get(i32, num_devices)
    mod_attrs["mhlo.num_replicas"] = ir.IntegerAttr.get(i32, 1)
    if "sym_name" not in mod_attrs:
      mod_attrs["sym_name"] = ir.StringAttr.get(name)
    if use_shardy:
      # The inline meshes of the shardings become `sdy.mesh` symbols, as in
      # jax's own lowering.
      _passmanager.PassManager.parse(
          "builtin.module(sdy-lift-inlined-meshes)").run(module.operation)


def compile_module(name: str, module: Any, mesh: jax.sharding.Mesh,
                   in_avals: Sequence[jax.core.ShapedArray],
                   out_avals: Sequence[jax.core.ShapedArray],
                   in_shardings: Sequence[jax.sharding.Sharding],
                   out_shardings: Sequence[jax.sharding.Sharding | None] = ()) -> Any:
  """Compiles an annotated module SPMD-partitioned over ``mesh.devices``.

  Goes through ``pxla.UnloadedMeshExecutable.from_hlo`` (as ``jax.jit`` does),
  hence through ``compiler.compile_or_get_cached`` and the persistent
  compilation cache when enabled. Output shardings are left to XLA and read
  back, except those given in ``out_shardings`` (None: XLA's choice).
  Returns a ``pxla.MeshExecutable``; XLA errors propagate unchanged.
  """
  devices = tuple(mesh.devices.flat)
  backend = jax.extend.backend.get_backend(devices[0].platform)
  n_in, n_out = len(in_avals), len(out_avals)
  outs = tuple(_UNSPECIFIED if o is None else o
               for o in (tuple(out_shardings) or (None,) * n_out))
  return _pxla.UnloadedMeshExecutable.from_hlo(
      name, module, list(in_avals), list(out_avals), tuple(in_shardings),
      outs,
      tuple_args=False, unordered_effects=[], ordered_effects=[],
      host_callbacks=[], keepalive=None, kept_var_idx=set(range(n_in)),
      backend=backend, device_list=_xc.DeviceList(devices), committed=True,
      in_layouts=(None,) * n_in, out_layouts=(None,) * n_out,
      compiler_options_kvs=(), num_devices=len(devices), context_mesh=mesh)


def device_assignment(sharding: jax.sharding.Sharding) -> tuple:
  """The ordered devices a sharding's tile assignment refers to (its
  ``_device_assignment``); must equal the compile device list for the
  sharding annotation to mean what it says."""
  return tuple(sharding._device_assignment)


def executable_shardings(exe: Any) -> tuple[list[jax.sharding.Sharding],
                                            list[jax.sharding.Sharding]]:
  """(input shardings, output shardings) of a ``pxla.MeshExecutable``; the
  output ones are those read back from the compiled XLA executable."""
  return list(exe._in_shardings), list(exe._out_shardings)


def executable_text(exe: Any) -> str | None:
  """The optimized HLO text of a ``pxla.MeshExecutable`` (for debugging)."""
  return exe.as_text()


def executable_memory_analysis(exe: Any) -> Any:
  """XLA's compiled memory statistics of a ``pxla.MeshExecutable`` (per
  device: argument, output, temp and generated-code sizes), or ``None``."""
  try:
    return exe.memory_analysis()
  except NotImplementedError:
    return None


class _CheckedExecutable:
  """Stands in for the MeshExecutable in the slow (cache-miss) call path:
  validates the arguments, then delegates to the real executable."""

  __slots__ = ("_exe", "_check")

  def __init__(self, exe: Any, check: Callable[[tuple], None]):
    self._exe = exe
    self._check = check

  def call(self, *args):
    self._check(args)
    return self._exe.call(*args)


def make_dispatch(exe: Any, num_args: int, num_outs: int,
                  check: Callable[[tuple], None]) -> Callable[..., list]:
  """A callable ``f(*arrays) -> list[jax.Array]`` that runs ``exe``.

  It is the C++ dispatch path of ``jax.stages.Compiled`` (a ``PjitFunction``):
  calls whose argument signature (shape, dtype, sharding, committedness) was
  seen before never enter Python; any other call takes the Python slow path,
  where ``check(args)`` runs first (raise there to reject the call before
  anything executes).
  """
  in_tree = _tree_util.tree_structure((tuple(range(num_args)), {}))
  out_tree = _tree_util.tree_structure(list(range(num_outs)))
  params = _stages.CompiledCallParams(
      _CheckedExecutable(exe, check), True, in_tree, out_tree, [], None, None)
  fn = exe.create_cpp_call(params)
  if fn is None:  # executables with effects/callbacks have no C++ path
    def fn(*args):
      return _stages.Compiled.call(params, *args)[0]
  return fn


# --- JaxPP front end (mpmd.jaxpp) ---
# Helpers for `mpmd.jaxpp` (JaxPP's programming model on this compiler): a
# multi-operand identity primitive whose transpose re-binds it with updated
# params (stage markers), tracing a function to a jaxpr whose closed-over
# values become leading inputs (the body of `treduce`), and jaxpr surgery
# (a jaxpr made of some equations of another; inlining nested `jit` calls).
# Uses ``jax._src.core`` (Jaxpr construction, ``jaxprs_in_params``, ``join_effects``),
# ``partial_eval.trace_to_jaxpr_dynamic`` / ``convert_constvars_jaxpr``, the AD
# tables (``primitive_jvps``, ``primitive_transposes``, ``linear_jvp``,
# ``Zero``, ``instantiate_zeros``) and ``batching.primitive_batchers``.

from jax._src.pjit import jit_p as _jit_p  # noqa: E402


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


def trace_to_jaxpr(fun: Callable[..., Sequence[Any]], in_avals: Sequence[Any], *,
                   debug_name: str) -> tuple[core.ClosedJaxpr, list[Any]]:
  """Traces ``fun(*flat_args) -> flat outputs`` at ``in_avals``.

  Returns ``(closed, consts)``: ``closed`` has no consts; its inputs are the
  values ``fun`` closed over (``consts``: arrays, or tracers of an enclosing
  trace) followed by the arguments. Bind a primitive on
  ``(*consts, *args)`` to stage it, as JAX's control flow does.
  """
  dbg = api_util.debug_info(debug_name, fun, tuple(in_avals), {})
  jaxpr, _, consts = pe.trace_to_jaxpr_dynamic(lu.wrap_init(fun, debug_info=dbg),
                                               list(in_avals))
  return core.ClosedJaxpr(pe.convert_constvars_jaxpr(jaxpr), ()), list(consts)


def jaxpr_of_equations(eqns: Sequence[core.JaxprEqn], invars: Sequence[core.Var],
                       outvars: Sequence[Any]) -> core.ClosedJaxpr:
  """The closed jaxpr ``invars -> outvars`` made of ``eqns`` (in order)."""
  effects = core.join_effects(*(e.effects for e in eqns)) if eqns else core.no_effects
  dbg = core.DebugInfo("mpmd.jaxpp", "stage", tuple(f"x{i}" for i in range(len(invars))),
                       tuple(f"[{i}]" for i in range(len(outvars))))
  return core.ClosedJaxpr(
      core.Jaxpr((), list(invars), list(outvars), list(eqns), effects, dbg), ())


def contains_primitive(jaxpr: core.Jaxpr, prim: Primitive) -> bool:
  """Whether ``prim`` occurs in ``jaxpr`` or any jaxpr nested in its params."""
  return any(e.primitive is prim or any(contains_primitive(j, prim)
                                        for j in core.jaxprs_in_params(e.params))
             for e in jaxpr.eqns)


def nested_call_jaxpr(eqn: core.JaxprEqn) -> core.ClosedJaxpr | None:
  """The body of a nested ``jit`` / ``closed_call`` equation (else None):
  the calls :func:`inline_calls` can inline without changing semantics."""
  if eqn.primitive is _jit_p:
    return eqn.params["jaxpr"]
  if eqn.primitive is core.closed_call_p:
    return eqn.params["call_jaxpr"]
  return None


def inline_calls(closed: core.ClosedJaxpr,
                 should_inline: Callable[[core.JaxprEqn], bool]) -> core.ClosedJaxpr:
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
    return core.ClosedJaxpr(core.Jaxpr(jaxpr.invars[:n], jaxpr.invars[n:], jaxpr.outvars,
                                       jaxpr.eqns, jaxpr.effects, jaxpr.debug_info), consts)
  return traced


# ----------------------------------------------------------------------------
# Multi-process runs: the coordination service's key-value store.

from jax._src import distributed as _distributed  # noqa: E402


def distributed_client() -> Any | None:
  """The client of JAX's coordination service (set by
  ``jax.distributed.initialize``), or None in a single-process run. Its
  ``key_value_set(key, value, allow_overwrite)``, ``key_value_try_get(key)``
  (raises when the key is absent) and ``blocking_key_value_get(key, ms)``
  are what mpmd uses to exchange compile-time metadata between processes."""
  return _distributed.global_state.client
