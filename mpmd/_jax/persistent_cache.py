"""JAX's persistent compilation cache, checked: a program the cache returns
for a fragment is verified to be that fragment's, and compiled again under
another key when it is not.

The JAX internals used here:

* ``jax._src.compilation_cache.is_cache_used`` and
  ``jax._src.config.compilation_cache_dir`` -- whether (and where) the
  persistent compilation cache serves this process.
* a compiled program's ``xla_executable.hlo_modules()`` /
  ``get_parameter_layouts()`` / ``get_output_layouts()`` -- whether the
  cache returned this module's program.
* the ``/jax/compilation_cache/cache_hits`` monitoring event -- which
  programs were read from the cache (not compiled by this process).
"""

from __future__ import annotations

import logging
import os
import re
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import jax
from jax._src import compilation_cache as _compilation_cache
from jax._src import config as _config
from jax._src.lib.mlir import ir

_logger = logging.getLogger("mpmd")
_JaxRuntimeError = jax.errors.JaxRuntimeError

__all__ = ["build_checked", "read_from_cache"]


def build_checked(build: Callable[[Any], Any], module: Any, name: str, backend: Any,
                  devices: Sequence[Any], in_avals: Sequence[jax.core.ShapedArray],
                  out_avals: Sequence[jax.core.ShapedArray]) -> Any:
  """`build(module)` (a compiled ``pxla.MeshExecutable``); with the
  persistent cache on, checked to be the program of `module` (its HLO module
  name, its numbers of parameters and results, their ranks). A program from
  the cache that is not (an entry swapped, or stale), or that JAX cannot load
  back as this module's, is compiled again under another cache key, with a
  warning naming the cache directory and fragment `name`; where that fails
  too, the error says the cache is at fault and what to do."""
  if not _compilation_cache.is_cache_used(backend):
    return build(module)
  module_name = ir.StringAttr(module.operation.attributes["sym_name"]).value

  def mismatch(exe: Any) -> str | None:
    return _program_mismatch(exe, module_name, in_avals, out_avals)

  first_error: Exception | None = None
  try:
    exe = _build_noting_cache_reads(build, module)
    problem = mismatch(exe)
  except _JaxRuntimeError:
    raise  # XLA rejected the program (a cache read that fails is JAX's to handle)
  except Exception as e:  # noqa: BLE001 -- a program JAX cannot load back as this one's
    first_error, problem = e, f"{type(e).__name__}: {e}"
  if problem is None:
    return exe
  # Compile again under another cache key: a copy of the module with one
  # more attribute (JAX's key hashes the module's bytecode; a new module
  # object also misses JAX's in-memory cache of compiled modules).
  with module.context:
    fresh = ir.Module.parse(module.operation.get_asm(enable_debug_info=True))
    fresh.operation.attributes[_CACHE_BYPASS_ATTR] = ir.StringAttr.get("recompiled")
  cache_dir = _config.compilation_cache_dir.value
  try:
    exe = _build_noting_cache_reads(build, fresh)
    again = mismatch(exe)
  except Exception as e:  # noqa: BLE001
    if first_error is not None and type(e) is type(first_error) and str(e) == str(first_error):
      # The same failure under another key: the program's, not the cache's.
      first_error.add_note("(the same when compiled again under another key of JAX's "
                           f"persistent compilation cache, {cache_dir})")
      raise first_error from None
    raise RuntimeError(_cache_fault(module_name, cache_dir, problem,
                                    f"compiling it again failed: {type(e).__name__}: {e}")) from e
  if again is not None:
    raise RuntimeError(_cache_fault(module_name, cache_dir, problem,
                                    f"under another key it returned another program again: "
                                    f"{again}"))
  _logger.warning(
      "JAX's persistent compilation cache (%s) returned another program for fragment %r "
      "(on devices %s): %s. Compiled it again, bypassing that entry. Delete the cache's "
      "entries named %s, or the whole directory: until then every run loads that entry "
      "and compiles again.", cache_dir, name, [d.id for d in devices], problem,
      _entries_named(module_name, cache_dir))
  return exe


