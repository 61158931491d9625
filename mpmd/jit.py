"""`mpmd.jit`: compile a labelled JAX function into an MPMD program."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import logging
import threading
import weakref
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any

import jax

from mpmd.partition import partitioner as partition
from mpmd.run.calling import Signature, argument_path, check_not_traced, dtype_of
from mpmd.config import MpmdConfig
from mpmd.errors import ConfigError, MpmdError
from mpmd.trace.tracing import trace_and_lower
from mpmd.stages import Compiled, Lowered

logger = logging.getLogger("mpmd")

_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


@dataclasses.dataclass
class _SharedCache:
  """The compiled programs of one (function, configuration) pair.

  `refs` keeps alive the objects whose `id()` is part of the key (schedule
  objects, unhashable parts), so that no other object can take their ids.
  """
  refs: tuple
  programs: dict


# function -> {(config key, static_argnums, donate_argnums, shardings keys) -> _SharedCache}:
# what lets `mpmd.jit(f, config)(...)` called inline compile once, like `jax.jit`.
_SHARED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_SHARED_LOCK = threading.Lock()


def _shardings_key(shardings: Any) -> Hashable:
  """A hashable key of an in/out shardings pytree (identity when unhashable)."""
  if shardings is None:
    return ("value", None)
  try:
    leaves, treedef = jax.tree_util.tree_flatten(shardings)
    key = (tuple(leaves), treedef)
    hash(key)
  except (TypeError, ValueError):
    return ("id", id(shardings))
  return ("value", key)


def _shared_cache(fun: Callable, key: Hashable, refs: tuple) -> tuple[dict | None, bool]:
  """(the programs dict shared by wrappers of `fun` with `key`, whether it
  existed before), or (None, False) when `fun` cannot be a weak dict key."""
  try:
    with _SHARED_LOCK:
      per_function = _SHARED.get(fun)
      if per_function is None:
        per_function = _SHARED[fun] = {}
      entry = per_function.get(key)
      if entry is not None:
        return entry.programs, True
      entry = per_function[key] = _SharedCache(refs, {})
      return entry.programs, False
  except TypeError:  # not weakly referenceable, or unhashable
    return None, False


def _parameters(fun: Callable) -> list[inspect.Parameter] | None:
  try:
    return list(inspect.signature(fun).parameters.values())
  except (TypeError, ValueError):
    return None


def _describe(param: inspect.Parameter) -> str:
  if param.kind is inspect.Parameter.VAR_POSITIONAL:
    return "*" + param.name
  if param.kind is inspect.Parameter.VAR_KEYWORD:
    return "**" + param.name
  return param.name


def _resolve_argnames(what: str, fun: Callable, names: str | Iterable[str]) -> tuple[int, ...]:
  """The positions of the parameters `names` (static_argnames, donate_argnames)."""
  if isinstance(names, str):
    names = (names,)
  names = tuple(names)
  for n in names:
    if not isinstance(n, str):
      raise ConfigError(f"{what} must be strings (parameter names), got {n!r}")
  if not names:
    return ()
  fname = getattr(fun, "__name__", repr(fun))
  params = _parameters(fun)
  if params is None:
    raise ConfigError(f"{what} {names} needs the parameters of {fname}, whose signature cannot "
                      f"be read: give positions ({what[:-len('names')]}nums) instead")
  positional = [p for p in params if p.kind in _POSITIONAL]
  by_name = {p.name: p for p in params}
  out = []
  for n in names:
    p = by_name.get(n)
    if p is None or p.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
      listed = ", ".join(_describe(q) for q in params) or "none"
      raise ConfigError(f"{what} names {n!r}, which is not a parameter of {fname} "
                        f"(its parameters: {listed})")
    if p.kind is inspect.Parameter.KEYWORD_ONLY:
      raise ConfigError(f"{what} names {n!r}, a keyword-only parameter of {fname}: mpmd.jit takes "
                        "names of positional parameters only; declare it before the '*' or bind "
                        "it with functools.partial")
    out.append(positional.index(p))
  return tuple(out)


class MpmdJitted:
  """A function compiled by `mpmd.jit`. Call it, or `lower` it first."""

  def __init__(self, fun: Callable, config: MpmdConfig, static_argnums: Sequence[int] = (),
               in_shardings: Any = None, out_shardings: Any = None,
               donate_argnums: Sequence[int] = (), *,
               static_argnames: str | Iterable[str] = (),
               donate_argnames: str | Iterable[str] = ()):
    if not isinstance(config, MpmdConfig):
      raise ConfigError(f"mpmd.jit needs an MpmdConfig from mpmd.make_config, got {config!r}")
    self.fun = fun
    self.config = config
    self.static_argnums = tuple(sorted(set(
        _normalize_argnums("static_argnums", fun, static_argnums)
        + _resolve_argnames("static_argnames", fun, static_argnames))))
    self.in_shardings = in_shardings
    self.out_shardings = out_shardings
    self.donate_argnums = tuple(sorted(set(
        _normalize_argnums("donate_argnums", fun, donate_argnums)
        + _resolve_argnames("donate_argnames", fun, donate_argnames))))
    overlap = set(self.static_argnums) & set(self.donate_argnums)
    if overlap:
      raise ConfigError(f"arguments {sorted(overlap)} are both static and donated")
    # Static and donated parameters that a call may pass by keyword: such a
    # call is rewritten to pass them by position (`_by_position`).
    params = _parameters(fun) or []
    self._positional = [p for p in params if p.kind in _POSITIONAL]
    self._by_name = {p.name: i for i, p in enumerate(self._positional)
                     if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
                     and (i in self.static_argnums or i in self.donate_argnums)}
    self.static_argnames = tuple(n for n, i in self._by_name.items() if i in self.static_argnums)
    self.donate_argnames = tuple(n for n, i in self._by_name.items() if i in self.donate_argnums)
    # (structure, avals, statics, placement) -> (Lowered, {input layouts -> Compiled}),
    # shared by the wrappers of the same function with an equivalent configuration.
    key = (config.cache_key(), self.static_argnums, self.donate_argnums,
           _shardings_key(in_shardings), _shardings_key(out_shardings))
    shared, self._shares_earlier = _shared_cache(fun, key, (config, in_shardings, out_shardings))
    self._cache: dict[Any, tuple[Lowered, dict[tuple, Compiled]]] = (
        {} if shared is None else shared)
    self._lowered_here: set = set()   # keys of `_cache` this wrapper filled
    #: (structure, statics, variants dict, Compiled) of the last call: a call
    #: with the same structure and statics whose arguments that program
    #: recognises as its steady state (`Compiled.call_steady`) skips the
    #: cache key, which reads every argument in Python.
    self._last: tuple | None = None
    self._reuse_logged = False
    functools.update_wrapper(self, fun)

  @property
  def _name(self) -> str:
    return getattr(self.fun, "__name__", repr(self.fun))

  def clear_cache(self) -> None:
    """Drops the compiled programs of this function and configuration (for
    every wrapper sharing them); the next call compiles again."""
    for _, variants in self._cache.values():
      variants.clear()  # (an emptied variants dict also retires `_last`)
    self._cache.clear()
    self._lowered_here.clear()
    self._last = None

  def _split(self, args: tuple) -> tuple[tuple, tuple]:
    """(dynamic, static) positional arguments."""
    return (tuple(a for i, a in enumerate(args) if i not in self.static_argnums),
            tuple(a for i, a in enumerate(args) if i in self.static_argnums))

  def _by_position(self, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """Moves static or donated parameters passed by keyword to their
    positions (parameters skipped before them take their defaults)."""
    named = [self._by_name[n] for n in kwargs if n in self._by_name] if kwargs else ()
    if not named:
      return args, kwargs
    for n in kwargs:
      if n in self._by_name and self._by_name[n] < len(args):
        raise TypeError(f"{self._name}() got multiple values for argument {n!r}")
    args, kwargs = list(args), dict(kwargs)
    for param in self._positional[len(args):max(named) + 1]:
      if param.name in kwargs and param.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD:
        args.append(kwargs.pop(param.name))
      elif param.default is not inspect.Parameter.empty:
        args.append(param.default)
      else:
        raise TypeError(f"{self._name}() missing required positional argument {param.name!r}")
    return tuple(args), kwargs

  def lower(self, *args, **kwargs) -> Lowered:
    """Traces, lowers and partitions the function for these arguments."""
    args, kwargs = self._by_position(args, kwargs)
    _check_static_hashable(self._name, self.static_argnums, self._positional, args)
    config = self.config
    lowering = trace_and_lower(self.fun, args, kwargs, static_argnums=self.static_argnums,
                               donate_argnums=self.donate_argnums)
    dynamic, statics = self._split(args)
    # (typed PRNG keys as the program takes them: their uint32 data)
    leaves = lowering.keys.physical_leaves(jax.tree.leaves((dynamic, kwargs)))
    hints = partition.mesh_hints(config, lowering, dynamic, leaves, self.in_shardings,
                                 self.out_shardings)
    partitioned = partition.partition(self._name, config, lowering.text,
                                      partition.program_spec(config, lowering, hints),
                                      partition.partition_options(config))
    signature = Signature.build(config, lowering, partitioned.program, hints,
                                self.static_argnums, statics)
    lowered = _JitLowered(config, lowering, partitioned, signature,
                          arg_shardings=signature.arg_shardings(leaves), name=self._name)
    try:  # (arguments `jax.ShapeDtypeStruct`s: no cache key, nothing to serve)
      flat, tree = jax.tree_util.tree_flatten((dynamic, kwargs))
      key = self._cache_key(args, kwargs, flat, tree)
      layouts = signature.layout_key(leaves)
    except (TypeError, ValueError, AttributeError):
      return lowered
    lowered._serve = functools.partial(_serve_calls, self._cache, self._lowered_here, key, layouts)
    return lowered

  def _cache_key(self, args: tuple, kwargs: dict, leaves: list, tree: Any) -> Any:
    statics = self._split(args)[1]
    try:
      avals = tuple((dtype_of(x), jax.numpy.shape(x),
                     bool(getattr(x, "weak_type", False))) for x in leaves)
    except TypeError:
      _check_leaves(self._name, leaves, tree)
      raise
    placement = (tuple(partition.argument_meshes(self.config, leaves))
                 if self.config.read_input_mesh_from_arguments else ())
    return (tree, avals, statics, placement)

  def __call__(self, *args, **kwargs) -> Any:
    args, kwargs = self._by_position(args, kwargs)
    dynamic, statics = self._split(args)
    leaves, tree = jax.tree_util.tree_flatten((dynamic, kwargs))
    last = self._last
    if last is not None and last[2] and last[0] == tree and last[1] == statics:
      ran, outputs = last[3].call_steady(leaves)
      if ran:
        return outputs
    check_not_traced(f"{self._name} (an mpmd.jit function)", leaves, tree)
    key = self._cache_key(args, kwargs, leaves, tree)
    try:
      entry = self._cache.get(key)
    except TypeError:
      _check_static_hashable(self._name, self.static_argnums, self._positional, args)
      raise
    if entry is None:
      if self._cache:
        logger.info("compiling %s again: new argument structure, shapes, dtypes or static "
                    "values (%d variant(s) compiled before for this function and config)",
                    self._name, len(self._cache))
      else:
        logger.info("compiling %s", self._name)
      entry = self._cache[key] = (self.lower(*args, **kwargs), {})
      self._lowered_here.add(key)
    elif not self._reuse_logged and key not in self._lowered_here:
      self._reuse_logged = True
      logger.info("%s: reusing the program compiled by an earlier mpmd.jit of the same function "
                  "and an equivalent config (no recompile)", self._name)
    lowered, variants = entry
    placed = lowered.signature.keys.physical_leaves(leaves)  # (keys as their data)
    layouts = lowered.signature.layout_key(placed)
    compiled = variants.get(layouts)
    if compiled is None:
      if variants:
        logger.info("recompiling %s: the arguments' shardings changed", self._name)
      compiled = variants[layouts] = lowered.compile_for(
          lowered.signature.arg_shardings(placed))
    self._last = (tree, statics, variants, compiled)
    return compiled.call_flat(leaves)


class _JitLowered(Lowered):
  """A `Lowered` from `MpmdJitted.lower`: what its `compile()` returns also
  serves later calls of the function with arguments like those it was lowered
  for, as `jax.jit`'s does (no second compile)."""

  _serve: Callable[[Lowered, Compiled], None] | None = None

  def compile(self) -> Compiled:
    compiled = super().compile()
    if self._serve is not None:
      self._serve(self, compiled)
    return compiled


