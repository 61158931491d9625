"""pytest configuration: 8 virtual CPU devices (set before JAX is imported),
and XLA's CPU backend compiling without LLVM's optimisations.

The suite compares mpmd with `jax.jit` of the same step in the same process
(and in the processes it starts, which inherit `XLA_FLAGS`), so both sides
compile alike; most of the suite's time is XLA compiling tiny models, and
`--xla_backend_optimization_level=0` halves it (HLO passes, and so every
program's structure, are unchanged; only the machine code is less tuned).
Give `--xla_backend_optimization_level=N` in `XLA_FLAGS` to test at another
level. Run directly (not under pytest), the benchmarks and examples compile
as users' programs do.

`MPMD_DISPATCH_COST=0`: the suite checks each schedule's exact order of
units and the calls each pass leaves, on models so small that the CPU's
measured call cost would merge many of their back-to-back units into one
program; test_dispatch_cost.py tests those merges (with the knob unset).

Compiled programs are shared across tests: JAX's persistent compilation
cache serves the whole session (the pytest-xdist workers and every process a
test starts inherit `JAX_COMPILATION_CACHE_DIR`), so a program another test
compiled (a reference `jax.jit` step, a fragment of the same toy model) is
read back instead of compiled again. The directory is a fresh temporary one,
removed at the end, unless `JAX_COMPILATION_CACHE_DIR` is set (point it at a
lasting folder to reuse the programs across runs; `JAX_ENABLE_COMPILATION_CACHE=false`
turns the cache off). Tests of the cache itself set their own folder."""

import os
import shutil
import tempfile

_flags = os.environ.get("XLA_FLAGS", "")
if "xla_force_host_platform_device_count" not in _flags:
  _flags += " --xla_force_host_platform_device_count=8"
if "xla_backend_optimization_level" not in _flags:
  _flags += " --xla_backend_optimization_level=0"
os.environ["XLA_FLAGS"] = _flags.strip()
os.environ.setdefault("MPMD_DISPATCH_COST", "0")

# Made by the first process that loads this file (pytest itself, before it starts
# its workers), which removes it when the session ends.
_SESSION_CACHE: str | None = None
if not os.environ.get("JAX_COMPILATION_CACHE_DIR"):
  _SESSION_CACHE = tempfile.mkdtemp(prefix="mpmd-tests-jax-cache-")
  os.environ["JAX_COMPILATION_CACHE_DIR"] = _SESSION_CACHE
# Every program, however small or quick to compile.
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")

import pytest  # noqa: E402


def pytest_unconfigure(config):
  """Removes the session's compilation cache (in the process that made it)."""
  del config
  if _SESSION_CACHE is not None:
    shutil.rmtree(_SESSION_CACHE, ignore_errors=True)


def pytest_collection_modifyitems(session, config, items):
  """The tests marked slow run first (in their files' order): the pytest-xdist
  workers then end the session on short tests, instead of one worker finishing
  a minute-long smoke run while the other waits."""
  del session, config
  items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(autouse=True)
def _fresh_jit_cache():
  """Each test starts without programs compiled by earlier tests: `mpmd.jit`
  wrappers of the same function and an equivalent config share one cache
  (as `jax.jit`'s do), which would make later tests skip the compile they
  check."""
  import importlib  # noqa: PLC0415
  jit_module = importlib.import_module("mpmd.jit")  # (`mpmd.jit` is the function)
  with jit_module._SHARED_LOCK:
    jit_module._SHARED.clear()
  yield
