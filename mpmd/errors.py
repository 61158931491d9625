"""Exceptions raised by mpmd."""

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