def _serve_calls(cache: dict, lowered_here: set, key: Hashable, layouts: tuple,
                 lowered: Lowered, compiled: Compiled) -> None:
  """Enters `compiled` in an `MpmdJitted` cache under the call key and input
  layouts it was lowered and compiled for (a program already there stays)."""
  entry = cache.get(key)
  if entry is None:
    entry = cache[key] = (lowered, {})
    lowered_here.add(key)
  entry[1].setdefault(layouts, compiled)


def _check_static_hashable(name: str, static_argnums: Sequence[int],
                           positional: Sequence[inspect.Parameter], args: tuple) -> None:
  """Raises `ConfigError` (a ValueError, as jax.jit raises), naming the
  argument, for a static argument that cannot be hashed."""
  for i in static_argnums:
    if i >= len(args):
      continue
    try:
      hash(args[i])
    except TypeError as e:
      param = f" ({positional[i].name})" if i < len(positional) else ""
      raise ConfigError(
          f"static argument {i}{param} of {name} is a {type(args[i]).__name__} "
          f"({args[i]!r:.60}), which cannot be hashed ({e}): static arguments are part of the "
          "compilation cache key, so they must be hashable; pass a tuple instead of a list "
          "(or a frozen dataclass), or pass arrays as ordinary (non-static) arguments") from None


