"""The transfer plan: how each transfer between meshes runs.

A transfer between two meshes of this process is a copy (`jax.device_put`,
or an `ArrayCopier` when the layout is the same on both meshes: the same
copy without `device_put`'s per-call bookkeeping). Between meshes of
different processes it is this process's part of a collective over both
meshes' devices, or a pull from the producing process where that applies
(`mpmd.run.crossprocess`).
"""

from __future__ import annotations

from collections.abc import Mapping

from jax.sharding import Mesh

from mpmd import distributed as dist
from mpmd.errors import MpmdError
from mpmd._jax.array_copy import make_array_copier
from mpmd.run import crossprocess
from mpmd.compile.compile_plan import PlannedTransfer
from mpmd.run.program import CrossProcessTransferInstruction, TransferInstruction

__all__ = ["plan_transfer"]


def plan_transfer(index: int, inst, planned: PlannedTransfer, topology: Mapping[str, Mesh],
                  owner: dist.Ownership, fingerprint: str
                  ) -> TransferInstruction | CrossProcessTransferInstruction:
  """The runtime instruction of transfer `inst` (instruction `index` of the
  partitioned program), whose layouts `planned` holds."""
  fields = (inst.src_mesh, inst.mesh, tuple(inst.operands), tuple(inst.results),
            inst.location)
  aval = planned.aval
  target = planned.target
  if not planned.across:
    # Meshes sharing devices: a real copy (the same-layout copier and a plain
    # device_put would both return the source's buffer).
    shared = not set(topology[inst.src_mesh].devices.flat).isdisjoint(
        topology[inst.mesh].devices.flat)
    source = planned.source
    # Between memory kinds (device and host memory of one mesh): device_put.
    copier = (None if source is None or inst.memory_kind != inst.src_memory_kind else
              make_array_copier(source, target, len(aval.shape), always_copy=shared))
    return TransferInstruction(*fields, donate=inst.donate, sharding=target, copier=copier,
                               may_alias=False if shared else None)
  if inst.memory_kind != inst.src_memory_kind:
    raise MpmdError(f"moving a value of mesh {inst.mesh!r} between memory kinds "
                    f"({inst.src_memory_kind or 'device'!r} to {inst.memory_kind or 'device'!r}"
                    + (f", at {inst.location}" if inst.location else "") + ") is supported only "
                    "when one process runs the mesh: drop the memory kind (`#pinned_host`) from "
                    "the assignment in a multi-process run")
  plan = crossprocess.make_plan(topology[inst.src_mesh], topology[inst.mesh],
                                aval.shape, aval.dtype, target)
  src, dst = owner.processes[inst.src_mesh], owner.processes[inst.mesh]
  if crossprocess.pull_applies(plan, src, dst):
    transfer = crossprocess.PullTransfer(plan, f"{fingerprint}/transfer/{index}", src[0], dst[0])
  else:
    transfer = crossprocess.CrossProcessTransfer(plan)
  return CrossProcessTransferInstruction(*fields, donate=inst.donate, transfer=transfer)
