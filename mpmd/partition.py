"""Partition: from a config and a lowering to the partitioned program.

The second stage of a step (trace -> partition -> compile -> run). It builds
what the C++ partitioner needs once, in typed form (`mpmd._mpmd.ProgramSpec`,
`PartitionOptions`, schedule `Unit`s; no text), runs it in two calls
(`import_program`, then `ImportedProgram.finish` with the schedule resolved
against the imported program's units), and describes the result's flat
inputs and outputs in one `Signature` that `Lowered`, `Compiled`, the memory
report and the runtime share.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import NamedSharding, Sharding

from mpmd import _mpmd
from mpmd import distributed as dist
from mpmd.config import KNOWN_PARTITIONING_OPTIONS, MpmdConfig
from mpmd.errors import ConfigError, MpmdError, PartitionError
from mpmd.lowering import MpmdLoweringResult
from mpmd.prng_keys import KeyBoundary
from mpmd.schedule import Schedule
from mpmd.schedule import resolve as schedule_resolve
from mpmd.sharding import (ArgumentPlacement, broadcast_prefix, check_fits, mesh_of_sharding_leaf,
                           on_mesh)

logger = logging.getLogger("mpmd")


def dtype_of(x: Any) -> Any:
  """The dtype of an argument (a RemoteArray, array or Python scalar)."""
  if isinstance(x, dist.RemoteArray):
    return x.dtype
  return jax.numpy.result_type(x)


#: Partitioning options that are the user's `mpmd_<flag>` options; the other
#: flags of `_mpmd.PartitionOptions` follow from the schedule.
_USER_FLAGS = tuple(name for name, _, _ in _mpmd.PARTITION_FLAGS
                    if f"mpmd_{name}" in KNOWN_PARTITIONING_OPTIONS)


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


def _leaf_paths(in_tree: Any) -> list[str]:
  """How errors name each leaf of `(args, kwargs)` with structure `in_tree`:
  `args[0]['w']`, `kwargs['x']`."""
  tree = jax.tree_util.tree_unflatten(in_tree, [0] * in_tree.num_leaves)
  return [("args" if first.idx == 0 else "kwargs") + jax.tree_util.keystr(tuple(rest))
          for (first, *rest), _ in jax.tree_util.tree_flatten_with_path(tree)[0]]


def argument_path(in_tree: Any, i: int) -> str:
  """How errors name flat argument `i` of `(args, kwargs)` with structure
  `in_tree`: `args[0]['w']`, `kwargs['x']`."""
  return _leaf_paths(in_tree)[i]


def _structure_difference(expected: Any, got: Any, limit: int = 4) -> str:
  """What differs between two `(args, kwargs)` structures, for messages."""
  want_args = jax.tree_util.tree_unflatten(expected, [0] * expected.num_leaves)[0]
  got_args = jax.tree_util.tree_unflatten(got, [0] * got.num_leaves)[0]
  parts = []
  if len(want_args) != len(got_args):
    parts.append(f"it takes {len(want_args)} positional (non-static) arguments, got "
                 f"{len(got_args)}")
  want, have = _leaf_paths(expected), _leaf_paths(got)
  want_set, have_set = set(want), set(have)
  missing = [p for p in want if p not in have_set]
  extra = [p for p in have if p not in want_set]
  for what, paths in (("missing", missing), ("unexpected", extra)):
    if paths:
      more = f" and {len(paths) - limit} more" if len(paths) > limit else ""
      parts.append(f"{what} {', '.join(paths[:limit])}{more}")
  return "; ".join(parts) or ("the same leaves in other containers (e.g. a list where the "
                              "program had a tuple, or a None)")


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
  options = _mpmd.PartitionOptions()
  for name in _USER_FLAGS:
    setattr(options, name, bool(config.option(f"mpmd_{name}")))
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
class Partitioned:
  """The partitioner's answer.

  Attributes:
    result: the `_mpmd.PartitionResult` (instructions, fragment functions,
      input and output meshes, the exported module).
    import_again: prints the module after import (fragments on meshes,
      transfers) by importing the lowered module again: the text of a
      program of many microbatches is tens of megabytes, so it is made
      only when asked for (`imported_text`).
    schedule: the resolved `mpmd.schedule.Schedule` (None: program order).
    seconds: wall time of both calls, schedule resolution included.
    mpmd_opt_args: the `mpmd-opt` pipelines that redo this partition from
      the lowered module (see `mpmd_opt_args`).
  """
  result: Any
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


def partition(fun_name: str, config: MpmdConfig, module_text: str, spec: _mpmd.ProgramSpec,
              options: _mpmd.PartitionOptions) -> Partitioned:
  """Imports the module, resolves the config's schedule against its units and
  finishes the partition. Raises `PartitionError` naming the function."""
  start = time.perf_counter()
  scheduled = config.pipeline_schedule is not None
  # With a schedule, inferred fragments stay apart until the units are ordered.
  options.merge_inferred_after_scheduling = scheduled
  import_flags = {name: getattr(options, name) for name, _, _ in _mpmd.PARTITION_FLAGS}
  imported = _mpmd.import_program(module_text, spec, options)
  if not imported.ok:
    raise PartitionError(f"mpmd could not partition {fun_name}:\n{imported.error.rstrip()}")
  _log_warnings(imported.warnings)
  schedule = None
  order: list[list[_mpmd.Unit]] = []
  if scheduled:
    schedule = schedule_resolve.resolve(config.pipeline_schedule, imported.units,
                                        config.mesh_names)
    if options.split_bwd_fragments:
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
  return Partitioned(result, functools.partial(_import_again, module_text, spec, import_flags),
                     schedule, seconds, mpmd_opt_args(config, spec, options, order))


def _units_text(units: Sequence[_mpmd.Unit]) -> str:
  return " ".join(f"{u.kind}{u.microbatch}" + (f".s{u.stage}" if u.stage >= 0 else "")
                  for u in units)


def mpmd_opt_args(config: MpmdConfig, spec: _mpmd.ProgramSpec, options: _mpmd.PartitionOptions,
                  order: Sequence[Sequence[_mpmd.Unit]]) -> tuple[str, ...]:
  """The `mpmd-opt` arguments that run the same import, optimize and export
  pipelines as `partition` (the request rendered in the pipelines' text
  options): `mpmd-opt <lowered module> <these>` prints the partitioned
  program. Only options that differ from the pipelines' defaults appear."""
  topology = ";".join(f"{m.name}:" + ",".join(f"{axis}={size}" for axis, size in m.axes)
                      for m in spec.topology)
  imports = [f"topology={topology}"]
  if spec.assignment:
    imports.append("assignment=" + ",".join(
        f"{a.name}@{a.mesh}" + (f"/{a.stage}" if a.stage >= 0 else "") for a in spec.assignment))
  for name, assigned in (("input-assignment", spec.input_assignment),
                         ("output-assignment", spec.output_assignment)):
    if assigned:
      imports.append(f"{name}=" + ",".join(f"{a.index}@{a.mesh}" for a in assigned))
  for flag in ("infer_transfers", "infer_cross_mesh_reductions"):
    if getattr(options, flag):
      imports.append(f"{flag.replace('_', '-')}=true")
  if options.merge_inferred_after_scheduling:
    imports.append("merge-inferred=false")
  optimize = []
  if any(order):
    optimize.append("schedule=\"" + "; ".join(
        f"{config.mesh_names[m]}: {_units_text(units)}" for m, units in enumerate(order)
        if units) + "\"")
  if options.merge_rules:
    optimize.append("merge-rules=\"" + "; ".join(
        f"{rule[0].mesh}: {_units_text(rule)}" for rule in options.merge_rules if rule) + "\"")
  for flag in ("split_bwd_fragments", "fragment_remat", "merge_remat_fragments",
               "merge_forward_with_backward"):
    if getattr(options, flag):
      optimize.append(f"{flag.replace('_', '-')}=true")
  if options.merge_inferred_after_scheduling:
    optimize.append("merge-inferred=true")
  export = []
  if not options.validate_no_backward_deps:
    export.append("validate-no-backward-deps=false")
  if options.fail_on_backward_deps:
    export.append("fail-on-backward-deps=true")

  def pipeline(name: str, parts: list[str]) -> str:
    return f"-mpmd-{name}-pipeline" + (f"={' '.join(parts)}" if parts else "")

  args = [pipeline("import", imports)]
  if optimize:
    args.append(pipeline("optimize", optimize))
  args.append(pipeline("export", export))
  return tuple(args)


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


