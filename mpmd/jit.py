"""`mpmd.jit`: compile a labelled JAX function into an MPMD program."""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax

from mpmd import _mpmd, pipeline
from mpmd.config import MpmdConfig
from mpmd.errors import ConfigError, PartitionError
from mpmd.lowering import trace_and_lower
from mpmd.sharding import ArgumentPlacement, broadcast_prefix, mesh_of_sharding_leaf, on_mesh
from mpmd.stages import Compiled, Lowered, dtype_of

logger = logging.getLogger("mpmd")


class _Broadcast:
  """A prefix leaf's mesh and the number of argument leaves it covers."""

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


class MpmdJitted:
  """A function compiled by `mpmd.jit`. Call it, or `lower` it first."""

  def __init__(self, fun: Callable, config: MpmdConfig, static_argnums: Sequence[int],
               in_shardings: Any = None, out_shardings: Any = None,
               donate_argnums: Sequence[int] = ()):
    if not isinstance(config, MpmdConfig):
      raise ConfigError(f"mpmd.jit needs an MpmdConfig from mpmd.make_config, got {config!r}")
    self.fun = fun
    self.config = config
    self.static_argnums = tuple(static_argnums)
    self.in_shardings = in_shardings
    self.out_shardings = out_shardings
    self.donate_argnums = tuple(donate_argnums)
    overlap = set(self.static_argnums) & set(self.donate_argnums)
    if overlap:
      raise ConfigError(f"arguments {sorted(overlap)} are both static and donated")
    # (structure, avals, statics, placement) -> (Lowered, {input layouts -> Compiled})
    self._cache: dict[Any, tuple[Lowered, dict[tuple, Compiled]]] = {}
    functools.update_wrapper(self, fun)

  def _dynamic(self, args: tuple) -> tuple:
    return tuple(a for i, a in enumerate(args) if i not in self.static_argnums)

  def lower(self, *args, **kwargs) -> Lowered:
    """Traces, lowers and partitions the function for these arguments."""
    config = self.config
    lowering = trace_and_lower(self.fun, args, kwargs, static_argnums=self.static_argnums,
                               donate_argnums=self.donate_argnums)
    dynamic = self._dynamic(args)
    statics = tuple(a for i, a in enumerate(args) if i in self.static_argnums)
    num_in = len(lowering.in_avals)
    num_positional = len(jax.tree.leaves(dynamic))
    in_leaves = broadcast_prefix("in_shardings", self.in_shardings, dynamic, num_positional)
    in_leaves += [None] * (num_in - len(in_leaves))  # kwargs: no explicit sharding
    out_tree = jax.tree_util.tree_unflatten(lowering.out_tree, [0] * lowering.out_tree.num_leaves)
    out_leaves = broadcast_prefix("out_shardings", self.out_shardings, out_tree,
                                  lowering.out_tree.num_leaves)

    flat_in = _prefix_leaves("input_mesh_assignment", config.input_mesh_assignment, dynamic)
    flat_in += [None] * (num_in - len(flat_in))  # kwargs: inferred
    for i, leaf in enumerate(in_leaves):
      pinned = mesh_of_sharding_leaf(leaf, config)
      if pinned is not None and flat_in[i] is None:
        flat_in[i] = pinned
    if config.read_input_mesh_from_arguments:
      for i, mesh in enumerate(self._argument_meshes(args, kwargs)):
        if flat_in[i] is None:
          flat_in[i] = mesh
    flat_out = _prefix_leaves("output_mesh_assignment", config.output_mesh_assignment, out_tree)
    for j, leaf in enumerate(out_leaves):
      pinned = mesh_of_sharding_leaf(leaf, config)
      if pinned is not None and flat_out[j] is None:
        flat_out[j] = pinned

    request = _mpmd.PartitionRequest()
    request.module_text = lowering.text
    request.topology = [_mesh_spec(name, mesh) for name, mesh in config.topology.items()]
    request.assignment = config.assignment_entries()
    request.input_assignment = [f"{k}@{flat_in[i]}" for k, i in enumerate(lowering.kept_var_idx)
                                if flat_in[i] is not None]
    request.output_assignment = [f"{k}@{m}" for k, m in enumerate(flat_out) if m is not None]
    request.infer_transfers = bool(config.option("mpmd_infer_transfers"))
    request.infer_cross_mesh_reductions = bool(config.option("mpmd_infer_cross_mesh_reductions"))
    request.split_bwd_fragments = bool(config.option("mpmd_split_bwd_fragments"))
    request.fragment_remat = bool(config.option("mpmd_fragment_remat"))
    request.merge_remat_fragments = bool(config.option("mpmd_merge_remat_fragments"))
    request.merge_forward_with_backward = bool(config.option("mpmd_merge_forward_with_backward"))
    request.merge_rules = "\n".join(rule.to_text() for rule in config.fragment_merge_rules)
    request.fail_on_backward_deps = bool(config.option("mpmd_fail_on_backward_deps"))
    start = time.perf_counter()
    schedule = None
    imported_text = None
    if config.pipeline_schedule is not None:
      request.merge_inferred_after_scheduling = True
      request.stop_after_import = True
      request.keep_handoff = True  # phase 2 continues from the module in memory
      imported = self._partition(request)
      imported_text = imported.imported_text
      schedule = pipeline.resolve(config.pipeline_schedule, imported.units, config.mesh_names)
      request.stop_after_import = False
      request.skip_import = True
      request.keep_handoff = False
      request.handoff_token = imported.handoff_token  # 0: continue from the text
      request.module_text = imported.handoff_text
      if request.split_bwd_fragments:
        schedule = pipeline.with_weight_after_backward(schedule)
      request.split_bwd_fragments = bool(schedule.split_backward)
      request.validate_no_backward_deps = not schedule.wrap_around
      request.schedule = pipeline.to_compiler_text(schedule, config.mesh_names)
    try:
      partition = self._partition(request)
    except PartitionError as e:
      hint = _deadlock_hint(str(e), config)
      if hint:
        raise PartitionError(f"{e}\n{hint}") from None
      raise
    partition_seconds = time.perf_counter() - start
    logger.info("partitioned %s into %d fragment calls and %d transfers in %.3fs",
                getattr(self.fun, "__name__", "function"),
                sum(1 for inst in partition.program if inst.kind == "call"),
                sum(1 for inst in partition.program if inst.kind == "transfer"), partition_seconds)

    meshes: list[str | None] = [None] * num_in
    for k, i in enumerate(lowering.kept_var_idx):
      meshes[i] = partition.input_meshes[k]
    explicit = [None if leaf is None or meshes[i] is None else
                on_mesh(f"in_shardings for argument {i}", leaf, meshes[i],
                        config.topology[meshes[i]])
                for i, leaf in enumerate(in_leaves)]
    placement = ArgumentPlacement(meshes, explicit, config.topology)
    leaves = jax.tree.leaves((dynamic, kwargs))
    arg_shardings = [placement.sharding(i, x) for i, x in enumerate(leaves)]
    out_shardings = {j: on_mesh(f"out_shardings for output {j}", leaf, partition.output_meshes[j],
                                config.topology[partition.output_meshes[j]])
                     for j, leaf in enumerate(out_leaves) if leaf is not None}
    return Lowered(config, lowering, partition, statics, self.static_argnums, schedule,
                   placement=placement, arg_shardings=arg_shardings, out_shardings=out_shardings,
                   partition_seconds=partition_seconds,
                   imported_text=imported_text or partition.imported_text)

  def _partition(self, request):
    partition = _mpmd.partition(request)
    if not partition.ok:
      raise PartitionError(f"mpmd could not partition {getattr(self.fun, '__name__', self.fun)}:"
                           f"\n{partition.error.rstrip()}")
    for line in partition.warnings.splitlines():
      if line.strip():
        logger.warning("%s", line)
    return partition

  def _argument_meshes(self, args: tuple, kwargs: dict) -> list[str | None]:
    """Per flat argument, the mesh whose devices it is committed to (or None)."""
    return [self.config.mesh_of_devices(x.sharding.device_set)
            if isinstance(x, jax.Array) and x.committed else None
            for x in jax.tree.leaves((self._dynamic(args), kwargs))]

  def _cache_key(self, args: tuple, kwargs: dict, leaves: list, tree: Any) -> Any:
    statics = tuple(a for i, a in enumerate(args) if i in self.static_argnums)
    avals = tuple((jax.numpy.shape(x), dtype_of(x),
                   bool(getattr(x, "weak_type", False))) for x in leaves)
    placement = (tuple(self._argument_meshes(args, kwargs))
                 if self.config.read_input_mesh_from_arguments else ())
    return (tree, avals, statics, placement)

  def __call__(self, *args, **kwargs) -> Any:
    leaves, tree = jax.tree_util.tree_flatten((self._dynamic(args), kwargs))
    key = self._cache_key(args, kwargs, leaves, tree)
    entry = self._cache.get(key)
    if entry is None:
      lowered = self.lower(*args, **kwargs)
      entry = self._cache[key] = (lowered, {})
    lowered, variants = entry
    placement = lowered._placement
    layouts = tuple(placement.key(i, x) for i, x in enumerate(leaves))
    compiled = variants.get(layouts)
    if compiled is None:
      if variants:
        logger.info("recompiling %s: the arguments' shardings changed",
                    getattr(self.fun, "__name__", "function"))
      compiled = variants[layouts] = lowered._compile(
          [placement.sharding(i, x) for i, x in enumerate(leaves)])
    return compiled._call_flat(leaves)


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


