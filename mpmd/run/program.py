"""The program the runtime runs: instructions and `Program`.

A compiled MPMD program is an ordered instruction list: fragment calls (a
compiled SPMD program on one mesh, `CallInstruction`) and transfers between
meshes (`TransferInstruction` within this process, `CrossProcessTransferInstruction`
between meshes of different processes). `Program.run` walks it in order,
dispatching asynchronously with no host synchronisation: each value is
dropped after its last use, buffers the compiler marked as donated are
consumed by the fragment that uses them last, and arguments the caller
donated are deleted at their last use. `mpmd.compile.compile_program` builds it.
"""

from __future__ import annotations

import collections
import dataclasses
import traceback
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
from jax.sharding import Sharding

from mpmd import distributed as dist
from mpmd import knobs
from mpmd._jax.array_copy import batched_copier
from mpmd._jax.dispatch import drop_failed_effect_tokens
from mpmd.errors import FragmentRuntimeError
from mpmd.run import crossprocess, stuck
from mpmd.compile.fragment import FragmentExecutable

__all__ = ["CallInstruction", "CrossProcessTransferInstruction", "FragmentRuntimeError",
           "Instruction", "Program", "ProgramParts", "TransferInstruction", "max_inflight",
           "wait_for_calls"]


@dataclasses.dataclass(frozen=True)
class CallInstruction:
  """Run fragment `fragment` on `mesh`: values `operands` -> `results`."""
  fragment: FragmentExecutable
  mesh: str
  operands: tuple[int, ...]
  results: tuple[int, ...]
  origins: tuple[str, ...]
  location: str
  unit: str = ""
  #: Operand positions whose buffers the call consumes.
  donated: tuple[int, ...] = ()
  #: Values whose last use this is (dropped after it).
  frees: tuple[int, ...] = ()
  #: Operand positions of constants the call consumes (the zeros a first
  #: microbatch's accumulators start from), made afresh by `fill` (a compiled
  #: program of no arguments, one dispatch) for each call.
  fresh: tuple[int, ...] = ()
  fill: Any = dataclasses.field(default=None, compare=False)
  #: The program has effects outside it (a host callback, a side-effecting
  #: custom call): it runs only once every argument of the step is checked.
  effects: bool = False
  #: Which result `execute` returns (the call is done when it is ready): the
  #: first one no later call consumes by donation, so that a window can still
  #: wait for it and see the call's error (`Program`; 0 when all are donated).
  watch: int = 0

  def __str__(self) -> str:
    unit = f" [{self.unit}]" if self.unit else ""
    return (f"call {self.fragment.name}{unit} on {self.mesh}: "
            f"{list(self.operands)} -> {list(self.results)}")

  def execute(self, env: list) -> jax.Array | None:
    """Dispatches the call on the values in `env` and stores its results
    there; returns one of them (ready when the call is done), if any."""
    args = [env[i] for i in self.operands]
    if self.fresh:
      for k, x in zip(self.fresh, self.fill()):
        args[k] = x
    outs = self.fragment.call_trusted(args)
    for i, x in zip(self.results, outs):
      env[i] = x
    return outs[self.watch] if outs else None

  @property
  def meshes(self) -> tuple[str, ...]:
    return (self.mesh,)

  def describe(self) -> str:
    """How errors name this call: function, unit, origins, mesh, source."""
    parts = [f"fragment {self.fragment.name!r}"]
    if self.unit:
      parts.append(f"(unit {self.unit})")
    parts.append(f"of {', '.join(self.origins)}" if self.origins else "(inferred)")
    parts.append(f"on mesh {self.mesh!r}")
    if self.location:
      parts.append(f"at {self.location}")
    return " ".join(parts)


@dataclasses.dataclass(frozen=True)
class _Transfer:
  """What both kinds of transfer have: `operands[0]` on `src_mesh` becomes
  `results[0]` on `mesh`."""
  src_mesh: str
  mesh: str
  operands: tuple[int, ...]
  results: tuple[int, ...]
  location: str
  #: The transfer is the last use of its operand (the compiler's `mpmd.donate`):
  #: the source is released as soon as the copy is issued. (It is not passed
  #: to `jax.device_put(donate=True)`: with jaxlib 0.10.2 on CPU, touching the
  #: source array after such a cross-device put crashes the process.)
  donate: bool = False
  frees: tuple[int, ...] = ()

  @property
  def meshes(self) -> tuple[str, ...]:
    return (self.src_mesh, self.mesh)

  def _where(self) -> str:
    return (f"from mesh {self.src_mesh!r} to mesh {self.mesh!r}"
            + (f" at {self.location}" if self.location else ""))


