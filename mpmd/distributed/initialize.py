"""Joining a multi-process run: `initialize`, the exit-on-error hook,
`is_multiprocess`."""

from __future__ import annotations

import logging
import os
import sys
import threading
import traceback
from typing import Any

import jax

from mpmd import knobs
from mpmd.distributed import gloo_admission, steps, termination
from mpmd.errors import DistributedError, MpmdError

__all__ = ["ENV_COORDINATOR", "ENV_HEARTBEAT_TIMEOUT", "ENV_NUM_PROCESSES", "ENV_PROCESS_ID",
           "initialize", "is_multiprocess"]

logger = logging.getLogger("mpmd")

#: Environment variables `python -m mpmd.launch` sets for each process.
ENV_COORDINATOR = knobs.MPMD_COORDINATOR_ADDRESS
ENV_NUM_PROCESSES = knobs.MPMD_NUM_PROCESSES
ENV_PROCESS_ID = knobs.MPMD_PROCESS_ID
ENV_HEARTBEAT_TIMEOUT = knobs.MPMD_HEARTBEAT_TIMEOUT


def _env_int(name: str) -> int | None:
  try:
    return knobs.integer(name)
  except knobs.KnobError as e:
    raise MpmdError(str(e)) from None


def initialize(coordinator_address: str | None = None, num_processes: int | None = None,
               process_id: int | None = None, *, local_device_ids: Any = None,
               heartbeat_timeout_seconds: int | None = None,
               initialization_timeout: int = 300, exit_on_error: bool = True,
               handle_sigterm: bool = True) -> None:
  """Joins this process to a multi-process run (`jax.distributed.initialize`).

  Arguments left as None are read from the variables `python -m mpmd.launch`
  sets (`MPMD_COORDINATOR_ADDRESS`, `MPMD_NUM_PROCESSES`, `MPMD_PROCESS_ID`,
  `MPMD_HEARTBEAT_TIMEOUT`); where those are absent too, JAX detects the
  cluster (SLURM, Open MPI, Kubernetes, Cloud TPU...). A loopback
  coordinator address (127.0.0.1, as the launcher uses) makes the
  coordination service listen on the loopback only. On CPU, cross-process
  collectives use gloo (`jax_cpu_collectives_implementation`), set here
  unless already chosen; on GPU they use NCCL, JAX's default there (the gloo
  setting only concerns the CPU backend). Gloo's listening socket then lets
  in only the connections of the run's own processes
  (`mpmd.distributed.gloo_admission`; `MPMD_GLOO_ADMISSION=0` turns that
  off). Call it before anything touches the devices.

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
      hanging. Either way the others are told which process failed and why,
      and end within about a second (`mpmd.distributed.steps`).
    handle_sigterm: SIGTERM ends the whole run: this process after the
      hooks registered with `mpmd.distributed.on_termination` (exit code
      143), the others at once (`mpmd.distributed.termination`). False keeps
      JAX's own SIGTERM handling (preemption sync points), under which a
      worker ignores SIGTERM.
  """
  coordinator_address = coordinator_address or knobs.text(ENV_COORDINATOR)
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
  # Before anything else touches the devices: JAX's CPU backend starts here,
  # and gloo's listening socket gets its filter as soon as it is open.
  try:
    gloo_admission.install(timeout=initialization_timeout)
  except DistributedError:
    # The others must hear of it, and this process must not wait for them
    # in JAX's shutdown barrier.
    steps.install()
    if exit_on_error:
      _install_exit_on_error()
    raise
  logger.info("process %d of %d joined the run (%d local devices of %d)", jax.process_index(),
              jax.process_count(), jax.local_device_count(), jax.device_count())
  steps.install()
  if exit_on_error:
    _install_exit_on_error()
  if handle_sigterm:
    termination.install()


def _install_exit_on_error() -> None:
  previous = sys.excepthook

  def hook(kind, value, tb):
    try:
      me = jax.process_index()
      # The others hear of it first, before anything here waits: the record
      # says whether this failure follows a peer's (a collective whose other
      # end failed or died) or came first.
      record = steps.publish_failure(f"{kind.__name__}: {value}")
      sys.stderr.write(f"[mpmd] process {me} of {jax.process_count()} failed; "
                       "ending it now so that the other processes stop too\n")
      if record is not None and record.cause is not None:
        first = steps.origin(record.cause)
        what = steps.failed_peers(timeout=0.5).get(first, "failed (see its output)")
        sys.stderr.write(f"[mpmd] process {me}: this follows the failure of process {first}, "
                         f"which failed first: process {first} {what}\n")
      previous(kind, value, tb)
    finally:
      sys.stdout.flush()
      sys.stderr.flush()
      # (Process 0 hosts the coordination service: the others read this
      # failure there before it goes.)
      steps.let_peers_hear()
      steps.publish_exit()
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
