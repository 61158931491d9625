"""`mpmd.jit`: compile a labelled JAX function into an MPMD program."""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable, Sequence
from typing import Any

import jax

from mpmd import partition
from mpmd.config import MpmdConfig
from mpmd.errors import ConfigError
from mpmd.lowering import trace_and_lower
from mpmd.partition import dtype_of
from mpmd.stages import Compiled, Lowered

logger = logging.getLogger("mpmd")


class MpmdJitted:
  """A function compiled by `mpmd.jit`. Call it, or `lower` it first."""

  def __init__(self, fun: Callable, config: MpmdConfig, static_argnums: Sequence[int],
               in_shardings: Any = None, out_shardings: Any = None,
               donate_argnums: Sequence[int] = ()):
    if not isinstance(config, MpmdConfig):
      raise ConfigError(f"mpmd.jit needs an MpmdConfig from mpmd.make_config, got {config!r}")
    self.fun = fun
    self.config = config
    self.static_argnums = _normalize_argnums("static_argnums", fun, static_argnums)
    self.in_shardings = in_shardings
    self.out_shardings = out_shardings
    self.donate_argnums = _normalize_argnums("donate_argnums", fun, donate_argnums)
    overlap = set(self.static_argnums) & set(self.donate_argnums)
    if overlap:
      raise ConfigError(f"arguments {sorted(overlap)} are both static and donated")
    # (structure, avals, statics, placement) -> (Lowered, {input layouts -> Compiled})
    self._cache: dict[Any, tuple[Lowered, dict[tuple, Compiled]]] = {}
    functools.update_wrapper(self, fun)

  @property
  def _name(self) -> str:
    return getattr(self.fun, "__name__", repr(self.fun))

  def _split(self, args: tuple) -> tuple[tuple, tuple]:
    """(dynamic, static) positional arguments."""
    return (tuple(a for i, a in enumerate(args) if i not in self.static_argnums),
            tuple(a for i, a in enumerate(args) if i in self.static_argnums))

  def lower(self, *args, **kwargs) -> Lowered:
    """Traces, lowers and partitions the function for these arguments."""
    config = self.config
    lowering = trace_and_lower(self.fun, args, kwargs, static_argnums=self.static_argnums,
                               donate_argnums=self.donate_argnums)
    dynamic, statics = self._split(args)
    leaves = jax.tree.leaves((dynamic, kwargs))
    hints = partition.mesh_hints(config, lowering, dynamic, leaves, self.in_shardings,
                                 self.out_shardings)
    partitioned = partition.partition(self._name, config, lowering.text,
                                      partition.program_spec(config, lowering, hints),
                                      partition.partition_options(config))
    signature = partition.Signature.build(config, lowering, partitioned.result, hints,
                                          self.static_argnums, statics)
    return Lowered(config, lowering, partitioned, signature,
                   arg_shardings=signature.arg_shardings(leaves))

  def _cache_key(self, args: tuple, kwargs: dict, leaves: list, tree: Any) -> Any:
    statics = self._split(args)[1]
    avals = tuple((jax.numpy.shape(x), dtype_of(x),
                   bool(getattr(x, "weak_type", False))) for x in leaves)
    placement = (tuple(partition.argument_meshes(self.config, leaves))
                 if self.config.read_input_mesh_from_arguments else ())
    return (tree, avals, statics, placement)

  def __call__(self, *args, **kwargs) -> Any:
    leaves, tree = jax.tree_util.tree_flatten((self._split(args)[0], kwargs))
    key = self._cache_key(args, kwargs, leaves, tree)
    entry = self._cache.get(key)
    if entry is None:
      entry = self._cache[key] = (self.lower(*args, **kwargs), {})
    lowered, variants = entry
    layouts = lowered.signature.layout_key(leaves)
    compiled = variants.get(layouts)
    if compiled is None:
      if variants:
        logger.info("recompiling %s: the arguments' shardings changed", self._name)
      compiled = variants[layouts] = lowered.compile_for(
          lowered.signature.arg_shardings(leaves))
    return compiled.call_flat(leaves)


def _normalize_argnums(what: str, fun: Callable, argnums: Sequence[int]) -> tuple[int, ...]:
  """Positions as non-negative ints; negative ones count from the end of the
  function's positional parameters (as in `jax.jit`)."""
  argnums = tuple(argnums)
  for i in argnums:
    if not isinstance(i, int) or isinstance(i, bool):
      raise ConfigError(f"{what} must be ints (argument positions), got {i!r}")
  if all(i >= 0 for i in argnums):
    return argnums
  name = getattr(fun, "__name__", repr(fun))
  try:
    params = inspect.signature(fun).parameters.values()
  except (TypeError, ValueError):
    params = None
  if params is None or any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params):
    raise ConfigError(f"{what} {argnums} has negative positions, which need the number of "
                      f"positional parameters of {name}, and it has *args or no readable "
                      "signature: give non-negative positions")
  count = sum(p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
              for p in params)
  out = []
  for i in argnums:
    j = i + count if i < 0 else i
    if j < 0:
      raise ConfigError(f"{what} position {i} is out of range: {name} has {count} positional "
                        "parameters")
    out.append(j)
  return tuple(out)


def jit(fun: Callable, config: MpmdConfig, *, static_argnums: int | Sequence[int] = (),
        in_shardings: Any = None, out_shardings: Any = None,
        donate_argnums: int | Sequence[int] = ()) -> MpmdJitted:
  """Compiles `fun` into an MPMD program over the meshes of `config`.

  Like `jax.jit`: `jit(f, config)(*args)` lowers, partitions, compiles (once
  per argument shapes/dtypes/shardings) and runs; `jit(f, config).lower(*args)`
  returns a `Lowered` whose `compile()` returns a `Compiled`.

  Args:
    fun: the step function; label its parts with `mpmd.named_computation`.
    config: from `mpmd.make_config`.
    static_argnums: positional arguments that are static (hashable).
    in_shardings: how each positional argument is laid out on the devices of
      the mesh it is placed on: a pytree prefix of the positional arguments
      whose leaves are `PartitionSpec` (over the meshes' axis names), a
      `NamedSharding` of one of the topology's meshes (which also places the
      argument on that mesh) or None. None (the default) keeps the layout of
      an argument that is a committed `jax.Array` on its mesh and replicates
      the others.
    out_shardings: the same for the outputs (pytree prefix of the outputs);
      None leaves XLA's choice.
    donate_argnums: positional arguments whose buffers the program may
      consume (as in `jax.jit`): each is freed at its last use in the step
      and deleted for the caller.
  """
  if isinstance(static_argnums, int):
    static_argnums = (static_argnums,)
  if isinstance(donate_argnums, int):
    donate_argnums = (donate_argnums,)
  return MpmdJitted(fun, config, static_argnums, in_shardings, out_shardings, donate_argnums)
