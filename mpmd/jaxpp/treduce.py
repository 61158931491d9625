"""`treduce` / `treduce_i`: the pipelined microbatch loop.

``treduce(fun, xs, schedule)`` applies ``fun`` to microbatch ``i`` of ``xs``
for ``i`` in ``range(n)`` and combines the results with `Add` / `Max` /
`Concat`. It stages one primitive, ``jaxpp_treduce``, holding the traced body:

* under plain ``jax.jit`` (or eagerly) it is an ordinary accumulation loop
  (``lax.fori_loop``) and the stage markers are identities;
* under the MPMD lowering (`mpmd_jit_with_loop`, or ``mpmd.jit`` with a
  matching config) the loop is unrolled: microbatch ``i`` is an
  ``mpmd.call`` with ``call_counter=i`` whose body is split at the markers
  into the named computations ``stage_k`` (forward, transpose count 0, and
  backward, count 1; see `mpmd.jaxpp.staging`), followed by the
  accumulation. The compiler places the accumulators and everything outside
  the stages, and runs the units in the order of the schedule.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from mpmd.trace import ops as mpmd_ops
from mpmd._jax import jaxpr as jj
from mpmd._jax import lowering as jl
from mpmd.jaxpp import markers, staging
from mpmd.jaxpp.reduce_ops import Add, Concat, as_op

__all__ = ["treduce", "treduce_i", "treduce_p"]

treduce_p = jl.Primitive("jaxpp_treduce")
treduce_p.multiple_results = True


def _split(args, num_consts):
  return list(args[:num_consts]), list(args[num_consts:])


def _value_avals(body):
  return [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in body.out_avals]


def _loop_impl(*args, body, num_consts: int, length: int, axis: int, ops, **_):
  """Plain semantics: a fori_loop that accumulates microbatch by microbatch."""
  consts, xs = _split(args, num_consts)
  fun = jax.extend.core.jaxpr_as_fun(body)
  init = [op.state(length, v) for op, v in zip(ops, _value_avals(body))]

  def step(i, acc):
    x_i = [lax.dynamic_index_in_dim(x, i, axis, keepdims=False) for x in xs]
    outs = fun(*consts, jnp.asarray(i, jnp.int32), *x_i)
    return [op.update(a, o, i) for op, a, o in zip(ops, acc, outs)]

  return lax.fori_loop(0, length, step, init)


@functools.lru_cache(maxsize=64)
def plan_for(body) -> staging.StagePlan:
  """The stage plan of a treduce body (cached per traced body)."""
  return staging.plan_stages(body)


def _pipelined_impl(*args, body, num_consts: int, length: int, axis: int, ops, **_):
  """MPMD semantics: one mpmd.call per microbatch, the body split into stages."""
  consts, xs = _split(args, num_consts)
  plan = plan_for(body)
  acc = [op.state(length, v) for op, v in zip(ops, _value_avals(body))]

  # Traced once (a jitted function, of the microbatch index where the body
  # or a Concat uses it): every microbatch calls the same jaxpr, which JAX
  # lowers to one function, rather than tracing and lowering the stages
  # again per microbatch. The compiler inlines the calls
  # (-mpmd-inline-func-calls) and parameterizes the index.
  index = body.jaxpr.invars[num_consts]
  uses_index = (any(isinstance(op, Concat) for op in ops) or index in body.jaxpr.outvars or
                any(index in eqn.invars for eqn in body.jaxpr.eqns))

  @jax.jit
  def treduce_microbatch(consts, acc, x_i, i):
    i = np.int32(0) if i is None else i  # not used when None
    outs = plan.run([*consts, i, *x_i])
    return [op.update(a, o, i) for op, a, o in zip(ops, acc, outs)]

  for i in range(length):
    x_i = [lax.index_in_dim(x, i, axis, keepdims=False) for x in xs]
    # The index is an operand of the call, so that every call has the same
    # body (the compiler inlines it and parameterizes the index).
    acc = mpmd_ops.call(treduce_microbatch, call_counter=i)(
        consts, acc, x_i, np.int32(i) if uses_index else None)
  return acc


def _abstract_eval(*args, state_avals, **_):
  return list(state_avals)


treduce_p.def_impl(_loop_impl)
treduce_p.def_abstract_eval(_abstract_eval)
jl.register_default_lowering(treduce_p, jl.lowering_from_impl(_loop_impl))
jl.register_mpmd_lowering(treduce_p, jl.lowering_from_impl(_pipelined_impl))
jl.define_unsupported_jvp(
    treduce_p, "treduce cannot be differentiated: compute the gradient inside its body (e.g. "
    "treduce(jax.value_and_grad(loss), ...)); the loop accumulates it")


def _ops_for(operation: Any, out_tree, out_avals) -> tuple:
  """Broadcasts the pytree prefix ``operation`` to one Op per output leaf."""
  struct = jax.tree.unflatten(out_tree, list(range(len(out_avals))))
  try:
    per_leaf = jax.tree.map(lambda op, sub: [as_op(op)] * len(jax.tree.leaves(sub)),
                            operation, struct)
  except (ValueError, TypeError) as e:
    if isinstance(e, TypeError) and "operation must be" in str(e):
      raise
    raise ValueError(f"treduce operation {operation!r} is not a pytree prefix of the body's "
                     f"output structure {out_tree}: give one Add/Max/Concat per output (or "
                     f"one for a whole subtree)") from e
  return tuple(op for ops in jax.tree.leaves(per_leaf, is_leaf=lambda x: isinstance(x, list))
               for op in ops)


def _bind(fun_flat: Callable, x_leaves: list, x_avals: list, length: int, axis: int,
          schedule: Any, operation: Any, what: str) -> Any:
  out_tree_box = []

  def body(i, *x_i):
    with markers.stage_scope():
      out = fun_flat(i, *x_i)
    leaves, tree = jax.tree.flatten(out)
    out_tree_box.append(tree)
    return leaves

  in_avals = [jax.core.ShapedArray((), jnp.int32)] + x_avals
  closed, consts = jj.trace_to_jaxpr(body, in_avals, debug_name=what)
  out_tree = out_tree_box[-1]
  if not closed.out_avals:
    raise ValueError(f"the {what} body returns nothing: return the values to reduce "
                     "(e.g. the loss and gradients)")
  ops = _ops_for(operation, out_tree, closed.out_avals)
  state_avals = []
  for op, aval in zip(ops, closed.out_avals):
    s = jax.eval_shape(lambda op=op, aval=aval: op.state(
        length, jax.ShapeDtypeStruct(aval.shape, aval.dtype)))
    state_avals.append(jax.core.ShapedArray(s.shape, s.dtype))
  outs = treduce_p.bind(*consts, *x_leaves, body=closed, num_consts=len(consts), length=length,
                        axis=axis, ops=ops, schedule=schedule, state_avals=tuple(state_avals))
  return jax.tree.unflatten(out_tree, outs)


def treduce(fun: Callable[[Any], Any], xs: Any, schedule: Any = None, axis: int = 0,
            operation: Any = (Concat(), Add)) -> Any:
  """Reduces ``fun`` over the microbatches of ``xs`` (a pipelined loop).

  Microbatch ``i`` is ``jax.tree.map(lambda x: x[i] along axis, xs)``; every
  leaf of ``xs`` must have the same length along ``axis``. The results are
  combined by ``operation``, a pytree prefix of the body's output of `Add`,
  `Max`, `Concat` (classes or instances): the default ``(Concat(), Add)``
  stacks the first output (e.g. the losses of ``value_and_grad``) and sums
  the second (the gradients).

  Args:
    fun: the microbatch body; mark its stages with `mark_stage_end`.
    xs: a pytree of arrays stacked along ``axis``.
    schedule: the pipeline schedule (e.g. ``Std1F1B(4)``); required under
      `mpmd_jit_with_loop`, ignored by plain ``jax.jit``.
    axis: the microbatch axis of every leaf of ``xs``.
    operation: how results are combined.
  """
  leaves, tree = jax.tree.flatten(xs)
  if not leaves:
    raise ValueError("treduce needs at least one array in xs (use treduce_i to loop over an "
                     "index instead)")
  if not isinstance(axis, int) or isinstance(axis, bool):
    raise TypeError(f"treduce axis must be an int, got {axis!r}")
  sizes = []
  for path, x in jax.tree_util.tree_flatten_with_path(xs)[0]:
    shape = np.shape(x)
    if not -len(shape) <= axis < len(shape):
      raise ValueError(f"treduce: xs{jax.tree_util.keystr(path)} has shape {tuple(shape)}, "
                       f"which has no axis {axis}")
    sizes.append((jax.tree_util.keystr(path), shape[axis]))
  if len({s for _, s in sizes}) != 1:
    listing = ", ".join(f"xs{p or ''}: {s}" for p, s in sizes)
    raise ValueError(f"treduce: every leaf of xs must have the same length along axis {axis} "
                     f"(the number of microbatches), got {listing}")
  length = sizes[0][1]
  if length < 1:
    raise ValueError("treduce needs at least one microbatch (xs has length 0 along axis "
                     f"{axis})")
  x_avals = []
  for x in leaves:
    shape = list(np.shape(x))
    del shape[axis % len(shape)]
    x_avals.append(jax.core.ShapedArray(tuple(shape), jnp.result_type(x)))
  leaves = [jnp.asarray(x) for x in leaves]

  def fun_flat(i, *x_i):
    del i
    return fun(jax.tree.unflatten(tree, list(x_i)))

  return _bind(fun_flat, leaves, x_avals, length, axis, schedule, operation, "treduce")


def treduce_i(fun: Callable[[Any], Any], length: int, schedule: Any = None,
              operation: Any = (Concat(), Add)) -> Any:
  """Like `treduce`, but calls ``fun(i)`` with the microbatch index ``i``
  (an int32 scalar) for ``i`` in ``range(length)``; ``fun`` selects its own
  microbatch (e.g. with ``jax.lax.dynamic_index_in_dim``)."""
  if not isinstance(length, (int, np.integer)) or isinstance(length, bool) or length < 1:
    raise ValueError(f"treduce_i length must be a positive int, got {length!r}")
  return _bind(lambda i: fun(i), [], [], int(length), 0, schedule, operation, "treduce_i")
