"""JaxPP's programming model on the mpmd compiler: ``from mpmd import jaxpp``.

``jaxpp.api.X`` (and ``jaxpp.X``) give JaxPP's stage markers, `treduce`
loop, `MpmdMesh`, `mpmd_jit_with_loop` / `mpmd_jit_by_yield` and schedule
classes; the step is compiled by `mpmd.jit` (see docs/jaxpp.md).
"""

from mpmd.jaxpp import api
from mpmd.jaxpp.api import *  # noqa: F401,F403
from mpmd.jaxpp.api import __all__ as _api_all

__all__ = ["api", *_api_all]
