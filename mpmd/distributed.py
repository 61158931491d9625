"""Running one MPMD program over several processes (JAX's multi-controller runtime).

Every process runs the same script: it calls `initialize()`, builds the same
topology over the global devices (`jax.devices()`), and calls the same
`mpmd.jit` program with the same arguments. Each process compiles and runs
only the fragments of the meshes that have devices it owns; a transfer
between meshes of different processes is one XLA collective over the devices
of both meshes, which every process owning one of those devices joins in
program order (`mpmd/crossprocess.py`). Outputs on meshes of other processes
come back as `RemoteArray` placeholders; `gather` brings values to every
process (e.g. the loss, for logging).

Launch locally with `python -m mpmd.launch --processes 2 --devices-per-process 4
script.py`; on a cluster, with the cluster's launcher (see docs/multiprocess.md).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
import traceback
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from mpmd import _jax_internals as _ji
from mpmd.errors import MpmdError

__all__ = ["RemoteArray", "gather", "initialize", "is_multiprocess", "mesh_processes"]

logger = logging.getLogger("mpmd")

#: Environment variables `python -m mpmd.launch` sets for each process.
ENV_COORDINATOR = "MPMD_COORDINATOR_ADDRESS"
ENV_NUM_PROCESSES = "MPMD_NUM_PROCESSES"
ENV_PROCESS_ID = "MPMD_PROCESS_ID"
ENV_HEARTBEAT_TIMEOUT = "MPMD_HEARTBEAT_TIMEOUT"
#: Seconds a process waits for another to publish compile-time metadata.
ENV_TIMEOUT = "MPMD_DISTRIBUTED_TIMEOUT"


class DistributedError(MpmdError, RuntimeError):
  """A multi-process run went wrong: another process did not answer in time,
  or a value was used on a process that does not hold it."""


def _env_int(name: str) -> int | None:
  value = os.environ.get(name)
  if value is None or value == "":
    return None
  try:
    return int(value)
  except ValueError:
    raise MpmdError(f"environment variable {name}={value!r} is not an integer") from None


def initialize(coordinator_address: str | None = None, num_processes: int | None = None,
               process_id: int | None = None, *, local_device_ids: Any = None,
               heartbeat_timeout_seconds: int | None = None,
               initialization_timeout: int = 300, exit_on_error: bool = True) -> None:
  """Joins this process to a multi-process run (`jax.distributed.initialize`).

  Arguments left as None are read from the variables `python -m mpmd.launch`
  sets (`MPMD_COORDINATOR_ADDRESS`, `MPMD_NUM_PROCESSES`, `MPMD_PROCESS_ID`,
  `MPMD_HEARTBEAT_TIMEOUT`); where those are absent too, JAX detects the
  cluster (SLURM, Open MPI, Kubernetes, Cloud TPU...). A loopback
  coordinator address (127.0.0.1, as the launcher uses) makes the
  coordination service listen on the loopback only. On CPU, cross-process
  collectives use gloo (`jax_cpu_collectives_implementation`), set here
  unless already chosen. Call it before anything touches the devices.

  Args:
    coordinator_address: "host:port" of process 0's coordination service.
    num_processes: how many processes take part.
    process_id: this process's index, 0 .. num_processes-1.
    local_device_ids: restricts the local devices this process uses.
    heartbeat_timeout_seconds: how long a silent process is tolerated before
      the others are told it died (JAX's default when None).
    initialization_timeout: seconds to wait for all processes to connect.
    exit_on_error: on an uncaught exception, print it and end this process
      at once (`os._exit(1)`) instead of waiting in JAX's shutdown barrier
      for processes that may be blocked on a collective with this one: its
      peers then fail too (closed connections, missed heartbeats) instead of
      hanging.
  """
  coordinator_address = coordinator_address or os.environ.get(ENV_COORDINATOR) or None
  if num_processes is None:
    num_processes = _env_int(ENV_NUM_PROCESSES)
  if process_id is None:
    process_id = _env_int(ENV_PROCESS_ID)
  if heartbeat_timeout_seconds is None:
    heartbeat_timeout_seconds = _env_int(ENV_HEARTBEAT_TIMEOUT)
  if jax.config.jax_cpu_collectives_implementation in (None, "", "none"):
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
  kwargs: dict[str, Any] = {"initialization_timeout": initialization_timeout}
  host = (coordinator_address or "").rsplit(":", 1)[0]
  if host in ("127.0.0.1", "localhost", "[::1]"):
    # A local run: the coordination service listens on the loopback only
    # (JAX binds every interface unless told otherwise).
    kwargs["coordinator_bind_address"] = coordinator_address
  if heartbeat_timeout_seconds is not None:
    kwargs["heartbeat_timeout_seconds"] = heartbeat_timeout_seconds
  try:
    jax.distributed.initialize(coordinator_address, num_processes, process_id,
                               local_device_ids=local_device_ids, **kwargs)
  except ValueError as e:
    if coordinator_address is None:
      raise DistributedError(
          f"cannot join a multi-process run: {e} No coordinator was given and JAX detected no "
          f"cluster. Start the script with `python -m mpmd.launch --processes N script.py`, "
          f"under a cluster manager JAX knows (SLURM, Open MPI, ...), or pass "
          f"coordinator_address=, num_processes= and process_id= (or set {ENV_COORDINATOR}, "
          f"{ENV_NUM_PROCESSES} and {ENV_PROCESS_ID})") from e
    raise
  logger.info("process %d of %d joined the run (%d local devices of %d)", jax.process_index(),
              jax.process_count(), jax.local_device_count(), jax.device_count())
  if exit_on_error:
    _install_exit_on_error()


def _install_exit_on_error() -> None:
  previous = sys.excepthook

  def hook(kind, value, tb):
    try:
      sys.stderr.write(f"[mpmd] process {jax.process_index()} of {jax.process_count()} failed; "
                       "ending it now so that the other processes stop too\n")
      previous(kind, value, tb)
    finally:
      sys.stdout.flush()
      sys.stderr.flush()
      os._exit(1)

  def thread_hook(args):
    sys.stderr.write(f"[mpmd] thread {args.thread.name if args.thread else '?'} raised:\n")
    traceback.print_exception(args.exc_type, args.exc_value, args.exc_traceback)
    sys.stderr.flush()

  sys.excepthook = hook
  threading.excepthook = thread_hook


def is_multiprocess() -> bool:
  """Whether this run spans several processes (`jax.process_count() > 1`)."""
  return jax.process_count() > 1


def mesh_processes(mesh: Mesh) -> tuple[int, ...]:
  """The processes that own devices of `mesh`, ascending."""
  return tuple(sorted({d.process_index for d in mesh.devices.flat}))


class Ownership:
  """Which meshes of a topology this process takes part in."""

  def __init__(self, topology: Mapping[str, Mesh]):
    me = jax.process_index()
    self.process = me
    self.multiprocess = is_multiprocess()
    self.processes = {name: mesh_processes(mesh) for name, mesh in topology.items()}
    self._local = {name: me in procs for name, procs in self.processes.items()}
    self._only = {name: procs == (me,) for name, procs in self.processes.items()}

  def runs(self, mesh: str) -> bool:
    """This process owns devices of `mesh` (so it runs its fragments)."""
    return self._local[mesh]

  def owns_all(self, mesh: str) -> bool:
    """All devices of `mesh` belong to this process."""
    return self._only[mesh]

  def owner(self, mesh: str) -> int:
    """The first process owning devices of `mesh` (publishes its metadata)."""
    return self.processes[mesh][0]


class RemoteArray:
  """Stands for an output that lives on a mesh of other processes.

  It has the output's `shape`, `dtype`, `mesh` name and owning `processes`;
  passing it back as an argument of the same program (e.g. the parameters of
  the next step) is fine, since this process does not run that mesh. Its
  data is not here: `mpmd.distributed.gather(x)`, called by every process,
  returns it as a NumPy array everywhere.
  """

  __slots__ = ("shape", "dtype", "mesh", "processes")

  def __init__(self, shape: tuple[int, ...], dtype: Any, mesh: str, processes: tuple[int, ...]):
    self.shape = tuple(shape)
    self.dtype = np.dtype(dtype)
    self.mesh = mesh
    self.processes = tuple(processes)

  @property
  def ndim(self) -> int:
    return len(self.shape)

  @property
  def size(self) -> int:
    return int(np.prod(self.shape, dtype=np.int64))

  def _where(self) -> str:
    owners = ", ".join(str(p) for p in self.processes)
    return (f"this {self.dtype}{list(self.shape)} value lives on mesh {self.mesh!r}, owned by "
            f"process {owners}, not by process {jax.process_index()}")

  def __array__(self, dtype=None, copy=None):
    raise DistributedError(f"{self._where()}: call mpmd.distributed.gather(value) on every "
                           "process to get its data everywhere")

  def __repr__(self) -> str:
    return (f"RemoteArray({self.dtype}{list(self.shape)}, mesh={self.mesh!r}, "
            f"processes={list(self.processes)})")


def _owners_of(x: Any) -> tuple[int, ...] | None:
  """The processes holding `x`'s data, or None when every process has it."""
  if isinstance(x, RemoteArray):
    return x.processes
  if isinstance(x, jax.Array):
    return tuple(sorted({d.process_index for d in x.sharding.device_set}))
  return None


def gather(tree: Any) -> Any:
  """Every leaf of `tree` as a NumPy array on every process.

  A collective: every process calls it with a tree of the same structure
  (what the same program returned there: `jax.Array`\\ s where it holds the
  value, `RemoteArray`\\ s where it does not). Leaves owned by one process are
  broadcast from it; leaves whose mesh spans processes are all-gathered;
  NumPy arrays and Python numbers are returned as they are. A `jax.Array`
  that is not an mpmd output but lives on this process's devices (each
  process with its own) counts as owned by this process alone, so the
  processes would disagree on who broadcasts it: pass such values as NumPy.
  In a single-process run this is `jax.device_get`.
  """
  leaves, treedef = jax.tree.flatten(tree)
  if not is_multiprocess():
    return jax.tree.unflatten(treedef, [np.asarray(jax.device_get(x)) for x in leaves])
  from jax.experimental import multihost_utils  # public; imports lazily
  me = jax.process_index()
  out: list[Any] = [None] * len(leaves)
  by_owner: dict[int, list[int]] = {}
  for i, x in enumerate(leaves):
    owners = _owners_of(x)
    if owners is None:
      out[i] = np.asarray(x)
    elif len(owners) == 1:
      by_owner.setdefault(owners[0], []).append(i)
    else:  # a mesh spanning processes: its (global) array is here too
      out[i] = np.asarray(multihost_utils.process_allgather(x, tiled=True))
  for owner in sorted(by_owner):
    indices = by_owner[owner]
    source = me == owner
    host = []
    for i in indices:
      x = leaves[i]
      value = np.asarray(x) if source else np.zeros(x.shape, x.dtype)
      host.append(value.astype(np.uint8) if value.dtype == np.bool_ else value)
    got = multihost_utils.broadcast_one_to_all(host, is_source=source)
    for i, value in zip(indices, got):
      value = np.asarray(value)
      out[i] = value.astype(np.bool_) if leaves[i].dtype == np.bool_ else value
  return jax.tree.unflatten(treedef, out)


# --- compile-time metadata between processes ---------------------------------------------------

def _client():
  client = _ji.distributed_client()
  if client is None:
    raise DistributedError("this run spans several processes but JAX's coordination service is "
                           "not initialized: call mpmd.distributed.initialize() (or "
                           "jax.distributed.initialize()) first")
  return client


def timeout_seconds() -> float:
  """How long a process waits for metadata another process publishes
  (`MPMD_DISTRIBUTED_TIMEOUT`, default 600 s: it covers the other process's
  compile time)."""
  return float(os.environ.get(ENV_TIMEOUT, "600"))


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


def encode_sharding(sharding: NamedSharding) -> str:
  """A NamedSharding's spec as JSON (its mesh is known to every process)."""
  return json.dumps([list(p) if isinstance(p, tuple) else p for p in sharding.spec])


def decode_sharding(text: str, mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, PartitionSpec(*[tuple(p) if isinstance(p, list) else p
                                            for p in json.loads(text)]))
