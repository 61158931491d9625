"""Puts the runtime's `Program` together from a resolved compile plan.

Once every instruction of the partitioned program has its layouts (decided
by `mpmd.partition.layouts`) and programs (`mpmd.compile.compile_plan`),
what is left is bookkeeping: the output fix-ups (copies where an output's
sharding is not the one asked for, placeholders for outputs on other
processes' meshes), one runtime instruction per instruction this process
runs (a `CallInstruction`, or a transfer from the transfer plan,
`mpmd.compile.transfers`), and one `ProgramParts` value that `Program` is
built from.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from jax.sharding import Sharding

from mpmd import distributed as dist
from mpmd.errors import MpmdError
from mpmd.run import crossprocess
from mpmd.compile.compile_plan import SKIPPED, CompilePlan, PlannedCall
from mpmd.run.program import (CallInstruction, CrossProcessTransferInstruction, Instruction,
                                  Program, ProgramParts, eager_sends, max_inflight)
from mpmd.compile.transfers import plan_transfer

if TYPE_CHECKING:
  from mpmd.partition.partitioner import PartitionedProgram

__all__ = ["assemble_program"]

logger = logging.getLogger("mpmd")


def assemble_program(partition: PartitionedProgram, plan: CompilePlan,
                     input_shardings: Sequence[Sharding],
                     output_shardings: Mapping[int, Sharding], donated_inputs: Sequence[bool],
                     output_avals: Sequence[Any], start: float) -> Program:
  """The `Program` of a resolved `plan` (`start`: when the compile began,
  for the log)."""
  final, fixups, remote = _output_fixups(partition, plan.sharding_of, output_shardings,
                                         output_avals, plan.owner)
  cache, topology = plan.cache, plan.topology
  logger.info("compiled %d distinct fragment programs for %d calls on %d meshes in %.2fs: "
              "%d XLA compiles (%.2fs over %d threads), %d loaded on another mesh of the "
              "same shape; %d programs making the constants calls consume",
              len({id(f) for f in cache.compiled.values()}),
              sum(isinstance(r, PlannedCall) for r in plan.resolved),
              len({k[1] for k in cache.compiled}), time.perf_counter() - start,
              cache.num_compiled, cache.compile_seconds, cache.workers, cache.num_loaded,
              len(cache.fillers))
  donated = {v for v, d in zip(partition.input_ids, donated_inputs) if d}
  instructions = _local_instructions(partition, plan, donated)
  platform = next(iter(topology.values())).devices.flat[0].platform
  return Program(ProgramParts(
      instructions=instructions, input_ids=partition.input_ids,
      output_ids=partition.output_ids, num_values=partition.num_values,
      input_shardings=input_shardings, output_shardings=final, fragments=cache.fragments(),
      output_fixups=fixups, donated_inputs=donated_inputs, remote_outputs=remote,
      constants=plan.constants, max_inflight=max_inflight(platform), ownership=plan.owner,
      bounded_meshes=frozenset(name for name, mesh in topology.items() if mesh.size > 1),
      num_xla_compiles=cache.num_compiled, num_loaded=cache.num_loaded,
      num_warmed_up=cache.num_warmed_up, fingerprint=plan.fingerprint))


def _output_fixups(partition: PartitionedProgram, sharding_of: Mapping[int, Sharding],
                   output_shardings: Mapping[int, Sharding], output_avals: Sequence[Any],
                   owner: dist.Ownership) -> tuple[list[Sharding | None], dict[int, Sharding],
                                                   dict[int, dist.RemoteArray]]:
  """Output fix-ups: (the sharding of each output, output index -> the
  sharding to copy it to, output index -> placeholder).

  An output gets copied where its sharding is not the one the caller asked
  for (an input returned as is, or a value returned twice); an output on a
  mesh of other processes becomes a `RemoteArray` placeholder.
  """
  final = [sharding_of.get(v) for v in partition.output_ids]
  fixups = {}
  remote = {}
  for k, mesh in enumerate(partition.output_meshes):
    if not owner.runs(mesh):
      aval = output_avals[k]
      remote[k] = dist.RemoteArray(aval.shape, aval.dtype, mesh, owner.processes[mesh])
  for k, sharding in output_shardings.items():
    if k not in remote and final[k] != sharding:  # an input returned as is, or returned twice
      fixups[k] = sharding
      final[k] = sharding
  return final, fixups, remote


def _local_instructions(partition: PartitionedProgram, plan: CompilePlan,
                        donated_inputs: set[int]) -> list[Instruction]:
  """The runtime instructions this process runs, in program order (those of
  meshes it takes no part in dropped; the pulls it serves moved early,
  `eager_sends`, offering a copy where a later instruction consumes their
  value, `crossprocess.keep_offered`; `donated_inputs`: the value ids of the
  arguments the caller donates)."""
  if any(r is None for r in plan.resolved):  # cannot happen for a verified program
    raise MpmdError("the partitioned program uses a value before defining it")
  cache, owner = plan.cache, plan.owner
  functions = cache.functions
  #: The functions whose programs have effects outside them (host callbacks
  #: among them): their calls wait for the step's arguments to be checked
  #: (`Program.run`).
  effectful = {name for name, f in functions.items() if f.has_side_effects}
  instructions = []
  for index, (inst, planned) in enumerate(zip(partition.program, plan.resolved)):
    if planned is SKIPPED:
      continue
    if isinstance(planned, PlannedCall):
      instructions.append(CallInstruction(
          planned.fragment, inst.mesh, tuple(inst.operands), tuple(inst.results),
          tuple(inst.origins), inst.location, inst.unit,
          donated=tuple(functions[inst.callee].donated_args), fresh=planned.fresh,
          fill=None if planned.fill is None else cache.filler(planned.fill),
          effects=inst.callee in effectful))
    else:
      instructions.append(plan_transfer(index, inst, planned, plan.topology, owner,
                                        plan.fingerprint))
  instructions = eager_sends(instructions)
  if owner.multiprocess:
    copied = crossprocess.keep_offered(instructions,
                                       _consumed_after(instructions, donated_inputs))
    crossing = [r for r in instructions if isinstance(r, CrossProcessTransferInstruction)]
    pulls = sum(isinstance(r.transfer, crossprocess.PullTransfer) for r in crossing)
    logger.info("process %d runs meshes %s: %d of %d instructions, %d cross-process transfers "
                "(%d pulls, %d of them offering a copy, %d collectives)", owner.process,
                [m for m in plan.topology if owner.runs(m)], len(instructions),
                len(partition.program), len(crossing), pulls, copied, len(crossing) - pulls)
  return instructions


def _consumed_after(instructions: Sequence[Instruction], donated_inputs: set[int]):
  """`consumed(index, value)`: whether an instruction after `index`
  consumes `value`: a call donating it, or the deletion of an argument the
  caller donated at its last use (which is at `index` or later, since
  instruction `index` reads it)."""
  last_donation: dict[int, int] = {}
  for index, inst in enumerate(instructions):
    if isinstance(inst, CallInstruction):
      for k in inst.donated:
        last_donation[inst.operands[k]] = index
  return lambda index, value: value in donated_inputs or last_donation.get(value, -1) > index
