"""How `treduce` combines the per-microbatch results: `Add`, `Max`, `Concat`.

An operation makes the initial accumulator from the number of microbatches
and the shape/dtype of one microbatch's value (``state``), and folds the value
of microbatch ``i`` into it (``update``). `treduce` takes a pytree prefix of
operations (classes or instances) over the body's outputs.
"""

from __future__ import annotations

import abc
import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

__all__ = ["Add", "Concat", "Max", "Op", "as_op"]


class Op(abc.ABC):
  """A reduction over microbatches."""

  @abc.abstractmethod
  def state(self, n: int, value: jax.ShapeDtypeStruct) -> jax.Array:
    """The accumulator before microbatch 0, for ``n`` microbatches of ``value``."""

  @abc.abstractmethod
  def update(self, state: jax.Array, value: jax.Array, i: Any) -> jax.Array:
    """The accumulator after folding in microbatch ``i``'s ``value``."""


@dataclasses.dataclass(frozen=True)
class Add(Op):
  """Sum over microbatches (gradient accumulation); starts from zeros."""

  def state(self, n, value):
    return jnp.zeros(value.shape, value.dtype)

  def update(self, state, value, i):
    return lax.add(state, jnp.asarray(value, state.dtype))


@dataclasses.dataclass(frozen=True)
class Max(Op):
  """Elementwise maximum over microbatches; starts from the dtype's lowest
  value (``-inf`` for floats)."""

  def state(self, n, value):
    dtype = np.dtype(value.dtype)
    if jnp.issubdtype(dtype, jnp.floating):
      low = -np.inf
    elif jnp.issubdtype(dtype, jnp.integer):
      low = jnp.iinfo(dtype).min
    elif dtype == np.bool_:
      low = False
    else:
      raise TypeError(f"Max cannot reduce values of dtype {dtype}")
    return jnp.full(value.shape, low, dtype)

  def update(self, state, value, i):
    return lax.max(state, jnp.asarray(value, state.dtype))


@dataclasses.dataclass(frozen=True)
class Concat(Op):
  """Stacks the microbatch values along a new axis ``axis`` of length n."""

  axis: int = 0

  def state(self, n, value):
    shape = list(value.shape)
    axis = self.axis if self.axis >= 0 else self.axis + len(shape) + 1
    if not 0 <= axis <= len(shape):
      raise ValueError(f"Concat(axis={self.axis}) is out of range for values of rank "
                       f"{len(shape)}")
    shape.insert(axis, n)
    return jnp.zeros(shape, value.dtype)

  def update(self, state, value, i):
    axis = self.axis if self.axis >= 0 else self.axis + state.ndim
    return lax.dynamic_update_index_in_dim(state, jnp.asarray(value, state.dtype), i, axis)


def as_op(op: Any) -> Op:
  """An `Op` instance from an instance or an `Op` subclass (``Add`` or ``Add()``)."""
  if isinstance(op, type) and issubclass(op, Op):
    return op()
  if isinstance(op, Op):
    return op
  raise TypeError(f"treduce operation must be Add, Max, Concat (class or instance) or another "
                  f"mpmd.jaxpp Op, got {op!r}")