def _check_leaves(name: str, leaves: list, tree: Any) -> None:
  """Raises, naming the argument, for a leaf `mpmd.jit` cannot take:
  something that is not an array or a number."""
  for i, x in enumerate(leaves):
    try:
      dtype_of(x)
    except TypeError:
      kind = type(x).__name__
      if getattr(x, "dtype", None) is not None:  # e.g. a numpy array of Python objects
        kind += f" of dtype {x.dtype}"
      shown = " ".join(repr(x).split())[:60]  # (one line)
      raise MpmdError(
          f"argument {argument_path(tree, i)} of {name} is "
          f"{'an' if kind[0] in 'aeiou' else 'a'} {kind} ({shown}), not an array or a number: "
          "pass arrays of numbers (or pytrees of them), or mark the argument static "
          "(static_argnums / static_argnames)") from None


def _normalize_argnums(what: str, fun: Callable, argnums: Sequence[int]) -> tuple[int, ...]:
  """Positions as non-negative ints; negative ones count from the end of the
  function's positional parameters (as in `jax.jit`)."""
  argnums = tuple(argnums)
  for i in argnums:
    if not isinstance(i, int) or isinstance(i, bool):
      raise ConfigError(f"{what} must be ints (argument positions), got {i!r}")
  name = getattr(fun, "__name__", repr(fun))
  params = _parameters(fun)
  if all(i >= 0 for i in argnums):
    # Past the positional parameters (and no *args to take it): as jax.jit's
    # ValueError, but at once and naming the function.
    if params is not None and not any(p.kind is inspect.Parameter.VAR_POSITIONAL
                                      for p in params):
      count = sum(p.kind in _POSITIONAL for p in params)
      for i in argnums:
        if i >= count:
          raise ConfigError(
              f"{what} position {i} is out of range: {name} has {count} positional parameters "
              f"({', '.join(p.name for p in params if p.kind in _POSITIONAL) or 'none'}); "
              "positions count from 0 (negative ones from the end)")
    return argnums
  if params is None or any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params):
    raise ConfigError(f"{what} {argnums} has negative positions, which need the number of "
                      f"positional parameters of {name}, and it has *args or no readable "
                      "signature: give non-negative positions")
  count = sum(p.kind in _POSITIONAL for p in params)
  out = []
  for i in argnums:
    j = i + count if i < 0 else i
    if j < 0:
      raise ConfigError(f"{what} position {i} is out of range: {name} has {count} positional "
                        "parameters")
    out.append(j)
  return tuple(out)


