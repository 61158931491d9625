"""Exceptions raised by mpmd: every one is an `MpmdError` and is defined here
(the modules that raise them import them from here, so `mpmd.errors` imports
nothing of mpmd). The common ones are also exported from `mpmd` (e.g.
`mpmd.FragmentRuntimeError`), the schedule library's from `mpmd.schedule`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class MpmdError(Exception):
  """Base class of mpmd's errors."""


class ConfigError(MpmdError, ValueError):
  """An invalid `make_config` argument: names the offending name or mesh."""


class PartitionError(MpmdError, ValueError):
  """The compiler rejected the program.

  The message carries the compiler's diagnostics, each with the source
  location (file:line of the user's code) of the op it is about.
  """


class FragmentCompileError(MpmdError, RuntimeError):
  """A fragment program failed to parse or to compile. The message names the
  fragment and its devices and contains the parser's or XLA's message."""


class FragmentArgumentError(MpmdError, ValueError):
  """A fragment was called with an argument of the wrong shape, dtype,
  devices or sharding (raised before anything executes)."""


class FragmentExecutionError(MpmdError, RuntimeError):
  """Dispatching a fragment failed for a reason other than a bad argument."""


class FragmentRuntimeError(MpmdError, RuntimeError):
  """A fragment (or transfer) of a running program failed.

  The message names the fragment, its mesh, its scheduling unit and origins
  and the source location of the computation. Arrays the caller passed
  without donating them are left intact.
  """


class DistributedError(MpmdError, RuntimeError):
  """A multi-process run went wrong: another process did not answer in time,
  or a value was used on a process that does not hold it."""


class StageError(MpmdError, ValueError):
  """The stage markers of a traced step do not describe a pipeline
  (`mpmd.jaxpp`)."""


class PlanError(MpmdError, ValueError):
  """Planning cannot proceed: the message says why (a unit missing from the
  step, no microbatch count that divides the batch, a memory budget no
  candidate fits, naming the smallest budget that does, ...)."""


class LaunchError(MpmdError, ValueError):
  """An invalid launcher argument: the message names it and says what to pass."""


class OptError(MpmdError):
  """A failure of the `mpmd-opt` wrapper command itself (not of mpmd-opt):
  printed as one message."""


class ConversionError(MpmdError, ValueError):
  """jaxlib cannot parse or verify MLIR text it converts between readable and
  generic form (`mpmd._jax.mlir_text`), or the text has calls jaxlib's
  verifier would crash on. `str()` is the diagnostics as MLIR's tools print
  them; `diagnostics` are those located in the text (`mpmd._jax.mlir_text.Diagnostic`), in order (a note after
  the diagnostic it belongs to); `other` says whether jaxlib printed more
  than those (lines of no located diagnostic)."""

  def __init__(self, text: str, diagnostics: Sequence[Any], other: bool = False):
    super().__init__(text)
    self.diagnostics = list(diagnostics)
    self.other = other


class ScheduleError(MpmdError, ValueError):
  """An invalid schedule or schedule parameter; the message names the culprit."""


class ScheduleParseError(ScheduleError):
  """The text form of a schedule is malformed.

  Attributes:
    line_number: 1-based line number of the offending line (None if global).
    line: the offending line's text.
    token: the offending token, when one is to blame.
  """

  def __init__(self, message: str, *, line_number: int | None = None,
               line: str | None = None, token: str | None = None):
    where = f"line {line_number}: " if line_number is not None else ""
    text = where + message
    if line is not None:
      text += f"\n  {line_number}| {line.rstrip()}"
    super().__init__(text)
    self.line_number = line_number
    self.line = line
    self.token = token


class DeadlockError(ScheduleError):
  """The per-mesh orders cannot all run: some meshes wait on each other.

  Attributes:
    cycle: the wait-for cycle, one ``WaitEdge`` per mesh on it (a single edge
      when a mesh orders a unit before one it depends on).
  """

  def __init__(self, cycle: Sequence[Any]):
    self.cycle = tuple(cycle)
    if len(self.cycle) == 1 and self.cycle[0].awaited_mesh == self.cycle[0].mesh:
      e = self.cycle[0]
      msg = (f"schedule deadlocks: mesh {e.mesh} runs {e.blocked} before "
             f"{e.awaited}, but {e.blocked} depends on {e.awaited}")
    else:
      lines = [f"schedule deadlocks: {len(self.cycle)} meshes wait on each "
               "other:"]
      for i, e in enumerate(self.cycle):
        nxt = self.cycle[(i + 1) % len(self.cycle)]
        lines.append(
            f"  mesh {e.mesh} is blocked at {e.blocked}, which needs "
            f"{e.awaited} from mesh {e.awaited_mesh}, ordered there after "
            f"{nxt.blocked}")
      if len(self.cycle) == 2:
        a, b = self.cycle
        lines.insert(1, f"  {a.blocked} (mesh {a.mesh}) and {b.blocked} "
                     f"(mesh {b.mesh}) wait on each other")
      msg = "\n".join(lines)
    super().__init__(msg)


class KnobError(MpmdError, ValueError):
  """A malformed value of an `MPMD_*` environment variable (`mpmd.knobs`):
  names the variable, its value, and what it accepts."""


class UnknownKnobError(MpmdError, KeyError):
  """A name that is not a row of `mpmd.knobs.KNOBS` (a typo in code)."""

  def __str__(self) -> str:  # KeyError's would print the repr of the message
    return str(self.args[0]) if self.args else ""
