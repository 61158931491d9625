"""Partition: from a config and a lowering to the partitioned program.

The second stage of a step (trace -> partition -> compile -> run). It builds
what the C++ partitioner needs once, in typed form (`mpmd._mpmd.ProgramSpec`,
`PartitionOptions`, schedule `Unit`s; no text), runs it in two calls
(`import_program`, then `ImportedProgram.finish` with the schedule resolved
against the imported program's units), and hands the result on as one typed
value (`PartitionedProgram`). What a call does with the program's flat
inputs and outputs (`Signature`) lives in `mpmd.run.calling`.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax

from mpmd import _mpmd
from mpmd import knobs
from mpmd import options as options_table
from mpmd.config import MpmdConfig
from mpmd.errors import ConfigError, PartitionError
from mpmd.trace.tracing import MpmdLoweringResult
from mpmd.schedule import Schedule
from mpmd.schedule import resolve as schedule_resolve
from mpmd.partition import dispatch_cost
from mpmd.partition.sharding import broadcast_prefix, mesh_of_sharding_leaf

logger = logging.getLogger("mpmd")


# ---------------------------------------------------------------------------
# Where the flat inputs and outputs go (before partitioning)
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class MeshHints:
  """What the user said about the flat arguments and outputs.

  Attributes:
    in_meshes / out_meshes: per flat argument / output, the mesh it must be
      on (None: the partitioner infers it). Sources, first wins:
      `input_mesh_assignment` / `output_mesh_assignment`, then a
      `NamedSharding` of one of the topology's meshes in `in_shardings` /
      `out_shardings`, then (inputs, with `read_input_mesh_from_arguments`)
      the mesh a committed argument lives on.
    in_leaves / out_leaves: per flat argument / output, its `in_shardings` /
      `out_shardings` leaf (None where not given).
  """
  in_meshes: tuple[str | None, ...]
  out_meshes: tuple[str | None, ...]
  in_leaves: tuple[Any, ...]
  out_leaves: tuple[Any, ...]


class _Broadcast:
  """A prefix leaf's mesh and the number of leaves it covers."""

  def __init__(self, mesh: str | None, count: int):
    self.mesh, self.count = mesh, count


def _prefix_leaves(what: str, prefix: Any, tree: Any) -> list[str | None]:
  """Broadcasts a pytree prefix of mesh names (or None) to the leaves of `tree`."""
  if prefix == () or prefix is None:
    return [None] * len(jax.tree.leaves(tree))
  try:
    per_leaf = jax.tree.map(lambda mesh, sub: _Broadcast(mesh, len(jax.tree.leaves(sub))),
                            prefix, tree, is_leaf=lambda x: x is None)
  except ValueError as e:
    raise ConfigError(f"{what} is not a pytree prefix of the function's "
                      f"{'arguments' if 'input' in what else 'outputs'}: {e}") from e
  groups = jax.tree.leaves(per_leaf, is_leaf=lambda x: isinstance(x, _Broadcast))
  return [g.mesh for g in groups for _ in range(g.count)]


def _fill(meshes: list[str | None], more: Sequence[str | None]) -> None:
  """Sets the meshes still unknown from a later source."""
  for i, mesh in enumerate(more):
    if mesh is not None and meshes[i] is None:
      meshes[i] = mesh


def argument_meshes(config: MpmdConfig, leaves: Sequence[Any]) -> list[str | None]:
  """Per flat argument, the mesh whose devices it is committed to (or None)."""
  return [config.mesh_of_devices(x.sharding.device_set)
          if isinstance(x, jax.Array) and x.committed else None for x in leaves]


