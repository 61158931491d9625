"""Automatic pipeline planning: stages, schedule and microbatches from the
program's measured costs.

`plan(step, topology, *args, ...)` returns a `Plan` whose ``config`` is ready
for `mpmd.jit`; ``python -m mpmd.plan module:function`` does the same from the
command line. See docs/planning.md.

Modules, one job each: `units` (the units' programs in a traced step),
`costs` (measuring them), `predict` (a candidate's step time and memory),
`search` (groupings x schedules x microbatch counts), `planner` (the front
end), `auto` (automatic stages: the layers of an unlabelled step as units),
`render` (the picture), `__main__` (the command line).
"""

from mpmd.plan.auto import AutoStages, LayerCalls, auto_stages, auto_stages_from_dict, find_layers
from mpmd.plan.costs import ProgramCosts, Roofline, TransferCost, UnitCost, measure_transfer
from mpmd.plan.errors import PlanError
from mpmd.plan.planner import Plan, Problem, config_from_dict, parse_bytes, plan, split_batch
from mpmd.plan.predict import Prediction, predict, stage_costs
from mpmd.plan.search import (DEFAULT_SCHEDULES, TRAINING_SCHEDULES, Candidate, Candidates, SearchResult,
                              min_max_partition, search)
from mpmd.plan.units import TracedUnits, UnitProgram, trace_units

__all__ = [
    "AutoStages", "LayerCalls", "auto_stages", "auto_stages_from_dict", "find_layers",
    "Candidate", "Candidates", "Plan", "PlanError", "Problem", "Prediction", "ProgramCosts",
    "DEFAULT_SCHEDULES", "Roofline", "SearchResult", "TRAINING_SCHEDULES", "TracedUnits", "TransferCost", "UnitCost",
    "UnitProgram", "config_from_dict", "measure_transfer", "min_max_partition", "parse_bytes",
    "plan", "predict", "search", "split_batch", "stage_costs", "trace_units",
]