@dataclasses.dataclass(frozen=True)
class TransferInstruction(_Transfer):
  """Move a value between two meshes of this process (`jax.device_put`, or
  `copier` when the compiler found the value's layout to be the same on both
  meshes: the same copy without `device_put`'s per-call bookkeeping)."""
  sharding: Sharding = dataclasses.field(kw_only=True)
  copier: Any = dataclasses.field(default=None, kw_only=True, compare=False)
  #: False between meshes that share devices (`make_config(shared_devices=
  #: True)`): there `jax.device_put` would hand back the same buffer, and
  #: each mesh frees and donates its values on its own, so the copy is real.
  may_alias: bool | None = dataclasses.field(default=None, kw_only=True)

  def __str__(self) -> str:
    return f"transfer {self.operands[0]} from {self.src_mesh} to {self.mesh} -> {self.results[0]}"

  def execute(self, env: list) -> jax.Array:
    """Issues the copy of the value in `env` and stores the result there."""
    x = env[self.operands[0]]
    y = env[self.results[0]] = (self.copier(x) if self.copier is not None
                                else jax.device_put(x, self.sharding, may_alias=self.may_alias))
    return y

  def describe(self) -> str:
    return f"transfer {self._where()}"


@dataclasses.dataclass(frozen=True)
class CrossProcessTransferInstruction(_Transfer):
  """This process's part of a transfer between meshes of different processes
  (one collective over both meshes' devices; see `mpmd.run.crossprocess`)."""
  transfer: crossprocess.CrossProcessTransfer | crossprocess.PullTransfer = dataclasses.field(
      kw_only=True)

  @property
  def sharding(self) -> Sharding:
    return self.transfer.plan.target

  def __str__(self) -> str:
    role = "/".join(r for r, on in (("send", self.transfer.sends),
                                    ("receive", self.transfer.receives)) if on)
    return (f"transfer {self.operands[0]} from {self.src_mesh} to {self.mesh} -> "
            f"{self.results[0]} (cross-process, {role})")

  def execute(self, env: list) -> jax.Array:
    """Joins the collective; stores the value where this process receives it."""
    env[self.results[0]], done = self.transfer.exchange(env[self.operands[0]])
    return done

  def describe(self) -> str:
    return f"cross-process transfer {self._where()}"


Instruction = CallInstruction | TransferInstruction | CrossProcessTransferInstruction


def eager_sends(instructions: Sequence[Instruction]) -> list[Instruction]:
  """`instructions` with each pull this process serves (the source side of a
  `crossprocess.PullTransfer`) moved to right after the instruction that
  computes its value (to the start for a value the program starts with).

  Offering a value to the transfer server after a later call on the same
  device holds the pull behind that call: in 1F1B the activation of
  microbatch i+1 would wait for the backward of microbatch i, which waits
  for the other process. Collectives keep their places (every process must
  join them in the same order); pulls are numbered per transfer, so moving
  one does not change what the other process pulls.
  """
  def early(inst: Instruction) -> bool:
    return (isinstance(inst, CrossProcessTransferInstruction) and inst.transfer.sends
            and not inst.transfer.receives
            and isinstance(inst.transfer, crossprocess.PullTransfer))

  rest = [inst for inst in instructions if not early(inst)]
  produced = {v for inst in rest for v in inst.results}
  after: dict[int, list[Instruction]] = collections.defaultdict(list)  # value -> its sends
  ordered = []
  for inst in instructions:
    if early(inst):
      if inst.operands[0] in produced:
        after[inst.operands[0]].append(inst)
      else:
        ordered.append(inst)
  for inst in rest:
    ordered.append(inst)
    for v in inst.results:
      ordered.extend(after.pop(v, ()))
  return ordered


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


