"""The JAX stages model for MPMD programs: `Lowered` -> `Compiled` -> call.

`mpmd.jit(f, config).lower(*args)` traces and lowers `f`, runs the C++
partitioner and returns a `Lowered`; `Lowered.compile()` compiles every
distinct fragment program on its mesh and returns a `Compiled`, which runs
the program when called with arguments like those `lower` saw.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec, Sharding

from mpmd import runtime
from mpmd.config import MpmdConfig
from mpmd.errors import MpmdError
from mpmd.lowering import MpmdLoweringResult

logger = logging.getLogger("mpmd")


def _describe_program(partition) -> str:
  lines = []
  for inst in partition.program:
    if inst.kind == "call":
      lines.append(f"  {inst.mesh}: {inst.callee}  [{', '.join(inst.origins) or 'inferred'}]")
    else:
      lines.append(f"  transfer {inst.src_mesh} -> {inst.mesh}")
  return "\n".join(lines)


class Lowered:
  """A partitioned, not yet compiled MPMD program."""

  def __init__(self, config: MpmdConfig, lowering: MpmdLoweringResult, partition,
               static_args: tuple, static_argnums: tuple[int, ...], schedule=None):
    self.config = config
    #: The resolved `mpmd.schedule.Schedule` the program runs in (or None:
    #: the order JAX emitted).
    self.schedule = schedule
    self.lowering = lowering
    self.partition = partition
    self._static_args = static_args
    self._static_argnums = static_argnums

  @property
  def in_tree(self):
    """Pytree definition of the non-static `(args, kwargs)`."""
    return self.lowering.in_tree

  @property
  def out_tree(self):
    return self.lowering.out_tree

  @property
  def input_meshes(self) -> tuple[str | None, ...]:
    """Mesh of each flat argument (None for arguments the program does not use)."""
    meshes: list[str | None] = [None] * len(self.lowering.in_avals)
    for k, i in enumerate(self.lowering.kept_var_idx):
      meshes[i] = self.partition.input_meshes[k]
    return tuple(meshes)

  @property
  def output_meshes(self) -> tuple[str, ...]:
    """Mesh of each flat output."""
    return tuple(self.partition.output_meshes)

  def as_text(self, dialect: str = "mpmd") -> str:
    """The program as text.

    Args:
      dialect: "stablehlo": the module JAX lowered, with `mpmd.*` label ops;
        "mpmd-import": after import (fragments on meshes, transfers);
        "mpmd": the final program (fragment calls and fragment functions).
    """
    if dialect == "stablehlo":
      return self.lowering.lowered.as_text()
    if dialect == "mpmd-import":
      return self.partition.imported_text
    if dialect == "mpmd":
      return self.partition.exported_text
    raise ValueError(f"unknown dialect {dialect!r}: use 'stablehlo', 'mpmd-import' or 'mpmd'")

  def compile(self) -> Compiled:
    """Compiles every distinct fragment program on its mesh (through PJRT)."""
    topology = self.config.topology
    in_shardings = [NamedSharding(topology[m], PartitionSpec())
                    for m in self.partition.input_meshes]
    logger.info("partitioned program:\n%s", _describe_program(self.partition))
    program = runtime.compile_program(self.partition, topology, in_shardings)
    return Compiled(self, program, in_shardings)


class Compiled:
  """A compiled MPMD program; call it like the original function."""

  def __init__(self, lowered: Lowered, program: runtime.Program,
               kept_input_shardings: Sequence[Sharding]):
    self.lowered = lowered
    self.program = program
    self._kept_input_shardings = tuple(kept_input_shardings)
    self._flat_in_shardings: list[Sharding | None] = [None] * len(lowered.lowering.in_avals)
    for k, i in enumerate(lowered.lowering.kept_var_idx):
      self._flat_in_shardings[i] = kept_input_shardings[k]

  @property
  def input_shardings(self) -> Any:
    """The sharding each argument is placed with (pytree like the arguments)."""
    return jax.tree_util.tree_unflatten(self.lowered.in_tree, self._flat_in_shardings)

  @property
  def output_shardings(self) -> Any:
    """The sharding of each output (pytree like the outputs)."""
    return jax.tree_util.tree_unflatten(self.lowered.out_tree, list(self.program.output_shardings))

  @property
  def schedule(self):
    """The `mpmd.schedule.Schedule` the program runs in (None: program order)."""
    return self.lowered.schedule

  @property
  def instructions(self) -> list[runtime.Instruction]:
    """The program in execution order."""
    return list(self.program.instructions)

  def as_text(self) -> str:
    """The partitioned MPMD program (fragment calls and fragment functions)."""
    return self.lowered.as_text("mpmd")

  def _flatten_args(self, args: tuple, kwargs: dict) -> list:
    static = self.lowered._static_argnums
    dynamic = tuple(a for i, a in enumerate(args) if i not in static)
    statics = tuple(a for i, a in enumerate(args) if i in static)
    if statics != self.lowered._static_args:
      raise MpmdError(f"static arguments {statics!r} differ from those the program was compiled "
                      f"for ({self.lowered._static_args!r}): lower and compile again")
    leaves, tree = jax.tree_util.tree_flatten((dynamic, kwargs))
    if tree != self.lowered.in_tree:
      raise MpmdError(f"arguments have structure {tree} but the program was compiled for "
                      f"{self.lowered.in_tree}")
    return leaves

  def __call__(self, *args, **kwargs) -> Any:
    leaves = self._flatten_args(args, kwargs)
    lowering = self.lowered.lowering
    inputs = []
    for k, i in enumerate(lowering.kept_var_idx):
      x, aval, sharding = leaves[i], lowering.in_avals[i], self._kept_input_shardings[k]
      shape, dtype = np.shape(x), jax.numpy.result_type(x)
      if tuple(shape) != tuple(aval.shape) or dtype != aval.dtype:
        path = jax.tree_util.keystr(jax.tree_util.tree_flatten_with_path(
            jax.tree_util.tree_unflatten(lowering.in_tree, leaves))[0][i][0])
        raise MpmdError(f"argument {path} has shape {tuple(shape)} and dtype {dtype} but the "
                        f"program was compiled for {tuple(aval.shape)} {aval.dtype}")
      if not (isinstance(x, jax.Array) and x.sharding == sharding):
        x = jax.device_put(x, sharding)
      inputs.append(x)
    outputs = self.program.run(inputs)
    return jax.tree_util.tree_unflatten(lowering.out_tree, outputs)
