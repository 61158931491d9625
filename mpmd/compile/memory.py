"""Per-mesh memory of a compiled MPMD program: estimated and measured.

*Estimated*: walk the instruction list in program order, keeping the set of
live values of each mesh (bytes per device of each value's shard, from its
sharding). A value is live from the instruction that produces it to its last
use; the program's inputs stay live for the whole step unless donated (the
caller holds them), outputs until the end. While a fragment runs, its
outputs and XLA's temporary buffers (from the compiled executable's memory
analysis) are live too, minus the donated inputs XLA aliases to outputs.

*Measured*: run the program once more, waiting after every instruction, and
sum the bytes of the device buffers of the arrays alive at that point (the
program's values and the arguments, as the runtime really frees, donates,
deletes and lays them out); where the backend reports allocator statistics (GPUs), their
peak is recorded too. XLA's temporary buffers are not visible there.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import jax
import numpy as np
from jax.sharding import Mesh, Sharding

from mpmd.run.program import CallInstruction, Program, delete_values


def shard_bytes(shape: Sequence[int], dtype, sharding: Sharding) -> int:
  """Bytes of one device's shard of a global array with this sharding."""
  shard = sharding.shard_shape(tuple(shape))
  return int(np.prod(shard, dtype=np.int64)) * np.dtype(dtype).itemsize


@dataclasses.dataclass(frozen=True)
class MeshMemory:
  """Memory of one mesh, in bytes per device (the largest over its devices).

  Attributes:
    mesh: mesh name.
    estimated_peak: the estimate's peak over the program.
    estimated_peak_at: index of the instruction at which it is reached.
    estimated: live bytes at each instruction (index = instruction): its
      results exist and the values it used for the last time are not
      dropped yet, but for the buffers XLA aliased to its results.
    measured_peak: peak of the live-array bytes measured by an instrumented
      run (None when not measured).
    allocator_peak: the device allocator's peak bytes in use where the
      backend reports it (GPUs), else None.
  """
  mesh: str
  estimated_peak: int
  estimated_peak_at: int
  estimated: tuple[int, ...]
  measured_peak: int | None = None
  allocator_peak: int | None = None

  @property
  def estimated_live_peak(self) -> int:
    """The estimate's peak of the arrays alive between instructions (what
    `measured_peak` measures; `estimated_peak` adds each call's scratch
    space, XLA's temp buffers, which a measurement between calls cannot
    see)."""
    return max(self.estimated, default=0)