def _with_watched_results(instructions: list[Instruction]) -> list[Instruction]:
  """Sets each call's `watch`: its first result that no later call consumes
  by donation (a donated result is deleted before the call's error could be
  read from it)."""
  donated = {inst.operands[k] for inst in instructions if isinstance(inst, CallInstruction)
             for k in inst.donated}
  out = []
  for inst in instructions:
    if isinstance(inst, CallInstruction) and inst.results and inst.results[0] in donated:
      kept = [k for k, v in enumerate(inst.results) if v not in donated]
      if kept:
        inst = dataclasses.replace(inst, watch=kept[0])
    out.append(inst)
  return out


def _aliased_outputs(input_ids: Sequence[int], output_ids: Sequence[int],
                     fixups: Mapping[int, Sharding]) -> tuple[int, ...]:
  """Output positions whose value is an input, or an earlier output, and that
  no sharding fix-up copies already."""
  seen = set(input_ids)
  aliased = []
  for k, v in enumerate(output_ids):
    if v in seen and k not in fixups:
      aliased.append(k)
    seen.add(v)
  return tuple(aliased)


@dataclasses.dataclass(frozen=True)
class ProgramParts:
  """What a `Program` is made of (`mpmd.compile.compile_program` puts it together).

  Attributes:
    instructions: the program in execution order.
    input_ids / output_ids: value ids of the entry function's inputs/outputs.
    num_values: the size of the value table (one more than the largest id).
    input_shardings: the sharding each input must have.
    output_shardings: the sharding of each output.
    fragments: (function name, mesh, variant) -> executable, one per compile.
    output_fixups: output index -> the sharding it is copied to (its value
      has another one: an input returned as is, or a value returned twice).
    donated_inputs: per input, whether the caller donated it: it is deleted
      at its last use if XLA did not consume it.
    remote_outputs: output index -> its placeholder, for outputs on meshes
      of other processes.
    constants: value id -> the array the runtime passes itself (the scalars
      that tell microbatches apart; see `-mpmd-parameterize-fragment-constants`),
      placed on its mesh once. (The constants a call consumes, such as the
      zeros a first microbatch's accumulators start from, are not here: the
      call makes them afresh, see `CallInstruction.fill`.)
    max_inflight: most dispatched, unfinished instructions per mesh (0: no
      bound); see `max_inflight()`.
    ownership: the `mpmd.distributed.Ownership` of the meshes.
    bounded_meshes: the meshes `max_inflight` bounds (None: all of them).
    num_xla_compiles / num_loaded: how many `fragments` XLA compiled (None:
      all of them), and how many are programs compiled for another mesh of
      the same shape and loaded on their mesh instead.
    num_warmed_up: how many programs ran once on zeros when the compile
      finished (`mpmd.compile.warmup`).
    fingerprint: in a multi-process run, the name every process gives this
      compile (in JAX's coordination service); "" otherwise.
  """
  instructions: Sequence[Instruction]
  input_ids: Sequence[int]
  output_ids: Sequence[int]
  num_values: int
  input_shardings: Sequence[Sharding]
  output_shardings: Sequence[Sharding | None]
  fragments: Mapping[tuple, FragmentExecutable] = dataclasses.field(default_factory=dict)
  output_fixups: Mapping[int, Sharding] = dataclasses.field(default_factory=dict)
  donated_inputs: Sequence[bool] = ()
  remote_outputs: Mapping[int, dist.RemoteArray] = dataclasses.field(default_factory=dict)
  constants: Mapping[int, jax.Array] = dataclasses.field(default_factory=dict)
  max_inflight: int = 0
  ownership: dist.Ownership | None = None
  bounded_meshes: frozenset[str] | None = None
  num_xla_compiles: int | None = None
  num_loaded: int = 0
  num_warmed_up: int = 0
  fingerprint: str = ""


