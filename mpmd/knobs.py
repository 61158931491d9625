"""Every `MPMD_*` environment variable mpmd reads or sets, in one table.

Each variable is one row of `KNOBS`: its name, kind (flag / int / float / str
/ path), default, who sets it, whether it can change a program's results, and
what it means. Code reads a variable only through the typed accessors here
(`flag`, `tristate`, `integer`, `number`, `text`, `path`, `raw`), which read
`os.environ` at each call, and names one through the constants below
(`knobs.MPMD_PROCESS_ID`) or `name()`, so that each name is written once. A
name that is not in the table is an error (`UnknownKnobError`, a KeyError);
a value an accessor cannot read is a `KnobError` (a ValueError) that names
the variable, its value and what it accepts.

docs/environment.md is generated from the table (`markdown()`): `python -m
mpmd.knobs_doc` rewrites it, `--print` prints it (test/python/test_knobs.py
checks that it is up to date).

This module imports only `mpmd.errors` (which imports nothing of mpmd), so any module may import it.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any

from mpmd.errors import KnobError, UnknownKnobError

__all__ = ["KNOBS", "Knob", "KnobError", "UnknownKnobError", "flag", "integer", "knob",
           "markdown", "name", "number", "path", "raw", "text", "tristate"]

# The names, each written once (the rows below use these constants).
MPMD_ASYNC_CALLS = "MPMD_ASYNC_CALLS"
MPMD_COMPILE_THREADS = "MPMD_COMPILE_THREADS"
MPMD_COORDINATOR_ADDRESS = "MPMD_COORDINATOR_ADDRESS"
MPMD_CPU_AFFINITY = "MPMD_CPU_AFFINITY"
MPMD_CROSS_PROCESS_TRANSFERS = "MPMD_CROSS_PROCESS_TRANSFERS"
MPMD_DISPATCH_COST = "MPMD_DISPATCH_COST"
MPMD_DISTRIBUTED_TIMEOUT = "MPMD_DISTRIBUTED_TIMEOUT"
MPMD_GLOO_ADMISSION = "MPMD_GLOO_ADMISSION"
MPMD_GLOO_ADMISSION_TIMEOUT = "MPMD_GLOO_ADMISSION_TIMEOUT"
MPMD_HEARTBEAT_TIMEOUT = "MPMD_HEARTBEAT_TIMEOUT"
MPMD_LAUNCHED = "MPMD_LAUNCHED"
MPMD_MAX_INFLIGHT = "MPMD_MAX_INFLIGHT"
MPMD_NUM_PROCESSES = "MPMD_NUM_PROCESSES"
MPMD_OPT = "MPMD_OPT"
MPMD_OPT_NO_FRONT = "MPMD_OPT_NO_FRONT"
MPMD_PARTIAL_SUMS = "MPMD_PARTIAL_SUMS"
MPMD_PROCESS_ID = "MPMD_PROCESS_ID"
MPMD_PROGRESS = "MPMD_PROGRESS"
MPMD_PROGRESS_AFTER = "MPMD_PROGRESS_AFTER"
MPMD_PYTHON = "MPMD_PYTHON"
MPMD_RUN_DIR = "MPMD_RUN_DIR"
MPMD_STALL_WARNING = "MPMD_STALL_WARNING"
MPMD_STEP_CHECK_INTERVAL = "MPMD_STEP_CHECK_INTERVAL"
MPMD_TERMINATION_GRACE = "MPMD_TERMINATION_GRACE"
MPMD_TRANSFER_HOST = "MPMD_TRANSFER_HOST"
MPMD_WARMUP_BYTES = "MPMD_WARMUP_BYTES"

#: The kinds of variable, and the accessor that reads each.
KINDS = {"flag": "flag / tristate", "int": "integer", "float": "number", "str": "text",
         "path": "path"}

#: Who sets a variable.
USER = "user"
LAUNCH = "mpmd.launch (for its workers)"


@dataclasses.dataclass(frozen=True)
class Knob:
  """One environment variable.

  `default` is the value the accessor returns when the variable is unset
  (None: "not given", for the caller to decide). `blank_is_unset`: an empty
  (or all-blank) value means unset; otherwise it is read like any other
  value. `lenient`: a malformed value means the default instead of an error
  (variables read in watcher threads and signal handlers). `minimum`: larger
  of it and the value read (int and float). Flags: `true_values` /
  `false_values` (compared after `strip().lower()` when `fold_case`), and
  `others`: what any other value means ("default"; "on": any non-empty
  value is on; "error": `KnobError`, for variables whose misspelled value
  must not pass unnoticed). Text: `choices` (empty: any text).
  """

  name: str
  kind: str
  default: Any
  set_by: str
  changes_results: str  # "" when it cannot; otherwise how it can
  meaning: str
  read_by: str
  blank_is_unset: bool = True
  lenient: bool = False
  minimum: float | None = None
  true_values: tuple[str, ...] = ()
  false_values: tuple[str, ...] = ()
  fold_case: bool = False
  others: str = "default"
  choices: tuple[str, ...] = ()
  default_doc: str = ""  # the default in words, where its value says too little

  def accepted(self) -> str:
    """What the variable accepts, in words."""
    if self.kind == "flag":
      words = []
      if self.true_values:
        words.append("/".join(self.true_values) + ": on")
      if self.false_values:
        words.append("/".join(self.false_values) + ": off")
      if self.others == "on":
        words.append("any other non-empty value: on")
      elif self.others == "error":
        words.append("any other value is an error")
      else:
        words.append("any other value: as if unset")
      return "; ".join(words)
    if self.kind == "int":
      what = "a whole number"
    elif self.kind == "float":
      what = "a number"
    elif self.choices:
      what = " or ".join(repr(c) for c in self.choices)
    elif self.kind == "path":
      what = "a path"
    else:
      what = "any text"
    if self.minimum is not None:
      what += f" (at least {_number_text(self.minimum)}: a smaller one counts as that)"
    return what


def _number_text(value: float) -> str:
  return str(int(value)) if float(value).is_integer() else str(value)


#: Every `MPMD_*` variable, by name.
KNOBS: dict[str, Knob] = {k.name: k for k in (
    Knob(MPMD_ASYNC_CALLS, "flag", None, USER, "",
         "Whether a call of an `mpmd.jit` program returns once its work is dispatched "
         "(on) or waits for it (off). Unset: a single-process run returns at once, as "
         "`jax.jit` does, and a multi-process run waits, so that a process finds its own "
         "failure before its peers wait on it. Off makes a failure raise from the call "
         "that failed instead of from the next call or the first read of an output.",
         "mpmd/run/program.py", default_doc="wait only in multi-process runs",
         true_values=("1", "true", "yes"), false_values=("0", "false", "no"), fold_case=True,
         others="error"),
    Knob(MPMD_COMPILE_THREADS, "int", 8, USER, "",
         "Most fragment programs compiled at once (XLA compiles without the GIL); bounded "
         "by the number of CPUs. Read when `mpmd.compile.fragment_cache` is imported.",
         "mpmd/compile/fragment_cache.py", blank_is_unset=False),
    Knob(MPMD_COORDINATOR_ADDRESS, "str", None, LAUNCH, "",
         "`host:port` of process 0's coordination service, for `mpmd.distributed.initialize()` "
         "when its `coordinator_address` argument is not given. Unset: JAX detects the "
         "cluster (SLURM, Open MPI, ...).",
         "mpmd/distributed/initialize.py", default_doc="none: JAX detects the cluster"),
    Knob(MPMD_CPU_AFFINITY, "str", None, LAUNCH, "",
         "The CPUs (comma-separated numbers) a worker is pinned to before its Python "
         "starts (`python -m mpmd.launch --cpus-per-process`); read by the launcher's "
         "start-up stub in the worker process, not by `mpmd`.",
         "mpmd/launch.py (the worker's start-up stub)", default_doc="none: not pinned"),
    Knob(MPMD_CROSS_PROCESS_TRANSFERS, "str", "pull", USER, "",
         "How values move between meshes that each belong to one process: `pull` (the "
         "destination pulls from the source's transfer server) or `collective` (a "
         "collective over both meshes). It must be the same on every process.",
         "mpmd/run/crossprocess.py", blank_is_unset=False, choices=("pull", "collective")),
    Knob(MPMD_DISPATCH_COST, "str", None, USER,
         "yes: which units run as one program (XLA may fuse and round across them)",
         "The cost of a program call on this machine, `CALL_US,KERNEL_US,GFLOPS` (as "
         "`python benchmarks/dispatch_cost.py` prints it), in place of the platform's measured "
         "row: units of a mesh that run back to back merge into one program where the second's "
         "estimated run time is at most a call's cost. `0`: merge nothing.",
         "mpmd/partition/dispatch_cost.py", default_doc="the platform's row in "
         "`mpmd.partition.dispatch_cost.MEASURED`"),
    Knob(MPMD_DISTRIBUTED_TIMEOUT, "float", 600.0, USER, "",
         "Seconds a process waits for what another process publishes: while compiling, that "
         "it laid out the same program (this covers the other process's tracing and "
         "partitioning); while running, a transfer's connection or a peer's end.",
         "mpmd/distributed/coordination.py", blank_is_unset=False),
    Knob(MPMD_GLOO_ADMISSION, "flag", True, USER, "",
         "Whether gloo's listening socket lets in only the connections of the run's own "
         "processes. Off turns the filter off; it must then be off on every process.",
         "mpmd/distributed/gloo_admission.py", true_values=("1", "true", "yes"),
         false_values=("0", "false", "no"), fold_case=True, others="error"),
    Knob(MPMD_GLOO_ADMISSION_TIMEOUT, "float", 30.0, USER, "",
         "Seconds a connection to another process's gloo port may stay unadmitted before "
         "the process that made it ends, naming it.",
         "mpmd/distributed/gloo_admission.py", blank_is_unset=False),
    Knob(MPMD_HEARTBEAT_TIMEOUT, "int", None, LAUNCH, "",
         "Seconds a silent process is tolerated before the others are told it died, for "
         "`mpmd.distributed.initialize()` when its `heartbeat_timeout_seconds` argument is "
         "not given (unset: JAX's default). The launcher sets it from "
         "`--heartbeat-timeout`, in whole seconds.",
         "mpmd/distributed/initialize.py, mpmd/distributed/steps.py",
         default_doc="JAX's default"),
    Knob(MPMD_LAUNCHED, "flag", False, LAUNCH, "",
         "`1` in the processes `python -m mpmd.launch` starts, for a program that wants to "
         "know; `mpmd` itself does not read it.",
         "(programs; not mpmd)", true_values=("1",)),
    Knob(MPMD_MAX_INFLIGHT, "int", None, USER, "",
         "How many instructions may be dispatched and unfinished per mesh of several "
         "devices (0: no bound). Unset: 16 on CPU, where too many multi-device executions "
         "with collectives in flight deadlock; no bound on other platforms.",
         "mpmd/run/program.py", minimum=0, default_doc="16 on CPU, else no bound"),
    Knob(MPMD_NUM_PROCESSES, "int", None, LAUNCH, "",
         "How many processes take part, for `mpmd.distributed.initialize()` when its "
         "`num_processes` argument is not given.",
         "mpmd/distributed/initialize.py"),
    Knob(MPMD_OPT, "path", None, "user; mpmd-opt (for its Python front end)", "",
         "The `mpmd-opt` binary `python -m mpmd.opt` runs. Unset: the one on `PATH`, "
         "else the one installed next to this Python, else the build tree's.",
         "mpmd/opt.py", default_doc="`mpmd-opt` on `PATH`, ..."),
    Knob(MPMD_OPT_NO_FRONT, "flag", False, "mpmd.opt and mpmd-opt (for the binary they run)",
         "",
         "Any non-empty value keeps the `mpmd-opt` binary from handing readable input to "
         "the Python front end (`python -m mpmd.opt`), which has converted it already.",
         "mpmd-opt (C++)", others="on"),
    Knob(MPMD_PARTIAL_SUMS, "flag", True, USER,
         "yes: the floating-point rounding of accumulated gradients (the order of the sums)",
         "Whether gradient accumulators may be held as unreduced partial sums, with one "
         "all-reduce in the call that reads them whole (as `jax.jit` of the whole batch "
         "does). Off: every accumulator is reduced in each "
         "backward call).",
         "mpmd/partition/partitioner.py (the partition flag `partial_sums`)",
         true_values=("1", "true", "yes"),
         false_values=("0", "false", "no"), fold_case=True, others="error"),
    Knob(MPMD_PROCESS_ID, "int", None, LAUNCH, "",
         "This process's index, 0 .. processes-1, for `mpmd.distributed.initialize()` when "
         "its `process_id` argument is not given.",
         "mpmd/distributed/initialize.py"),
    Knob(MPMD_PROGRESS, "flag", None, USER, "",
         "Whether a progress line for long compiles is shown on stderr: `1` always, `0` "
         "never. Unset (or any other value): when the `mpmd` logger is at INFO, or on a "
         "terminal that shows warnings.",
         "mpmd/compile/fragment_cache.py", true_values=("1",), false_values=("0",),
         default_doc="at INFO, or on a terminal"),
    Knob(MPMD_PROGRESS_AFTER, "float", 2.0, USER, "",
         "Seconds a compile runs before its progress is shown, and between two progress "
         "lines outside a terminal. Read when `mpmd.compile.fragment_cache` is imported.",
         "mpmd/compile/fragment_cache.py", blank_is_unset=False),
    Knob(MPMD_PYTHON, "path", None, USER, "",
         "The Python the `mpmd-opt` binary runs its front end with (it must import "
         "`mpmd`). Unset: the one next to the binary, the build's, or `python3` on `PATH`.",
         "mpmd-opt (C++)"),
    Knob(MPMD_RUN_DIR, "path", None, LAUNCH, "",
         "A directory the launcher and its workers share for the run: a failed worker "
         "writes its failure record there and the launcher writes how each failed worker "
         "ended. Ignored unless it is a directory.",
         "mpmd/distributed/failures.py"),
    Knob(MPMD_STALL_WARNING, "float", 30.0, USER, "",
         "Seconds a multi-process call may run before a watchdog reports where each "
         "process is (0: never); the call is not ended.",
         "mpmd/distributed/steps.py", lenient=True, minimum=0),
    Knob(MPMD_STEP_CHECK_INTERVAL, "float", 1.0, USER, "",
         "Seconds between two looks of a process at what its peers published (a failure, "
         "an exit), which bounds how long the others take to end after one failed.",
         "mpmd/distributed/steps.py", lenient=True, minimum=0.05),
    Knob(MPMD_TERMINATION_GRACE, "float", 5.0, USER, "",
         "Seconds the `on_termination` hooks may take after SIGTERM before the process is "
         "ended without them.",
         "mpmd/distributed/termination.py", lenient=True, minimum=0),
    Knob(MPMD_TRANSFER_HOST, "str", "127.0.0.1", USER, "",
         "The address JAX's transfer servers (cross-process pulls) listen on: an address "
         "of this host the other processes can reach.",
         "mpmd/run/crossprocess.py", blank_is_unset=False),
    Knob(MPMD_WARMUP_BYTES, "int", 64 << 20, USER, "",
         "The largest argument-plus-result size in bytes of a fragment program warmed up "
         "(run once on zeros) while the first call compiles (0: none is).",
         "mpmd/compile/warmup.py", minimum=0, default_doc="67108864 (64 MiB)"),
)}


def knob(variable: str) -> Knob:
  """The row of `variable`; `UnknownKnobError` when it has none."""
  try:
    return KNOBS[variable]
  except KeyError:
    raise UnknownKnobError(
        f"{variable!r} is not an environment variable of mpmd (not a row of "
        f"mpmd.knobs.KNOBS); add a row there first") from None


def name(variable: str) -> str:
  """`variable`, checked to be a row of the table (for code that sets it)."""
  return knob(variable).name


def _row(variable: str, *kinds: str) -> Knob:
  row = knob(variable)
  if row.kind not in kinds:
    raise TypeError(f"{variable} is a {row.kind} variable: read it with "
                    f"mpmd.knobs.{KINDS[row.kind].split(' / ')[0]}()")
  return row


def _value(row: Knob, env: Mapping[str, str] | None) -> str | None:
  """The value to read, or None when the variable counts as unset."""
  value = (os.environ if env is None else env).get(row.name)
  if value is None or (row.blank_is_unset and not value.strip()):
    return None
  return value


def _malformed(row: Knob, value: str) -> KnobError:
  what = {"int": "is not an integer", "float": "is not a number"}.get(
      row.kind, "is not one of its values")
  return KnobError(f"environment variable {row.name}={value!r} {what}: it accepts "
                   f"{row.accepted()} (unset: {_default_text(row)})")


def _flag(row: Knob, env: Mapping[str, str] | None) -> bool | None:
  value = _value(row, env)
  if value is None:
    return row.default
  key = value.strip().lower() if row.fold_case else value
  if key in row.true_values:
    return True
  if key in row.false_values:
    return False
  if row.others == "on":
    return True
  if row.others == "error":
    raise _malformed(row, value)
  return row.default


def flag(variable: str, env: Mapping[str, str] | None = None) -> bool:
  """The on/off variable `variable` (`env`: instead of os.environ)."""
  row = _row(variable, "flag")
  if row.default is None:
    raise TypeError(f"{variable} has three states: read it with mpmd.knobs.tristate()")
  return bool(_flag(row, env))


def tristate(variable: str, env: Mapping[str, str] | None = None) -> bool | None:
  """The on/off variable `variable`, None when unset (or set to a value that
  means unset): the caller decides."""
  return _flag(_row(variable, "flag"), env)


def _numeric(variable: str, kind: str, convert, env: Mapping[str, str] | None):
  row = _row(variable, kind)
  value = _value(row, env)
  if value is None:
    return row.default
  try:
    result = convert(value)
  except ValueError:
    if row.lenient:
      return row.default
    raise _malformed(row, value) from None
  return result if row.minimum is None else max(convert(row.minimum), result)


def integer(variable: str, env: Mapping[str, str] | None = None) -> int | None:
  """The whole-number variable `variable` (its default, possibly None, when
  unset); `KnobError` when it is not an integer."""
  return _numeric(variable, "int", int, env)


def number(variable: str, env: Mapping[str, str] | None = None) -> float | None:
  """The number variable `variable` (its default when unset); `KnobError`
  when it is not a number (the default for a lenient variable)."""
  return _numeric(variable, "float", float, env)


def text(variable: str, env: Mapping[str, str] | None = None) -> str | None:
  """The text variable `variable` (its default when unset); `KnobError`
  when it is not one of its choices."""
  row = _row(variable, "str")
  value = _value(row, env)
  if value is None:
    return row.default
  if row.choices and value not in row.choices:
    raise _malformed(row, value)
  return value


def path(variable: str, env: Mapping[str, str] | None = None) -> str | None:
  """The path variable `variable`, None when unset or empty."""
  row = _row(variable, "path")
  value = _value(row, env)
  return row.default if value is None else value


def raw(variable: str, env: Mapping[str, str] | None = None) -> str | None:
  """The value of `variable` as set (None when unset), unread: for messages
  that quote it."""
  return (os.environ if env is None else env).get(knob(variable).name)


def _default_text(row: Knob) -> str:
  if row.default_doc:
    return row.default_doc
  if row.default is None:
    return "not given"
  if row.kind == "flag":
    return "on" if row.default else "off"
  if isinstance(row.default, float):
    return _number_text(row.default)
  return str(row.default)


def _cell(text: str) -> str:
  return text.replace("|", "\\|").replace("\n", " ")


GENERATED = ("<!-- generated from the table in mpmd/knobs.py by `python -m mpmd.knobs_doc`; "
             "do not edit -->")


def markdown() -> str:
  """docs/environment.md: a header line saying it is generated, then the table."""
  lines = [
      GENERATED,
      "",
      "# Environment variables",
      "",
      "Every `MPMD_*` environment variable mpmd reads or sets, from the one table in "
      "`mpmd/knobs.py`. *Set by* `user` means you may set it; the others are set by mpmd "
      "for the processes it starts. *Changes results* says whether a value can change "
      "what a program computes (the others change when, where or how fast it runs, or "
      "what it reports). A value a variable does not accept is an error naming it, "
      "except for those marked *lenient*, which then take their default.",
      "",
      "| variable | kind | default | set by | changes results | accepts | meaning | read by |",
      "|---|---|---|---|---|---|---|---|",
  ]
  for row in sorted(KNOBS.values(), key=lambda k: k.name):
    accepts = row.accepted()
    if row.kind != "flag":
      accepts += ("; empty: as if unset" if row.blank_is_unset else "")
    if row.lenient:
      accepts += "; lenient"
    default = _default_text(row)
    if row.default is not None and not row.default_doc:
      default = f"`{default}`"
    lines.append(
        f"| `{row.name}` | {row.kind} | {_cell(default)} | "
        f"{_cell(row.set_by)} | {_cell(row.changes_results or 'no')} | {_cell(accepts)} | "
        f"{_cell(row.meaning)} | {_cell(row.read_by)} |")
  return "\n".join(lines) + "\n"
