"""pytest configuration: 8 virtual CPU devices (set before JAX is imported)."""

import os

_flags = os.environ.get("XLA_FLAGS", "")
if "xla_force_host_platform_device_count" not in _flags:
  os.environ["XLA_FLAGS"] = (
      _flags + " --xla_force_host_platform_device_count=8").strip()

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
