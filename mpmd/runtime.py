"""Compiles the fragments of a partitioned program and runs the program.

The partitioner returns an ordered instruction list: fragment calls (a
compiled SPMD program on one mesh) and transfers (between meshes). Compiling
walks the list once in program order, so every fragment is compiled with the
shardings its inputs really have (those of the user's inputs, or read back
from the executable that produces them). Running walks it again, dispatching
asynchronously; each value is dropped after its last use.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Mapping, Sequence

import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec, Sharding

from mpmd import _pjrt

logger = logging.getLogger("mpmd")


@dataclasses.dataclass(frozen=True)
class CallInstruction:
  """Run fragment `fragment` on `mesh`: values `operands` -> `results`."""
  fragment: _pjrt.FragmentExecutable
  mesh: str
  operands: tuple[int, ...]
  results: tuple[int, ...]
  origins: tuple[str, ...]
  location: str
  unit: str = ""
  frees: tuple[int, ...] = ()

  def __str__(self) -> str:
    unit = f" [{self.unit}]" if self.unit else ""
    return (f"call {self.fragment.name}{unit} on {self.mesh}: "
            f"{list(self.operands)} -> {list(self.results)}")


@dataclasses.dataclass(frozen=True)
class TransferInstruction:
  """Move value `operands[0]` from `src_mesh` to `mesh` as `results[0]`."""
  sharding: Sharding
  src_mesh: str
  mesh: str
  operands: tuple[int, ...]
  results: tuple[int, ...]
  location: str
  frees: tuple[int, ...] = ()

  def __str__(self) -> str:
    return f"transfer {self.operands[0]} from {self.src_mesh} to {self.mesh} -> {self.results[0]}"


Instruction = CallInstruction | TransferInstruction


def _on_mesh(sharding: Sharding, mesh: Mesh) -> Sharding:
  """The same layout as `sharding`, on the devices of `mesh`."""
  if isinstance(sharding, NamedSharding):
    return NamedSharding(mesh, sharding.spec, memory_kind=sharding.memory_kind)
  return NamedSharding(mesh, PartitionSpec())


def _with_frees(instructions: list[Instruction], keep: set[int]) -> list[Instruction]:
  """Adds to each instruction the values whose last use it is."""
  last_use: dict[int, int] = {}
  for index, inst in enumerate(instructions):
    for v in inst.operands:
      last_use[v] = index
  frees: dict[int, list[int]] = {}
  for v, index in last_use.items():
    if v not in keep:
      frees.setdefault(index, []).append(v)
  return [dataclasses.replace(inst, frees=tuple(frees.get(i, ()))) for i, inst in enumerate(instructions)]


class Program:
  """A compiled MPMD program: fragment executables and the instruction list."""

  def __init__(self, instructions: list[Instruction], input_ids: Sequence[int],
               output_ids: Sequence[int], num_values: int,
               fragments: Mapping[tuple[str, str], _pjrt.FragmentExecutable],
               output_shardings: Sequence[Sharding]):
    self.instructions = _with_frees(instructions, set(output_ids))
    self.input_ids = tuple(input_ids)
    self.output_ids = tuple(output_ids)
    self.num_values = num_values
    self.fragments = dict(fragments)
    self.output_shardings = tuple(output_shardings)

  def run(self, inputs: Sequence[jax.Array]) -> list[jax.Array]:
    """Runs the program on inputs already placed on their meshes."""
    env: list = [None] * self.num_values
    for i, x in zip(self.input_ids, inputs):
      env[i] = x
    for inst in self.instructions:
      if isinstance(inst, CallInstruction):
        outs = inst.fragment(*[env[i] for i in inst.operands])
        for i, x in zip(inst.results, outs):
          env[i] = x
      else:
        env[inst.results[0]] = _pjrt.transfer(env[inst.operands[0]], inst.sharding)
      for i in inst.frees:
        env[i] = None
    return [env[i] for i in self.output_ids]


def compile_program(partition, topology: Mapping[str, Mesh],
                    input_shardings: Sequence[Sharding]) -> Program:
  """Compiles each distinct (fragment function, mesh, input shardings) once.

  Args:
    partition: the `mpmd._mpmd.PartitionResult` of the partitioner.
    topology: mesh name -> mesh.
    input_shardings: the sharding of each input of the entry function.
  """
  texts = {f.name: f.module_text for f in partition.functions}
  sharding_of: dict[int, Sharding] = dict(zip(partition.input_ids, input_shardings))
  cache: dict[tuple, _pjrt.FragmentExecutable] = {}
  instructions: list[Instruction] = []
  num_calls = sum(1 for inst in partition.program if inst.kind == "call")
  start = time.perf_counter()
  calls_seen = 0
  for inst in partition.program:
    mesh = topology[inst.mesh]
    if inst.kind == "transfer":
      sharding = _on_mesh(sharding_of[inst.operands[0]], mesh)
      sharding_of[inst.results[0]] = sharding
      instructions.append(TransferInstruction(sharding, inst.src_mesh, inst.mesh,
                                              tuple(inst.operands), tuple(inst.results),
                                              inst.location))
      continue
    calls_seen += 1
    in_shardings = tuple(sharding_of[v] for v in inst.operands)
    key = (inst.callee, inst.mesh, in_shardings)
    fragment = cache.get(key)
    if fragment is None:
      t0 = time.perf_counter()
      fragment = _pjrt.compile_fragment(texts[inst.callee], mesh, name=inst.callee,
                                        in_shardings=list(in_shardings))
      cache[key] = fragment
      logger.info("[%d/%d] compiled %s for mesh %r (%d devices) in %.2fs", calls_seen, num_calls,
                  inst.callee, inst.mesh, mesh.size, time.perf_counter() - t0)
    for v, sharding in zip(inst.results, fragment.output_shardings):
      sharding_of[v] = sharding
    instructions.append(CallInstruction(fragment, inst.mesh, tuple(inst.operands),
                                        tuple(inst.results), tuple(inst.origins), inst.location,
                                        inst.unit))
  logger.info("compiled %d distinct fragment programs for %d calls in %.2fs", len(cache),
              num_calls, time.perf_counter() - start)
  num_values = 1 + max([*partition.input_ids, *partition.output_ids,
                        *(v for inst in partition.program for v in (*inst.operands, *inst.results))],
                       default=-1)
  fragments = {(k[0], k[1]): f for k, f in cache.items()}
  return Program(instructions, partition.input_ids, partition.output_ids, num_values, fragments,
                 [sharding_of[v] for v in partition.output_ids])
