"""pytest configuration: 8 virtual CPU devices (set before JAX is imported)."""

import os

_flags = os.environ.get("XLA_FLAGS", "")
if "xla_force_host_platform_device_count" not in _flags:
  os.environ["XLA_FLAGS"] = (
      _flags + " --xla_force_host_platform_device_count=8").strip()
