"""`mpmd.jaxpp.core`: the entry points that compile a JaxPP-style step."""

from mpmd.jaxpp.jit import (CompiledMpmdFunction, MpmdFunction, mpmd_jit_by_yield,
                            mpmd_jit_with_loop)

__all__ = ["CompiledMpmdFunction", "MpmdFunction", "mpmd_jit_by_yield", "mpmd_jit_with_loop"]