def read_from_cache(executable: Any) -> bool:
  """Whether this compiled program (a ``pxla.MeshExecutable`` that
  `build_checked` returned) was read from JAX's persistent cache (not
  compiled by this process)."""
  return executable in _READ_FROM_CACHE


#: The compiled programs read from JAX's persistent cache (not compiled by
#: this process); see `read_from_cache`. Held weakly: an `id` kept here once
#: outlived its program, and a program compiled later at the same address was
#: taken for one read from the cache (it was then compiled again for every
#: mesh instead of loaded on it).
_READ_FROM_CACHE: weakref.WeakSet = weakref.WeakSet()
_cache_reads = threading.local()
_cache_listener_lock = threading.Lock()
_cache_listener_registered = False


def _note_cache_read(event: str, **_: Any) -> None:
  if event == "/jax/compilation_cache/cache_hits":
    _cache_reads.hit = True


def _build_noting_cache_reads(build: Callable[[Any], Any], module: Any) -> Any:
  """`build(module)`, noting (in `_READ_FROM_CACHE`) a program that JAX read
  from its persistent cache: JAX reports each read as a monitoring event,
  in the compiling thread."""
  global _cache_listener_registered
  with _cache_listener_lock:
    if not _cache_listener_registered:
      jax.monitoring.register_event_listener(_note_cache_read)
      _cache_listener_registered = True
  _cache_reads.hit = False
  exe = build(module)
  if _cache_reads.hit:
    _READ_FROM_CACHE.add(exe)
  return exe


#: Module attribute that gives a recompiled module another persistent cache key.
_CACHE_BYPASS_ATTR = "mpmd.persistent_cache_bypass"


def _entries_named(module_name: str, cache_dir: str | None) -> str:
  """The cache entries JAX writes for `module_name`: the pattern, and the
  file names where the cache is a local directory."""
  pattern = f"'{module_name}-*-cache'"
  if cache_dir and os.path.isdir(cache_dir):
    names = sorted(f for f in os.listdir(cache_dir)
                   if f.startswith(module_name + "-") and f.endswith("-cache"))
    if names:
      return f"{pattern} ({', '.join(names[:4])}{', ...' if len(names) > 4 else ''})"
  return pattern


def _cache_fault(module_name: str, cache_dir: str | None, problem: str, then: str) -> str:
  return (f"JAX's persistent compilation cache ({cache_dir}) is at fault: for module "
          f"{module_name!r} it returned another program ({problem}); {then}. Delete the "
          f"cache's entries named {_entries_named(module_name, cache_dir)}, or the whole "
          "directory, or turn the cache off (jax.config.update("
          "'jax_enable_compilation_cache', False)), and run again")


def _program_mismatch(exe: Any, module_name: str,
                      in_avals: Sequence[jax.core.ShapedArray],
                      out_avals: Sequence[jax.core.ShapedArray]) -> str | None:
  """What shows that compiled `exe` is not the program of module
  `module_name` with these avals (its HLO module name, its numbers of
  parameters and results and their ranks), or None."""
  xla = exe.xla_executable
  modules = xla.hlo_modules()
  if modules and modules[0].name != module_name and _PLAIN_NAME.fullmatch(module_name):
    return f"its HLO module is {modules[0].name!r}"
  for what, layouts, avals in (("parameters", xla.get_parameter_layouts(), in_avals),
                               ("results", xla.get_output_layouts(), out_avals)):
    if len(layouts) != len(avals):
      return f"it has {len(layouts)} {what}, not {len(avals)}"
    ranks = [_layout_rank(l) for l in layouts]
    if None not in ranks and ranks != [a.ndim for a in avals]:
      return f"its {what} have ranks {ranks}, not {[a.ndim for a in avals]}"
  return None


def _layout_rank(layout: Any) -> int | None:
  """The rank of an array with this compiled layout (None: not known)."""
  try:
    return len(layout._xla_layout().minor_to_major())
  except (AttributeError, TypeError):
    return None


#: Module names XLA keeps as they are (others may be rewritten).
_PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