def mesh_hints(config: MpmdConfig, lowering: MpmdLoweringResult, dynamic: tuple,
               arg_leaves: Sequence[Any], in_shardings: Any, out_shardings: Any) -> MeshHints:
  """Broadcasts the user's prefixes to flat leaves and merges the mesh sources."""
  num_in = len(lowering.in_avals)
  num_out = lowering.out_tree.num_leaves
  num_positional = len(jax.tree.leaves(dynamic))
  pad = [None] * (num_in - num_positional)  # kwargs: no prefix applies
  in_leaves = broadcast_prefix("in_shardings", in_shardings, dynamic, num_positional) + pad
  out_tree = jax.tree_util.tree_unflatten(lowering.out_tree, [0] * num_out)
  out_leaves = broadcast_prefix("out_shardings", out_shardings, out_tree, num_out)

  in_meshes = _prefix_leaves("input_mesh_assignment", config.input_mesh_assignment, dynamic) + pad
  _fill(in_meshes, [mesh_of_sharding_leaf(leaf, config) for leaf in in_leaves])
  if config.read_input_mesh_from_arguments:
    _fill(in_meshes, argument_meshes(config, arg_leaves))
  out_meshes = _prefix_leaves("output_mesh_assignment", config.output_mesh_assignment, out_tree)
  _fill(out_meshes, [mesh_of_sharding_leaf(leaf, config) for leaf in out_leaves])
  return MeshHints(tuple(in_meshes), tuple(out_meshes), tuple(in_leaves), tuple(out_leaves))


# ---------------------------------------------------------------------------
# The typed request
# ---------------------------------------------------------------------------


def program_spec(config: MpmdConfig, lowering: MpmdLoweringResult,
                 hints: MeshHints) -> _mpmd.ProgramSpec:
  """The topology and where labels, program inputs and outputs go."""
  spec = _mpmd.ProgramSpec()
  spec.topology = [_mpmd.MeshSpec(name, [(str(axis), int(size))
                                         for axis, size in mesh.shape.items()])
                   for name, mesh in config.topology.items()]
  stages = config.name_to_stage_assignment or {}
  spec.assignment = [_mpmd.NameAssignment(name, mesh, stages.get(name, -1))
                     for name, mesh in config.name_to_mesh_assignment.items()]
  # Program input k is flat argument kept_var_idx[k].
  spec.input_assignment = [_mpmd.IndexAssignment(k, hints.in_meshes[i])
                           for k, i in enumerate(lowering.kept_var_idx)
                           if hints.in_meshes[i] is not None]
  spec.output_assignment = [_mpmd.IndexAssignment(j, mesh)
                            for j, mesh in enumerate(hints.out_meshes) if mesh is not None]
  return spec


def partition_options(config: MpmdConfig) -> _mpmd.PartitionOptions:
  """The config's partitioning options and merge rules, typed."""
  options = options_table.typed(config.partitioning_options or {})
  options.merge_rules = [[_mpmd.Unit(rule.mesh, kind, microbatch, -1 if stage is None else stage)
                          for kind, microbatch, stage in rule.parsed_units()]
                         for rule in config.fragment_merge_rules]
  return options


def compiler_schedule(schedule: Schedule, mesh_names: Sequence[str]) -> list[list[_mpmd.Unit]]:
  """The per-mesh order as the compiler takes it (one list of units per mesh)."""
  return [[_mpmd.Unit(mesh_names[m], u.kind, u.microbatch, u.stage) for u in schedule.orders[m]]
          for m in range(schedule.num_meshes)]