class Program:
  """A compiled MPMD program: fragment executables and the instruction list,
  made of one `ProgramParts`.

  Attributes:
    instructions: the program in execution order.
    input_ids / output_ids, num_values, input_shardings, output_shardings,
    fragments, constants, ownership, max_inflight, num_xla_compiles,
    num_loaded, num_warmed_up, fingerprint: as in `ProgramParts`.
    remote_outputs: output index -> placeholder, for outputs on meshes of
      other processes.
  """

  def __init__(self, parts: ProgramParts):
    self.instructions = _with_watched_results(_with_frees(list(parts.instructions),
                                                          set(parts.output_ids)))
    self.constants = dict(parts.constants)
    self.num_xla_compiles = (len(parts.fragments) if parts.num_xla_compiles is None
                             else parts.num_xla_compiles)
    self.num_loaded = parts.num_loaded
    self.num_warmed_up = parts.num_warmed_up
    self.fingerprint = parts.fingerprint
    # Inputs the caller donated that XLA did not consume (it aliases only
    # buffers it can reuse for an output) are deleted at their last use.
    donated = {v for v, d in zip(parts.input_ids, parts.donated_inputs) if d}
    self._delete_at = {index: tuple(v for v in inst.frees if v in donated)
                       for index, inst in enumerate(self.instructions)
                       if any(v in donated for v in inst.frees)}
    self.input_ids = tuple(parts.input_ids)
    self.output_ids = tuple(parts.output_ids)
    self.num_values = parts.num_values
    self.fragments = dict(parts.fragments)
    self.input_shardings = tuple(parts.input_shardings)
    self.output_shardings = tuple(parts.output_shardings)
    self._output_fixups = dict(parts.output_fixups)
    #: Outputs that would otherwise be the same array as an input (the
    #: caller's own object) or as an earlier output: they are copied, so that
    #: every output owns its buffer, as with `jax.jit` (donating one must not
    #: delete another, or the caller's argument).
    self._copied_outputs = _aliased_outputs(self.input_ids, self.output_ids,
                                            self._output_fixups)
    #: Output index -> placeholder, for outputs on meshes of other processes.
    self.remote_outputs = dict(parts.remote_outputs)
    #: The meshes this process takes part in (all of them in a single-process run).
    self.ownership = parts.ownership
    #: Most dispatched, unfinished instructions per mesh (0: no bound); see
    #: `max_inflight()`. Each call has its own windows (`_Windows`): nothing
    #: of a call is held once it returns, and a failed call leaves nothing
    #: behind that a later one would trip over.
    self.max_inflight = parts.max_inflight
    #: Whether a call waits for all of its work before it returns (see
    #: `wait_for_calls()`); else only for its instructions on bounded meshes.
    self.wait_for_calls = wait_for_calls()
    #: (instruction index, weak reference to an output) of calls that returned
    #: before their work was done (`wait_for_calls` off): the next call looks
    #: at those done and raises for a failure, naming where it began.
    self._pending: list[tuple[int, weakref.ref]] = []
    bounded = parts.bounded_meshes
    self._bounded = (lambda mesh: True) if bounded is None else bounded.__contains__
    self._prepare_steps()

  @property
  def instructions(self) -> list[Instruction]:
    """The program in execution order (setting it prepares `run` again)."""
    return self._instructions

  @instructions.setter
  def instructions(self, instructions: list[Instruction]) -> None:
    self._instructions = instructions
    if hasattr(self, "_bounded"):
      self._prepare_steps()

  def deleted_after(self, index: int) -> tuple[int, ...]:
    """The caller's donated inputs that `run` deletes after instruction
    `index` (their last use; XLA consumed none of them)."""
    return self._delete_at.get(index, ())

  def _prepare_steps(self) -> None:
    """What `run` does per instruction, worked out once: the dispatch, the
    meshes whose in-flight window it enters (only multi-device meshes: the
    bound guards a deadlock of collectives, which one device never runs),
    the donated caller inputs to delete, the values to drop, and the index
    of the (first) instruction, for errors. Consecutive same-layout
    transfers are one step: one batched copy (`_batched_transfers`)."""
    steps = []
    runs = _transfer_runs(self._instructions)
    slots: dict[str, int] = {}
    blocking: list[bool] = []
    for first, group in runs:
      indices = range(first, first + len(group))
      meshes = dict.fromkeys(m for inst in group for m in inst.meshes)
      for m in meshes:
        if m not in slots:
          slots[m] = len(slots)
          blocking.append(bool(self.max_inflight) and self._bounded(m))
      if len(group) > 1:
        execute = _batched_transfers(group)
      elif isinstance(group[0], CallInstruction) and group[0].effects:
        # (a host callback that raises on one device of several: see `stuck`)
        execute = stuck.watched_execute(group[0].execute, group[0].describe)
      else:
        execute = group[0].execute
      steps.append((
          execute,
          tuple(slots[m] for m in meshes),
          tuple(v for i in indices for v in self.deleted_after(i)),
          tuple(v for inst in group for v in inst.frees), first))
    self._steps = tuple(steps)
    #: Per window slot (one per mesh): whether it bounds what is in flight
    #: (else it only keeps the latest results, to find where a failure began).
    self._window_blocking = tuple(blocking)
    #: Value id -> index of the instruction that makes it (for errors).
    self._producer = {v: i for i, inst in enumerate(self._instructions) for v in inst.results}
    #: (output position, index of the call that makes it): one output per
    #: fragment call (the results of one execution are ready, or failed,
    #: together; a training step's state is hundreds of outputs of a few calls).
    watched: dict[int, int] = {}
    for k, v in enumerate(self.output_ids):
      index = self._producer.get(v)
      if index is not None and isinstance(self._instructions[index], CallInstruction):
        watched.setdefault(index, k)
    self._watched_outputs = tuple((k, index) for index, k in sorted(watched.items()))
    #: Whether every instruction runs in this process: then, after a failure,
    #: waiting for what was dispatched before it cannot hang on another process.
    self._local_only = not any(isinstance(inst, CrossProcessTransferInstruction)
                               for inst in self._instructions)
    #: Whether the program pulls values between processes (see
    #: `crossprocess.seal_connected`, called at the end of each call).
    self._pulls = any(isinstance(inst, CrossProcessTransferInstruction)
                      and isinstance(inst.transfer, crossprocess.PullTransfer)
                      for inst in self._instructions)
    #: First instruction of a batched step -> how many it issues together.
    self._batched_sizes = {first: len(group) for first, group in runs if len(group) > 1}
    inputs = set(self.input_ids)
    checkpoint = next((p for p, (first, group) in enumerate(runs)
                       if any(self._irreversible(first + j, inst, inputs)
                              for j, inst in enumerate(group))), len(runs))
    #: The steps before the first one that consumes or changes anything the
    #: caller holds (`_irreversible`), and the rest: `run(check=...)` checks
    #: the arguments in between.
    self._early_steps, self._late_steps = self._steps[:checkpoint], self._steps[checkpoint:]
    early_reads = {v for _, group in runs[:checkpoint] for inst in group for v in inst.operands}
    #: Positions of the inputs that the steps before the checkpoint read.
    self.early_inputs = tuple(k for k, v in enumerate(self.input_ids) if v in early_reads)

  def _irreversible(self, index: int, inst: Instruction, inputs: set[int]) -> bool:
    """Whether instruction `index` consumes a caller's array (a call
    donating an input, the deletion of a donated input at its last use),
    has effects outside the program, or involves another process."""
    if index in self._delete_at or isinstance(inst, CrossProcessTransferInstruction):
      return True
    return isinstance(inst, CallInstruction) and (
        inst.effects or any(inst.operands[k] in inputs for k in inst.donated))

  def initial_env(self, inputs: Sequence[jax.Array]) -> list:
    """The value table of a run: the inputs at their ids, None elsewhere."""
    env: list = [None] * self.num_values
    for i, x in zip(self.input_ids, inputs):
      env[i] = x
    for i, x in self.constants.items():
      env[i] = x
    return env

  def run(self, inputs: Sequence[jax.Array],
          check: Callable[[], None] | None = None) -> list[jax.Array]:
    """Runs the program on inputs placed as `input_shardings`.

    Dispatches asynchronously; with `wait_for_calls` it then waits for the
    call's work (its outputs and the latest instructions of each mesh), so
    that a failure raises here, else it returns once everything is dispatched
    and a failure raises from the next call that finds it (see
    `wait_for_calls()`). No value of the call but its outputs outlives it.
    Raises `FragmentRuntimeError` naming the instruction (fragment, unit,
    origins, mesh, source location) where the failure began: the first one,
    in program order, found failed. `check`, if given, runs before the
    first instruction that consumes an argument or has effects outside the
    program: it may raise to stop the call, and then nothing the caller holds
    has changed (the instructions before it only read the inputs and make
    values of the program's own).
    """
    if self._pending:
      self._raise_earlier_failure()
    stuck.raise_if_stuck()
    env = self.initial_env(inputs)
    windows = _Windows(self._window_blocking, self.max_inflight or _TRACKED)
    try:
      self._run_steps(env, self._early_steps, windows)
      if check is not None:
        check()
      self._run_steps(env, self._late_steps, windows)
      outputs = [env[i] for i in self.output_ids]
      env.clear()
      for k, sharding in self._output_fixups.items():
        outputs[k] = jax.device_put(outputs[k], sharding)
      for k in self._copied_outputs:
        if outputs[k] is not None:
          outputs[k] = jax.numpy.copy(outputs[k])
      self._settle(windows, outputs)
      if self._pulls:
        crossprocess.seal_connected(wait=self.wait_for_calls)
    except BaseException:
      # The error's traceback holds this frame: it must not hold the call's values.
      env.clear()
      outputs = None
      raise
    finally:
      windows.clear()
      if stuck.watching:
        stuck.forget_done()
      if not self._local_only:
        dist.steps.call_finished()
    if not self.wait_for_calls:
      self._pending.extend((index, weakref.ref(outputs[k])) for k, index in self._watched_outputs
                           if outputs[k] is not None and k not in self.remote_outputs)
      del self._pending[:-_MAX_PENDING]
    for k, placeholder in self.remote_outputs.items():
      outputs[k] = placeholder
    return outputs

  def _raise_earlier_failure(self) -> None:
    """Looks at the outputs of earlier calls that returned before their work
    was done (`wait_for_calls` off), without waiting: raises
    `FragmentRuntimeError` for one that failed, naming the call where it
    began, before this call runs anything (so nothing the caller passes is
    consumed). Those not done yet are looked at by the next call."""
    pending, self._pending = self._pending, []
    for index, ref in pending:
      x = ref()
      if x is None or x.is_deleted():
        continue  # (dropped or donated since: a later output carries any error)
      if not _done(x):
        self._pending.append((index, ref))
        continue
      try:
        _check(index, x)
      except _Failed as e:
        self._pending.clear()  # (one report per failure: they all carry it)
        if self._local_only:
          drop_failed_effect_tokens()
        _forget_frames(e.cause)
        raise FragmentRuntimeError(
            f"{self.instructions[index].describe()} failed in an earlier call of this program, "
            f"which returned before its work was done (calls run asynchronously, as jax.jit's "
            f"do): {type(e.cause).__name__}: {e.cause}. That call's outputs carry the error; "
            "nothing of this call ran, and its arguments are as they were") from e.cause

  def _run_steps(self, env: list, steps: Sequence[tuple], windows: _Windows) -> None:
    """Dispatches `steps` (of `_steps`) on the value table `env`."""
    index = 0
    failure = None
    try:
      for execute, slots, deletes, frees, index in steps:
        done = execute(env)
        if done is not None:
          for slot in slots:
            windows.push(slot, index, done)
        if deletes:
          delete_values(env, deletes)
        for i in frees:
          env[i] = None
    except _Failed as e:
      failure = e.index, e.cause
    except Exception as e:  # noqa: BLE001 -- re-raised naming the instruction
      failure = index, e
    if failure is not None:
      done = None
      env.clear()
      self._raise_failure(windows, *failure)

  def _settle(self, windows: _Windows, outputs: Sequence[jax.Array | None]) -> None:
    """Waits for the call's work: the instructions still in the windows (in
    program order), then the outputs; raises for the first that failed."""
    try:
      if not self.wait_for_calls:  # (MPMD_ASYNC_CALLS: only what the bound needs)
        windows.check_all(block=True, only_blocking=True)
        return
      windows.check_all(block=True)
      # One output per fragment call: the results of one execution are
      # ready (or failed) together, and a training step's state is hundreds
      # of outputs of a few update calls (waiting for each cost the small
      # model of benchmarks/gpt2.py 0.6 ms a step).
      last = len(self._instructions) - 1
      checked = set()
      for k, x in enumerate(outputs):
        if x is not None and k not in self.remote_outputs:
          index = self._producer.get(self.output_ids[k])
          if index is None:  # not made by this call (an input passed through)
            _check(last, x)
            continue
          if index in checked:
            continue
          if isinstance(self._instructions[index], CallInstruction):
            checked.add(index)
          _check(index, x)
    except _Failed as e:
      self._raise_failure(windows, e.index, e.cause)

  def _raise_failure(self, windows: _Windows, index: int, cause: BaseException) -> None:
    """Raises `FragmentRuntimeError` for a failure seen at instruction
    `index`, naming the instruction where it began: the earliest one still
    held in a window that failed too (an error passes on to everything
    computed from the failed value). In a single-process program the
    instructions dispatched before are waited for first; with other
    processes involved only finished ones are looked at (waiting might hang
    on a process that is itself waiting for this one)."""
    try:
      windows.check_all(block=self._local_only, before=index)
    except _Failed as earlier:
      index, cause = earlier.index, earlier.cause
    finally:
      windows.clear()
    if stuck.is_stuck(cause):
      # (Its message names the fragment and what follows; the stuck devices'
      # effect tokens never finish, so none is waited for.)
      raise FragmentRuntimeError(str(cause)) from None
    if self._local_only:
      drop_failed_effect_tokens()
    _forget_frames(cause)
    what = self.instructions[index].describe()
    together = self._batched_sizes.get(index, 1)
    if together > 1:
      what = (f"{what} (or one of the {together - 1} transfer(s) after it, issued together: "
              + "; ".join(self.instructions[i].describe()
                          for i in range(index + 1, index + together)) + ")")
    message = f"{what} failed: {type(cause).__name__}: {cause}"
    if not self._local_only:  # a peer that failed first is the likely cause
      # (A failure that came through a transfer from another process: that
      # process publishes its own error right after; wait for it a little.)
      wait = 2.0 if isinstance(self.instructions[index], CrossProcessTransferInstruction) else 0.0
      message += "".join(f" (before this, {f})"
                         for f in dist.steps.peer_failures(wait=wait))
    raise FragmentRuntimeError(message) from cause


