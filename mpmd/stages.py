"""The JAX stages model for MPMD programs: `Lowered` -> `Compiled` -> call.

`mpmd.jit(f, config).lower(*args)` traces and lowers `f`, runs the C++
partitioner and returns a `Lowered`; `Lowered.compile()` compiles every
distinct fragment program on its mesh (for the input shardings of the
arguments `lower` saw, or `in_shardings`) and returns a `Compiled`, which
runs the program when called with arguments like those. Both read the
program's flat inputs and outputs from one `mpmd.run.calling.Signature`; what a
call does with its arguments (the steady-state path, placement) is in
`mpmd.run.calling` too.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import jax
from jax.sharding import Sharding

from mpmd import distributed as dist
from mpmd.compile.compile_program import compile_program
from mpmd.run.program import Instruction, Program
from mpmd._jax.compiling import host_callbacks
from mpmd._jax import lowering as jl
from mpmd.run.calling import ProgramInputs, Signature, check_not_traced
from mpmd.config import MpmdConfig
from mpmd.errors import FragmentRuntimeError
from mpmd.trace.tracing import MpmdLoweringResult
from mpmd.partition.partitioner import Partitioned
from mpmd.compile import memory
from mpmd.run import timeline as trace_lib

logger = logging.getLogger("mpmd")


class _NotSteady(Exception):
  """A steady-state call found an argument it does not recognise."""


class Lowered:
  """A partitioned, not yet compiled MPMD program."""

  def __init__(self, config: MpmdConfig, lowering: MpmdLoweringResult, partitioned: Partitioned,
               signature: Signature, *, arg_shardings: Sequence[Sharding | None],
               name: str = "program"):
    #: The name of the function (for messages).
    self.name = name
    self.config = config
    self.lowering = lowering
    #: The `mpmd.partition.partitioner.PartitionedProgram`: instructions, fragment
    #: functions, meshes.
    self.partition = partitioned.program
    #: The resolved `mpmd.schedule.Schedule` the program runs in (or None:
    #: the order JAX emitted).
    self.schedule = partitioned.schedule
    #: Seconds the C++ partitioner took (import, schedule, optimize, export).
    self.partition_seconds = partitioned.seconds
    #: The flat inputs and outputs: meshes, avals, donation, placement.
    self.signature = signature
    self._partitioned = partitioned
    self._mpmd_opt_args = partitioned.mpmd_opt_args
    self._arg_shardings = tuple(arg_shardings)

  @property
  def in_tree(self):
    """Pytree definition of the non-static `(args, kwargs)`."""
    return self.signature.in_tree

  @property
  def out_tree(self):
    return self.signature.out_tree

  @property
  def input_meshes(self) -> tuple[str | None, ...]:
    """Mesh of each flat argument (None for arguments the program does not use)."""
    return self.signature.input_meshes

  @property
  def output_meshes(self) -> tuple[str, ...]:
    """Mesh of each flat output."""
    return self.signature.output_meshes

  @property
  def donated(self) -> tuple[bool, ...]:
    """Per flat argument: whether the caller donates it (`donate_argnums`)."""
    return self.signature.donated

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
      return self._partitioned.imported_text
    if dialect == "mpmd":
      return self.partition.exported_text
    raise ValueError(f"unknown dialect {dialect!r}: use 'stablehlo', 'mpmd-import' or 'mpmd'")

  def mpmd_opt_args(self) -> list[str]:
    """The `mpmd-opt` arguments that redo this partition from the lowered
    module: the import, optimize (schedule, merge rules, remat) and export
    pipelines with this program's topology, assignments and options.

    `python -m mpmd.opt step.mlir <args>`, with `step.mlir` holding
    `as_text("stablehlo")`, prints the program `as_text("mpmd")` shows;
    e.g. `shlex.join(["python", "-m", "mpmd.opt", "step.mlir",
    *lowered.mpmd_opt_args()])` is a shell command line.
    """
    return list(self._mpmd_opt_args)

  def compiler_ir(self, dialect: str = "stablehlo") -> Any:
    """The module JAX lowered (with the `mpmd.*` label ops) as an MLIR
    module object, as `jax.stages.Lowered.compiler_ir`. Only "stablehlo":
    the partitioned program is text (`as_text("mpmd")`)."""
    if dialect != "stablehlo":
      raise ValueError(f"compiler_ir has only dialect 'stablehlo', got {dialect!r}: use "
                       "as_text('mpmd-import') or as_text('mpmd') for the partitioned program")
    return self.lowering.lowered.compiler_ir("stablehlo")

  def compile(self) -> Compiled:
    """Compiles every distinct fragment program on its mesh (through PJRT).

    Inputs are compiled for `in_shardings` where given, else for the layout
    the arguments passed to `lower` have on their mesh, else replicated.
    """
    return self.compile_for(self._arg_shardings)

  def compile_for(self, arg_shardings: Sequence[Sharding | None]) -> Compiled:
    """Compiles for explicit input layouts: one sharding per flat argument
    (None for arguments the program does not use), e.g.
    `lowered.signature.arg_shardings(leaves)` for other arguments."""
    sig = self.signature
    logger.info("partitioned program:\n%s", self.partition.describe())
    program = compile_program(
        self.partition, self.config.topology, [arg_shardings[i] for i in sig.kept],
        sig.out_shardings, sig.kept_donated, sig.out_avals,
        host_callbacks(self.lowering.lowered))
    return Compiled(self, program)


class Compiled:
  """A compiled MPMD program; call it like the original function."""

  def __init__(self, lowered: Lowered, program: Program):
    self.lowered = lowered
    self.program = program
    sig = self.signature = lowered.signature
    self._flat_in_shardings: list[Sharding | None] = [None] * len(sig.in_avals)
    for k, i in enumerate(sig.kept):
      self._flat_in_shardings[i] = program.input_shardings[k]
    owner = program.ownership
    #: How the flat arguments become the program's inputs (placement, and
    #: the steady-state check of a step's outputs fed to the next).
    self._inputs = ProgramInputs(sig, program.input_shardings, owner.runs)
    self._inputs.steady.read_first(program.early_inputs)
    self._multiprocess = owner.multiprocess
    #: Typed PRNG key arguments, passed to the program as their data.
    self._keys = sig.keys if sig.keys.inputs else None
    #: Whether a steady-state call checks its arguments while the program's
    #: first instructions run (cleared once the check failed there: that
    #: call ran again on the checked path, and later calls check first).
    self._check_while_running = True
    #: Calls of this program, checked against the other processes' counts.
    self._step_counter = (dist.steps.counter(program.fingerprint, lowered.name,
                                             sorted({p for ps in owner.processes.values()
                                                     for p in ps}))
                          if owner.multiprocess else None)

  @property
  def input_shardings(self) -> Any:
    """The sharding each argument is placed with (pytree like the arguments;
    None for arguments the program does not use)."""
    return jax.tree_util.tree_unflatten(self.signature.in_tree, self._flat_in_shardings)

  @property
  def output_shardings(self) -> Any:
    """The sharding of each output (pytree like the outputs)."""
    return self.signature.unflatten_outputs(self.program.output_shardings)

  @property
  def schedule(self):
    """The `mpmd.schedule.Schedule` the program runs in (None: program order)."""
    return self.lowered.schedule

  @property
  def instructions(self) -> list[Instruction]:
    """The program in execution order."""
    return list(self.program.instructions)

  def as_text(self) -> str:
    """The partitioned MPMD program (fragment calls and fragment functions)."""
    return self.lowered.as_text("mpmd")

  def cost_analysis(self) -> dict[str, Any]:
    """XLA's cost estimates per compiled fragment program: a dict from
    `"<function> on <mesh>"` to what XLA reports (e.g. `flops`), or None
    where the backend reports nothing."""
    return {f"{fragment.name} on {key[1]}": fragment.cost_analysis()
            for key, fragment in self.program.fragments.items()}

  def memory_analysis(self) -> dict[str, Any]:
    """XLA's memory statistics per compiled fragment program (per device:
    argument, output, temp and code sizes), keyed like `cost_analysis`.
    `memory_report` combines them into a per-mesh picture of the step."""
    return {f"{fragment.name} on {key[1]}": fragment.memory_analysis()
            for key, fragment in self.program.fragments.items()}

  def _single_process_only(self, what: str) -> None:
    if self._multiprocess:
      raise dist.DistributedError(
          f"Compiled.{what} covers single-process runs only; in a multi-process run use "
          "jax.profiler on each process (its meshes' fragments are named in the trace)")

  def call_steady(self, leaves: list) -> tuple[bool, Any]:
    """Runs the program if the flat arguments are as an earlier checked call
    left them (`mpmd.run.calling.SteadyInputs`: a step's outputs fed to the next)
    and no JAX trace is active: returns (True, the outputs' pytree). Returns
    (False, None) otherwise, having changed nothing the caller holds; the
    call then takes the checked path, which places the arguments or says
    what is wrong.

    The arguments are checked while the program's first instructions run:
    those up to the first that consumes an argument or has effects outside
    the program (`Program.run`), which only make values of the program's
    own. If the check fails, or one of them fails to dispatch, their results
    are dropped.
    """
    steady = self._inputs.steady
    if not (steady.array_types and self._inputs.all_local) or jl.under_transformation():
      return False, None  # (no checked call has run yet, or a multi-process or traced one)
    if self._keys:
      leaves = self._keys.try_unwrap(leaves)
      if leaves is None:
        return False, None
    xs = steady.take(leaves)
    if not self._check_while_running or self._step_counter is not None:
      # (A multi-process step is counted once it starts: it must not start twice.)
      if not steady.accept_taken(xs, leaves):
        return False, None
      return True, self.run_inputs(list(xs))
    if not steady.placed(xs):  # (what the first instructions read, without raising)
      return False, None
    checked = False

    def check() -> None:
      nonlocal checked
      if not steady.accept_taken(xs, leaves):
        raise _NotSteady
      checked = True

    try:
      return True, self.run_inputs(list(xs), check)
    except (_NotSteady, FragmentRuntimeError):
      if checked:
        raise  # a real failure, after the arguments were found in order
      self._check_while_running = False
      return False, None

  def call_flat(self, leaves: list) -> Any:
    """Runs the program on the flat arguments (the leaves of the non-static
    `(args, kwargs)`) without checking their shapes; returns the outputs'
    pytree. `__call__` checks and flattens first."""
    return self.run_inputs(self._inputs.place(self.signature.unwrap_keys(leaves)))

  def run_inputs(self, inputs: list, check: Callable[[], None] | None = None) -> Any:
    """Runs the program on inputs placed as `program.input_shardings`
    (`check`: see `Program.run`); returns the outputs' pytree."""
    if self._step_counter is not None:
      self._step_counter.begin()
    return self.signature.outputs(self.program.run(inputs, check))

  def _checked_leaves(self, args: tuple, kwargs: dict) -> list:
    return self._checked(self.signature.flatten(args, kwargs))

  def _checked(self, leaves: list) -> list:
    """The flat arguments as the program takes them, after checking that no
    trace is active and every shape and dtype is the compiled one."""
    check_not_traced(f"the Compiled program of {self.lowered.name}", leaves,
                     self.signature.in_tree)
    leaves = self.signature.unwrap_keys(leaves)
    self.signature.check_avals(leaves)
    return leaves

  def __call__(self, *args, **kwargs) -> Any:
    leaves = self.signature.flatten(args, kwargs)
    ran, outputs = self.call_steady(leaves)
    if ran:
      return outputs
    return self.run_inputs(self._inputs.place(self._checked(leaves)))

  def trace(self, *args, **kwargs) -> tuple[Any, trace_lib.RuntimeTrace]:
    """Runs one step like `__call__` and returns (outputs, `RuntimeTrace`):
    when each fragment ran on its mesh, the measured bubble fraction, and a
    Chrome trace (`trace.write_chrome_trace(path)`)."""
    self._single_process_only("trace")
    leaves = self._checked_leaves(args, kwargs)
    outputs, runtime_trace = trace_lib.trace_run(self.program, self._inputs.place(leaves),
                                                 tuple(self.lowered.config.topology))
    return self.signature.outputs(outputs), runtime_trace

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
    sig = self.signature
    mesh_names = tuple(self.lowered.config.topology)
    est = memory.estimate(self.program, list(sig.kept_avals),
                          [sig.input_meshes[i] for i in sig.kept], list(sig.kept_donated),
                          mesh_names)
    measured = None
    if args or kwargs:
      leaves = self._checked_leaves(args, kwargs)
      inputs = self._inputs.copies(leaves)
      measured = memory.measure(self.program, inputs, self.lowered.config.topology)
      del inputs
    meshes = []
    for m in mesh_names:
      curve, peak, at = est[m]
      meas, alloc = measured[m] if measured else (None, None)
      meshes.append(memory.MeshMemory(m, peak, at, tuple(curve), meas, alloc))
    return memory.MemoryReport(tuple(meshes))
