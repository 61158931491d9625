"""`mpmd.jit`: compile a labelled JAX function into an MPMD program."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax

from mpmd import _mpmd, pipeline
from mpmd.config import MpmdConfig
from mpmd.errors import ConfigError, PartitionError
from mpmd.lowering import trace_and_lower
from mpmd.stages import Compiled, Lowered


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

  def __init__(self, fun: Callable, config: MpmdConfig, static_argnums: Sequence[int]):
    if not isinstance(config, MpmdConfig):
      raise ConfigError(f"mpmd.jit needs an MpmdConfig from mpmd.make_config, got {config!r}")
    self.fun = fun
    self.config = config
    self.static_argnums = tuple(static_argnums)
    self._cache: dict[Any, Compiled] = {}
    functools.update_wrapper(self, fun)

  def lower(self, *args, **kwargs) -> Lowered:
    """Traces, lowers and partitions the function for these arguments."""
    lowering = trace_and_lower(self.fun, args, kwargs, static_argnums=self.static_argnums)
    config = self.config
    dynamic = tuple(a for i, a in enumerate(args) if i not in self.static_argnums)
    statics = tuple(a for i, a in enumerate(args) if i in self.static_argnums)
    flat_in = _prefix_leaves("input_mesh_assignment", config.input_mesh_assignment, dynamic)
    flat_in += [None] * (len(lowering.in_avals) - len(flat_in))  # kwargs: inferred
    if config.read_input_mesh_from_arguments:
      for i, mesh in enumerate(self._argument_meshes(args, kwargs)):
        if flat_in[i] is None:
          flat_in[i] = mesh
    out_tree = jax.tree_util.tree_unflatten(lowering.out_tree, [0] * lowering.out_tree.num_leaves)
    flat_out = _prefix_leaves("output_mesh_assignment", config.output_mesh_assignment, out_tree)

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
    schedule = None
    if config.pipeline_schedule is not None:
      request.merge_inferred_after_scheduling = True
      request.stop_after_import = True
      imported = self._partition(request)
      schedule = pipeline.resolve(config.pipeline_schedule, imported.units, config.mesh_names)
      request.stop_after_import = False
      request.skip_import = True
      request.module_text = imported.handoff_text
      if request.split_bwd_fragments:
        schedule = pipeline.with_weight_after_backward(schedule)
      request.split_bwd_fragments = bool(schedule.split_backward)
      request.schedule = pipeline.to_compiler_text(schedule, config.mesh_names)
    partition = self._partition(request)
    return Lowered(config, lowering, partition, statics, self.static_argnums, schedule)

  def _partition(self, request):
    partition = _mpmd.partition(request)
    if not partition.ok:
      raise PartitionError(f"mpmd could not partition {getattr(self.fun, '__name__', self.fun)}:"
                           f"\n{partition.error.rstrip()}")
    return partition

  def _argument_meshes(self, args: tuple, kwargs: dict) -> list[str | None]:
    """Per flat argument, the mesh whose devices it is committed to (or None)."""
    dynamic = tuple(a for i, a in enumerate(args) if i not in self.static_argnums)
    return [self.config.mesh_of_devices(x.sharding.device_set)
            if isinstance(x, jax.Array) and x.committed else None
            for x in jax.tree.leaves((dynamic, kwargs))]

  def _cache_key(self, args: tuple, kwargs: dict) -> Any:
    dynamic = tuple(a for i, a in enumerate(args) if i not in self.static_argnums)
    statics = tuple(a for i, a in enumerate(args) if i in self.static_argnums)
    leaves, tree = jax.tree_util.tree_flatten((dynamic, kwargs))
    avals = tuple((jax.numpy.shape(x), jax.numpy.result_type(x),
                   bool(getattr(x, "weak_type", False))) for x in leaves)
    placement = (tuple(self._argument_meshes(args, kwargs))
                 if self.config.read_input_mesh_from_arguments else ())
    return (tree, avals, statics, placement)

  def __call__(self, *args, **kwargs) -> Any:
    key = self._cache_key(args, kwargs)
    compiled = self._cache.get(key)
    if compiled is None:
      compiled = self.lower(*args, **kwargs).compile()
      self._cache[key] = compiled
    return compiled(*args, **kwargs)


def _mesh_spec(name: str, mesh: jax.sharding.Mesh):
  spec = _mpmd.MeshSpec()
  spec.name = name
  spec.axes = [(str(axis), int(size)) for axis, size in mesh.shape.items()]
  return spec


def jit(fun: Callable, config: MpmdConfig, *, static_argnums: int | Sequence[int] = ()) -> MpmdJitted:
  """Compiles `fun` into an MPMD program over the meshes of `config`.

  Like `jax.jit`: `jit(f, config)(*args)` lowers, partitions, compiles (once
  per argument shapes/dtypes) and runs; `jit(f, config).lower(*args)` returns a
  `Lowered` whose `compile()` returns a `Compiled`.

  Args:
    fun: the step function; label its parts with `mpmd.named_computation`.
    config: from `mpmd.make_config`.
    static_argnums: positional arguments that are static (hashable).
  """
  if isinstance(static_argnums, int):
    static_argnums = (static_argnums,)
  return MpmdJitted(fun, config, static_argnums)
