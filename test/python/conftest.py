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
program; test_dispatch_cost.py tests those merges (with the knob unset)."""

import os

_flags = os.environ.get("XLA_FLAGS", "")
if "xla_force_host_platform_device_count" not in _flags:
  _flags += " --xla_force_host_platform_device_count=8"
if "xla_backend_optimization_level" not in _flags:
  _flags += " --xla_backend_optimization_level=0"
os.environ["XLA_FLAGS"] = _flags.strip()
os.environ.setdefault("MPMD_DISPATCH_COST", "0")

import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _fresh_jit_cache():
  """Each test starts without programs compiled by earlier tests: `mpmd.jit`
  wrappers of the same function and an equivalent config share one cache
  (as `jax.jit`'s do), which would make later tests skip the compile they
  check."""
  import sys  # noqa: PLC0415
  import mpmd  # noqa: PLC0415,F401 (after XLA_FLAGS)
  jit_module = sys.modules["mpmd.jit"]  # (`mpmd.jit` is the function)
  with jit_module._SHARED_LOCK:
    jit_module._SHARED.clear()
  yield
