"""mpmd: MPMD pipeline parallelism for JAX.

Label parts of a JAX function with `named_computation`, map the names to
meshes with `make_config`, and run it with `jit(f, config)(*args)`.

The package follows a step's life: `mpmd.trace` (labels, tracing and
lowering) -> `mpmd.partition` (the C++ partitioner) -> `mpmd.compile` (every
fragment through PJRT, and the `Program`) -> `mpmd.run` (a call). `mpmd.jit`
and `mpmd.stages` (`Lowered`, `Compiled`) drive them; `mpmd.schedule`,
`mpmd.plan`, `mpmd.jaxpp` and `mpmd.distributed` are wings beside them, and
every JAX internal is in `mpmd._jax`.

The public names below are imported on their first use: `import mpmd` alone
imports no JAX (the launcher, `python -m mpmd.launch`, needs none).
"""

import importlib
import sys
import types
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # (imported on first use, below)
  from mpmd import distributed
  from mpmd.config import FragmentMergeRule, MpmdConfig, make_config
  from mpmd.errors import (ConfigError, DistributedError, FragmentArgumentError,
                           FragmentCompileError, FragmentExecutionError, FragmentRuntimeError,
                           MpmdError, PartitionError, StageError)
  from mpmd.jit import MpmdJitted, jit
  from mpmd.plan import AutoStages, Plan, PlanError, auto_stages, plan
  from mpmd.stages import Compiled, Lowered
  from mpmd.trace.label import label_layers, stage_names
  from mpmd.trace.ops import (broadcast, call, enumerated_for, fori_loop, named_computation,
                              named_tensor, reduce)

#: The module each public name comes from, imported on the name's first use
#: (PEP 562), so that `import mpmd` is cheap for what needs none of them:
#: `python -m mpmd.launch` starts its processes without importing JAX (a
#: second saved in every launch).
_SOURCES = {
    "distributed": "mpmd.distributed",
    **dict.fromkeys(("FragmentMergeRule", "MpmdConfig", "make_config"), "mpmd.config"),
    **dict.fromkeys(("ConfigError", "DistributedError", "FragmentArgumentError",
                     "FragmentCompileError", "FragmentExecutionError", "FragmentRuntimeError",
                     "MpmdError", "PartitionError", "StageError"), "mpmd.errors"),
    **dict.fromkeys(("MpmdJitted", "jit"), "mpmd.jit"),
    **dict.fromkeys(("AutoStages", "Plan", "PlanError", "auto_stages", "plan"), "mpmd.plan"),
    **dict.fromkeys(("Compiled", "Lowered"), "mpmd.stages"),
    **dict.fromkeys(("label_layers", "stage_names"), "mpmd.trace.label"),
    **dict.fromkeys(("broadcast", "call", "enumerated_for", "fori_loop", "named_computation",
                     "named_tensor", "reduce"), "mpmd.trace.ops"),
}

#: The public names that are modules themselves (the others are attributes of theirs).
_SUBMODULES = frozenset({"distributed"})


def __getattr__(name: str):
  """A public name, imported from its module on its first use."""
  source = _SOURCES.get(name)
  if source is None:
    raise AttributeError(f"module 'mpmd' has no attribute {name!r}")
  module = importlib.import_module(source)
  value = module if name in _SUBMODULES else getattr(module, name)
  globals()[name] = value
  return value


def __dir__() -> list[str]:
  return sorted(set(globals()) | set(_SOURCES))


class _Package(types.ModuleType):
  """The package's module: importing a submodule binds it as an attribute of
  its package, but `mpmd.jit` and `mpmd.plan` name the functions, not the
  modules of the same names (as they did when this file imported them
  eagerly, after those modules)."""

  def __setattr__(self, name: str, value) -> None:
    if name in _SOURCES and name not in _SUBMODULES and isinstance(value, types.ModuleType):
      return  # (the module stays in sys.modules; the function is bound on first use)
    super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


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