def jit(fun: Callable, config: MpmdConfig, *, static_argnums: int | Sequence[int] = (),
        static_argnames: str | Iterable[str] = (),
        in_shardings: Any = None, out_shardings: Any = None,
        donate_argnums: int | Sequence[int] = (),
        donate_argnames: str | Iterable[str] = ()) -> MpmdJitted:
  """Compiles `fun` into an MPMD program over the meshes of `config`.

  Like `jax.jit`: `jit(f, config)(*args)` lowers, partitions, compiles (once
  per argument shapes/dtypes/shardings) and runs; `jit(f, config).lower(*args)`
  returns a `Lowered` whose `compile()` returns a `Compiled`.

  Wrappers of the same function object with an equivalent configuration
  (equal `config.cache_key()`), the same static and donated arguments and
  equal shardings share their compiled programs, so `jit(f, config)(*args)`
  written inline in a loop compiles once. A new function object (a lambda or
  `functools.partial` made each time) does not share, as with `jax.jit`.

  Args:
    fun: the step function; label its parts with `mpmd.named_computation`.
    config: from `mpmd.make_config`.
    static_argnums: positional arguments that are static (hashable); a
      different value compiles again. Negative positions count from the end
      of the positional parameters.
    static_argnames: names of positional parameters that are static (the
      same as giving their positions); such an argument may also be passed
      by keyword. Keyword-only parameters are not supported.
    in_shardings: how each positional argument is laid out on the devices of
      the mesh it is placed on: a pytree prefix of the positional arguments
      whose leaves are `PartitionSpec` (over the meshes' axis names), a
      `NamedSharding` of one of the topology's meshes (which also places the
      argument on that mesh) or None. None (the default) keeps the layout of
      an argument that is a committed `jax.Array` on its mesh and replicates
      the others.
    out_shardings: the same for the outputs (pytree prefix of the outputs);
      None leaves the layout Shardy's propagation gives the output.
    donate_argnums: positional arguments whose buffers the program may
      consume (as in `jax.jit`): each is freed at its last use in the step
      and deleted for the caller.
    donate_argnames: names of positional parameters to donate (the same as
      giving their positions).

  Returns:
    An `MpmdJitted`: call it like `fun` (compiles on the first call with new
    argument structure, shapes, dtypes, static values or layouts, then runs
    and returns the outputs as `jax.Array`s on the meshes that computed
    them), or `.lower(*args, **kwargs)` it to get a `Lowered`.

  Raises:
    ConfigError: at once, for a `config` not made by `mpmd.make_config`,
      argument positions that are not ints or out of range, names that are
      not positional parameters of `fun` (listing its parameters), or an
      argument both static and donated.
    ConfigError: when called or lowered, for a static argument that cannot be
      hashed (a ValueError, as jax.jit raises).
    PartitionError: when called or lowered, if the compiler rejects the
      program (e.g. a cross-mesh transfer no label implies); the message
      names the ops and their source lines.
    FragmentCompileError: when called or compiled, if XLA fails to compile a
      fragment for its mesh.
    FragmentRuntimeError: when called, if a fragment or transfer fails while
      running (arguments that were not donated are left intact).
    MpmdError: the base class of all of these (all exported from `mpmd`);
      raised itself when arguments do not fit the program (devices outside
      the topology, deleted or donated arrays).
  """
  if isinstance(static_argnums, int):
    static_argnums = (static_argnums,)
  if isinstance(donate_argnums, int):
    donate_argnums = (donate_argnums,)
  return MpmdJitted(fun, config, static_argnums, in_shardings, out_shardings, donate_argnums,
                    static_argnames=static_argnames, donate_argnames=donate_argnames)
