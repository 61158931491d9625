"""Which processes own which meshes: `mesh_processes`, `Ownership`."""

from __future__ import annotations

from collections.abc import Mapping

import jax
from jax.sharding import Mesh

from mpmd.distributed.initialize import is_multiprocess

__all__ = ["Ownership", "mesh_processes"]


def mesh_processes(mesh: Mesh) -> tuple[int, ...]:
  """The processes that own devices of `mesh`, ascending."""
  return tuple(sorted({d.process_index for d in mesh.devices.flat}))


class Ownership:
  """Which meshes of a topology this process takes part in."""

  def __init__(self, topology: Mapping[str, Mesh]):
    me = jax.process_index()
    self.process = me
    self.multiprocess = is_multiprocess()
    self.processes = {name: mesh_processes(mesh) for name, mesh in topology.items()}
    self._local = {name: me in procs for name, procs in self.processes.items()}
    self._only = {name: procs == (me,) for name, procs in self.processes.items()}

  def runs(self, mesh: str) -> bool:
    """This process owns devices of `mesh` (so it runs its fragments)."""
    return self._local[mesh]

  def owns_all(self, mesh: str) -> bool:
    """All devices of `mesh` belong to this process."""
    return self._only[mesh]

  def owner(self, mesh: str) -> int:
    """The first process owning devices of `mesh` (publishes its metadata)."""
    return self.processes[mesh][0]
