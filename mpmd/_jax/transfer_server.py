"""JAX's transfer server: point-to-point pulls of arrays between the processes
of a multi-process run.

Uses ``jax.experimental.transfer`` (public, experimental).
"""

from __future__ import annotations

from typing import Any

__all__ = ["start_transfer_server"]


def start_transfer_server(client: Any, address: str) -> Any:
  """A `jax.experimental.transfer` server of `client` listening on
  `address` ("host:0": any port), its data connections on the same host."""
  from jax.experimental import transfer  # noqa: PLC0415 (experimental API)
  host = address.rsplit(":", 1)[0]
  return transfer.start_transfer_server(client, address, [f"{host}:0"])
