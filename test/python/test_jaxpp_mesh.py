"""`mpmd.jaxpp.mesh.MpmdMesh`: groups, submeshes and device lookups."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from jax.sharding import Mesh

from mpmd.jaxpp.mesh import MpmdMesh


@pytest.fixture
def mesh() -> MpmdMesh:
  """Axes ("data", "stage", "model") of sizes (1, 4, 2): the pipeline axis is
  not the first one."""
  devices = np.array(jax.devices()).reshape(1, 4, 2)
  return MpmdMesh(Mesh(devices, ("data", "stage", "model")), "stage")


def test_device_coords_and_groups(mesh):
  devices = jax.devices()
  assert mesh.mpmd_axis == 1 and mesh.mpmd_dim == 4
  assert mesh.device_coords[devices[0]] == (0, 0, 0)
  assert mesh.device_coords[devices[3]] == (0, 1, 1)
  assert mesh.device_coords[devices[7]] == (0, 3, 1)
  assert len(mesh.device_coords) == 8
  assert [mesh.device_mpmd_idx[d] for d in devices] == [0, 0, 1, 1, 2, 2, 3, 3]
  with pytest.raises(TypeError):
    mesh.device_mpmd_idx[devices[0]] = 3  # read-only mapping


def test_submesh_is_an_mpmd_mesh(mesh):
  sub = mesh.mpmd_submesh([3, 1])
  assert isinstance(sub, MpmdMesh) and sub.mpmd_axis_name == "stage"
  assert sub.mpmd_dim == 2 and sub.jax_mesh.axis_names == ("data", "stage", "model")
  assert sub.jax_mesh.device_ids.tolist() == [[[6, 7], [2, 3]]]
  one = mesh.mpmd_submesh([2])
  assert one.jax_mesh == mesh.unstack[2] and one.lowering_mesh() == mesh.unstack[2]
  with pytest.raises(ValueError, match="index 4 is out of range for mpmd_dim=4"):
    mesh.mpmd_submesh([4])
  with pytest.raises(ValueError, match="repeat a group"):
    mesh.mpmd_submesh([1, 1])
  with pytest.raises(ValueError, match="at least one group"):
    mesh.mpmd_submesh([])


def test_group_of_meshes_and_arrays(mesh):
  assert mesh.mpmd_idx_for_mesh(mesh.unstack[2]) == 2
  x = jax.device_put(np.ones(2), jax.sharding.NamedSharding(mesh.unstack[3],
                                                            jax.sharding.PartitionSpec()))
  assert mesh.mpmd_idx_of(x) == 3
  with pytest.raises(ValueError, match="are not one group of this MpmdMesh"):
    mesh.mpmd_idx_of(jax.device_put(np.ones(2), jax.devices()[0]))