# ---------------------------------------------------------------------------
# The program's signature
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Signature:
  """The flat inputs and outputs of a partitioned program.

  Flat arguments are the leaves of the non-static `(args, kwargs)`; JAX
  prunes unused ones, so the program's input `k` is flat argument `kept[k]`.
  This object owns that map and everything per argument or output that
  `Lowered`, `Compiled`, the memory report and the runtime need.

  Attributes:
    in_tree / out_tree: pytree definitions of `(args, kwargs)` and outputs.
    in_avals / out_avals: shape and dtype per flat argument / output.
    kept: per program input, its flat argument index.
    donated: per flat argument, whether the caller donates it.
    static_argnums / static_args: the static positional arguments.
    input_meshes: per flat argument, its mesh (None: unused).
    output_meshes: per flat output, its mesh.
    placement: how each flat argument is laid out on its mesh.
    out_shardings: output index -> the sharding the user asked for.
    keys: which flat arguments and outputs are typed PRNG keys (the program
      takes and returns their data).
  """
  in_tree: Any
  out_tree: Any
  in_avals: tuple[Any, ...]
  out_avals: tuple[Any, ...]
  kept: tuple[int, ...]
  donated: tuple[bool, ...]
  static_argnums: tuple[int, ...]
  static_args: tuple[Any, ...]
  input_meshes: tuple[str | None, ...]
  output_meshes: tuple[str, ...]
  placement: ArgumentPlacement
  out_shardings: Mapping[int, NamedSharding]
  keys: KeyBoundary = KeyBoundary()

  @classmethod
  def build(cls, config: MpmdConfig, lowering: MpmdLoweringResult, result: Any,
            hints: MeshHints, static_argnums: tuple[int, ...],
            static_args: tuple[Any, ...]) -> "Signature":
    """The signature of `result` (a `_mpmd.PartitionResult`) for `lowering`."""
    num_in = len(lowering.in_avals)
    meshes: list[str | None] = [None] * num_in
    for k, i in enumerate(lowering.kept_var_idx):
      meshes[i] = result.input_meshes[k]
    explicit = [None if leaf is None or meshes[i] is None else
                on_mesh(f"in_shardings for argument {i}", leaf, meshes[i],
                        config.topology[meshes[i]])
                for i, leaf in enumerate(hints.in_leaves)]
    out_shardings = {j: on_mesh(f"out_shardings for output {j}", leaf, result.output_meshes[j],
                                config.topology[result.output_meshes[j]])
                     for j, leaf in enumerate(hints.out_leaves) if leaf is not None}
    for i, s in enumerate(explicit):
      if s is not None:
        check_fits(f"in_shardings for argument {i}", s, lowering.in_avals[i].shape)
    for j, s in out_shardings.items():
      check_fits(f"out_shardings for output {j}", s, lowering.out_avals[j].shape)
    donated = tuple(bool(d) for d in lowering.donated_invars) or (False,) * num_in
    return cls(in_tree=lowering.in_tree, out_tree=lowering.out_tree,
               in_avals=tuple(lowering.in_avals), out_avals=tuple(lowering.out_avals),
               kept=tuple(lowering.kept_var_idx), donated=donated,
               static_argnums=tuple(static_argnums), static_args=tuple(static_args),
               input_meshes=tuple(meshes), output_meshes=tuple(result.output_meshes),
               placement=ArgumentPlacement(meshes, explicit, config.topology),
               out_shardings=out_shardings, keys=lowering.keys)

  # -- program inputs (kept arguments) --------------------------------------

  @property
  def kept_donated(self) -> tuple[bool, ...]:
    """Per program input, whether the caller donates it."""
    return tuple(self.donated[i] for i in self.kept)

  @property
  def kept_avals(self) -> tuple[Any, ...]:
    """Per program input, its shape and dtype."""
    return tuple(self.in_avals[i] for i in self.kept)

  def arg_shardings(self, leaves: Sequence[Any]) -> list[Sharding | None]:
    """Per flat argument, the sharding a program compiled for `leaves` takes."""
    return [self.placement.sharding(i, x) for i, x in enumerate(leaves)]

  def layout_key(self, leaves: Sequence[Any]) -> tuple:
    """A hashable key of the input layouts `arg_shardings(leaves)` gives."""
    return tuple(self.placement.key(i, x) for i, x in enumerate(leaves))

  # -- calling ---------------------------------------------------------------

  def split_args(self, args: tuple) -> tuple[tuple, tuple]:
    """(dynamic, static) positional arguments."""
    static = self.static_argnums
    return (tuple(a for i, a in enumerate(args) if i not in static),
            tuple(a for i, a in enumerate(args) if i in static))

  def flatten(self, args: tuple, kwargs: dict) -> list:
    """The flat arguments of a call; raises if statics or structure differ."""
    dynamic, statics = self.split_args(args)
    if statics != self.static_args:
      raise MpmdError(f"static arguments {statics!r} differ from those the program was compiled "
                      f"for ({self.static_args!r}): lower and compile again")
    leaves, tree = jax.tree_util.tree_flatten((dynamic, kwargs))
    if tree != self.in_tree:
      raise MpmdError(f"arguments have structure {tree} but the program was compiled for "
                      f"{self.in_tree}: {_structure_difference(self.in_tree, tree)}; call the "
                      "mpmd.jit function instead (it compiles again for a new structure), or "
                      "lower and compile again with these arguments")
    return leaves

  def unwrap_keys(self, leaves: Sequence[Any]) -> Sequence[Any]:
    """The flat arguments as the program takes them: typed PRNG keys as their
    data (`KeyBoundary.unwrap`; raises for a non-key where a key was traced)."""
    return self.keys.unwrap(leaves, self._paths) if self.keys.inputs else leaves

  def path(self, leaves: Sequence[Any], i: int) -> str:
    """How errors name flat argument `i`: `args[0]['w']`, `kwargs['x']`."""
    return self._paths[i]

  @functools.cached_property
  def _paths(self) -> list[str]:
    return _leaf_paths(self.in_tree)

  @functools.cached_property
  def _expected(self) -> tuple[tuple[tuple[int, ...], Any], ...]:
    """Per flat argument, the (shape tuple, dtype) an array must have."""
    return tuple((tuple(aval.shape), aval.dtype) for aval in self.in_avals)

  def check_avals(self, leaves: Sequence[Any]) -> None:
    """Raises, naming the argument, if a shape or dtype differs.

    Arrays with exactly the expected shape and dtype pass on two attribute
    reads (the common case: the previous step's outputs); anything else
    (Python scalars, arrays JAX would convert, wrong arguments) takes the
    full check."""
    for i, (shape, dtype) in enumerate(self._expected):
      x = leaves[i]
      try:
        if x.shape == shape and x.dtype == dtype:
          continue
      except AttributeError:
        pass
      self._check_aval(leaves, i)

  def _check_aval(self, leaves: Sequence[Any], i: int) -> None:
    aval, x = self.in_avals[i], leaves[i]
    shape, dtype = np.shape(x), dtype_of(x)
    if tuple(shape) != tuple(aval.shape) or dtype != aval.dtype:
      raise MpmdError(f"argument {self.path(leaves, i)} has shape {tuple(shape)} and dtype "
                      f"{dtype} but the program was compiled for {tuple(aval.shape)} "
                      f"{aval.dtype}: call mpmd.jit(...) (which recompiles) or lower again")

  def unflatten_outputs(self, outputs: Sequence[Any]) -> Any:
    """The pytree of per-output values (e.g. shardings) in output order."""
    return jax.tree_util.tree_unflatten(self.out_tree, list(outputs))

  def outputs(self, flat: Sequence[Any]) -> Any:
    """The caller's outputs from the program's: key outputs wrapped back
    into typed PRNG key arrays, as a pytree."""
    if self.keys.outputs:
      flat = self.keys.wrap(flat)
    return jax.tree_util.tree_unflatten(self.out_tree, list(flat))


def describe_program(result: Any) -> str:
  """The instruction list, one line each (for the `mpmd` logger)."""
  lines = []
  for inst in result.program:
    if inst.kind == "call":
      lines.append(f"  {inst.mesh}: {inst.callee}  [{', '.join(inst.origins) or 'inferred'}]")
    else:
      lines.append(f"  transfer {inst.src_mesh} -> {inst.mesh}")
  return "\n".join(lines)


__all__ = ["MeshHints", "Partitioned", "Signature", "argument_meshes", "argument_path", "compiler_schedule",
           "describe_program", "dtype_of", "mesh_hints", "partition", "partition_options",
           "program_spec"]

