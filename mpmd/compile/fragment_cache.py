"""The fragment compile cache: one program per distinct compile key.

A call compiles the fragment program the partition stage laid out for it
(`mpmd.partition.layouts.FragmentLayout`), whose *compile key* is (fragment
function, mesh, input shardings, output shardings). `FragmentCache` holds
one compiled program per key: it compiles the programs the compile plan
(`mpmd.compile.compile_plan`) needs in parallel (XLA compiles without the
GIL; `MPMD_COMPILE_THREADS`, default 8, bounded by the number of CPUs), loads a
program compiled for another mesh of the same shape with the same layouts
instead of compiling it again, runs each new program once on zeros
(`mpmd.compile.warmup`), and compiles the filler programs that make the
constants a call consumes. Every compile is logged to the `mpmd` logger at
INFO, and long compiles show a progress line (`_Progress`).
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

from jax.sharding import Mesh, NamedSharding, Sharding

from mpmd import knobs
from mpmd._jax.compiling import HostCallbacks
from mpmd.compile import warmup
from mpmd.compile.constants import make_filler
from mpmd.compile.fragment import FragmentExecutable, compile_laid_out
from mpmd.partition.layouts import FragmentLayout

__all__ = ["CompileKey", "FragmentCache"]

logger = logging.getLogger("mpmd")

#: (fragment function, mesh name, input shardings, output shardings):
#: `FragmentLayout.key`.
CompileKey = tuple[str, str, tuple[Sharding, ...], tuple[Sharding, ...]]

#: Most fragment programs compiled at once (XLA compiles without the GIL).
_COMPILE_THREADS = knobs.integer(knobs.MPMD_COMPILE_THREADS)

#: Seconds a compile runs before its progress is shown.
_PROGRESS_AFTER = knobs.number(knobs.MPMD_PROGRESS_AFTER)


class _Progress:
  """A progress line on stderr for compiles that take more than
  `_PROGRESS_AFTER` seconds: programs ready / expected, how many of them
  were loaded from another mesh instead of compiled, and the time so far.

  Shown when the `mpmd` logger is at INFO, or with `MPMD_PROGRESS=1`, or on
  a terminal that shows warnings; never with `MPMD_PROGRESS=0`. On a
  terminal it is one line rewritten in place; elsewhere (a log file) a line
  every `_PROGRESS_AFTER` seconds.
  """

  def __init__(self, total: int):
    self.total = total
    self.start = self.last = time.perf_counter()
    self.tty = sys.stderr.isatty()
    setting = knobs.tristate(knobs.MPMD_PROGRESS)
    self.enabled = setting is not False and (setting is True or logger.isEnabledFor(logging.INFO) or
                                             (self.tty and logger.isEnabledFor(logging.WARNING)))
    self.shown = False

  def update(self, done: int, loaded: int, name: str) -> None:
    now = time.perf_counter()
    if not self.enabled or now - self.start < _PROGRESS_AFTER:
      return
    if not self.tty and now - self.last < _PROGRESS_AFTER:
      return
    self.last = now
    text = (f"[mpmd] fragment programs {done}/{self.total} ({loaded} loaded from another mesh), "
            f"{now - self.start:.0f}s: {name[:40]}")
    sys.stderr.write(f"\r{text:<110}" if self.tty else text + "\n")
    sys.stderr.flush()
    self.shown = True

  def close(self) -> None:
    if self.enabled and self.shown and self.tty:
      sys.stderr.write("\r" + " " * 110 + "\r")
      sys.stderr.flush()


class FragmentCache:
  """The compiled programs of one `compile_program` call.

  Use it as a context manager: the compile threads run while it is open
  (compiles, warm-up runs, filler programs); `finish` waits for what they
  still do. What it reads from a function's text (whether it calls host
  callbacks, may be warmed up) it reads once, when a program of the function
  is first compiled on this process.

  Args:
    functions: the partitioned program's `_mpmd.FragmentFunction`s.
    topology: mesh name -> mesh.
    callbacks: the host callbacks of the lowered step, which the programs
      that call them are compiled with.
    expected: how many (function, mesh) pairs will get a program (for the
      progress line).

  Attributes:
    num_compiled / num_loaded: XLA compiles, and programs loaded on another
      mesh of the same shape instead of compiled.
    num_warmed_up: programs run once on zeros (known after `finish`).
    compile_seconds: the compiles' time, summed over threads.
    workers: compile threads.
  """

  def __init__(self, functions: Sequence[Any], topology: Mapping[str, Mesh],
               callbacks: HostCallbacks | None, expected: int):
    self.functions = {f.name: f for f in functions}
    self.topology = topology
    self.callbacks = callbacks
    #: compile key -> executable, in compile order.
    self.compiled: dict[tuple, FragmentExecutable] = {}
    #: relative compile key (see `_relative_key`) -> the first executable.
    self.by_relative: dict[tuple, FragmentExecutable] = {}
    #: (constants, shardings) -> the filler program making them (a future
    #: while it compiles on the pool).
    self.fillers: dict[tuple, Any] = {}
    #: The fillers asked for since the last compile: they compile on the
    #: pool alongside the programs (or in `finish`).
    self._new_fillers: dict[tuple, tuple] = {}
    #: Warm-up runs of new programs on the compile threads, and the limit
    #: on their size (`warmup.warmup_bytes`, read at the first compile).
    self.warming: list[concurrent.futures.Future] = []
    self.warmup_limit: int | None = None
    self.num_compiled = 0
    self.num_loaded = 0
    self.num_warmed_up = 0
    self.compile_seconds = 0.0
    self.workers = max(1, min(_COMPILE_THREADS, os.cpu_count() or 1))
    self.pool: concurrent.futures.ThreadPoolExecutor | None = None
    self.progress = _Progress(expected)

  def __enter__(self) -> FragmentCache:
    self.pool = concurrent.futures.ThreadPoolExecutor(self.workers, "mpmd-compile")
    return self

  def __exit__(self, *exc_info) -> None:
    try:
      self.pool.shutdown(wait=True)
    finally:
      self.pool = None
      self.progress.close()

  # --- what the compile plan asks ------------------------------------------------------------

  def request_filler(self, constants: tuple[tuple[Any, Sharding], ...]) -> tuple:
    """Asks for the filler program making `constants` (each a
    `_mpmd.ConstantInput` and its sharding), once; returns its key for
    `filler`. It compiles on the pool with the programs."""
    key = tuple((c.dtype, c.value, tuple(c.shape), s) for c, s in constants)
    if key not in self.fillers and key not in self._new_fillers:
      self._new_fillers[key] = constants
    return key

  def calls_host(self, callee: str) -> bool:
    """Whether the programs of fragment function `callee` call host callbacks
    (as the compiler found: `_mpmd.FragmentFunction.calls_host`)."""
    return self.functions[callee].calls_host

  def filler(self, key: tuple) -> Any:
    """The filler program of `key` (after `finish`)."""
    return self.fillers[key]

  # --- compiling --------------------------------------------------------------------------------

  def compile(self, layouts: Sequence[FragmentLayout]) -> None:
    """Compiles the distinct programs of `layouts` in parallel.

    A program already compiled for another mesh of the same shape, with the
    same layouts relative to its mesh, is loaded on this mesh's devices
    instead of compiled again (`FragmentExecutable.on_mesh`)."""
    self._start_fillers()
    compile_keys: dict[Any, tuple[FragmentLayout, Any]] = {}  # relative key (or key) -> (layout, rel)
    load_keys: list[tuple[FragmentLayout, Any]] = []
    for layout in layouts:
      rel = self._relative_key(layout.key)
      if rel is not None and (rel in self.by_relative or rel in compile_keys):
        load_keys.append((layout, rel))
      else:
        compile_keys.setdefault(layout.key if rel is None else rel, (layout, rel))
    firsts = list(compile_keys.values())
    compiled = self.pool.map(self._compile_one, [layout for layout, _ in firsts])
    for (layout, rel), (fragment, seconds) in zip(firsts, compiled):
      key = layout.key
      self.compiled[key] = fragment
      self.compile_seconds += seconds
      self.num_compiled += 1
      if rel is not None:
        self.by_relative[rel] = fragment
      logger.info("[%d] compiled %s for mesh %r (%d devices) in %.2fs", len(self.compiled),
                  key[0], key[1], self.topology[key[1]].size, seconds)
      self.progress.update(self._num_done(), self.num_loaded, key[0])
      self._warm_up(key[0], fragment)
    for layout, rel in load_keys:
      key = layout.key
      self.compiled[key] = self._load_one(layout, self.by_relative[rel])
      self.progress.update(self._num_done(), self.num_loaded, key[0])
      self._warm_up(key[0], self.compiled[key])

  def _num_done(self) -> int:
    """How many of the (function, mesh) pairs the progress line counts have
    a program."""
    return len({key[:2] for key in self.compiled})

  def _relative_key(self, key: CompileKey) -> tuple | None:
    """A compile key with the mesh replaced by its shape and every layout by
    its spec: equal for the same program on meshes of the same shape. None
    when a layout is not a `NamedSharding` (then it is compiled per mesh)."""
    callee, mesh_name, in_shardings, out_shardings = key
    if self.calls_host(callee):
      return None  # host callbacks do not survive serialization
    specs = []
    for s in (*in_shardings, *out_shardings):
      if isinstance(s, NamedSharding):
        specs.append((s.spec, s.memory_kind))
      else:
        return None
    mesh = self.topology[mesh_name]
    return (callee, tuple(mesh.shape.items()), tuple(specs))

  def _load_one(self, layout: FragmentLayout,
                source: FragmentExecutable) -> FragmentExecutable:
    """`source` loaded on the mesh of `layout` (compiled afresh if that fails)."""
    t0 = time.perf_counter()
    try:
      fragment = source.on_mesh(layout.mesh)
    except Exception as e:  # noqa: BLE001 -- any failure: compile instead
      logger.info("could not load %s (compiled for mesh %r) on mesh %r, compiling it: %s",
                  layout.name, source.mesh, layout.mesh_name, e)
      fragment, seconds = self._compile_one(layout)
      self.compile_seconds += seconds
      self.num_compiled += 1
      return fragment
    self.num_loaded += 1
    logger.info("[%d] loaded %s on mesh %r (compiled for another mesh of its shape) in %.3fs",
                len(self.compiled) + 1, layout.name, layout.mesh_name, time.perf_counter() - t0)
    return fragment

  def _compile_one(self, layout: FragmentLayout) -> tuple[FragmentExecutable, float]:
    """Compiles one fragment program as laid out; returns it and the seconds
    it took."""
    t0 = time.perf_counter()
    fragment = compile_laid_out(layout,
                                self.callbacks if self.calls_host(layout.name) else None)
    return fragment, time.perf_counter() - t0

  def _warm_up(self, callee: str, fragment: FragmentExecutable) -> None:
    """Runs a new program once on a compile thread (`mpmd.compile.warmup`)."""
    if self.warmup_limit is None:
      self.warmup_limit = warmup.warmup_bytes()
    if not self.warmup_limit:
      return
    if (warmup.may_run_early(self.functions[callee])
        and warmup.eligible(fragment, self.warmup_limit)):
      self.warming.append(self.pool.submit(warmup.run_once, fragment))

  def _start_fillers(self) -> None:
    """Starts compiling the fillers asked for on the pool."""
    for key, constants in self._new_fillers.items():
      self.fillers[key] = self.pool.submit(make_filler, constants)
    self._new_fillers.clear()

  def finish(self) -> None:
    """Waits for the filler programs and the warm-up runs on the pool."""
    self._start_fillers()
    self.fillers = {k: f.result() for k, f in self.fillers.items()}
    warmed = sum(f.result() for f in self.warming)
    if self.warmup_limit is None:  # (nothing compiled)
      self.warmup_limit = warmup.warmup_bytes()
    if self.warmup_limit:
      warmed += warmup.run_fillers(self.fillers.values(), self.warmup_limit)
    self.num_warmed_up = warmed
    if warmed:
      logger.info("warmed up %d programs (ran each once on zeros, for XLA's first-run "
                  "set-up)", warmed)

  def fragments(self) -> dict[tuple, FragmentExecutable]:
    """(function name, mesh, variant) -> executable, one per compile."""
    return {(k[0], k[1], i): f for i, (k, f) in enumerate(self.compiled.items())}
