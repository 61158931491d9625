"""JaxPP's programming model on the mpmd compiler: ``from mpmd import jaxpp``.

The package has JaxPP's module layout: ``api`` (everything), ``schedules``,
``mesh``, ``types``, ``array``, ``pipelining``, ``training`` and ``core``;
the names of ``api`` are also offered here (``jaxpp.X``). Steps are compiled by
`mpmd.jit` (see docs/jaxpp.md). `install_as_jaxpp()` makes ``import jaxpp``
resolve to this package, so unchanged JaxPP programs run on mpmd.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys

from mpmd.jaxpp import api, array, core, mesh, pipelining, schedules, training, types
from mpmd.jaxpp.api import *  # noqa: F401,F403
from mpmd.jaxpp.api import __all__ as _api_all

#: The JaxPP release whose public API this package mirrors.
__version__ = "0.9.2"

_MODULES = ("api", "array", "core", "mesh", "pipelining", "schedules", "training", "types")

__all__ = ["install_as_jaxpp", *_MODULES, *_api_all]


def install_as_jaxpp() -> None:
  """Makes ``import jaxpp`` (and ``jaxpp.api``, ``jaxpp.schedules``, ...)
  resolve to `mpmd.jaxpp`.

  Call it once, before the program imports ``jaxpp``: every submodule of this
  package is registered in `sys.modules` under the ``jaxpp.`` name, so
  ``import jaxpp.api`` and ``from jaxpp.schedules import Std1F1B`` give this
  package's modules (the same objects as ``mpmd.jaxpp.api``, ...). Calling it
  again does nothing.

  Raises:
    ImportError: another ``jaxpp`` (the real one) is already imported; call
      this before anything imports it.
  """
  this = sys.modules[__name__]
  present = sys.modules.get("jaxpp")
  if present is not None and present is not this:
    raise ImportError(f"a module named 'jaxpp' is already imported ({present!r}); call "
                      "mpmd.jaxpp.install_as_jaxpp() before anything imports jaxpp")
  names = {info.name for info in pkgutil.iter_modules(__path__)}
  modules = {name: importlib.import_module(f"{__name__}.{name}") for name in sorted(names)}
  sys.modules["jaxpp"] = this
  for name, module in modules.items():
    sys.modules[f"jaxpp.{name}"] = module
