"""`mpmd.jaxpp.pipelining`: stage markers and the scope that numbers them."""

from mpmd.jaxpp.markers import mark_stage_end, pipeline_enter_stage, stage_scope

__all__ = ["mark_stage_end", "pipeline_enter_stage", "yield_scope"]

#: JaxPP's name of `stage_scope`: a context manager under which the k-th
#: marker call ends stage k (``treduce`` bodies and `mpmd_jit_by_yield`
#: functions are traced inside one; outside any, markers carry no stage).
yield_scope = stage_scope
