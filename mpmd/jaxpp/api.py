"""`mpmd.jaxpp.api`: JaxPP's public API on the mpmd compiler and runtime.

Switch from JaxPP by changing the import (``from mpmd import jaxpp`` instead
of ``import jaxpp``), or call `mpmd.jaxpp.install_as_jaxpp()` once so that
``import jaxpp`` itself resolves here. See docs/jaxpp.md for what is
supported and what differs.
"""

from mpmd.jaxpp.array import MpmdArray, mpmd_to_spmd_reshard, spmd_to_mpmd_reshard
from mpmd.jaxpp.collectives import cross_mpmd_all_reduce, cross_mpmd_stack
from mpmd.jaxpp.jit import (CompiledMpmdFunction, MpmdFunction, mpmd_jit_by_yield,
                            mpmd_jit_with_loop)
from mpmd.jaxpp.markers import mark_stage_end, pipeline_enter_stage
from mpmd.jaxpp.mesh import MpmdMesh
from mpmd.jaxpp.profiling import collect_task_times_ms
from mpmd.jaxpp.reduce_ops import Add, Concat, Max, Op
from mpmd.jaxpp.staging import StageError
from mpmd.jaxpp.treduce import treduce, treduce_i
from mpmd.jaxpp.types import MpmdSharding
from mpmd.schedule.task_lists import (BaseSchedule, DualPipeV, Eager1F1B, FusedTask, GPipe,
                                 Interleaved1F1B, InterleavedBaseSchedule, InterleavedGPipe,
                                 KimiK2, Std1F1B, Task, TaskType, ZeroBubble)

__all__ = [
    "Add", "BaseSchedule", "CompiledMpmdFunction", "Concat", "DualPipeV", "Eager1F1B",
    "FusedTask", "GPipe", "Interleaved1F1B", "InterleavedBaseSchedule", "InterleavedGPipe",
    "KimiK2", "Max", "MpmdArray", "MpmdFunction", "MpmdMesh", "MpmdSharding", "Op",
    "StageError", "Std1F1B", "Task", "TaskType", "ZeroBubble", "collect_task_times_ms",
    "cross_mpmd_all_reduce",
    "cross_mpmd_stack", "mark_stage_end",
    "mpmd_jit_by_yield", "mpmd_jit_with_loop", "mpmd_to_spmd_reshard", "pipeline_enter_stage",
    "spmd_to_mpmd_reshard", "treduce", "treduce_i",
]
