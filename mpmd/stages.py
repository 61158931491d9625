"""The JAX stages model for MPMD programs: `Lowered` -> `Compiled` -> call.

`mpmd.jit(f, config).lower(*args)` traces and lowers `f`, runs the C++
partitioner and returns a `Lowered`; `Lowered.compile()` compiles every
distinct fragment program on its mesh (for the input shardings of the
arguments `lower` saw, or `in_shardings`) and returns a `Compiled`, which
runs the program when called with arguments like those.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec, Sharding

from mpmd import distributed as dist
from mpmd import memory, runtime
from mpmd import trace as trace_lib
from mpmd.config import MpmdConfig
from mpmd.errors import MpmdError
from mpmd.lowering import MpmdLoweringResult
from mpmd.sharding import ArgumentPlacement

logger = logging.getLogger("mpmd")


def _describe_program(partition) -> str:
  lines = []
  for inst in partition.program:
    if inst.kind == "call":
      lines.append(f"  {inst.mesh}: {inst.callee}  [{', '.join(inst.origins) or 'inferred'}]")
    else:
      lines.append(f"  transfer {inst.src_mesh} -> {inst.mesh}")
  return "\n".join(lines)


def dtype_of(x: Any) -> Any:
  """The dtype of an argument (a RemoteArray, array or Python scalar)."""
  if isinstance(x, dist.RemoteArray):
    return x.dtype
  return jax.numpy.result_type(x)


def _copy(x: Any) -> Any:
  """A copy of `x` in a buffer of its own (on the same devices)."""
  return jax.numpy.copy(x) if isinstance(x, jax.Array) else x


class Lowered:
  """A partitioned, not yet compiled MPMD program."""

  def __init__(self, config: MpmdConfig, lowering: MpmdLoweringResult, partition,
               static_args: tuple, static_argnums: tuple[int, ...], schedule=None, *,
               placement: ArgumentPlacement, arg_shardings: Sequence[Sharding | None],
               out_shardings: dict[int, Sharding] | None = None,
               partition_seconds: float = 0.0, imported_text: str | None = None):
    self.config = config
    #: The resolved `mpmd.schedule.Schedule` the program runs in (or None:
    #: the order JAX emitted).
    self.schedule = schedule
    self.lowering = lowering
    self.partition = partition
    #: Seconds the C++ partitioner took (import, optimize, export).
    self.partition_seconds = partition_seconds
    self._imported_text = imported_text if imported_text is not None else partition.imported_text
    self._static_args = static_args
    self._static_argnums = static_argnums
    self._placement = placement
    self._arg_shardings = tuple(arg_shardings)
    self._out_shardings = dict(out_shardings or {})

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
    return self._placement.meshes

  @property
  def output_meshes(self) -> tuple[str, ...]:
    """Mesh of each flat output."""
    return tuple(self.partition.output_meshes)

  @property
  def donated(self) -> tuple[bool, ...]:
    """Per flat argument: whether the caller donates it (`donate_argnums`)."""
    return tuple(self.lowering.donated_invars)

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
      return self._imported_text
    if dialect == "mpmd":
      return self.partition.exported_text
    raise ValueError(f"unknown dialect {dialect!r}: use 'stablehlo', 'mpmd-import' or 'mpmd'")

  def compile(self) -> Compiled:
    """Compiles every distinct fragment program on its mesh (through PJRT).

    Inputs are compiled for `in_shardings` where given, else for the layout
    the arguments passed to `lower` have on their mesh, else replicated.
    """
    return self._compile(self._arg_shardings)

  def _compile(self, arg_shardings: Sequence[Sharding | None]) -> Compiled:
    kept = [arg_shardings[i] for i in self.lowering.kept_var_idx]
    logger.info("partitioned program:\n%s", _describe_program(self.partition))
    donated = self.lowering.donated_invars
    program = runtime.compile_program(
        self.partition, self.config.topology, kept, self._out_shardings,
        [bool(donated[i]) if donated else False for i in self.lowering.kept_var_idx],
        self.lowering.out_avals)
    return Compiled(self, program)


class Compiled:
  """A compiled MPMD program; call it like the original function."""

  def __init__(self, lowered: Lowered, program: runtime.Program):
    self.lowered = lowered
    self.program = program
    lowering = lowered.lowering
    self._flat_in_shardings: list[Sharding | None] = [None] * len(lowering.in_avals)
    for k, i in enumerate(lowering.kept_var_idx):
      self._flat_in_shardings[i] = program.input_shardings[k]
    donated = lowering.donated_invars
    # Arguments on meshes of other processes are not placed here (multi-process).
    owner = program.ownership
    self._kept = tuple((i, program.input_shardings[k], bool(donated[i]) if donated else False,
                        owner.runs(mesh))
                       for k, (i, mesh) in enumerate(zip(lowering.kept_var_idx,
                                                         lowered.partition.input_meshes)))
    self._multiprocess = owner.multiprocess
    self._memory: memory.MemoryReport | None = None

  @property
  def input_shardings(self) -> Any:
    """The sharding each argument is placed with (pytree like the arguments;
    None for arguments the program does not use)."""
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

  def _path(self, leaves: list, i: int) -> str:
    tree = jax.tree_util.tree_unflatten(self.lowered.in_tree, leaves)
    first, *rest = jax.tree_util.tree_flatten_with_path(tree)[0][i][0]
    return ("args" if first.idx == 0 else "kwargs") + jax.tree_util.keystr(tuple(rest))

  def _check_avals(self, leaves: list) -> None:
    for i, aval in enumerate(self.lowered.lowering.in_avals):
      x = leaves[i]
      shape, dtype = np.shape(x), dtype_of(x)
      if tuple(shape) != tuple(aval.shape) or dtype != aval.dtype:
        raise MpmdError(f"argument {self._path(leaves, i)} has shape {tuple(shape)} and dtype "
                        f"{dtype} but the program was compiled for {tuple(aval.shape)} "
                        f"{aval.dtype}: call mpmd.jit(...) (which recompiles) or lower again")

  def _place(self, leaves: list) -> list[jax.Array]:
    """The program's inputs: each kept argument on its mesh with its sharding
    (device_put where it is not there yet). Raises before anything runs."""
    placement = self.lowered._placement
    inputs = []
    donated_ids: dict[int, int] = {}
    for i, sharding, donated, local in self._kept:
      x = leaves[i]
      if not local:  # a mesh of other processes: they place it
        inputs.append(None)
        continue
      if isinstance(x, dist.RemoteArray):
        raise dist.DistributedError(
            f"argument {self._path(leaves, i)} is a RemoteArray of mesh {x.mesh!r} (processes "
            f"{list(x.processes)}), but this program places it on a mesh this process runs: pass "
            "the value itself (mpmd.distributed.gather(x)) or keep it on the same mesh")
      if isinstance(x, jax.Array):
        if x.sharding is not sharding and x.sharding != sharding:
          placement.check_devices(x, self._path(leaves, i))
          # A donated input is consumed: it must not share the caller's
          # buffer (device_put may alias it even with may_alias=False).
          x = jax.device_put(_copy(x) if donated else x, sharding)
        elif donated:
          other = donated_ids.setdefault(id(x), i)
          if other != i:
            raise MpmdError(f"the same array is passed as arguments {self._path(leaves, other)} "
                            f"and {self._path(leaves, i)}, and donated: donation consumes it; "
                            f"pass a copy")
      else:
        x = jax.device_put(x, sharding)
      inputs.append(x)
    if donated_ids:
      for i, _, donated, _ in self._kept:
        if not donated and id(leaves[i]) in donated_ids:
          raise MpmdError(f"the same array is passed as arguments "
                          f"{self._path(leaves, donated_ids[id(leaves[i])])} (donated) and "
                          f"{self._path(leaves, i)}: donation consumes it; pass a copy")
    return inputs

  def _single_process_only(self, what: str) -> None:
    if self._multiprocess:
      raise dist.DistributedError(
          f"Compiled.{what} covers single-process runs only; in a multi-process run use "
          "jax.profiler on each process (its meshes' fragments are named in the trace)")

  def _call_flat(self, leaves: list) -> Any:
    outputs = self.program.run(self._place(leaves))
    return jax.tree_util.tree_unflatten(self.lowered.out_tree, outputs)

  def __call__(self, *args, **kwargs) -> Any:
    leaves = self._flatten_args(args, kwargs)
    self._check_avals(leaves)
    return self._call_flat(leaves)

  def trace(self, *args, **kwargs) -> tuple[Any, trace_lib.RuntimeTrace]:
    """Runs one step like `__call__` and returns (outputs, `RuntimeTrace`):
    when each fragment ran on its mesh, the measured bubble fraction, and a
    Chrome trace (`trace.write_chrome_trace(path)`)."""
    self._single_process_only("trace")
    leaves = self._flatten_args(args, kwargs)
    self._check_avals(leaves)
    outputs, runtime_trace = trace_lib.trace_run(self.program, self._place(leaves),
                                                 tuple(self.lowered.config.topology))
    return jax.tree_util.tree_unflatten(self.lowered.out_tree, outputs), runtime_trace

  def memory_report(self, *args, **kwargs) -> memory.MemoryReport:
    """Per-mesh memory in bytes per device: estimated for every point of the
    program, and measured when arguments are given.

    With arguments (like those of a call), the program runs once more,
    waiting after each instruction, on copies of the arguments (donated
    arguments are not consumed), and the peak bytes of live arrays on each
    mesh's devices are recorded (plus the allocator's peak where the
    backend reports one). The report prints as a table.
    """
    self._single_process_only("memory_report")
    lowering = self.lowered.lowering
    mesh_names = tuple(self.lowered.config.topology)
    kept = lowering.kept_var_idx
    donated = lowering.donated_invars or (False,) * len(lowering.in_avals)
    est = memory.estimate(self.program, [lowering.in_avals[i] for i in kept],
                          list(self.lowered.partition.input_meshes), [donated[i] for i in kept],
                          mesh_names)
    measured = None
    if args or kwargs:
      leaves = self._flatten_args(args, kwargs)
      self._check_avals(leaves)
      inputs = [jax.device_put(_copy(leaves[i]), sharding) for i, sharding, _, _ in self._kept]
      measured = memory.measure(self.program, inputs, self.lowered.config.topology)
      del inputs
    meshes = []
    for m in mesh_names:
      curve, peak, at = est[m]
      meas, alloc = measured[m] if measured else (None, None)
      meshes.append(memory.MeshMemory(m, peak, at, tuple(curve), meas, alloc))
    return memory.MemoryReport(tuple(meshes))
