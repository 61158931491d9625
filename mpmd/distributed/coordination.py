"""Compile-time metadata between processes: JAX's coordination service.

A process publishes what others cannot know (that it laid out a program, its
call counts, its failures) under a key naming the compile or the run; the
others poll for it (`try_fetch`, `wait_for_any`, `wait_for_peers`) until
`MPMD_DISTRIBUTED_TIMEOUT`.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping

import jax

from mpmd import knobs
from mpmd._jax.distributed_client import distributed_client
from mpmd.errors import DistributedError

__all__ = ["ENV_TIMEOUT", "publish", "timeout_seconds", "try_fetch", "wait_for_any",
           "wait_for_peers"]

#: Seconds a process waits for another to publish compile-time metadata.
ENV_TIMEOUT = knobs.MPMD_DISTRIBUTED_TIMEOUT


def _client():
  client = distributed_client()
  if client is None:
    raise DistributedError("this run spans several processes but JAX's coordination service is "
                           "not initialized: call mpmd.distributed.initialize() (or "
                           "jax.distributed.initialize()) first")
  return client


def timeout_seconds() -> float:
  """How long a process waits for what another process publishes
  (`MPMD_DISTRIBUTED_TIMEOUT`, default 600 s: it covers the other process's
  tracing and partitioning)."""
  return knobs.number(ENV_TIMEOUT)


def publish(key: str, value: str) -> None:
  """Publishes `value` under `key` for the other processes (idempotent)."""
  _client().key_value_set(key, value, allow_overwrite=True)


def try_fetch(key: str) -> str | None:
  """The value another process published under `key`, or None (no wait)."""
  try:
    return _client().key_value_try_get(key)
  except Exception as e:  # noqa: BLE001 -- NOT_FOUND comes as a runtime error
    if "NOT_FOUND" in str(e) or "not found" in str(e):
      return None
    raise


def wait_for_any(keys: Mapping[str, str], deadline: float) -> None:
  """Waits until one of `keys` is published; `keys` maps each key to what is
  waited for (for the error). Raises `DistributedError` at `deadline`."""
  delay = 0.005
  while True:
    for key in keys:
      if try_fetch(key) is not None:
        return
    if time.monotonic() > deadline:
      missing = "; ".join(dict.fromkeys(keys.values()))
      raise DistributedError(
          f"process {jax.process_index()} waited {timeout_seconds():.0f} s (MPMD_DISTRIBUTED_TIMEOUT)"
          f" for {missing}. The process that compiles it failed, is still compiling, or runs a "
          "different program: every process must call the same mpmd.jit program with "
          "arguments of the same shapes and shardings")
    time.sleep(delay)
    delay = min(delay * 2, 0.2)


def wait_for_peers(prefix: str, me: int, peers: Iterable[int], what: str) -> None:
  """Publishes `{prefix}/{me}` and waits until every other process of `peers`
  has published its own (with a program's fingerprint in `prefix`: until
  they laid out the same program). `what` names what is waited for, with
  `{process}` for the process (for the error). Raises `DistributedError`
  after `MPMD_DISTRIBUTED_TIMEOUT` seconds."""
  publish(f"{prefix}/{me}", "1")
  deadline = time.monotonic() + timeout_seconds()
  for peer in sorted(set(peers) - {me}):
    wait_for_any({f"{prefix}/{peer}": what.format(process=peer)}, deadline)
