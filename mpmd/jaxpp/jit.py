"""`mpmd_jit_with_loop` and `mpmd_jit_by_yield`: JaxPP's entry points on `mpmd.jit`.

Both trace the step once to find its stages (and, with a loop, the `treduce`
and its schedule), build an `mpmd.make_config` over the groups of the
`MpmdMesh` (group ``i`` is mesh ``mpmd{i}``; the named computations
``stage_k`` go where the schedule places stage ``k``) and hand the step to
`mpmd.jit`, whose compiler places everything else (loss, accumulators,
optimizer) and runs the units in the schedule's order.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.extend.core as jex
from jax.sharding import NamedSharding, PartitionSpec

import mpmd
from mpmd._jax import jaxpr as jj
from mpmd.distributed.arrays import RemoteArray
from mpmd.jaxpp import markers, profiling, staging
from mpmd.jaxpp.array import MpmdArray
from mpmd.jaxpp.mesh import MpmdMesh
from mpmd.jaxpp.types import MpmdSharding
from mpmd.jaxpp.treduce import plan_for, treduce_p
from mpmd.trace.tracing import abstractify
from mpmd.schedule.task_lists import FusedTask, Task, TaskType

__all__ = ["CompiledMpmdFunction", "MpmdFunction", "mpmd_jit_by_yield", "mpmd_jit_with_loop"]

#: Compiler options every JaxPP-style program gets: a weight used by several
#: stages has its gradient contributions summed across meshes (JaxPP's
#: cross-group all-reduce of ``add_any``).
DEFAULT_PARTITIONING_OPTIONS = {"mpmd_infer_cross_mesh_reductions": True}


def _is_none(x: Any) -> bool:
  return x is None


class CompiledMpmdFunction:
  """A step compiled for one argument signature. Call it like the step.

  Outputs are `MpmdArray`s, each held by the group (mesh) that produced it;
  feed them back in as they are (plain `jax.Array`s are taken too).
  """

  def __init__(self, compiled: mpmd.Compiled, closed_jaxpr: Any, mpmd_mesh: MpmdMesh,
               static_argnums: tuple[int, ...] = ()):
    #: The underlying `mpmd.Compiled` (instructions, schedule, program text).
    self.compiled = compiled
    #: The traced step (its `jaxpp_treduce` equation holds the loop body).
    self.closed_jaxpr = closed_jaxpr
    self.mpmd_mesh = mpmd_mesh
    self._static_argnums = static_argnums
    self._shardings: dict[Any, MpmdSharding] = {}
    flat, _ = jax.tree.flatten(compiled.input_shardings, is_leaf=_is_none)
    #: Per flat argument, the group the program reads it on (None: unused).
    self._in_groups = [self._group(s) for s in flat]

  def _group(self, sharding: Any) -> int | None:
    if sharding is None:
      return None
    return self.mpmd_mesh._idx_of_devices(sharding.device_set)

  def _mpmd_sharding(self, sharding: Any) -> MpmdSharding:
    """An `mpmd.jit` sharding (on one group's mesh, or None) as an `MpmdSharding`."""
    out = self._shardings.get(sharding)
    if out is None:
      if sharding is None:
        out = MpmdSharding(self.mpmd_mesh, (), PartitionSpec())
      else:
        spec = sharding.spec if isinstance(sharding, NamedSharding) else PartitionSpec()
        out = MpmdSharding(self.mpmd_mesh, (self._group(sharding),), spec)
      self._shardings[sharding] = out
    return out

  @property
  def in_shardings(self) -> Any:
    """Where each argument is placed: a pytree like ``((args...), kwargs)``
    of `MpmdSharding`s (no group for an argument the program does not use).
    ``spmd_to_mpmd_reshard(mesh, args, in_shardings[0])`` places arguments
    accordingly."""
    return jax.tree.map(self._mpmd_sharding, self.compiled.input_shardings, is_leaf=_is_none)

  @property
  def out_shardings(self) -> Any:
    """The `MpmdSharding` of each output (the group that holds it)."""
    return jax.tree.map(self._mpmd_sharding, self.compiled.output_shardings, is_leaf=_is_none)

  @property
  def schedule(self):
    """The `mpmd.schedule.Schedule` the microbatches run in (None: no loop)."""
    return self.compiled.schedule

  @property
  def instructions(self) -> list:
    """The program in execution order (fragment calls and transfers)."""
    return self.compiled.instructions

  def as_text(self) -> str:
    """The partitioned MPMD program."""
    return self.compiled.as_text()

  def __call__(self, *args, **kwargs) -> Any:
    args = self._unwrap(args, kwargs)
    if not profiling.active():
      return self._wrap(self.compiled(*args, **kwargs))
    outputs, trace = self.compiled.trace(*args, **kwargs)
    schedule = self.compiled.schedule
    groups = {self.mpmd_mesh.mesh_name(i): i for i in range(self.mpmd_mesh.mpmd_dim)}
    profiling.record(trace, groups, bool(getattr(schedule, "split_backward", False)))
    return self._wrap(outputs)

  def _unwrap(self, args: tuple, kwargs: dict) -> tuple:
    """``args`` with each `MpmdArray` replaced by its copy on the group the
    program reads it on (``kwargs`` may not hold MpmdArrays)."""
    if not any(isinstance(x, MpmdArray) for x in jax.tree.leaves((args, kwargs))):
      return args
    if any(isinstance(x, MpmdArray) for x in jax.tree.leaves(kwargs)):
      raise TypeError("pass MpmdArrays as positional arguments, not keyword arguments")
    dynamic = [i for i in range(len(args)) if i not in self._static_argnums]
    leaves, tree = jax.tree.flatten(([args[i] for i in dynamic], kwargs))
    groups = self._in_groups if len(self._in_groups) == len(leaves) else [None] * len(leaves)
    leaves = [x.for_group(g) if isinstance(x, MpmdArray) else x for x, g in zip(leaves, groups)]
    out = list(args)
    for i, v in zip(dynamic, jax.tree.unflatten(tree, leaves)[0]):
      out[i] = v
    return tuple(out)

  def _wrap(self, outputs: Any) -> Any:
    """Each output leaf (a `jax.Array` on one group, or a `RemoteArray` in
    another process) as an `MpmdArray`."""
    return jax.tree.map(self._wrap_one, outputs)

  def _wrap_one(self, x: Any) -> Any:
    if isinstance(x, jax.Array):
      return MpmdArray([x], self._mpmd_sharding(x.sharding))
    if isinstance(x, RemoteArray):
      group = int(x.mesh.removeprefix("mpmd"))
      out = MpmdArray([], MpmdSharding(self.mpmd_mesh, (group,), PartitionSpec()),
                      shape=x.shape, dtype=x.dtype)
      out._placeholder = x
      return out
    return x


def _argnums(fun: Callable, nums: int | Sequence[int] | None, names: str | Sequence[str] | None,
             what: str) -> tuple[int, ...]:
  out = set((nums,) if isinstance(nums, int) else tuple(nums or ()))
  names = (names,) if isinstance(names, str) else tuple(names or ())
  if names:
    try:
      params = list(inspect.signature(fun).parameters)
    except (TypeError, ValueError) as e:
      raise ValueError(f"{what}names given but the signature of {fun!r} is unknown") from e
    for name in names:
      if name not in params:
        raise ValueError(f"{what}names: {fun!r} has no parameter {name!r}")
      out.add(params.index(name))
  return tuple(sorted(out))


def _as_specs(shardings: Any, specs: Any, what: str) -> Any:
  """The PartitionSpec pytree of `in/out_shardings` or `in/out_specs`."""
  if shardings is not None and specs is not None:
    raise ValueError(f"give {what}_shardings or {what}_specs, not both")
  if shardings is None:
    return specs
  return jax.tree.map(lambda s: s.spec if isinstance(s, NamedSharding) else s, shardings,
                      is_leaf=lambda s: isinstance(s, (NamedSharding, PartitionSpec)) or s is None)


class MpmdFunction:
  """A JaxPP-style step (from `mpmd_jit_with_loop` / `mpmd_jit_by_yield`).

  ``f(*args)`` compiles once per argument signature and runs;
  ``f.compile(*args)`` returns the `CompiledMpmdFunction`; ``f.lower(*args)``
  the `mpmd.Lowered` program.
  """

  def __init__(self, fun: Callable, mpmd_mesh: MpmdMesh, *, by_yield: bool,
               in_specs: Any = None, out_specs: Any = None,
               static_argnums: tuple[int, ...] = (), donate_argnums: tuple[int, ...] = (),
               target_num_stages: int | None = None,
               partitioning_options: dict[str, Any] | None = None, fuse_tasks: bool = True):
    if not isinstance(mpmd_mesh, MpmdMesh):
      raise TypeError(f"mpmd_mesh must be an MpmdMesh, got {type(mpmd_mesh).__name__}")
    self.fun = fun
    self.mpmd_mesh = mpmd_mesh
    self.by_yield = by_yield
    self.in_specs = in_specs
    self.out_specs = out_specs
    self.static_argnums = static_argnums
    self.donate_argnums = donate_argnums
    self.target_num_stages = target_num_stages
    self.fuse_tasks = fuse_tasks
    self.partitioning_options = {**DEFAULT_PARTITIONING_OPTIONS, **(partitioning_options or {})}
    self._cache: dict[Any, CompiledMpmdFunction] = {}
    functools.update_wrapper(self, fun)

  @property
  def _name(self) -> str:
    fun = self.fun
    while isinstance(fun, functools.partial):
      fun = fun.func
    return getattr(fun, "__name__", None) or "the step"

  def _mesh_context(self):
    return jax.set_mesh(self.mpmd_mesh.lowering_mesh())

  def _abstract(self, args: tuple) -> tuple:
    return tuple(a if i in self.static_argnums else jax.tree.map(abstractify, a)
                 for i, a in enumerate(_local(args, self.static_argnums)))

  def trace(self, *args) -> Any:
    """The step's ClosedJaxpr for these arguments."""
    abstract = self._abstract(args)
    with self._mesh_context():
      if self.by_yield:
        with markers.stage_scope():
          return jax.make_jaxpr(self.fun, static_argnums=self.static_argnums)(*abstract)
      return jax.make_jaxpr(self.fun, static_argnums=self.static_argnums)(*abstract)

  def _config(self, closed) -> mpmd.MpmdConfig:
    mesh = self.mpmd_mesh
    if self.by_yield:
      plan = staging.plan_stages(closed, what=f"{self._name} (under mpmd_jit_by_yield)",
                                 require_backward=False)
      n = plan.num_stages
      if self.target_num_stages is not None and self.target_num_stages != n:
        raise staging.StageError(
            f"mpmd_jit_by_yield(target_num_stages={self.target_num_stages}) but {self._name} "
            f"marks {n} stages ({n} mark_stage_end calls)")
      assignment = {staging.stage_name(k): mesh.mesh_name(k % mesh.mpmd_dim) for k in range(n)}
      return mpmd.make_config(mesh.topology, assignment,
                              partitioning_options=self.partitioning_options)
    loop = self._the_loop(closed)
    plan = plan_for(loop.params["body"])
    schedule = loop.params["schedule"]
    placement = _placement(schedule, plan.num_stages, loop.params["length"], mesh)
    assignment = {staging.stage_name(k): mesh.mesh_name(placement[k])
                  for k in range(plan.num_stages)}
    stages = {staging.stage_name(k): k for k in range(plan.num_stages)}
    rules = _fusion_rules(schedule, loop.params["length"], mesh) if self.fuse_tasks else ()
    return mpmd.make_config(mesh.topology, assignment, name_to_stage_assignment=stages,
                            pipeline_schedule=schedule,
                            partitioning_options=self.partitioning_options,
                            fragment_merge_rules=rules)

  def _the_loop(self, closed):
    loops = [e for e in closed.jaxpr.eqns if e.primitive is treduce_p]
    if len(loops) == 1:
      return loops[0]
    if len(loops) > 1:
      raise ValueError(f"{self._name} has {len(loops)} treduce loops; mpmd_jit_with_loop runs "
                       "exactly one: merge them into one treduce")
    nested = [e for e in closed.jaxpr.eqns
              if any(jj.contains_primitive(j, treduce_p) for j in jex.jaxprs_in_params(e.params))]
    if nested:
      raise ValueError(f"{self._name} calls treduce inside `{nested[0].primitive}`: call it at "
                       "the top level of the step (not inside jax.jit, cond, scan, ...)")
    raise ValueError(f"{self._name} has no treduce loop: mpmd_jit_with_loop pipelines the "
                     "microbatches of one treduce/treduce_i; use mpmd_jit_by_yield for a step "
                     "without a loop")

  def _jit(self, config: mpmd.MpmdConfig) -> mpmd.MpmdJitted:
    fun = _staged(self.fun, self.static_argnums) if self.by_yield else self.fun
    # jax.jit semantics: PartitionSpecs apply within whichever group mesh a
    # value lands on; donated arguments may be consumed by the program.
    return mpmd.jit(fun, config, static_argnums=self.static_argnums,
                    in_shardings=self.in_specs, out_shardings=self.out_specs,
                    donate_argnums=self.donate_argnums)

  def lower(self, *args) -> mpmd.Lowered:
    """Traces, checks the stages and schedule, and partitions the step."""
    closed = self.trace(*args)
    with self._mesh_context():
      return self._jit(self._config(closed)).lower(*_local(args, self.static_argnums))

  def compile(self, *args) -> CompiledMpmdFunction:
    """Compiles the step for arguments like ``args`` (once per signature)."""
    key = self._key(args)
    compiled = self._cache.get(key)
    if compiled is None:
      closed = self.trace(*args)
      with self._mesh_context():
        lowered = self._jit(self._config(closed)).lower(*_local(args, self.static_argnums))
      compiled = CompiledMpmdFunction(lowered.compile(), closed, self.mpmd_mesh,
                                      self.static_argnums)
      self._cache[key] = compiled
    return compiled

  def _key(self, args: tuple) -> Any:
    args = _local(args, self.static_argnums)
    dynamic = tuple(a for i, a in enumerate(args) if i not in self.static_argnums)
    statics = tuple(a for i, a in enumerate(args) if i in self.static_argnums)
    leaves, tree = jax.tree.flatten(dynamic)
    avals = tuple((jax.numpy.shape(x), jax.numpy.result_type(x),
                   bool(getattr(x, "weak_type", False))) for x in leaves)
    return tree, avals, statics

  def __call__(self, *args) -> Any:
    return self.compile(*args)(*args)


def _local(args: tuple, static_argnums: tuple[int, ...]) -> tuple:
  """``args`` with each `MpmdArray` leaf replaced by a local copy (or, in a
  process that holds none, its placeholder), for tracing and lowering."""
  return tuple(a if i in static_argnums else jax.tree.map(
      lambda x: x.for_group(None) if isinstance(x, MpmdArray) else x, a)
      for i, a in enumerate(args))


def _placement(schedule: Any, num_stages: int, num_microbatches: int,
               mesh: MpmdMesh) -> list[int]:
  """The group of every stage, checked against the schedule and the mesh."""
  if schedule is None:
    raise ValueError("treduce under mpmd_jit_with_loop needs a schedule, e.g. "
                     f"treduce(..., schedule=Std1F1B({num_stages}))")
  if not hasattr(schedule, "tasks"):
    raise TypeError(f"treduce schedule must be a schedule object with tasks(n) (Std1F1B, "
                    f"Interleaved1F1B, ...), got {schedule!r}")
  declared = getattr(schedule, "num_stages", None)
  if declared is not None and declared != num_stages:
    raise staging.StageError(
        f"the schedule {schedule!r} has num_stages={declared} but the treduce body marks "
        f"{num_stages} stages ({num_stages} mark_stage_end/pipeline_enter_stage calls): make "
        "them equal")
  ranks = schedule.tasks(num_microbatches)
  if len(ranks) != mesh.mpmd_dim:
    raise ValueError(f"the schedule {schedule!r} runs on {len(ranks)} ranks but the MpmdMesh has "
                     f"mpmd_dim={mesh.mpmd_dim} groups along {mesh.mpmd_axis_name!r}")
  if hasattr(schedule, "get_mpmd_idx"):
    return [int(schedule.get_mpmd_idx(k)) for k in range(num_stages)]
  where: dict[int, int] = {}
  for rank, row in enumerate(ranks):
    for entry in row:
      for task in (getattr(entry, "tasks", None) or ([entry] if entry is not None else [])):
        where.setdefault(task.stage, rank)
  missing = [k for k in range(num_stages) if k not in where]
  if missing:
    raise ValueError(f"the schedule {schedule!r} has no tasks for stages {missing}")
  return [where[k] for k in range(num_stages)]


def _fusion_rules(schedule: Any, num_microbatches: int,
                  mesh: MpmdMesh) -> list[mpmd.FragmentMergeRule]:
  """One merge rule per `FusedTask` of the schedule: its tasks run as one
  program on their rank (as in JaxPP)."""
  ranks = schedule.tasks(num_microbatches)
  split = any(isinstance(t, Task) and t.kind in (TaskType.BWD_I, TaskType.BWD_W)
              for row in ranks for e in row
              for t in (e.tasks if isinstance(e, FusedTask) else (e,)))
  rules = []
  for rank, row in enumerate(ranks):
    for entry in row:
      if isinstance(entry, FusedTask):
        units = [u for t in entry for u in t.units(split)]
        if len(units) > 1:
          rules.append(mpmd.FragmentMergeRule(mesh.mesh_name(rank), units))
  return rules


def _staged(fun: Callable, static_argnums: tuple[int, ...]) -> Callable:
  """``fun`` with its body split at its stage markers into named computations."""

  @functools.wraps(fun)
  def staged(*args):
    dyn_idx = [i for i in range(len(args)) if i not in static_argnums]
    leaves, tree = jax.tree.flatten([args[i] for i in dyn_idx])
    out_tree = []

    def flat(*flat_leaves):
      rebuilt = list(args)
      for i, v in zip(dyn_idx, jax.tree.unflatten(tree, flat_leaves)):
        rebuilt[i] = v
      with markers.stage_scope():
        out = fun(*rebuilt)
      out_leaves, t = jax.tree.flatten(out)
      out_tree.append(t)
      return out_leaves

    closed, consts = jj.trace_to_jaxpr(flat, [jax.typeof(x) for x in leaves],
                                       debug_name=getattr(fun, "__name__", "step"))
    plan = staging.plan_stages(closed, what=getattr(fun, "__name__", "the step"),
                               require_backward=False)
    return jax.tree.unflatten(out_tree[-1], plan.run([*consts, *leaves]))

  return staged


def mpmd_jit_with_loop(fun: Callable, mpmd_mesh: MpmdMesh, *, in_shardings: Any = None,
                       out_shardings: Any = None, in_specs: Any = None, out_specs: Any = None,
                       static_argnums: int | Sequence[int] | None = None,
                       static_argnames: str | Sequence[str] | None = None,
                       donate_argnums: int | Sequence[int] | None = None,
                       donate_argnames: str | Sequence[str] | None = None,
                       compiler_options: dict[str, Any] | None = None,
                       partitioning_options: dict[str, Any] | None = None,
                       fuse_tasks: bool = True) -> MpmdFunction:
  """Pipelines a training step built around one `treduce` loop.

  The microbatches of the (single, top-level) `treduce` run as a pipeline
  over the groups of ``mpmd_mesh`` in the order of its ``schedule``; stage
  ``k`` (between the body's ``k``-th and ``k+1``-th `mark_stage_end`) runs on
  group ``schedule.get_mpmd_idx(k)``. Code outside the stages (loss
  reductions, the optimizer) is placed by the compiler where its data lives.

  Args:
    fun: the step.
    mpmd_mesh: the groups.
    in_shardings, out_shardings: pytrees of `PartitionSpec` (or
      `NamedSharding`, whose spec is used) for the arguments / outputs,
      applied within the group mesh each value lands on.
    in_specs, out_specs: the same as PartitionSpecs (JaxPP's spelling).
    static_argnums, static_argnames: static arguments, as in `jax.jit`.
    donate_argnums, donate_argnames: donated arguments, as in `jax.jit`.
    compiler_options: XLA compiler options; not supported (must be empty).
    partitioning_options: extra `mpmd.make_config` partitioning options.
    fuse_tasks: run each `FusedTask` of the schedule as one program (JaxPP's
      default; its ``JAXPP_DISABLE_SCHEDULE_TASK_FUSION=1`` is ``False``).
  """
  if compiler_options:
    raise NotImplementedError(f"compiler_options {sorted(compiler_options)} are not supported "
                              "by mpmd.jaxpp; leave them out")
  return MpmdFunction(
      fun, mpmd_mesh, by_yield=False, fuse_tasks=fuse_tasks,
      in_specs=_as_specs(in_shardings, in_specs, "in"),
      out_specs=_as_specs(out_shardings, out_specs, "out"),
      static_argnums=_argnums(fun, static_argnums, static_argnames, "static_arg"),
      donate_argnums=_argnums(fun, donate_argnums, donate_argnames, "donate_arg"),
      partitioning_options=partitioning_options)


def mpmd_jit_by_yield(fun: Callable, mpmd_mesh: MpmdMesh, *, target_num_stages: int | None = None,
                      in_shardings: Any = None, out_shardings: Any = None,
                      in_specs: Any = None, out_specs: Any = None,
                      static_argnums: int | Sequence[int] | None = None,
                      static_argnames: str | Sequence[str] | None = None,
                      donate_argnums: int | Sequence[int] | None = None,
                      donate_argnames: str | Sequence[str] | None = None,
                      compiler_options: dict[str, Any] | None = None,
                      partitioning_options: dict[str, Any] | None = None) -> MpmdFunction:
  """Splits a step without a loop at its `mark_stage_end` calls.

  Stage ``k`` runs on group ``k % mpmd_dim``, in program order (no
  microbatches, no schedule): suited to forward-only (inference) pipelines,
  and to a single differentiated batch (backward stages follow their
  forward). ``target_num_stages``, when given, must equal the number of
  markers. Other arguments as in `mpmd_jit_with_loop`.
  """
  if compiler_options:
    raise NotImplementedError(f"compiler_options {sorted(compiler_options)} are not supported "
                              "by mpmd.jaxpp; leave them out")
  return MpmdFunction(
      fun, mpmd_mesh, by_yield=True,
      in_specs=_as_specs(in_shardings, in_specs, "in"),
      out_specs=_as_specs(out_shardings, out_specs, "out"),
      static_argnums=_argnums(fun, static_argnums, static_argnames, "static_arg"),
      donate_argnums=_argnums(fun, donate_argnums, donate_argnames, "donate_arg"),
      target_num_stages=target_num_stages, partitioning_options=partitioning_options)
