"""Running a compiled fragment program: the C++ dispatch fast path that
``jax.jit(...).lower(...).compile()`` objects use, and forgetting the effect
tokens of failed runs.

The JAX internals used here:

* ``jax._src.interpreters.pxla.MeshExecutable.create_cpp_call`` and
  ``jax._src.stages.CompiledCallParams`` / ``stages.Compiled.call`` -- the C++
  dispatch fast path.
* ``jax._src.tree_util.tree_structure`` -- pytree definitions for the call
  parameters (with the registry ``stages.Compiled.call`` compares against).
* ``jax._src.dispatch.runtime_tokens`` -- the effect tokens
  ``jax.effects_barrier`` waits on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from jax._src import stages as _stages
from jax._src import tree_util as _tree_util

__all__ = ["drop_failed_effect_tokens", "make_dispatch"]


class _CheckedExecutable:
  """Stands in for the MeshExecutable in the slow (cache-miss) call path:
  validates the arguments, then delegates to the real executable."""

  __slots__ = ("_exe", "_check")

  def __init__(self, exe: Any, check: Callable[[tuple], None]):
    self._exe = exe
    self._check = check

  def call(self, *args):
    self._check(args)
    return self._exe.call(*args)


def make_dispatch(exe: Any, num_args: int, num_outs: int,
                  check: Callable[[tuple], None]) -> Callable[..., list]:
  """A callable ``f(*arrays) -> list[jax.Array]`` that runs ``exe``.

  It is the C++ dispatch path of ``jax.stages.Compiled`` (a ``PjitFunction``):
  calls whose argument signature (shape, dtype, sharding, committedness) was
  seen before never enter Python; any other call takes the Python slow path,
  where ``check(args)`` runs first (raise there to reject the call before
  anything executes).
  """
  in_tree = _tree_util.tree_structure((tuple(range(num_args)), {}))
  out_tree = _tree_util.tree_structure(list(range(num_outs)))
  params = _stages.CompiledCallParams(
      _CheckedExecutable(exe, check), True, in_tree, out_tree, [], None, None)
  fn = exe.create_cpp_call(params)
  if fn is None:  # executables with effects/callbacks have no C++ path
    def fn(*args):
      return _stages.Compiled.call(params, *args)[0]
  return fn


def drop_failed_effect_tokens() -> int:
  """Forgets the effect tokens of executions that failed (JAX keeps the
  latest one per device for `jax.effects_barrier`; one of a failed step
  would make every later barrier, and the one at exit, raise the old error
  again). Waits for each token: call it only where the work it tracks
  cannot wait on another process. Returns how many were dropped."""
  from jax._src import dispatch  # pylint: disable=import-outside-toplevel
  tokens = dispatch.runtime_tokens.output_runtime_tokens
  dropped = 0
  for device, token in list(tokens.items()):
    try:
      token.block_until_ready()
    except Exception:  # noqa: BLE001 -- the failure was reported where it began
      if tokens.get(device) is token:
        del tokens[device]
        dropped += 1
  return dropped
