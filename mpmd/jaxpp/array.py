"""`MpmdArray`: a value of an MPMD program, held by one or more groups.

Every output of a function from `mpmd_jit_with_loop` / `mpmd_jit_by_yield` is
an `MpmdArray`; feed it back to the same function as it is. Its data is the
`jax.Array` of each group that holds it and is addressable here
(`to_mpmd_local_array`); in a multi-process run a process may hold none
(the array then carries only its shape, dtype and sharding).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import NamedSharding

from mpmd.distributed.arrays import RemoteArray
from mpmd.jaxpp.mesh import MpmdMesh
from mpmd.jaxpp.types import MpmdSharding

__all__ = ["MpmdArray", "mpmd_to_spmd_reshard", "spmd_to_mpmd_reshard"]


def _group_of(array: jax.Array, sharding: MpmdSharding) -> int:
  """The group of ``sharding``'s mesh whose devices are exactly ``array``'s."""
  devices = array.sharding.device_set
  group = sharding.mpmd_mesh.group_of_devices(devices)
  if group in sharding.mesh_ids:
    return group
  raise ValueError(
      f"an array on devices {sorted(d.id for d in devices)} is not on one of the groups "
      f"{sorted(sharding.mesh_ids)} of its MpmdSharding; place it on a group's mesh "
      "(mpmd_mesh.mpmd_submesh([i]).jax_mesh)")


def _as_dtype(dtype: Any) -> Any:
  """A NumPy dtype, or JAX's extended dtype (PRNG keys) as it is."""
  if jax.dtypes.issubdtype(dtype, jax.dtypes.extended):
    return dtype
  return np.dtype(dtype)


