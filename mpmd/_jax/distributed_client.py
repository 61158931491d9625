"""The client of JAX's coordination service in a multi-process run: its
key-value store carries compile-time metadata between processes.

The JAX internal used here: ``jax._src.distributed.global_state.client``.
"""

from __future__ import annotations

from typing import Any

from jax._src import distributed as _distributed

__all__ = ["distributed_client"]


def distributed_client() -> Any | None:
  """The client of JAX's coordination service (set by
  ``jax.distributed.initialize``), or None in a single-process run. Its
  ``key_value_set(key, value, allow_overwrite)``, ``key_value_try_get(key)``
  (raises when the key is absent) and ``blocking_key_value_get(key, ms)``
  are what mpmd uses to exchange compile-time metadata between processes."""
  return _distributed.global_state.client
