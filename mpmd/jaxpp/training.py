"""`mpmd.jaxpp.training`: the `treduce` microbatch loop and its reductions."""

from mpmd.jaxpp.reduce_ops import Add, Concat, Max, Op
from mpmd.jaxpp.treduce import treduce, treduce_i

__all__ = ["Add", "Concat", "Max", "Op", "treduce", "treduce_i"]