#: How many of its latest results a mesh's window keeps when it bounds nothing.
_TRACKED = 16
#: Most outputs of earlier asynchronous calls a program keeps looking at.
_MAX_PENDING = 64


class _Failed(Exception):
  """Instruction `index` of the running call failed with `cause`."""

  def __init__(self, index: int, cause: BaseException):
    super().__init__(index, cause)
    self.index, self.cause = index, cause


def _check(index: int, x: jax.Array) -> None:
  """Waits for `x` (a result of instruction `index`); raises `_Failed` if
  its computation failed (not if it was donated or deleted since)."""
  try:
    if stuck.watching and not x.is_ready():
      stuck.wait(x)  # (raises once a fragment is stuck behind a failed device)
    x.block_until_ready()
  except Exception as e:  # noqa: BLE001
    if x.is_deleted():
      return  # (donated to a later instruction, whose result carries any error)
    # (A computation that read a buffer deleted or donated before it ran
    # failed for real: its error says "deleted or donated" but it is raised.)
    raise _Failed(index, e) from e


def delete_values(env: list, ids: Sequence[int]) -> None:
  """Deletes the arrays at `ids` of the value table `env` (the caller's
  donated inputs at their last use; see `Program.deleted_after`)."""
  for i in ids:
    if env[i] is not None and not env[i].is_deleted():
      env[i].delete()


