"""Running one MPMD program over several processes (JAX's multi-controller runtime).

Every process runs the same script: it calls `initialize()`, builds the same
topology over the global devices (`jax.devices()`), and calls the same
`mpmd.jit` program with the same arguments. Each process compiles and runs
only the fragments of the meshes that have devices it owns; a transfer
between meshes of different processes is one XLA collective over the devices
of both meshes, which every process owning one of those devices joins in
program order (`mpmd/run/crossprocess.py`). Outputs on meshes of other
processes come back as `RemoteArray` placeholders; `gather` brings values to
every process (e.g. the loss, for logging).

Launch locally with `python -m mpmd.launch --processes 2 --devices-per-process 4
script.py`; on a cluster, with the cluster's launcher (see docs/multiprocess.md).

The modules, one job each (their public names are all available here):

* `mpmd.distributed.initialize` -- joining the run: `initialize` (and its
  exit-on-error hook), `is_multiprocess`;
* `mpmd.distributed.ownership` -- which processes own which meshes:
  `mesh_processes`, `Ownership`;
* `mpmd.distributed.arrays` -- `RemoteArray` placeholders and `gather`;
* `mpmd.distributed.steps` -- every process calls each program the same
  number of times: call counts, published at exit and checked by a watchdog,
  which also ends this process when another one fails and reports calls
  that stall;
* `mpmd.distributed.termination` -- SIGTERM ends the whole run, after the
  `on_termination` hooks (a last checkpoint);
* `mpmd.distributed.coordination` -- metadata between processes through
  JAX's key-value store (`publish`, `try_fetch`, `wait_for_any`,
  `wait_for_peers`, `timeout_seconds`);
* `mpmd.distributed.admission` -- the socket filter that lets only admitted
  addresses connect to a listening socket (transfer servers, gloo);
* `mpmd.distributed.gloo_admission` -- gloo's listening socket lets in only
  the connections the run's own processes announce (set up by `initialize`).

The local launcher that starts the processes is `mpmd.launch`.
"""

from mpmd.distributed.initialize import (ENV_COORDINATOR, ENV_HEARTBEAT_TIMEOUT,
                                         ENV_NUM_PROCESSES, ENV_PROCESS_ID, initialize,
                                         is_multiprocess)
from mpmd.distributed.ownership import Ownership, mesh_processes
from mpmd.distributed.arrays import RemoteArray, gather
from mpmd.distributed import steps, termination
from mpmd.distributed.termination import on_termination, termination_requested
from mpmd.distributed.coordination import (ENV_TIMEOUT, publish, timeout_seconds, try_fetch,
                                           wait_for_any, wait_for_peers)
from mpmd.errors import DistributedError

__all__ = ["DistributedError", "RemoteArray", "gather", "initialize", "is_multiprocess",
           "mesh_processes", "on_termination", "termination_requested"]