# ---------------------------------------------------------------------------
# Running the partitioner
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class PartitionedProgram:
  """The partitioned program, as `mpmd.run.calling.Signature` and the runtime
  (`mpmd.compile.compile_program.compile_program`) read it: the C++ `_mpmd.PartitionResult`
  read once into typed fields (its status, warnings and timing stay here).

  Attributes:
    functions: one `_mpmd.FragmentFunction` (name, module text, donated
      arguments) per distinct fragment body.
    program: the instructions in order, one `_mpmd.Instruction` each: a
      fragment call (`kind == "call"`: callee, mesh, operand and result
      value ids, origins, unit, location) or a transfer (`"transfer"`).
    input_ids / output_ids: value ids of the program's inputs / outputs.
    input_meshes / output_meshes: per input / output, its mesh.
    constants: the `_mpmd.ConstantInput`s the runtime makes itself (value
      id, mesh, dtype, splat value, shape, whether a call consumes it).
    exported_text: the partitioned module (fragment calls and functions).
    input_memory_kinds / output_memory_kinds: per input / output, its
      memory kind ("" for device memory, "pinned_host" for host memory:
      `m1#pinned_host` in an input or output mesh assignment).
  """
  functions: tuple[Any, ...]
  program: tuple[Any, ...]
  input_ids: tuple[int, ...]
  input_meshes: tuple[str, ...]
  output_ids: tuple[int, ...]
  output_meshes: tuple[str, ...]
  constants: tuple[Any, ...]
  exported_text: str
  input_memory_kinds: tuple[str, ...] = ()
  output_memory_kinds: tuple[str, ...] = ()

  @classmethod
  def from_result(cls, result: _mpmd.PartitionResult) -> PartitionedProgram:
    """Reads a successful `_mpmd.PartitionResult` (each of its list fields
    is a fresh copy per read, so it is read once, here)."""
    return cls(tuple(result.functions), tuple(result.program), tuple(result.input_ids),
               tuple(result.input_meshes), tuple(result.output_ids),
               tuple(result.output_meshes), tuple(result.constants), result.exported_text,
               tuple(result.input_memory_kinds), tuple(result.output_memory_kinds))

  @functools.cached_property
  def num_values(self) -> int:
    """The size of the value table: one more than the largest value id."""
    return 1 + max([*self.input_ids, *self.output_ids,
                    *(v for inst in self.program for v in (*inst.operands, *inst.results))],
                   default=-1)

  def describe(self) -> str:
    """The instruction list, one line each (for the `mpmd` logger)."""
    lines = []
    for inst in self.program:
      if inst.kind == "call":
        lines.append(f"  {inst.mesh}: {inst.callee}  [{', '.join(inst.origins) or 'inferred'}]")
      else:
        lines.append(f"  transfer {inst.src_mesh} -> {inst.mesh}")
    return "\n".join(lines)


@dataclasses.dataclass(frozen=True)
class Partitioned:
  """The partitioner's answer.

  Attributes:
    program: the `PartitionedProgram` (instructions, fragment functions,
      input and output meshes, the exported module).
    import_again: prints the module after import (fragments on meshes,
      transfers) by importing the lowered module again: the text of a
      program of many microbatches is tens of megabytes, so it is made
      only when asked for (`imported_text`).
    schedule: the resolved `mpmd.schedule.Schedule` (None: program order).
    seconds: wall time of both calls, schedule resolution included.
    mpmd_opt_args: the `mpmd-opt` pipelines that redo this partition from
      the lowered module, as the C++ driver rendered them from the request,
      schedule and options it ran with (`_mpmd.PartitionResult.mpmd_opt_args`).
  """
  program: PartitionedProgram
  import_again: Callable[[], str]
  schedule: Schedule | None
  seconds: float
  mpmd_opt_args: tuple[str, ...] = ()

  @property
  def imported_text(self) -> str:
    """The module after import (fragments on meshes, transfers)."""
    return self.import_again()


def _import_again(module_text: str, spec: _mpmd.ProgramSpec,
                  flags: dict[str, bool]) -> str:
  """The text of `module_text` after the import pipeline, with the options
  of the first import."""
  options = _mpmd.PartitionOptions()
  for name, value in flags.items():
    setattr(options, name, value)
  imported = _mpmd.import_program(module_text, spec, options)
  return imported.text() if imported.ok else imported.error


def _log_warnings(text: str) -> None:
  for line in text.splitlines():
    if line.strip():
      logger.warning("%s", line)


def partial_sums_enabled() -> bool:
  """Whether gradient accumulators may be held as unreduced partial sums
  (`MPMD_PARTIAL_SUMS`; the partition flag `partial_sums`)."""
  return knobs.flag(knobs.MPMD_PARTIAL_SUMS)