class MpmdArray:
  """A logical array held by the groups ``mpmd_sharding.mesh_ids``.

  Args:
    partially_addressable_arrays: the `jax.Array` copies this process holds,
      at most one per group of ``mpmd_sharding``, each on its group's devices
      (none in a process that holds no group of it).
    mpmd_sharding: where the value lives.
    shape, dtype: required when no array is given (the value's metadata).

  An `MpmdArray` is a pytree leaf. `np.asarray`, ``float``, ``int`` and
  format specs (``f"{loss:.3f}"``) read its first local copy.
  """

  def __init__(self, partially_addressable_arrays: Sequence[jax.Array],
               mpmd_sharding: MpmdSharding, shape: Sequence[int] | None = None,
               dtype: Any = None):
    if not isinstance(mpmd_sharding, MpmdSharding):
      raise TypeError(f"MpmdArray needs an MpmdSharding, got {type(mpmd_sharding).__name__}")
    arrays = list(partially_addressable_arrays)
    by_group: dict[int, jax.Array] = {}
    for a in arrays:
      if not isinstance(a, jax.Array):
        raise TypeError(f"MpmdArray holds jax.Arrays, got {type(a).__name__}")
      group = _group_of(a, mpmd_sharding)
      if group in by_group:
        raise ValueError(f"MpmdArray got two arrays on group {group}; give one per group")
      by_group[group] = a
    if arrays:
      first = arrays[0]
      for a in arrays[1:]:
        if a.shape != first.shape or a.dtype != first.dtype:
          raise ValueError(f"the copies of an MpmdArray differ: {first.dtype}{list(first.shape)} "
                           f"and {a.dtype}{list(a.shape)}")
      if shape is not None and tuple(shape) != first.shape:
        raise ValueError(f"MpmdArray shape={tuple(shape)} but its arrays have shape {first.shape}")
      if dtype is not None and _as_dtype(dtype) != first.dtype:
        raise ValueError(f"MpmdArray dtype={dtype} but its arrays have dtype {first.dtype}")
      shape, dtype = first.shape, first.dtype
    elif shape is None or dtype is None:
      raise ValueError("an MpmdArray without local arrays needs its shape= and dtype=")
    self._arrays = dict(sorted(by_group.items()))
    self._mpmd_sharding = mpmd_sharding
    self._shape = tuple(int(d) for d in shape)
    self._dtype = _as_dtype(dtype)
    #: What to pass back to an mpmd program when no copy is local (a
    #: `mpmd.distributed.RemoteArray` in multi-process runs).
    self._placeholder: Any = None

  # -- metadata --------------------------------------------------------------

  @property
  def mpmd_sharding(self) -> MpmdSharding:
    """Where the value lives: its groups and layout."""
    return self._mpmd_sharding

  @property
  def mpmd_mesh(self) -> MpmdMesh:
    """The mesh of groups."""
    return self._mpmd_sharding.mpmd_mesh

  @property
  def mpmd_idxs(self) -> frozenset[int]:
    """The groups that hold the value."""
    return self._mpmd_sharding.mesh_ids

  @property
  def spec(self):
    """The `PartitionSpec` within each group."""
    return self._mpmd_sharding.spec

  @property
  def sharding(self) -> NamedSharding:
    """The spec over the submesh of the holding groups."""
    return self._mpmd_sharding.sharding

  @property
  def shape(self) -> tuple[int, ...]:
    return self._shape

  @property
  def dtype(self):
    return self._dtype

  @property
  def ndim(self) -> int:
    return len(self._shape)

  @property
  def size(self) -> int:
    return int(np.prod(self._shape, dtype=np.int64))

  @property
  def aval(self) -> jax.ShapeDtypeStruct:
    """Shape and dtype (as a `jax.ShapeDtypeStruct`)."""
    return jax.ShapeDtypeStruct(self._shape, self._dtype)

  @property
  def is_mpmd_replicated(self) -> bool:
    """Whether more than one group holds the value."""
    return self._mpmd_sharding.is_mpmd_replicated

  @property
  def is_partially_addressable(self) -> bool:
    """Whether this process holds a copy."""
    return bool(self._arrays)

  # -- data ------------------------------------------------------------------

  @property
  def to_mpmd_local_array(self) -> jax.Array | list[jax.Array] | None:
    """The local copy: a `jax.Array`; a list of them when this process holds
    several groups of a replicated value; None when it holds none."""
    if not self._arrays:
      return None
    arrays = list(self._arrays.values())
    return arrays[0] if len(arrays) == 1 else arrays

  @property
  def first_mpmd_replica(self) -> jax.Array | None:
    """The copy of the lowest holding group, if this process has it."""
    if not self._mpmd_sharding.mesh_ids:
      return None
    return self._arrays.get(min(self._mpmd_sharding.mesh_ids))

  def local_arrays(self) -> dict[int, jax.Array]:
    """Group index -> the local copy on that group."""
    return dict(self._arrays)

  def for_group(self, mpmd_idx: int | None) -> Any:
    """What to pass to an mpmd program that reads this value on group
    ``mpmd_idx``: the local copy there, else another local copy (the program
    moves it), else, in a process holding no copy, a
    `mpmd.distributed.RemoteArray` standing for it."""
    if mpmd_idx in self._arrays:
      return self._arrays[mpmd_idx]
    if self._arrays:
      return next(iter(self._arrays.values()))
    if self._placeholder is not None:
      return self._placeholder
    if not self.mpmd_idxs:
      raise ValueError("an MpmdArray held by no group and no process has no data to pass")
    group = mpmd_idx if mpmd_idx in self.mpmd_idxs else min(self.mpmd_idxs)
    mesh = self.mpmd_mesh.unstack[group]
    processes = tuple(sorted({d.process_index for d in mesh.devices.flat}))
    return RemoteArray(self._shape, self._dtype, self.mpmd_mesh.mesh_name(group), processes)

  def _first(self, what: str) -> jax.Array:
    if not self._arrays:
      raise ValueError(f"{what}: this process holds no copy of the MpmdArray "
                       f"{self._dtype}{list(self._shape)} (groups {sorted(self.mpmd_idxs)}); "
                       "read it in a process of one of those groups, or gather it with "
                       "mpmd.distributed.gather")
    return next(iter(self._arrays.values()))

  def block_until_ready(self) -> MpmdArray:
    """Waits for every local copy; returns ``self``."""
    for a in self._arrays.values():
      a.block_until_ready()
    return self

  def delete(self) -> None:
    """Frees every local copy."""
    for a in self._arrays.values():
      a.delete()

  def is_deleted(self) -> bool:
    """Whether the local copies were freed (or donated)."""
    return any(a.is_deleted() for a in self._arrays.values())

  def __array__(self, dtype=None, copy=None):
    out = np.asarray(self._first("np.asarray"))
    return out if dtype is None else out.astype(dtype)

  def __int__(self) -> int:
    return int(self._first("int()"))

  def __float__(self) -> float:
    return float(self._first("float()"))

  def __bool__(self) -> bool:
    return bool(self._first("bool()"))

  def __format__(self, format_spec: str) -> str:
    return format(self._first("format()"), format_spec)

  def __len__(self) -> int:
    if not self._shape:
      raise TypeError("len() of a 0-d MpmdArray")
    return self._shape[0]

  def __repr__(self) -> str:
    return (f"MpmdArray({self._dtype}{list(self._shape)}, groups={sorted(self.mpmd_idxs)}, "
            f"spec={self.spec}, local={list(self._arrays)})")


