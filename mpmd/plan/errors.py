"""The planner's error (defined in `mpmd.errors`; this module keeps the
import path `mpmd.plan.errors.PlanError`)."""

from __future__ import annotations

from mpmd.errors import PlanError

__all__ = ["PlanError"]