@dataclasses.dataclass(frozen=True)
class MemoryReport:
  """Per-mesh memory of a program (see `Compiled.memory_report`)."""
  meshes: tuple[MeshMemory, ...]

  def __getitem__(self, mesh: str) -> MeshMemory:
    for m in self.meshes:
      if m.mesh == mesh:
        return m
    raise KeyError(mesh)

  def __str__(self) -> str:
    def mib(x: int | None) -> str:
      return "-" if x is None else f"{x / 2**20:.2f} MiB"
    rows = [("mesh", "estimated peak", "at instruction", "estimated between calls",
             "measured peak", "allocator peak")]
    for m in self.meshes:
      rows.append((m.mesh, mib(m.estimated_peak), str(m.estimated_peak_at),
                   mib(m.estimated_live_peak), mib(m.measured_peak), mib(m.allocator_peak)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def _temp_and_alias(fragment) -> tuple[int, int]:
  stats = fragment.memory_analysis()
  if stats is None:
    return 0, 0
  return (int(getattr(stats, "temp_size_in_bytes", 0) or 0),
          int(getattr(stats, "alias_size_in_bytes", 0) or 0))


def estimate(program: Program, input_avals: Sequence[jax.ShapeDtypeStruct],
             input_meshes: Sequence[str], donated_inputs: Sequence[bool],
             mesh_names: Sequence[str]) -> dict[str, tuple[list[int], int, int]]:
  """Per mesh: (live bytes after each instruction, peak, index of the peak;
  -1 when the peak is the inputs alone)."""
  size: dict[int, tuple[str, int]] = {}  # value id -> (mesh, bytes per device)
  aval_of: dict[int, tuple[tuple[int, ...], np.dtype]] = {}
  live = {m: 0 for m in mesh_names}
  held_by_caller: set[int] = set()
  for v, aval, mesh, sharding, donated in zip(program.input_ids, input_avals, input_meshes,
                                              program.input_shardings, donated_inputs):
    aval_of[v] = (tuple(aval.shape), aval.dtype)
    size[v] = (mesh, shard_bytes(aval.shape, aval.dtype, sharding))
    live[mesh] += size[v][1]
    if not donated:  # (a donated one is deleted at its last use, as the runtime does)
      held_by_caller.add(v)
  # The runtime's own constants (the scalars that tell microbatches apart)
  # live on their mesh for as long as the program does.
  reader = {}  # value -> the mesh of its first reader
  for inst in program.instructions:
    for v in inst.operands:
      reader.setdefault(v, getattr(inst, "src_mesh", inst.mesh))
  for v, x in program.constants.items():
    aval_of[v] = (tuple(x.shape), x.dtype)
    mesh = reader.get(v)
    if mesh in live:
      size[v] = (mesh, shard_bytes(x.shape, x.dtype, x.sharding))
      live[mesh] += size[v][1]
    held_by_caller.add(v)
  curves: dict[str, list[int]] = {m: [] for m in mesh_names}
  peak = {m: (live[m], -1) for m in mesh_names}
  for index, inst in enumerate(program.instructions):
    if isinstance(inst, CallInstruction):
      temp, alias = _temp_and_alias(inst.fragment)
      # Each result as its program lays it out (the avals' own sharding
      # says nothing of the mesh: a result split over a mesh's devices
      # would count whole).
      for v, aval, sharding in zip(inst.results, inst.fragment.out_avals,
                                   inst.fragment.output_shardings):
        aval_of[v] = (tuple(aval.shape), aval.dtype)
        size[v] = (inst.mesh, shard_bytes(aval.shape, aval.dtype, sharding))
        live[inst.mesh] += size[v][1]
      during = live[inst.mesh] + temp - alias
    else:
      v, src = inst.results[0], inst.operands[0]
      aval_of[v] = aval_of[src]
      size[v] = (inst.mesh, shard_bytes(*aval_of[src], inst.sharding))
      live[inst.mesh] += size[v][1]
      during = live[inst.mesh]
    if during > peak[inst.mesh][0]:
      peak[inst.mesh] = (during, index)
    # The curve's point: the results exist and the operands used for the
    # last time are not dropped yet (what `measure` sees after an
    # instruction), except the buffers XLA gave to results (aliased: a
    # donated operand no result takes stays alive until it is dropped).
    aliased = alias if isinstance(inst, CallInstruction) else 0
    for m in mesh_names:
      curves[m].append(live[m] - (aliased if m == inst.mesh else 0))
    for v in inst.frees:
      if v not in held_by_caller and v in size:
        mesh, nbytes = size[v]
        live[mesh] -= nbytes
  return {m: (curves[m], peak[m][0], peak[m][1]) for m in mesh_names}


def measure(program: Program, inputs: Sequence[jax.Array],
            topology: Mapping[str, Mesh]) -> dict[str, tuple[int, int | None]]:
  """Runs `program` instruction by instruction, waiting for each, and
  returns per mesh (peak bytes per device of the arrays alive, allocator
  peak or None)."""
  device_mesh = {d: name for name, mesh in topology.items() for d in mesh.devices.flat}
  held = list(inputs)  # the caller's arguments stay alive unless consumed

  def live_bytes(env: list) -> dict[str, int]:
    per_device: dict = {}
    seen: set[int] = set()
    for x in [*held, *env]:
      if x is None or id(x) in seen or x.is_deleted():
        continue
      seen.add(id(x))
      for shard in x.addressable_shards:
        per_device[shard.device] = per_device.get(shard.device, 0) + shard.data.nbytes
    out = {name: 0 for name in topology}
    for d, nbytes in per_device.items():
      name = device_mesh.get(d)
      if name is not None:
        out[name] = max(out[name], nbytes)
    return out

  env = program.initial_env(inputs)
  peak = live_bytes(env)
  for index, inst in enumerate(program.instructions):
    inst.execute(env)
    jax.block_until_ready([env[i] for i in inst.results])
    for name, nbytes in live_bytes(env).items():
      peak[name] = max(peak[name], nbytes)
    delete_values(env, program.deleted_after(index))  # as `Program.run` does
    for i in inst.frees:
      env[i] = None
  del env, held
  result = {}
  for name, mesh in topology.items():
    allocator = None
    stats = [d.memory_stats() for d in mesh.devices.flat]
    if all(s and "peak_bytes_in_use" in s for s in stats):
      allocator = max(int(s["peak_bytes_in_use"]) for s in stats)
    result[name] = (peak[name], allocator)
  return result
