"""Copying arrays to another mesh's devices in the same layout: one call of
the C++ copy ``jax.device_put`` ends in, without its Python bookkeeping, and
several such copies as one call.

The JAX internals used here:

* ``jax._src.array._sharding_indices_and_eq`` -- whether two shardings lay an
  array out alike.
* ``Sharding._internal_device_list.addressable_device_list`` -- a sharding's
  devices as the copy takes them.
* ``jax._src.lib.xla_client.batched_copy_array_to_devices_with_sharding`` and
  ``ArrayCopySemantics`` -- the C++ batched copy.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
from jax._src import array as _array
from jax._src.lib import xla_client as _xc

__all__ = ["ArrayCopier", "batched_copier", "make_array_copier"]


def make_array_copier(source: jax.sharding.Sharding, target: jax.sharding.Sharding,
                      ndim: int, *, always_copy: bool = False
                      ) -> Callable[[jax.Array], jax.Array] | None:
  """A copy of arrays laid out as `source` into `target` (another mesh's
  devices, the same layout) as one call of the C++ copy that
  `jax.device_put` ends in for that case, without its Python bookkeeping.
  None when the layouts differ or a side is not fully addressable (then
  `jax.device_put` it is). `always_copy`: a new buffer even where `target`
  has the source's devices (the copy may otherwise be the source's buffer)."""
  try:
    if not (source.is_fully_addressable and target.is_fully_addressable and
            _array._sharding_indices_and_eq(source, target, ndim)):
      return None
  except (NotImplementedError, AttributeError, TypeError):
    return None
  semantics = (_xc.ArrayCopySemantics.ALWAYS_COPY if always_copy
               else _xc.ArrayCopySemantics.REUSE_INPUT)
  return ArrayCopier(target._internal_device_list.addressable_device_list, target, semantics)


class ArrayCopier:
  """One same-layout copy into `target` (see `make_array_copier`); several
  go out as one call with `batched_copier`."""

  __slots__ = ("devices", "target", "semantics")

  def __init__(self, devices: Any, target: jax.sharding.Sharding, semantics: Any):
    self.devices = devices
    self.target = target
    self.semantics = semantics

  def __call__(self, x: jax.Array) -> jax.Array:
    return _xc.batched_copy_array_to_devices_with_sharding(
        [x], [self.devices], [self.target], [self.semantics])[0]


def batched_copier(copiers: Sequence[ArrayCopier]) -> Callable[[list], list]:
  """One call of the C++ batched copy for all of `copiers` (a list of
  arrays in, the copies out, in order)."""
  devices = [c.devices for c in copiers]
  targets = [c.target for c in copiers]
  semantics = [c.semantics for c in copiers]
  copy = _xc.batched_copy_array_to_devices_with_sharding

  def copy_all(xs: list) -> list:
    return copy(xs, devices, targets, semantics)

  return copy_all
