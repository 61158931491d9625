"""`MpmdMesh`: a JAX mesh with one axis that indexes pipeline groups."""

from __future__ import annotations

import dataclasses
import functools

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

  def mpmd_submesh(self, mpmd_idxs: list[int] | tuple[int, ...]) -> Mesh:
    """The mesh of the given groups (the pipeline axis has their number)."""
    idxs = [self._check_idx(i) for i in mpmd_idxs]
    devices = np.take(self.jax_mesh.devices, idxs, axis=self.mpmd_axis)
    return Mesh(devices, self.jax_mesh.axis_names, axis_types=self.jax_mesh.axis_types)

  def mesh_name(self, mpmd_idx: int) -> str:
    """The name of group ``mpmd_idx``'s mesh in compiled programs."""
    return f"mpmd{self._check_idx(mpmd_idx)}"

  @property
  def topology(self) -> dict[str, Mesh]:
    """Mesh name -> group mesh (the topology of `mpmd.make_config`)."""
    return {self.mesh_name(i): m for i, m in enumerate(self.unstack)}

  def device_mpmd_idx(self, device: jax.Device) -> int:
    """The group that holds ``device``."""
    for i, m in enumerate(self.unstack):
      if device in set(m.devices.flat):
        return i
    raise ValueError(f"device {device} is not in this MpmdMesh")

  def mpmd_idx_for_mesh(self, mesh: Mesh) -> int:
    """The group whose devices are exactly those of ``mesh``."""
    return self._idx_of_devices(mesh.devices.flat)

  def mpmd_idx_of(self, array: jax.Array) -> int:
    """The group a (compiled function's output) array lives on."""
    return self._idx_of_devices(array.sharding.device_set)

  def _idx_of_devices(self, devices) -> int:
    devices = set(devices)
    for i, m in enumerate(self.unstack):
      if set(m.devices.flat) == devices:
        return i
    raise ValueError(f"devices {sorted(d.id for d in devices)} are not one group of this "
                     "MpmdMesh")

  def _check_idx(self, i: int) -> int:
    if not isinstance(i, (int, np.integer)) or not 0 <= i < self.mpmd_dim:
      raise ValueError(f"MPMD group index {i!r} is out of range for mpmd_dim={self.mpmd_dim}")
    return int(i)
