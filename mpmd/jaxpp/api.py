"""`mpmd.jaxpp.api`: JaxPP's public API on the mpmd compiler and runtime.

Switch from JaxPP by changing the import (``from mpmd import jaxpp`` instead
of ``import jaxpp``); ``jaxpp.api.X`` then resolves to the names below. See
docs/jaxpp.md for what is supported and what differs.
"""

from mpmd.jaxpp.jit import (CompiledMpmdFunction, MpmdFunction, mpmd_jit_by_yield,
                            mpmd_jit_with_loop)
from mpmd.jaxpp.markers import mark_stage_end, pipeline_enter_stage
from mpmd.jaxpp.mesh import MpmdMesh
from mpmd.jaxpp.reduce_ops import Add, Concat, Max, Op
from mpmd.jaxpp.staging import StageError
from mpmd.jaxpp.treduce import treduce, treduce_i
from mpmd.schedule.jaxpp import (BaseSchedule, DualPipeV, Eager1F1B, FusedTask, GPipe,
                                 Interleaved1F1B, KimiK2, Std1F1B, Task, TaskType, ZeroBubble)

__all__ = [
    "Add", "BaseSchedule", "CompiledMpmdFunction", "Concat", "DualPipeV", "Eager1F1B",
    "FusedTask", "GPipe", "Interleaved1F1B", "KimiK2", "Max", "MpmdFunction", "MpmdMesh", "Op",
    "StageError", "Std1F1B", "Task", "TaskType", "ZeroBubble", "mark_stage_end",
    "mpmd_jit_by_yield", "mpmd_jit_with_loop", "pipeline_enter_stage", "treduce", "treduce_i",
]
