"""`MpmdMesh`: a JAX mesh with one axis that indexes pipeline groups."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh

__all__ = ["MpmdMesh"]


@dataclasses.dataclass(frozen=True)
class MpmdMesh:
  """A `jax.sharding.Mesh` whose axis ``mpmd_axis_name`` indexes MPMD groups.

  Group ``i`` (the slice ``i`` along that axis) is one mesh of the MPMD
  program, named ``mpmd{i}``; each group runs its own SPMD programs over its
  devices, sharded along the other axes.

  Attributes:
    jax_mesh: the whole mesh.
    mpmd_axis_name: the name of the pipeline axis.
  """

  jax_mesh: Mesh
  mpmd_axis_name: str

  def __post_init__(self):
    if not isinstance(self.jax_mesh, Mesh):
      raise TypeError(f"MpmdMesh needs a jax.sharding.Mesh, got {type(self.jax_mesh).__name__}")
    if self.mpmd_axis_name not in self.jax_mesh.axis_names:
      raise ValueError(f"MpmdMesh: axis {self.mpmd_axis_name!r} is not an axis of the mesh "
                       f"(axes: {', '.join(map(str, self.jax_mesh.axis_names))})")

  @property
  def mpmd_axis(self) -> int:
    """Index of the pipeline axis in the mesh's axes."""
    return list(self.jax_mesh.axis_names).index(self.mpmd_axis_name)

  @property
  def mpmd_dim(self) -> int:
    """Number of MPMD groups (the size of the pipeline axis)."""
    return int(self.jax_mesh.shape[self.mpmd_axis_name])

  @functools.cached_property
  def unstack(self) -> list[Mesh]:
    """The groups' meshes: every axis kept, the pipeline axis with size 1."""
    parts = np.split(self.jax_mesh.devices, self.mpmd_dim, axis=self.mpmd_axis)
    return [Mesh(p, self.jax_mesh.axis_names, axis_types=self.jax_mesh.axis_types)
            for p in parts]

  def lowering_mesh(self) -> Mesh:
    """The mesh a step is traced with (group 0's): PartitionSpecs of the step
    refer to its axes and apply to every group alike."""
    return self.unstack[0]

  def mpmd_submesh(self, mpmd_idxs: Sequence[int]) -> "MpmdMesh":
    """The `MpmdMesh` of the given groups, in the given order (its pipeline
    axis has one entry per group); ``.jax_mesh`` is the plain mesh."""
    idxs = [self._check_idx(i) for i in mpmd_idxs]
    if not idxs:
      raise ValueError("mpmd_submesh needs at least one group index")
    if len(set(idxs)) != len(idxs):
      raise ValueError(f"mpmd_submesh: group indices {list(mpmd_idxs)} repeat a group")
    devices = np.take(self.jax_mesh.devices, idxs, axis=self.mpmd_axis)
    return MpmdMesh(Mesh(devices, self.jax_mesh.axis_names, axis_types=self.jax_mesh.axis_types),
                    self.mpmd_axis_name)

  def mesh_name(self, mpmd_idx: int) -> str:
    """The name of group ``mpmd_idx``'s mesh in compiled programs."""
    return f"mpmd{self._check_idx(mpmd_idx)}"

  @property
  def topology(self) -> dict[str, Mesh]:
    """Mesh name -> group mesh (the topology of `mpmd.make_config`)."""
    return {self.mesh_name(i): m for i, m in enumerate(self.unstack)}

  @functools.cached_property
  def device_coords(self) -> Mapping[jax.Device, tuple[int, ...]]:
    """Device -> its coordinates in ``jax_mesh`` (one index per axis)."""
    return MappingProxyType({d: tuple(int(c) for c in idx)
                             for idx, d in np.ndenumerate(self.jax_mesh.devices)})

  @functools.cached_property
  def device_mpmd_idx(self) -> Mapping[jax.Device, int]:
    """Device -> the group that holds it (its coordinate on the pipeline axis)."""
    axis = self.mpmd_axis
    return MappingProxyType({d: c[axis] for d, c in self.device_coords.items()})

  def mpmd_idx_for_mesh(self, mesh: Mesh) -> int:
    """The group whose devices are exactly those of ``mesh``."""
    return self._idx_of_devices(mesh.devices.flat)

  def mpmd_idx_of(self, array: Any) -> int:
    """The group an array lives on: a `jax.Array` on one group's devices, or
    an `MpmdArray` of one group."""
    idxs = getattr(array, "mpmd_idxs", None)
    if idxs is not None:
      if len(idxs) != 1:
        raise ValueError(f"the MpmdArray lives on groups {sorted(idxs)}, not on one group; "
                         "use its .mpmd_idxs")
      return next(iter(idxs))
    return self._idx_of_devices(array.sharding.device_set)

  @functools.cached_property
  def _group_by_devices(self) -> dict[frozenset, int]:
    return {frozenset(m.devices.flat): i for i, m in enumerate(self.unstack)}

  def group_of_devices(self, devices) -> int | None:
    """The group whose devices are exactly ``devices``, or None."""
    return self._group_by_devices.get(frozenset(devices))

  def _idx_of_devices(self, devices) -> int:
    devices = frozenset(devices)
    group = self.group_of_devices(devices)
    if group is not None:
      return group
    raise ValueError(f"devices {sorted(d.id for d in devices)} are not one group of this "
                     "MpmdMesh")

  def _check_idx(self, i: int) -> int:
    if not isinstance(i, (int, np.integer)) or not 0 <= i < self.mpmd_dim:
      raise ValueError(f"MPMD group index {i!r} is out of range for mpmd_dim={self.mpmd_dim}")
    return int(i)