def _forget_frames(error: BaseException) -> None:
  """Clears the local variables of the finished frames in the tracebacks of
  `error` and the errors chained to it: a caller that keeps the exception
  must not keep the failed call's arrays alive with it."""
  seen = set()
  while error is not None and id(error) not in seen:
    seen.add(id(error))
    traceback.clear_frames(error.__traceback__)
    error = error.__cause__ or error.__context__


def _done(x: jax.Array) -> bool:
  """Whether `x` is computed (or failed), without waiting; False once deleted."""
  try:
    return x.is_ready()
  except Exception:  # noqa: BLE001 -- deleted (donated) since: nothing to look at
    return False


class _Windows:
  """One call's in-flight windows, one per mesh: (instruction index, a
  result) of the latest dispatched instructions. A blocking window waits for
  its oldest instruction once `limit` are in flight (`max_inflight`); the
  others keep the latest `limit` and look at the oldest only when it is
  already done. Either way a failure is seen as early as it can be, and
  `check_all` finds the earliest failed instruction still held."""

  __slots__ = ("blocking", "limit", "entries")

  def __init__(self, blocking: Sequence[bool], limit: int):
    self.blocking = blocking
    self.limit = limit
    self.entries = [collections.deque() for _ in blocking]

  def push(self, slot: int, index: int, done: jax.Array) -> None:
    window = self.entries[slot]
    window.append((index, done))
    if len(window) > self.limit:
      oldest_index, oldest = window.popleft()
      if self.blocking[slot] or _done(oldest):
        _check(oldest_index, oldest)

  def check_all(self, *, block: bool, before: int | None = None,
                only_blocking: bool = False) -> None:
    """Looks at every held instruction (before `before`, if given; of the
    blocking windows only, if `only_blocking`) in program order, waiting for
    each if `block`, else only at those done; raises `_Failed` for the first
    that failed."""
    held = {}
    for slot, window in enumerate(self.entries):
      if only_blocking and not self.blocking[slot]:
        continue
      for index, x in window:
        if before is None or index < before:
          held.setdefault(index, []).append(x)
    for index in sorted(held):
      for x in held[index]:
        if block or _done(x):
          _check(index, x)

  def clear(self) -> None:
    for window in self.entries:
      window.clear()


