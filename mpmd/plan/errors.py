"""The planner's error."""

from __future__ import annotations

from mpmd.errors import MpmdError

__all__ = ["PlanError"]


class PlanError(MpmdError, ValueError):
  """Planning cannot proceed: the message says why (a unit missing from the
  step, no microbatch count that divides the batch, a memory budget no
  candidate fits, naming the smallest budget that does, ...)."""
