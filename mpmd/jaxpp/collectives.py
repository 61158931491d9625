"""`cross_mpmd_all_reduce` and `cross_mpmd_stack`: combine values that live on
different groups (e.g. the squared gradient norms of every stage, for a global
gradient norm that clips every stage's update).

The result is an ordinary sum / stack marked with `mpmd.broadcast`, so the
compiler may use it on every group (it transfers it where it is needed); the
operands held by other groups are moved to where the result is computed.
Under plain `jax.jit` both compute the same values.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp

import mpmd

__all__ = ["cross_mpmd_all_reduce", "cross_mpmd_stack"]


def _check_alike(arrays: Sequence[jax.Array], what: str) -> None:
  if not arrays:
    raise ValueError(f"{what} needs at least one array")
  first = jax.typeof(arrays[0])
  for i, a in enumerate(arrays[1:], 1):
    aval = jax.typeof(a)
    if aval.shape != first.shape or aval.dtype != first.dtype:
      raise ValueError(f"{what}: every array must have the shape and dtype of the first "
                       f"({first.str_short()}); array {i} is {aval.str_short()}")


def cross_mpmd_all_reduce(*args: jax.Array) -> jax.Array:
  """The sum of ``args``, arrays of one shape and dtype that may live on
  different groups, usable on every group (JaxPP's cross-group all-reduce)."""
  _check_alike(args, "cross_mpmd_all_reduce")
  return mpmd.broadcast(functools.reduce(jnp.add, args))


def cross_mpmd_stack(arrays: Sequence[jax.Array], axis: int = 0) -> jax.Array:
  """``arrays`` (one shape and dtype, possibly on different groups) stacked
  along a new axis ``axis``, usable on every group."""
  arrays = list(arrays)
  _check_alike(arrays, "cross_mpmd_stack")
  parts = [mpmd.broadcast(jnp.expand_dims(a, axis)) for a in arrays]
  return mpmd.broadcast(jnp.concatenate(parts, axis=axis))
