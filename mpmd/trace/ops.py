"""User-facing labelling primitives: named computations, named tensors,
broadcast and reduce.

Each label is a JAX primitive with two lowerings:

* under plain ``jax.jit`` it is an identity (or, for a named computation, a
  call whose body is lowered inline), so a labelled model runs unpipelined and
  its numerics can be compared with the pipelined run;
* under the MPMD lowering (:func:`mpmd.trace.tracing.trace_and_lower`) it emits the
  corresponding ``mpmd.*`` op through jaxlib's ``jax.extend.mlir.dialects.mpmd``
  bindings.

Differentiation: the backward of a named computation is a named computation
with the same name and ``transpose_count + 1``; ``named_tensor`` is linear
(its transpose is a ``named_tensor`` of the same name); the transpose of
``broadcast`` is ``reduce`` and vice versa.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar, overload

import jax
import jax.extend.core
import numpy as np
from jax.extend.mlir import ir
from jax.extend.mlir.dialects import mpmd as mpmd_dialect

from mpmd._jax import lowering as jl

__all__ = [
    "RESERVED_NAMES",
    "broadcast",
    "broadcast_p",
    "named_computation",
    "named_computation_p",
    "named_tensor",
    "named_tensor_p",
    "reduce",
    "reduce_p",
]

F = TypeVar("F", bound=Callable[..., Any])

#: Names a user label may not take (``main`` is the entry function's name).
RESERVED_NAMES = frozenset({"main"})


def _validate_name(name: Any, what: str) -> str:
  if not isinstance(name, str):
    raise ValueError(
        f"{what} name must be a str, got {type(name).__name__}: {name!r}")
  if not name:
    raise ValueError(f"{what} name must be a non-empty string")
  if name in RESERVED_NAMES:
    raise ValueError(
        f"{what} name {name!r} is reserved (it names the entry function); "
        "choose another name")
  return name


# ---------------------------------------------------------------------------
# named_computation
# ---------------------------------------------------------------------------

named_computation_p = jl.make_call_primitive(
    "named_computation",
    transpose_params=lambda p: dict(
        p, transpose_count=p["transpose_count"] + 1))


def _named_computation_mpmd_lowering(ctx, *args, call_jaxpr, name: str,
                                     transpose_count: int):
  if not ctx.avals_out and not call_jaxpr.effects:
    # Dead (e.g. the empty known half that scan's partial evaluation leaves
    # behind when nothing is DCE'd): emit nothing rather than an empty op.
    return []
  result_types = jl.ir_types_for_avals(ctx, ctx.avals_out)
  operand_types = [a.type for a in args]
  origin = mpmd_dialect.UserOriginAttr.get(name, transpose_count)
  op = mpmd_dialect.NamedComputationOp(result_types, list(args), origin)
  block = op.regions[0].blocks.append(*operand_types)
  with ir.InsertionPoint(block):
    outs = jl.lower_jaxpr_in_block(ctx, call_jaxpr, list(block.arguments),
                                   name_stack_suffix=name)
    mpmd_dialect.ReturnOp(outs)
  return list(op.results)


jl.register_mpmd_lowering(named_computation_p, _named_computation_mpmd_lowering)


@overload
def named_computation(fn: F, *, name: str) -> F: ...


@overload
def named_computation(fn: None = None, *, name: str) -> Callable[[F], F]: ...


def named_computation(fn: Callable[..., Any] | None = None, *,
                      name: str) -> Any:
  """Labels ``fn`` as a named computation called ``name``.

  Usable as ``named_computation(f, name="stage0")(*args)`` or as the decorator
  ``@named_computation(name="stage0")``.  ``fn`` takes positional pytrees of
  arrays and returns a pytree of arrays.  Keyword arguments are not supported
  (close over them or use ``functools.partial``).

  Under plain ``jax.jit`` the call behaves exactly like ``fn``.  Under the MPMD
  lowering it becomes ``mpmd.named_computation`` with origin
  ``#mpmd.user_origin<"name"(k)>`` where ``k`` is the number of AD transposes
  applied (0 for the forward, 1 for its backward).

  Args:
    fn: The function to label; omit to get a decorator.
    name: The computation's name; a non-empty string other than ``"main"``.

  Returns:
    The wrapped function (or a decorator producing it).

  Raises:
    ValueError: if ``name`` is not a valid name.
  """
  _validate_name(name, "named_computation")
  if fn is None:
    return functools.partial(named_computation, name=name)
  if not callable(fn):
    raise TypeError(
        f"named_computation expects a callable, got {type(fn).__name__}")

  @functools.wraps(fn)
  def wrapped(*args: Any) -> Any:
    return jl.bind_call(named_computation_p, fn, args,
                        debug_name=f"named_computation[{name}]",
                        name=name, transpose_count=0)

  return wrapped


# ---------------------------------------------------------------------------
# named_tensor
# ---------------------------------------------------------------------------

named_tensor_p = jl.make_identity_primitive("named_tensor")
jl.define_linear_transpose(
    named_tensor_p, lambda ct, *, name: named_tensor_p.bind(ct, name=name))


def _named_tensor_mpmd_lowering(ctx, x, *, name: str):
  return [mpmd_dialect.NamedTensorOp(x, name).result]


jl.register_mpmd_lowering(named_tensor_p, _named_tensor_mpmd_lowering)


def named_tensor(x: Any, name: str) -> Any:
  """Labels the array ``x`` with ``name`` (identity on values).

  Under the MPMD lowering it becomes ``mpmd.named_tensor``, so the value can be
  assigned to a mesh.  Its transpose is a ``named_tensor`` of the same name.

  Raises:
    ValueError: if ``name`` is not a valid name.
  """
  _validate_name(name, "named_tensor")
  return named_tensor_p.bind(x, name=name)


# ---------------------------------------------------------------------------
# broadcast / reduce
# ---------------------------------------------------------------------------

broadcast_p = jl.make_identity_primitive("mpmd_broadcast")
reduce_p = jl.make_identity_primitive("mpmd_reduce")
jl.define_linear_transpose(broadcast_p, lambda ct: reduce_p.bind(ct))
jl.define_linear_transpose(reduce_p, lambda ct: broadcast_p.bind(ct))


def _broadcast_mpmd_lowering(ctx, x):
  return [mpmd_dialect.BroadcastOp(x).result]


def _reduce_mpmd_lowering(ctx, x):
  # No `reduction` attribute: the op's default, `#mpmd.reduction<none>`.
  return [mpmd_dialect.ReduceOp([x], results=[x.type]).result]


jl.register_mpmd_lowering(broadcast_p, _broadcast_mpmd_lowering)
jl.register_mpmd_lowering(reduce_p, _reduce_mpmd_lowering)


def broadcast(x: Any) -> Any:
  """Marks ``x`` as usable on any mesh (identity on values).

  Under the MPMD lowering it becomes ``mpmd.broadcast``: the compiler may
  replicate/transfer the value to every mesh where it is used.  Its transpose
  is :func:`reduce`.
  """
  return broadcast_p.bind(x)


def reduce(x: Any) -> Any:
  """Marks a cross-mesh reduction point (identity on values).

  Under the MPMD lowering it becomes ``mpmd.reduce`` with reduction ``none``.
  Its transpose is :func:`broadcast`.
  """
  return reduce_p.bind(x)


# ---------------------------------------------------------------------------
# call: one microbatch
# ---------------------------------------------------------------------------

mpmd_call_p = jl.make_call_primitive("mpmd_call")


def _mpmd_call_lowering(ctx, *args, call_jaxpr, call_counter: int | None, name: str):
  callee = jl.lower_jaxpr_as_function(ctx, f"mpmd_call_{name}", call_jaxpr)
  op = mpmd_dialect.CallOp(jl.ir_types_for_avals(ctx, ctx.avals_out), list(args), callee)
  if call_counter is not None:
    op.operation.attributes["call_counter"] = ir.IntegerAttr.get(
        ir.IntegerType.get_unsigned(32), call_counter)
  return list(op.results)


jl.register_mpmd_lowering(mpmd_call_p, _mpmd_call_lowering)


def call(fn: Callable[..., Any] | None = None, *, call_counter: int | None = None) -> Any:
  """Calls ``fn`` as one microbatch of a pipelined step.

  ``call(f, call_counter=i)(*args)`` (or ``@call(call_counter=i)``) behaves
  like ``f(*args)``; under ``mpmd.jit`` it becomes ``mpmd.call`` and every
  named computation inside it is tagged with microbatch ``i``, which is what
  pipeline schedules order. Write the gradient computation and its
  accumulation inside ``fn`` so they run microbatch by microbatch.

  Args:
    fn: The microbatch function (positional pytrees in and out).
    call_counter: The microbatch index, an int >= 0.
  """
  if call_counter is not None and (not isinstance(call_counter, int) or
                                   isinstance(call_counter, bool) or
                                   not 0 <= call_counter < 2**32):
    raise ValueError(f"call_counter must be an int in [0, 2**32), got {call_counter!r}")
  if fn is None:
    return functools.partial(call, call_counter=call_counter)
  if not callable(fn):
    raise TypeError(f"call expects a callable, got {type(fn).__name__}")
  name = getattr(fn, "__name__", "fn")

  @functools.wraps(fn)
  def wrapped(*args: Any) -> Any:
    return jl.bind_call(mpmd_call_p, fn, args, debug_name=f"mpmd.call[{name}]",
                        call_counter=call_counter, name=name)

  return wrapped


mpmd_fori_loop_p = jl.Primitive("mpmd_fori_loop")
mpmd_fori_loop_p.multiple_results = True


def _fori_impl(*args, body_jaxpr, num_consts: int, num_iterations: int):
  consts, carry = args[:num_consts], list(args[num_consts:])
  body = jax.extend.core.jaxpr_as_fun(body_jaxpr)
  for i in range(num_iterations):
    carry = body(np.uint32(i), *carry, *consts)
  return carry


mpmd_fori_loop_p.def_impl(_fori_impl)
mpmd_fori_loop_p.def_abstract_eval(
    lambda *args, body_jaxpr, **_: list(body_jaxpr.out_avals))
jl.define_unsupported_jvp(
    mpmd_fori_loop_p, "mpmd.fori_loop cannot be differentiated: compute the gradient inside "
    "the loop body (and accumulate it in the carry), one microbatch per iteration")
jl.register_default_lowering(mpmd_fori_loop_p, jl.lowering_from_impl(_fori_impl))


def _fori_mpmd_lowering(ctx, *args, body_jaxpr, num_consts: int, num_iterations: int):
  types = [a.type for a in args]
  callee = jl.lower_jaxpr_as_function(ctx, "mpmd_fori_body", body_jaxpr)
  op = mpmd_dialect.ForOp(types, list(args), num_iterations, unroll_factor=num_iterations)
  index_type = ir.RankedTensorType.get([], ir.IntegerType.get_unsigned(32))
  block = op.regions[0].blocks.append(*types, index_type)
  with ir.InsertionPoint(block):
    consts, carry = list(block.arguments)[:num_consts], list(block.arguments)[num_consts:-1]
    call = mpmd_dialect.CallOp(types[num_consts:], [block.arguments[-1], *carry, *consts], callee)
    mpmd_dialect.ReturnOp([*consts, *call.results])
  return list(op.results)[num_consts:]


jl.register_mpmd_lowering(mpmd_fori_loop_p, _fori_mpmd_lowering)


def fori_loop(num_iterations: int, body: Callable[[Any, Any], Any], init: Any) -> Any:
  """``carry = body(i, carry)`` for ``i`` in ``range(num_iterations)``, one
  microbatch per iteration.

  Under ``mpmd.jit`` this is an ``mpmd.for`` loop whose body is an
  ``mpmd.call``; the compiler unrolls it and numbers iteration ``i``'s
  computations as microbatch ``i`` for the pipeline schedule. ``i`` is a
  ``uint32`` scalar. Under plain ``jax.jit`` the loop is unrolled. The loop
  itself cannot be differentiated: compute gradients inside ``body``.
  """
  if not isinstance(num_iterations, int) or isinstance(num_iterations, bool) or num_iterations < 1:
    raise ValueError(f"num_iterations must be a positive int, got {num_iterations!r}")
  flat_init, tree = jax.tree.flatten(init)

  def flat_body(i, *flat_carry):
    out_flat, out_tree = jax.tree.flatten(body(i, jax.tree.unflatten(tree, flat_carry)))
    if out_tree != tree:
      raise TypeError(f"fori_loop body must return a carry with the structure of init {tree}, "
                      f"got {out_tree}")
    return out_flat

  index = np.uint32(0)
  converted, consts = jax.closure_convert(flat_body, index, *flat_init)
  body_jaxpr = jax.make_jaxpr(converted)(index, *flat_init, *consts)
  outs = mpmd_fori_loop_p.bind(*consts, *flat_init, body_jaxpr=body_jaxpr,
                               num_consts=len(consts), num_iterations=num_iterations)
  return jax.tree.unflatten(tree, outs)


def enumerated_for(body: Callable[[Any, int, Any], Any], init: Any, inputs: Any) -> Any:
  """``carry = body(carry, i, x_i)`` over the leading axis of ``inputs`` (a
  pytree of arrays with a common leading dimension, e.g. microbatches), one
  ``call(..., call_counter=i)`` per slice. Returns the final carry.
  """
  leaves = jax.tree.leaves(inputs)
  if not leaves:
    raise ValueError("enumerated_for needs at least one input array")
  sizes = {np.shape(x)[0] if np.ndim(x) else None for x in leaves}
  if len(sizes) != 1 or None in sizes:
    raise ValueError(f"enumerated_for inputs must share a leading dimension, got sizes {sorted(map(str, sizes))}")
  (n,) = sizes
  carry = init
  for i in range(n):
    x_i = jax.tree.map(lambda x, i=i: x[i], inputs)
    carry = call(lambda c, x, i=i: body(c, i, x), call_counter=i)(carry, x_i)
  return carry
