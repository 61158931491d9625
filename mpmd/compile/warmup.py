"""Warm-up: each compiled program runs once, on zeros, at the end of `compile`.

XLA finishes setting up an executable on its first execution: on jaxlib
0.10.2's CPU runtime that first run takes about 15-35 ms more than the later
ones for the fragment programs of the JaxPP tutorial step (17 ms for a small
one-device `jax.jit` program too), for programs loaded on another mesh as well
as for those just compiled. Without warm-up, the first call of a compiled step
pays it once per program, which made it several times a steady step. So
`compile` runs each program once as soon as it is compiled (or loaded on its
mesh), on a compile thread while the next programs compile, and the constant
fillers once at the end: the set-up happens where the rest of it does.

A program is warmed up only when that is safe and cheap: the run has one
process (in a multi-process run every process must issue its executions in
the same order as the others, and nothing is run early), it has no side
effects (no host callback such as `jax.debug.print`, no send/recv, infeed or
outfeed), no loop (a `while` whose trip count depends on the data might not
end on zeros), and its arguments and results together take at most
`MPMD_WARMUP_BYTES` bytes (default 64 MiB; 0 turns warm-up off). The others
set up on their first real call, as before. The same size limit holds for the
programs that make the zeros a first microbatch's accumulators start from.
"""

from __future__ import annotations

import logging
import math
from typing import Any
from collections.abc import Iterable

import jax
import numpy as np

from mpmd import knobs
from mpmd.compile.fragment import FragmentExecutable

__all__ = ["eligible", "may_run_early", "run_fillers", "run_once", "warmup_bytes"]

logger = logging.getLogger("mpmd")

def warmup_bytes() -> int:
  """The largest argument-plus-result size (bytes) of a program warmed up
  (`MPMD_WARMUP_BYTES`; default 64 MiB; 0: none is)."""
  return knobs.integer(knobs.MPMD_WARMUP_BYTES)


def _nbytes(avals: Iterable[jax.ShapeDtypeStruct]) -> int:
  return sum(math.prod(a.shape) * np.dtype(a.dtype).itemsize for a in avals)


def _zeros(aval: jax.ShapeDtypeStruct) -> jax.Array:
  return jax.device_put(np.zeros(aval.shape, aval.dtype), aval.sharding)


def may_run_early(function: Any) -> bool:
  """Whether the program of fragment function `function` (a
  `_mpmd.FragmentFunction`) may be run on zeros at compile time: a
  single-process run, no side effects, no loop (as the compiler found them;
  see the module's docstring)."""
  return (jax.process_count() == 1 and not function.has_side_effects and
          not function.has_loops)


def eligible(fragment: FragmentExecutable, limit: int) -> bool:
  """Whether `fragment` (of a program that `may_run_early`) is warmed up
  under the size `limit`: its arguments and results take at most `limit`
  bytes."""
  return limit > 0 and _nbytes(fragment.in_avals) + _nbytes(fragment.out_avals) <= limit


def run_once(fragment: FragmentExecutable) -> bool:
  """Runs `fragment` once on zeros and waits for it; False (logged) if that
  fails (its real call then reports any error)."""
  try:
    jax.block_until_ready(fragment.call_trusted([_zeros(a) for a in fragment.in_avals]))
    return True
  except Exception as e:  # noqa: BLE001 -- the real call reports it
    logger.debug("warm-up of %s on %s skipped: %s", fragment.name, fragment.mesh, e)
    return False


def run_fillers(fillers: Iterable, limit: int) -> int:
  """Runs each filler program (no arguments; see `make_filler`) whose results
  take at most `limit` bytes once and waits for them; returns how many ran."""
  results = []
  for fill in fillers:
    if _nbytes(jax.tree.leaves(fill.out_info)) > limit:
      continue
    try:
      results.append(fill())
    except Exception as e:  # noqa: BLE001
      logger.debug("warm-up of a constant filler skipped: %s", e)
  try:
    jax.block_until_ready(results)
  except Exception as e:  # noqa: BLE001
    logger.debug("a filler's warm-up failed: %s", e)
    return 0
  return len(results)
