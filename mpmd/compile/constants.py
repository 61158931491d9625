"""The constant inputs the runtime makes itself.

-mpmd-parameterize-fragment-constants turns the constants that tell
microbatches apart (a loop index, a slice offset, the zeros a first
microbatch's accumulators start from) into operands, so that every
microbatch shares one program. The partitioner lists them as
`_mpmd.ConstantInput`s (a splat value of a shape and dtype on a mesh); the
runtime places the ones calls only read once (`place_constant`), and makes
the ones a call consumes afresh for each call (`make_filler`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec, Sharding

__all__ = ["constant_value", "make_filler", "place_constant"]


def constant_value(constant: Any) -> tuple[Any, np.dtype]:
  """The Python value and dtype of a `_mpmd.ConstantInput`."""
  dtype = jax.numpy.dtype(constant.dtype)
  kind = dtype.kind
  value = (bool(int(constant.value)) if kind == "b" else
           int(constant.value) if kind in "iu" else float(constant.value))
  return value, dtype


def place_constant(constant: Any, mesh: Mesh) -> jax.Array:
  """A `_mpmd.ConstantInput` (a splat of its shape) as an array replicated on
  `mesh`."""
  value, dtype = constant_value(constant)
  return jax.device_put(np.full(tuple(constant.shape), value, dtype=dtype),
                        NamedSharding(mesh, PartitionSpec()))


def make_filler(constants: Sequence[tuple[Any, Sharding]]) -> Any:
  """A compiled program of no arguments that returns new arrays holding
  `constants` (`_mpmd.ConstantInput`s), each laid out as its sharding: the
  operands a call consumes, made afresh for each call in one dispatch."""
  specs = [(tuple(c.shape), *constant_value(c)) for c, _ in constants]

  def fill():
    return [jax.numpy.full(shape, value, dtype) for shape, value, dtype in specs]

  return jax.jit(fill, out_shardings=[s for _, s in constants]).lower().compile()
