"""Exceptions raised by mpmd: every one is an `MpmdError`, and all are exported
from `mpmd` (e.g. `mpmd.FragmentRuntimeError`)."""

from __future__ import annotations


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
