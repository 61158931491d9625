"""Typed PRNG keys at the boundary of an MPMD program.

``jax.random.key(0)`` makes an array of an extended dtype (``key<fry>``)
whose data is a ``uint32`` array with trailing dimensions of the
implementation's key shape. JAX lowers such arguments and outputs to that
data, and so does the program `mpmd.jit` partitions: its fragments, transfers
and shardings see ``uint32`` arrays. This module converts at the edges:
a call passes each key argument's data (`KeyBoundary.unwrap`) and wraps the
program's key outputs back into key arrays (`KeyBoundary.wrap`), so callers
see exactly the types `jax.jit` returns.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Sequence
from typing import Any

import jax

from mpmd._jax import lowering as jl
from mpmd.distributed.arrays import RemoteArray
from mpmd.errors import MpmdError

__all__ = ["KeyBoundary", "is_key_dtype", "physical_aval"]


def is_key_dtype(dtype: Any) -> bool:
  """Whether `dtype` is a typed PRNG key dtype (``key<fry>``, ``key<rbg>``)."""
  try:
    return jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)
  except TypeError:
    return False


def physical_aval(aval: Any) -> jax.ShapeDtypeStruct:
  """The ``uint32`` aval holding the data of a key aval (others unchanged,
  as a `jax.ShapeDtypeStruct`)."""
  if is_key_dtype(aval.dtype):
    return jax.eval_shape(jax.random.key_data, jax.ShapeDtypeStruct(aval.shape, aval.dtype))
  return jax.ShapeDtypeStruct(aval.shape, aval.dtype, weak_type=getattr(aval, "weak_type", False))


@dataclasses.dataclass(frozen=True)
class KeyBoundary:
  """Where a program's flat arguments and outputs are typed PRNG keys.

  Attributes:
    inputs: (flat argument index, key dtype) of each key argument.
    outputs: (flat output index, key dtype) of each key output.
  """
  inputs: tuple[tuple[int, Any], ...] = ()
  outputs: tuple[tuple[int, Any], ...] = ()

  @classmethod
  def of(cls, in_avals: Sequence[Any], out_avals: Sequence[Any]) -> "KeyBoundary":
    """The key positions among the traced (logical) avals."""
    return cls(tuple((i, a.dtype) for i, a in enumerate(in_avals) if is_key_dtype(a.dtype)),
               tuple((j, a.dtype) for j, a in enumerate(out_avals) if is_key_dtype(a.dtype)))

  def __bool__(self) -> bool:
    return bool(self.inputs or self.outputs)

  def unwrap(self, leaves: Sequence[Any], paths: Sequence[str] | None = None) -> list:
    """The flat arguments with each key argument replaced by its data.

    Raises `MpmdError`, naming the argument, where the program was traced
    with a key and something else is passed (a raw ``uint32`` array is not
    taken for a key: pass ``jax.random.wrap_key_data(data)``)."""
    out = self.try_unwrap(leaves)
    if out is not None:
      return out
    i, dtype = next((i, d) for i, d in self.inputs if not _is_key_array(leaves[i], d))
    where = paths[i] if paths is not None else f"{i}"
    got = getattr(leaves[i], "dtype", type(leaves[i]).__name__)
    raise MpmdError(f"argument {where} was traced as a PRNG key array of dtype {dtype} but "
                    f"this call passes {got}: pass a key of that implementation (e.g. "
                    "jax.random.key or jax.random.wrap_key_data), or call the mpmd.jit "
                    "function, which compiles again for new dtypes")

  def try_unwrap(self, leaves: Sequence[Any]) -> list | None:
    """`unwrap` for the steady-state path: None instead of an error."""
    out = list(leaves)
    for i, dtype in self.inputs:
      if not _is_key_array(out[i], dtype):
        return None
      out[i] = _data(out[i])
    return out

  def wrap(self, outputs: Sequence[Any]) -> list:
    """The flat outputs with each key output's data wrapped as a key array
    (a placeholder of another process's mesh, `RemoteArray`, as a
    placeholder of the key array: the key's shape and dtype)."""
    out = list(outputs)
    for j, dtype in self.outputs:
      x = out[j]
      if x is None or is_key_dtype(getattr(x, "dtype", None)):
        continue
      if isinstance(x, RemoteArray):
        trailing = len(physical_aval(jax.ShapeDtypeStruct((), dtype)).shape)
        out[j] = _remote_like(x, x.shape[:len(x.shape) - trailing], dtype)
      else:
        out[j] = jax.random.wrap_key_data(x, impl=jl.key_impl_of_dtype(dtype))
    return out

  def physical(self, x: Any) -> Any:
    """`x` (an argument `lower` saw: a key array or a key-dtype
    `ShapeDtypeStruct`) as the program takes it."""
    if not is_key_dtype(getattr(x, "dtype", None)):
      return x
    if isinstance(x, jax.Array):
      return _data(x)
    sds = physical_aval(x)
    sharding = getattr(x, "sharding", None)
    return jax.ShapeDtypeStruct(sds.shape, sds.dtype, sharding=sharding)

  def physical_leaves(self, leaves: Sequence[Any]) -> list:
    """`physical` of each key argument among the flat arguments."""
    out = list(leaves)
    for i, _ in self.inputs:
      out[i] = self.physical(out[i])
    return out


def _is_key_array(x: Any, dtype: Any) -> bool:
  """Whether `x` is a key array of `dtype` (or a placeholder of one)."""
  return getattr(x, "dtype", None) == dtype


def _data(x: Any) -> Any:
  """The ``uint32`` data of a key array, or the placeholder of that data
  for a key's placeholder (`RemoteArray`)."""
  if isinstance(x, jax.Array):
    return jax.random.key_data(x)
  if isinstance(x, RemoteArray) and is_key_dtype(x.dtype):
    data = physical_aval(jax.ShapeDtypeStruct(x.shape, x.dtype))
    return _remote_like(x, data.shape, data.dtype)
  return x


def _remote_like(x: RemoteArray, shape: tuple[int, ...], dtype: Any) -> RemoteArray:
  """Placeholder `x` with another shape and dtype (a key dtype too, which
  `RemoteArray()`, taking NumPy dtypes, does not)."""
  out = copy.copy(x)
  out.shape, out.dtype = tuple(shape), dtype
  return out
