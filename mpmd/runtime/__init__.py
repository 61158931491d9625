"""The runtime: compiling a partitioned program and running it.

Its rooms, in the order a step meets them:

* `mpmd.runtime.fragment` -- compile and dispatch one fragment program (a
  StableHLO module SPMD-partitioned over the devices of one mesh):
  `compile_fragment`, `FragmentExecutable`.
* `mpmd.runtime.compile` -- `compile_program`: compile every fragment of a
  partitioned program and build the `Program`, in the parts below.
* `mpmd.runtime.layouts` -- the order in which shardings are known: waves
  over the instructions, sharding propagation between fragments and, across
  processes, through JAX's key-value store.
* `mpmd.runtime.fragment_cache` -- the fragment compile cache: one program
  per distinct (function, mesh, shardings), compiled in parallel, loaded on
  meshes of the same shape, warmed up (`mpmd.runtime.warmup`).
* `mpmd.runtime.constants` -- the constant inputs the runtime makes itself.
* `mpmd.runtime.transfers` -- the transfer plan: a copy within this process,
  a collective or a pull between processes.
* `mpmd.runtime.assemble` -- the runtime instructions, output fix-ups and
  the one `ProgramParts` value a `Program` is built from.
* `mpmd.runtime.program` -- the instructions (`CallInstruction`,
  `TransferInstruction`, `CrossProcessTransferInstruction`), `ProgramParts`
  and `Program`, which runs them asynchronously; `max_inflight`.
* `mpmd.runtime.crossprocess` -- transfers between meshes of different
  processes (one collective over both meshes' devices).
* `mpmd.runtime.memory` -- per-mesh memory of a compiled program, estimated
  and measured (`Compiled.memory_report`).
* `mpmd.runtime.trace` -- runtime traces: when each fragment really ran
  (`Compiled.trace`).

The errors the runtime raises live in `mpmd.errors` (exported from `mpmd`).
"""

from mpmd.errors import FragmentRuntimeError
from mpmd.runtime.compile import compile_program
from mpmd.runtime.program import (CallInstruction, CrossProcessTransferInstruction, Instruction,
                                  Program, ProgramParts, TransferInstruction, max_inflight)

__all__ = [
    "CallInstruction", "CrossProcessTransferInstruction", "FragmentRuntimeError", "Instruction",
    "Program", "ProgramParts", "TransferInstruction", "compile_program", "max_inflight",
]
