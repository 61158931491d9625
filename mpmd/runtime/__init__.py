"""The runtime: compiling a partitioned program and running it.

Its rooms, in the order a step meets them:

* `mpmd.runtime.fragment` -- compile and dispatch one fragment program (a
  StableHLO module SPMD-partitioned over the devices of one mesh):
  `compile_fragment`, `FragmentExecutable`.
* `mpmd.runtime.compile` -- `compile_program`: compile every fragment of a
  partitioned program (wave-parallel, with sharding propagation between
  fragments and, across processes, through JAX's key-value store), plan the
  transfers and build the `Program`.
* `mpmd.runtime.program` -- the instructions (`CallInstruction`,
  `TransferInstruction`, `CrossProcessTransferInstruction`) and `Program`,
  which runs them asynchronously; `max_inflight`.
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
                                  Program, TransferInstruction, max_inflight)

__all__ = [
    "CallInstruction", "CrossProcessTransferInstruction", "FragmentRuntimeError", "Instruction",
    "Program", "TransferInstruction", "compile_program", "max_inflight",
]
