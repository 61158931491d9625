"""mpmd: MPMD pipeline parallelism for JAX.

Label parts of a JAX function with `named_computation`, map the names to
meshes with `make_config`, and run it with `jit(f, config)(*args)`.

The package follows a step's life: `mpmd.trace` (labels, tracing and
lowering) -> `mpmd.partition` (the C++ partitioner) -> `mpmd.compile` (every
fragment through PJRT, and the `Program`) -> `mpmd.run` (a call). `mpmd.jit`
and `mpmd.stages` (`Lowered`, `Compiled`) drive them; `mpmd.schedule`,
`mpmd.plan`, `mpmd.jaxpp` and `mpmd.distributed` are wings beside them, and
every JAX internal is in `mpmd._jax`.
"""

from mpmd import distributed
from mpmd.config import FragmentMergeRule, MpmdConfig, make_config
from mpmd.errors import (ConfigError, DistributedError, FragmentArgumentError, FragmentCompileError,
                         FragmentExecutionError, FragmentRuntimeError, MpmdError, PartitionError,
                         StageError)
from mpmd.jit import MpmdJitted, jit
from mpmd.trace.label import label_layers, stage_names
from mpmd.trace.ops import (broadcast, call, enumerated_for, fori_loop, named_computation, named_tensor,
                      reduce)
from mpmd.plan import AutoStages, Plan, PlanError, auto_stages, plan
from mpmd.stages import Compiled, Lowered


def _version() -> str:
  """The installed package's version, else the one in the source tree's pyproject.toml."""
  import importlib.metadata  # noqa: PLC0415
  try:
    return importlib.metadata.version("mpmd")
  except importlib.metadata.PackageNotFoundError:
    pass
  import pathlib  # noqa: PLC0415
  import re  # noqa: PLC0415
  try:
    text = (pathlib.Path(__file__).resolve().parent.parent / "pyproject.toml").read_text()
  except OSError:
    return "unknown"
  project = re.search(r"^\[project\]\s*$(.*?)(?=^\[|\Z)", text, re.M | re.S)
  found = project and re.search(r'^version\s*=\s*["\']([^"\']+)["\']', project.group(1), re.M)
  return found.group(1) if found else "unknown"


__version__ = _version()

__all__ = [
    "AutoStages", "auto_stages", "Compiled", "ConfigError", "DistributedError", "distributed",
    "FragmentArgumentError",
    "FragmentCompileError", "FragmentExecutionError", "FragmentMergeRule", "FragmentRuntimeError",
    "Lowered", "MpmdConfig", "MpmdError", "MpmdJitted", "PartitionError", "Plan", "PlanError",
    "StageError", "broadcast", "call", "enumerated_for", "fori_loop", "jit", "label_layers",
    "make_config", "named_computation", "named_tensor", "plan", "reduce", "stage_names",
]
