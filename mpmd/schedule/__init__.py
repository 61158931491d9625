"""Pipeline schedules: representation, built-ins, JaxPP-style objects,
simulation and pictures.

A schedule is, for every mesh, the total order of its scheduling units
(`Unit`: forward ``F``, backward ``B`` and, with a split backward, weight
gradient ``W`` of one stage and one microbatch). Three ways to get one, all
reducing to the same `Schedule`:

>>> from mpmd import schedule as sch
>>> s1 = sch.get_schedule("1F1B")(2, 2)                        # built-in name
>>> s2 = sch.from_tasks(sch.task_lists.Std1F1B(2).tasks(2))    # JaxPP tasks
>>> s3 = sch.Schedule.from_text("m0: F0 F1 B0 B1\\nm1: F0 B0 F1 B1")  # text
>>> s1 == s2 == s3
True
>>> round(sch.simulate(s1).bubble_fraction, 3)
0.333

See docs/schedules.md for every built-in schedule, and
``python -m mpmd.schedule --help`` for the command line. How a config's
``pipeline_schedule`` is resolved for a traced program is
`mpmd.schedule.resolve` (not imported here).
"""

from mpmd.schedule import task_lists
from mpmd.schedule.builtin import (SCHEDULES, BuiltinSchedule, build_schedule,
                                   circular, circular_with_reversed_backward,
                                   dual_pipe_v, eager_1f1b, get_schedule,
                                   gpipe, gpipe_but_1f1b_for_last_mesh,
                                   interleaved_1f1b, kimi_k2, looped_bfs,
                                   one_f_one_b,
                                   parallel_pipelines_with_wrap_around,
                                   schedule_names, zbv, zero_bubble_h1,
                                   zero_bubble_h2,
                                   zero_bubble_h2_full_tx_latency,
                                   zero_bubble_h2_half_tx_latency,
                                   zero_bubble_h2_zero_tx_latency)
from mpmd.schedule.core import (KINDS, DeadlockError, Kind, MeshOrder, Schedule,
                                ScheduleError, ScheduleParseError, Unit,
                                WaitEdge, format_line, format_unit,
                                looped_placement, v_placement)
from mpmd.schedule.task_lists import FusedTask, Task, TaskType, from_tasks, to_tasks
from mpmd.schedule.render import chrome_trace, render_png, write_chrome_trace
from mpmd.schedule.simulate import CostModel, SimulationResult, simulate

__all__ = [
    "BuiltinSchedule", "CostModel", "DeadlockError", "FusedTask", "KINDS",
    "Kind", "MeshOrder", "SCHEDULES", "Schedule", "ScheduleError",
    "ScheduleParseError", "SimulationResult", "Task", "TaskType", "Unit",
    "WaitEdge", "build_schedule", "chrome_trace", "circular",
    "circular_with_reversed_backward", "dual_pipe_v", "eager_1f1b",
    "format_line", "format_unit", "from_tasks", "get_schedule", "gpipe", "gpipe_but_1f1b_for_last_mesh",
    "interleaved_1f1b", "kimi_k2", "looped_bfs", "looped_placement",
    "one_f_one_b", "parallel_pipelines_with_wrap_around", "render_png",
    "schedule_names", "simulate", "task_lists", "to_tasks", "v_placement",
    "write_chrome_trace", "zbv", "zero_bubble_h1", "zero_bubble_h2",
    "zero_bubble_h2_full_tx_latency", "zero_bubble_h2_half_tx_latency",
    "zero_bubble_h2_zero_tx_latency",
]