def spmd_to_mpmd_reshard(mpmd_mesh: MpmdMesh, spmd_arrays: Any, mpmd_shardings: Any,
                         threshold: int | None = None) -> Any:
  """Moves arrays onto the groups an MPMD program expects.

  ``mpmd_shardings`` is a pytree of `MpmdSharding` like ``spmd_arrays`` (e.g.
  ``compiled.in_shardings`` of an `mpmd_jit_with_loop` function); each array
  is copied to every group of its sharding with that sharding's spec. A value
  held by no group (an unused input) goes to group 0. The inputs are left as
  they are (JaxPP deletes them; delete them yourself to free their memory).
  Single process only.

  Args:
    mpmd_mesh: the mesh of groups.
    spmd_arrays: a pytree of `jax.Array`s (for example sharded over the whole
      mesh, pipeline axis included).
    mpmd_shardings: a pytree of `MpmdSharding` with the same structure.
    threshold: accepted for JaxPP compatibility and unused (JaxPP bounds
      the memory of copies in flight with it).

  Returns:
    A pytree of `MpmdArray`s.
  """
  del threshold
  if jax.process_count() > 1:
    raise NotImplementedError("spmd_to_mpmd_reshard runs in a single process; in a multi-process "
                              "run pass the arrays to the mpmd program, which places them")
  arrays, tree = jax.tree.flatten(spmd_arrays)
  shardings = tree.flatten_up_to(mpmd_shardings)
  out = []
  for a, s in zip(arrays, shardings):
    if not isinstance(s, MpmdSharding):
      raise TypeError(f"spmd_to_mpmd_reshard needs MpmdShardings, got {s!r}")
    if s.mpmd_mesh != mpmd_mesh:
      raise ValueError("an MpmdSharding of spmd_to_mpmd_reshard is over another MpmdMesh")
    target = s if s.is_used else MpmdSharding(mpmd_mesh, {0}, s.spec)
    copies = [jax.device_put(a, target.group_sharding(i)) for i in sorted(target.mesh_ids)]
    out.append(MpmdArray(copies, target))
  return jax.tree.unflatten(tree, out)


def mpmd_to_spmd_reshard(mpmd_mesh: MpmdMesh, mpmd_arrays: Any, spmd_shardings: Any) -> Any:
  """The inverse of `spmd_to_mpmd_reshard`: each `MpmdArray` (its lowest
  group's copy) is copied to the `jax.sharding.Sharding` of
  ``spmd_shardings`` (a pytree like ``mpmd_arrays``, e.g. over the whole
  mesh). The `MpmdArray`s are left as they are. Single process only."""
  if jax.process_count() > 1:
    raise NotImplementedError("mpmd_to_spmd_reshard runs in a single process; use "
                              "mpmd.distributed.gather to bring values to every process")
  arrays, tree = jax.tree.flatten(mpmd_arrays)
  shardings = tree.flatten_up_to(spmd_shardings)
  out = []
  for a, s in zip(arrays, shardings):
    if isinstance(a, MpmdArray):
      if a.mpmd_mesh != mpmd_mesh:
        raise ValueError("an MpmdArray of mpmd_to_spmd_reshard is over another MpmdMesh")
      a = a.first_mpmd_replica if a.first_mpmd_replica is not None else a._first(
          "mpmd_to_spmd_reshard")
    out.append(jax.device_put(a, s))
  return jax.tree.unflatten(tree, out)
