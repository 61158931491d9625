"""`mpmd.jaxpp.array` / `mpmd.jaxpp.types`: `MpmdArray`, `MpmdSharding` and the
SPMD <-> MPMD reshard helpers."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from mpmd.distributed import RemoteArray
from mpmd.jaxpp.array import MpmdArray, mpmd_to_spmd_reshard, spmd_to_mpmd_reshard
from mpmd.jaxpp.mesh import MpmdMesh
from mpmd.jaxpp.types import MpmdSharding


@pytest.fixture
def mesh() -> MpmdMesh:
  """Three groups of two devices: axes ("stage", "model")."""
  devices = np.array(jax.devices()[:6]).reshape(3, 2)
  return MpmdMesh(jax.sharding.Mesh(devices, ("stage", "model")), "stage")


def _on(mesh: MpmdMesh, group: int, value) -> jax.Array:
  spec = P("model") if jnp.ndim(value) else P()
  return jax.device_put(value, NamedSharding(mesh.mpmd_submesh([group]).jax_mesh, spec))


def test_sharding_names_its_groups_and_drops_the_pipeline_axis(mesh):
  s = MpmdSharding(mesh, [2, 0], P(("stage", "model"), "stage"))
  assert s.mesh_ids == {0, 2} and s.is_mpmd_replicated and s.is_used
  assert s.spec == P("model", None)
  assert s.sharding.mesh == mesh.mpmd_submesh([0, 2]).jax_mesh
  assert s.group_sharding(2).mesh == mesh.unstack[2]
  assert s == MpmdSharding(mesh, {0, 2}, P("model", None)) and hash(s) == hash(
      MpmdSharding(mesh, (0, 2), P("model", None)))
  unused = MpmdSharding(mesh, set(), P())
  assert not unused.is_used and not unused.is_mpmd_replicated
  with pytest.raises(ValueError, match="holds the value on no group"):
    unused.sharding  # noqa: B018
  with pytest.raises(ValueError, match="group 1 does not hold this value"):
    s.group_sharding(1)
  with pytest.raises(ValueError, match="group index 3 is out of range.*mpmd_dim=3"):
    MpmdSharding(mesh, {3}, P())
  with pytest.raises(TypeError, match="needs an MpmdMesh"):
    MpmdSharding(mesh.jax_mesh, {0}, P())


def test_array_on_one_group(mesh):
  x = _on(mesh, 1, jnp.arange(4.0))
  a = MpmdArray([x], MpmdSharding(mesh, {1}, x.sharding.spec))
  assert (a.shape, a.dtype, a.ndim, a.size, len(a)) == ((4,), np.float32, 1, 4, 4)
  assert a.aval == jax.ShapeDtypeStruct((4,), np.float32)
  assert not a.is_mpmd_replicated and a.is_partially_addressable
  assert a.to_mpmd_local_array is x and a.first_mpmd_replica is x
  assert a.sharding.mesh == x.sharding.mesh and a.spec == P("model")
  assert a.mpmd_idxs == {1} and mesh.mpmd_idx_of(a) == 1
  np.testing.assert_array_equal(np.asarray(a), [0, 1, 2, 3])
  assert a.block_until_ready() is a
  assert "groups=[1]" in repr(a)
  a.delete()
  assert a.is_deleted() and x.is_deleted()


def test_scalar_reads_like_a_number(mesh):
  a = MpmdArray([_on(mesh, 0, jnp.float32(2.5))], MpmdSharding(mesh, {0}, P()))
  assert f"{a:.3f}" == "2.500" and float(a) == 2.5 and int(a) == 2 and bool(a)
  with pytest.raises(TypeError, match="len\\(\\) of a 0-d MpmdArray"):
    len(a)


def test_replicated_array_in_one_process(mesh):
  s = MpmdSharding(mesh, {0, 2}, P("model"))
  x0, x2 = _on(mesh, 0, jnp.ones(2)), _on(mesh, 2, jnp.ones(2))
  a = MpmdArray([x2, x0], s)  # any order: kept by group
  assert a.is_mpmd_replicated
  assert a.to_mpmd_local_array == [x0, x2]
  assert a.first_mpmd_replica is x0
  assert a.local_arrays() == {0: x0, 2: x2}
  assert a.for_group(2) is x2 and a.for_group(1) is x0
  with pytest.raises(ValueError, match="lives on groups \\[0, 2\\], not on one group"):
    mesh.mpmd_idx_of(a)


def test_array_holding_only_some_copies_or_none(mesh):
  s = MpmdSharding(mesh, {0, 2}, P("model"))
  only_2 = MpmdArray([_on(mesh, 2, jnp.zeros(2))], s)
  assert only_2.first_mpmd_replica is None  # group 0's copy is not here
  assert only_2.to_mpmd_local_array.sharding.mesh == mesh.unstack[2]
  meta = MpmdArray([], s, shape=(2,), dtype=jnp.float32)
  assert not meta.is_partially_addressable
  assert meta.to_mpmd_local_array is None and meta.first_mpmd_replica is None
  assert not meta.is_deleted()
  remote = meta.for_group(2)
  assert isinstance(remote, RemoteArray)
  assert (remote.shape, remote.dtype, remote.mesh) == ((2,), np.float32, "mpmd2")
  with pytest.raises(ValueError, match="holds no copy of the MpmdArray float32\\[2\\]"):
    float(meta)


def test_bad_arrays(mesh):
  s = MpmdSharding(mesh, {0}, P())
  with pytest.raises(ValueError, match="not on one of the groups \\[0\\]"):
    MpmdArray([_on(mesh, 1, jnp.zeros(2))], s)
  with pytest.raises(ValueError, match="not on one of the groups"):
    MpmdArray([jax.device_put(jnp.zeros(2), jax.devices()[0])], s)  # one device of group 0
  with pytest.raises(ValueError, match="two arrays on group 0"):
    MpmdArray([_on(mesh, 0, jnp.zeros(2)), _on(mesh, 0, jnp.ones(2))], s)
  with pytest.raises(ValueError, match="copies of an MpmdArray differ"):
    MpmdArray([_on(mesh, 0, jnp.zeros(2)), _on(mesh, 1, jnp.zeros(4))],
              MpmdSharding(mesh, {0, 1}, P()))
  with pytest.raises(ValueError, match="needs its shape= and dtype="):
    MpmdArray([], s, shape=(2,))
  with pytest.raises(ValueError, match="shape=\\(3,\\) but its arrays have shape \\(2,\\)"):
    MpmdArray([_on(mesh, 0, jnp.zeros(2))], s, shape=(3,))
  with pytest.raises(TypeError, match="holds jax.Arrays, got ndarray"):
    MpmdArray([np.zeros(2)], s)
  with pytest.raises(TypeError, match="needs an MpmdSharding"):
    MpmdArray([], s.sharding, shape=(), dtype=np.float32)


def test_typed_prng_key_array(mesh):
  key = jax.device_put(jax.random.key(0), NamedSharding(mesh.unstack[1], P()))
  a = MpmdArray([key], MpmdSharding(mesh, {1}, P()))
  assert jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key)
  meta = MpmdArray([], MpmdSharding(mesh, {1}, P()), shape=(), dtype=key.dtype)
  assert meta.dtype == key.dtype


def test_spmd_to_mpmd_and_back(mesh):
  whole = NamedSharding(mesh.jax_mesh, P(None, "model"))
  x = jax.device_put(jnp.arange(12.0).reshape(3, 4), whole)
  y = jax.device_put(jnp.arange(3.0), NamedSharding(mesh.jax_mesh, P()))
  shardings = {"x": MpmdSharding(mesh, {0, 2}, P(None, "model")),
               "y": MpmdSharding(mesh, set(), P())}  # unused: goes to group 0
  out = spmd_to_mpmd_reshard(mesh, {"x": x, "y": y}, shardings)
  assert out["x"].mpmd_idxs == {0, 2} and out["y"].mpmd_idxs == {0}
  for group, copy in out["x"].local_arrays().items():
    assert copy.sharding == NamedSharding(mesh.unstack[group], P(None, "model"))
    np.testing.assert_array_equal(copy, x)
  back = mpmd_to_spmd_reshard(mesh, out, {"x": whole, "y": whole.update(spec=P())})
  assert back["x"].sharding == whole
  np.testing.assert_array_equal(back["x"], x)
  np.testing.assert_array_equal(back["y"], y)
  other = MpmdMesh(jax.sharding.Mesh(np.array(jax.devices()[:2]).reshape(2, 1),
                                     ("stage", "model")), "stage")
  with pytest.raises(ValueError, match="over another MpmdMesh"):
    spmd_to_mpmd_reshard(mesh, [x], [MpmdSharding(other, {0}, P())])
  with pytest.raises(TypeError, match="needs MpmdShardings"):
    spmd_to_mpmd_reshard(mesh, [x], [whole])