def _mesh_spec(name: str, mesh: jax.sharding.Mesh):
  spec = _mpmd.MeshSpec()
  spec.name = name
  spec.axes = [(str(axis), int(size)) for axis, size in mesh.shape.items()]
  return spec


def jit(fun: Callable, config: MpmdConfig, *, static_argnums: int | Sequence[int] = (),
        in_shardings: Any = None, out_shardings: Any = None,
        donate_argnums: int | Sequence[int] = ()) -> MpmdJitted:
  """Compiles `fun` into an MPMD program over the meshes of `config`.

  Like `jax.jit`: `jit(f, config)(*args)` lowers, partitions, compiles (once
  per argument shapes/dtypes/shardings) and runs; `jit(f, config).lower(*args)`
  returns a `Lowered` whose `compile()` returns a `Compiled`.

  Args:
    fun: the step function; label its parts with `mpmd.named_computation`.
    config: from `mpmd.make_config`.
    static_argnums: positional arguments that are static (hashable).
    in_shardings: how each positional argument is laid out on the devices of
      the mesh it is placed on: a pytree prefix of the positional arguments
      whose leaves are `PartitionSpec` (over the meshes' axis names), a
      `NamedSharding` of one of the topology's meshes (which also places the
      argument on that mesh) or None. None (the default) keeps the layout of
      an argument that is a committed `jax.Array` on its mesh and replicates
      the others.
    out_shardings: the same for the outputs (pytree prefix of the outputs);
      None leaves XLA's choice.
    donate_argnums: positional arguments whose buffers the program may
      consume (as in `jax.jit`): each is freed at its last use in the step
      and deleted for the caller.
  """
  if isinstance(static_argnums, int):
    static_argnums = (static_argnums,)
  if isinstance(donate_argnums, int):
    donate_argnums = (donate_argnums,)
  return MpmdJitted(fun, config, static_argnums, in_shardings, out_shardings, donate_argnums)