def partition(fun_name: str, config: MpmdConfig, module_text: str, spec: _mpmd.ProgramSpec,
              options: _mpmd.PartitionOptions) -> Partitioned:
  """Imports the module, resolves the config's schedule against its units and
  finishes the partition. Raises `PartitionError` naming the function.
  `options` is not changed (the flags that follow from the schedule are set
  on a copy)."""
  start = time.perf_counter()
  options = options_table.copy(options)
  scheduled = config.pipeline_schedule is not None
  # With a schedule, inferred fragments stay apart until the units are ordered.
  options.merge_inferred_after_scheduling = scheduled
  # Packing values of any size pays where a device copy is cheap next to a
  # buffer's host time per call (not on CPU).
  platform = config.sharding_mesh.devices.flat[0].platform
  options.pack_large_fragment_values = platform != "cpu"
  # Back-to-back units of a mesh run as one program where a call costs more
  # than the second's work, by the platform's measured figures.
  options.dispatch_cost = dispatch_cost.for_platform(platform).typed()
  # Gradient accumulators held as unreduced partial sums (-mpmd-mark-partial-sums).
  options.partial_sums = partial_sums_enabled()
  import_flags = {f.name: getattr(options, f.name) for f in options_table.FLAGS}
  imported = _mpmd.import_program(module_text, spec, options)
  if not imported.ok:
    raise PartitionError(f"mpmd could not partition {fun_name}:\n{imported.error.rstrip()}")
  _log_warnings(imported.warnings)
  schedule = None
  order: list[list[_mpmd.Unit]] = []
  if scheduled:
    schedule = schedule_resolve.resolve(config.pipeline_schedule, imported.units,
                                        config.mesh_names)
    # Batched weight gradients need the W units the split makes.
    if options.split_bwd_fragments or options.batch_weight_gradients:
      schedule = schedule_resolve.with_weight_after_backward(schedule)
    options.split_bwd_fragments = bool(schedule.split_backward)
    options.validate_no_backward_deps = not schedule.wrap_around
    order = compiler_schedule(schedule, config.mesh_names)
  result = imported.finish(order, options)
  if not result.ok:
    message = f"mpmd could not partition {fun_name}:\n{result.error.rstrip()}"
    hint = _deadlock_hint(message, config)
    raise PartitionError(f"{message}\n{hint}" if hint else message)
  _log_warnings(result.warnings)
  seconds = time.perf_counter() - start
  logger.info("partitioned %s into %d fragment calls and %d transfers in %.3fs", fun_name,
              sum(1 for inst in result.program if inst.kind == "call"),
              sum(1 for inst in result.program if inst.kind == "transfer"), seconds)
  return Partitioned(PartitionedProgram.from_result(result),
                     functools.partial(_import_again, module_text, spec, import_flags),
                     schedule, seconds, tuple(result.mpmd_opt_args))


def _deadlock_hint(message: str, config: MpmdConfig) -> str:
  """What to check when a built-in schedule deadlocks on a program.

  Built-in schedules run stage i on the i-th mesh of the topology and send
  activations from stage i to stage i+1; a pipeline laid out the other way
  round (its first named computation on a later mesh) cannot run in their
  order, which shows up as a deadlock.
  """
  spec = config.pipeline_schedule
  if "the pipeline schedule deadlocks" not in message or not isinstance(spec, str) or ":" in spec:
    return ""
  order = ", ".join(config.mesh_names)
  placed = ", ".join(f"{name} -> {mesh}" for name, mesh in config.name_to_mesh_assignment.items())
  return (f"hint: built-in schedule {spec!r} runs stage i on the i-th mesh of the topology "
          f"({order}) and expects stage i to feed stage i+1 in the forward pass. The named "
          f"computations are placed {placed}: if the pipeline's first stage is not on the first "
          "mesh, reorder the topology (or the assignment) so that the forward pass goes from "
          "the first mesh to the last, or give the schedule as a text table")


__all__ = ["MeshHints", "Partitioned", "PartitionedProgram", "argument_meshes",
           "compiler_schedule", "mesh_hints", "partition", "partition_options", "program_spec"]