def _transfer_runs(instructions: Sequence[Instruction]) -> list[tuple[int, list[Instruction]]]:
  """The instructions in order as (index of the first, group): a group is
  one instruction, or a run of consecutive same-layout transfers (with a
  `copier`) none of which reads what another of the run writes."""
  groups: list[tuple[int, list[Instruction]]] = []
  #: Results of the current group while it is a run of batchable transfers
  #: (empty otherwise, so a non-empty set means the group can grow).
  written: set[int] = set()
  for index, inst in enumerate(instructions):
    batchable = isinstance(inst, TransferInstruction) and inst.copier is not None
    if batchable and written and not written.intersection(inst.operands):
      groups[-1][1].append(inst)
    else:
      groups.append((index, [inst]))
      written = set()
    if batchable:
      written.update(inst.results)
  return groups


def _batched_transfers(group: Sequence[TransferInstruction]):
  """One step for a run of same-layout transfers: one batched copy."""
  copy = batched_copier([t.copier for t in group])
  operands = [t.operands[0] for t in group]
  results = [t.results[0] for t in group]

  def execute(env: list) -> jax.Array:
    outs = copy([env[i] for i in operands])
    for i, y in zip(results, outs):
      env[i] = y
    return outs[-1]

  return execute


def wait_for_calls() -> bool:
  """Whether a call of a program waits for all of its work before it returns.

  By default a call in a single-process run returns once its work is
  dispatched, as a `jax.jit` call does: the host prepares the next step (data,
  logging) while the devices run this one. A failure then raises from the
  first read of an affected output (JAX's error) or from the next call of the
  program that finds it (`FragmentRuntimeError` naming the fragment, unit,
  origins and mesh where it began, before that call consumes anything). In a
  multi-process run a call waits for its work: a process finds its own
  failure and publishes it before its peers wait on it. On CPU a call also
  waits for its programs on meshes of several devices (`max_inflight`: the
  bound on what is in flight holds across calls).

  `MPMD_ASYNC_CALLS=1` makes every call return once dispatched (multi-process
  runs too); `MPMD_ASYNC_CALLS=0` makes every call wait, so that a failure
  raises from the call that failed. Nothing of a call but its outputs
  outlives it either way.
  """
  value = knobs.tristate(knobs.MPMD_ASYNC_CALLS)
  if value is not None:
    return not value
  return jax.process_count() > 1


def max_inflight(platform: str) -> int:
  """How many instructions may be dispatched and unfinished per mesh.

  `MPMD_MAX_INFLIGHT` when set (0: no bound). Otherwise 16 on CPU: with
  jaxlib 0.10.2, more than about 32 multi-device executions with
  collectives in flight on the same CPU devices deadlock (seen with plain
  `jax.jit` too, in one process or several), so the runtime waits for the
  oldest one before it gets there. Only meshes of several devices are bound:
  a one-device program runs no collective (400 one-device executions in
  flight ran fine on jaxlib 0.10.2, CPU). No bound on other platforms.
  """
  value = knobs.integer(knobs.MPMD_MAX_INFLIGHT)
  if value is not None:
    return value
  return 16 if platform == "cpu" else 0

