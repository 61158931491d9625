"""`mpmd.jaxpp.types`: `MpmdSharding` (where a value of an MPMD program lives)
and `TaskType`."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from mpmd.jaxpp.mesh import MpmdMesh
from mpmd.schedule.task_lists import TaskType

__all__ = ["MpmdSharding", "TaskType"]


def _without_axis(spec: PartitionSpec, axis: str) -> PartitionSpec:
  """``spec`` with every mention of the pipeline axis ``axis`` removed."""

  def drop(entry):
    if entry is None:
      return None
    if isinstance(entry, (tuple, list)):
      kept = tuple(e for e in entry if e != axis)
      return kept if len(kept) > 1 else (kept[0] if kept else None)
    return None if entry == axis else entry

  return PartitionSpec(*(drop(e) for e in spec))


class MpmdSharding:
  """The groups of an `MpmdMesh` that hold a value, and its layout in each.

  A value of an MPMD program lives on one group (a stage's weights), on
  several (a value replicated across groups) or on none (an unused input).
  Within each group it is laid out by ``spec``, a `PartitionSpec` over the
  mesh's axes (the pipeline axis is dropped from it).

  Args:
    mpmd_mesh: the mesh of groups.
    mesh_ids: the indices of the groups holding the value (may be empty).
    spec: the layout within a group.
  """

  __slots__ = ("mpmd_mesh", "mesh_ids", "spec")

  def __init__(self, mpmd_mesh: MpmdMesh, mesh_ids: Iterable[int], spec: PartitionSpec):
    if not isinstance(mpmd_mesh, MpmdMesh):
      raise TypeError(f"MpmdSharding needs an MpmdMesh, got {type(mpmd_mesh).__name__}")
    ids = []
    for i in mesh_ids:
      if not isinstance(i, (int, np.integer)) or isinstance(i, bool) \
          or not 0 <= i < mpmd_mesh.mpmd_dim:
        raise ValueError(f"MpmdSharding: group index {i!r} is out of range for an MpmdMesh "
                         f"with mpmd_dim={mpmd_mesh.mpmd_dim}")
      ids.append(int(i))
    if spec is None:
      spec = PartitionSpec()
    if not isinstance(spec, PartitionSpec):
      raise TypeError(f"MpmdSharding spec must be a PartitionSpec, got {spec!r}")
    self.mpmd_mesh = mpmd_mesh
    self.mesh_ids: frozenset[int] = frozenset(ids)
    self.spec = _without_axis(spec, mpmd_mesh.mpmd_axis_name)

  @property
  def is_used(self) -> bool:
    """Whether some group holds the value."""
    return bool(self.mesh_ids)

  @property
  def is_mpmd_replicated(self) -> bool:
    """Whether more than one group holds the value."""
    return len(self.mesh_ids) > 1

  @property
  def sharding(self) -> NamedSharding:
    """``spec`` over the mesh of the holding groups (their submesh of the
    `MpmdMesh`, pipeline axis included)."""
    if not self.mesh_ids:
      raise ValueError("this MpmdSharding holds the value on no group (an unused value), so it "
                       "has no jax sharding")
    return NamedSharding(self.mpmd_mesh.mpmd_submesh(sorted(self.mesh_ids)).jax_mesh, self.spec)

  def group_sharding(self, mpmd_idx: int) -> NamedSharding:
    """``spec`` over group ``mpmd_idx``'s own mesh (where one copy lives)."""
    if mpmd_idx not in self.mesh_ids:
      raise ValueError(f"group {mpmd_idx} does not hold this value (groups: "
                       f"{sorted(self.mesh_ids)})")
    return NamedSharding(self.mpmd_mesh.unstack[mpmd_idx], self.spec)

  def __eq__(self, other: object) -> bool:
    return (isinstance(other, MpmdSharding) and self.mpmd_mesh == other.mpmd_mesh
            and self.mesh_ids == other.mesh_ids and self.spec == other.spec)

  def __hash__(self) -> int:
    return hash((self.mpmd_mesh, self.mesh_ids, self.spec))

  def __repr__(self) -> str:
    return f"MpmdSharding(mesh_ids={sorted(self.mesh_ids)}, spec={self.spec})"
