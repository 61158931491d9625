"""`mpmd.jaxpp.schedules`: JaxPP's schedule classes (`tasks(n_microbatches)`
gives one list per rank of `Task` / `FusedTask` / ``None``).

The classes live in `mpmd.schedule.task_lists`, which also turns their task lists
into this project's `Schedule` (``schedule.to_schedule(n)``).
"""

from mpmd.schedule.task_lists import (BaseSchedule, DualPipeV, Eager1F1B, FusedTask, GPipe,
                                 Interleaved1F1B, InterleavedBaseSchedule, InterleavedGPipe,
                                 KimiK2, Std1F1B, Task, TaskType, ZeroBubble)

__all__ = [
    "BaseSchedule", "DualPipeV", "Eager1F1B", "FusedTask", "GPipe", "Interleaved1F1B",
    "InterleavedBaseSchedule", "InterleavedGPipe", "KimiK2", "Std1F1B", "Task", "TaskType",
    "ZeroBubble",
]
