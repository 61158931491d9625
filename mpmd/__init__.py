"""mpmd: MPMD pipeline parallelism for JAX.

Label parts of a JAX function with `named_computation`, map the names to
meshes with `make_config`, and run it with `jit(f, config)(*args)`.
"""

from mpmd import distributed
from mpmd.config import FragmentMergeRule, MpmdConfig, make_config
from mpmd.errors import (ConfigError, DistributedError, FragmentArgumentError, FragmentCompileError,
                         FragmentExecutionError, FragmentRuntimeError, MpmdError, PartitionError,
                         StageError)
from mpmd.jit import MpmdJitted, jit
from mpmd.ops import (broadcast, call, enumerated_for, fori_loop, named_computation, named_tensor,
                      reduce)
from mpmd.stages import Compiled, Lowered

__all__ = [
    "Compiled", "ConfigError", "DistributedError", "distributed", "FragmentArgumentError",
    "FragmentCompileError", "FragmentExecutionError", "FragmentMergeRule", "FragmentRuntimeError",
    "Lowered", "MpmdConfig", "MpmdError", "MpmdJitted", "PartitionError", "StageError", "broadcast",
    "call", "enumerated_for", "fori_loop", "jit", "make_config", "named_computation", "named_tensor",
    "reduce",
]
