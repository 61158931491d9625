"""Compiles the fragments of a partitioned program into a runnable `Program`.

The partitioner returns an ordered instruction list: fragment calls (a
compiled SPMD program on one mesh) and transfers (between meshes).
`compile_program` first has the partition stage decide every value's layout
(`mpmd.partition.layouts`: the annotated text of every fragment program),
then compiles and builds in three parts, each in a module of its own, read
in this order:

1. `mpmd.compile.compile_plan` -- the programs this process needs, from the
   fragment compile cache (`mpmd.compile.fragment_cache`: one program per
   distinct function, mesh and layouts, compiled in parallel), and the plan
   of each instruction;
2. `mpmd.compile.assemble` -- the runtime instructions (calls, and the
   transfer plan of `mpmd.compile.transfers`), the output fix-ups, and the
   one `ProgramParts` value the `Program` is built from;
3. `mpmd.run.program` -- the `Program` that runs them.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from jax.sharding import Mesh, NamedSharding, Sharding

from mpmd import distributed as dist
from mpmd._jax.compiling import HostCallbacks
from mpmd.compile.assemble import assemble_program
from mpmd.compile.compile_plan import CompilePlan
from mpmd.partition.layouts import lay_out_program
from mpmd.run.program import Program

if TYPE_CHECKING:
  from mpmd.partition.partitioner import PartitionedProgram

__all__ = ["compile_program"]


def compile_program(partition: PartitionedProgram, topology: Mapping[str, Mesh],
                    input_shardings: Sequence[Sharding],
                    output_shardings: Mapping[int, Sharding] | None = None,
                    donated_inputs: Sequence[bool] = (),
                    output_avals: Sequence[Any] = (),
                    callbacks: HostCallbacks | None = None) -> Program:
  """Compiles each distinct (fragment function, mesh, shardings) once, all in
  parallel (`MPMD_COMPILE_THREADS`, default 8, bounded by the number of
  CPUs), with the layouts the partition stage decides for them
  (`mpmd.partition.layouts.lay_out_program`).

  In a multi-process run only the fragments of meshes with devices of this
  process are compiled; transfers between meshes of different processes
  become collectives (`mpmd.run.crossprocess`). Every process decides the
  same layouts, so none waits for another's compile; each waits only until
  the others have laid out the same program (`MPMD_DISTRIBUTED_TIMEOUT`).

  Args:
    partition: the `mpmd.partition.partitioner.PartitionedProgram` of the partitioner.
    topology: mesh name -> mesh.
    input_shardings: the sharding of each input of the entry function.
    output_shardings: output index -> the sharding it must have (the
      fragment or transfer producing it is compiled for it; inputs returned
      as they are get copied).
    donated_inputs: per input, whether the caller donated it: it is
      consumed (deleted) at its last use in the program.
    output_avals: per output, its shape and dtype (for the `RemoteArray`
      placeholders of outputs on other processes' meshes).
    callbacks: the host callbacks of the lowered step (`jax.debug.print`,
      `jax.pure_callback`, ...), which the fragment programs that call them
      are compiled with.
  """
  start = time.perf_counter()
  laid_out = lay_out_program(partition, topology, input_shardings, output_shardings or {})
  input_shardings, output_shardings = list(laid_out.input_shardings), laid_out.output_shardings
  owner = dist.Ownership(topology)
  fingerprint = (_fingerprint(partition, input_shardings, output_shardings)
                 if owner.multiprocess else "")
  if owner.multiprocess:
    # Every process lays out the same program: wait until the others did
    # (processes running different programs fail here, naming the process).
    dist.wait_for_peers(f"mpmd/{fingerprint}/laid-out", owner.process,
                        {p for ps in owner.processes.values() for p in ps},
                        "process {process} to lay out the same program")
  plan = CompilePlan(laid_out, topology, owner, callbacks, fingerprint)
  plan.resolve()
  return assemble_program(partition, plan, input_shardings, output_shardings, donated_inputs,
                          output_avals, start)


def _fingerprint(partition: PartitionedProgram, input_shardings: Sequence[Sharding],
                 wanted: Mapping[int, Sharding]) -> str:
  """Names one compile of one program identically on every process."""
  h = hashlib.sha256(partition.exported_text.encode())
  for s in (*input_shardings, *(wanted[k] for k in sorted(wanted))):
    h.update(repr(s.spec if isinstance(s, NamedSharding) else s).encode())
  return h.hexdigest()[:24]
