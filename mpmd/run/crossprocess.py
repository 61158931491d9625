"""Transfers between meshes whose devices belong to different processes.

Within one process a transfer is a `jax.device_put`. Across processes it is
one XLA program compiled over the union of the source and target meshes'
devices (gloo collectives on CPU, NCCL on GPU): a `shard_map` whose body
`ppermute`s every block from a source device that holds it to the target
device that needs it. Every process owning a device of either mesh calls the
program when it reaches the transfer in program order; as every process
walks the same instruction list, all of them issue their collectives in the
same order and each pair of processes agrees on which transfer comes next.

Between two meshes of the same shape that each belong to one process (the
usual pipeline layout), a transfer is a pull instead (`PullTransfer`, unless
`MPMD_CROSS_PROCESS_TRANSFERS=collective`): the source process offers the
value to JAX's transfer server (`jax.experimental.transfer`) and the target
process pulls it, block by block onto its devices. Neither side waits for
the other on its device stream, so a stage keeps computing while its
activations are in flight (a collective blocks both devices until both
processes reach it).

The wire layout is computed identically everywhere from the two meshes, the
value's shape and its target sharding (which the source process publishes at
compile time when the target process cannot know it):

* meshes of the same shape: the source is laid out like the target (locally,
  if it is not already) and device k of the source sends its block to device
  k of the target: each byte crosses once;
* otherwise: the source is replicated locally, every target device receives
  the whole value (from source devices in turn), and the target lays it out
  locally.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import socket
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from mpmd import distributed as dist
from mpmd import knobs
from mpmd._jax.array_copy import make_array_copier
from mpmd._jax.transfer_server import start_transfer_server
from mpmd.distributed import admission
from mpmd.errors import DistributedError, MpmdError

_AXIS = "mpmd_transfer"


@dataclasses.dataclass(frozen=True)
class TransferPlan:
  """How one value crosses from `src_mesh` to `dst_mesh` (same on every process)."""
  shape: tuple[int, ...]
  dtype: np.dtype
  #: Layout the source is put in before sending / the value arrives in.
  wire_src: NamedSharding
  wire_dst: NamedSharding
  #: The sharding the value must have on the target mesh.
  target: NamedSharding
  #: Shape of one block on the wire (one device's shard of `wire_dst`).
  block: tuple[int, ...]
  #: The devices of both meshes, source first (the collective's mesh).
  union: Mesh
  num_src: int
  #: Rounds of (source position, target position) pairs in `union`.
  rounds: tuple[tuple[tuple[int, int], ...], ...]

  @property
  def wire_shape(self) -> tuple[int, ...]:
    """Global shape of the collective's operand: blocks stacked on dim 0."""
    n = len(self.union.devices.flat)
    if not self.block:
      return (n,)
    return (n * self.block[0], *self.block[1:])


def make_plan(src_mesh: Mesh, dst_mesh: Mesh, shape: tuple[int, ...], dtype: Any,
              target: NamedSharding) -> TransferPlan:
  """The wire layout and the collective's permutation for one transfer."""
  src = list(src_mesh.devices.flat)
  dst = list(dst_mesh.devices.flat)
  if set(src) & set(dst):
    raise MpmdError(f"cannot transfer between meshes sharing devices "
                    f"{sorted(d.id for d in set(src) & set(dst))}")
  shape = tuple(shape)
  same = (src_mesh.axis_names == dst_mesh.axis_names
          and src_mesh.devices.shape == dst_mesh.devices.shape)
  if same:  # every device's shard has the same shape (jax shards evenly)
    block = target.shard_shape(shape)
    wire_src = NamedSharding(src_mesh, target.spec)
    wire_dst = target
    rounds = (tuple((k, len(src) + k) for k in range(len(dst))),)
  else:
    wire_src = NamedSharding(src_mesh, PartitionSpec())
    wire_dst = NamedSharding(dst_mesh, PartitionSpec())
    block = shape
    rounds = tuple(tuple((k % len(src), len(src) + k)
                         for k in range(r * len(src), min((r + 1) * len(src), len(dst))))
                   for r in range(-(-len(dst) // len(src))))
  union = Mesh(np.array(src + dst), (_AXIS,))
  return TransferPlan(shape, np.dtype(dtype), wire_src, wire_dst, target, tuple(block), union,
                      len(src), rounds)


@functools.lru_cache(maxsize=256)
def _collective(union: Mesh, rounds: tuple) -> Any:
  """The jitted permutation over `union` (compiled once per shape)."""
  receivers = [jnp.asarray([t for _, t in pairs], jnp.int32) for pairs in rounds]

  def body(block):
    if len(rounds) == 1:
      return jax.lax.ppermute(block, _AXIS, perm=list(rounds[0]))
    me = jax.lax.axis_index(_AXIS)
    out = jnp.zeros_like(block)
    for pairs, targets in zip(rounds, receivers):
      got = jax.lax.ppermute(block, _AXIS, perm=list(pairs))
      out = jnp.where(jnp.any(me == targets), got, out)
    return out

  return jax.jit(jax.shard_map(body, mesh=union, in_specs=PartitionSpec(_AXIS),
                               out_specs=PartitionSpec(_AXIS)))


def _source_on_wire(plan: TransferPlan, x: jax.Array | None) -> jax.Array:
  """The value a process that owns source devices sends, laid out as the
  wire expects (both kinds of transfer)."""
  if x is None:
    raise MpmdError("cross-process transfer: the source value is missing on a process that "
                    "owns source devices")
  if not x.sharding.is_equivalent_to(plan.wire_src, len(plan.shape)):
    x = jax.device_put(x, plan.wire_src)
  return x


class CrossProcessTransfer:
  """This process's part in one cross-process transfer of a running program.

  `__call__(x)` takes the value on the source mesh (None where this process
  owns no source device) and returns it on the target mesh (None where this
  process owns no target device). Asynchronous, like every dispatch.
  """

  def __init__(self, plan: TransferPlan):
    self.plan = plan
    me = jax.process_index()
    devices = list(plan.union.devices.flat)
    self._local = [(pos, d) for pos, d in enumerate(devices) if d.process_index == me]
    self._src_local = [d for pos, d in self._local if pos < plan.num_src]
    self._dst_local = [d for pos, d in self._local if pos >= plan.num_src]
    self._wire = NamedSharding(plan.union, PartitionSpec(_AXIS))
    self._fn = _collective(plan.union, plan.rounds)
    self._zeros: list[jax.Array] | None = None
    self._scalar = not plan.shape

  @property
  def sends(self) -> bool:
    return bool(self._src_local)

  @property
  def receives(self) -> bool:
    return bool(self._dst_local)

  def _target_blocks(self) -> list[jax.Array]:
    if self._zeros is None:  # not donated to the collective: safe to reuse
      block = (1,) if self._scalar else self.plan.block
      self._zeros = [jax.device_put(np.zeros(block, self.plan.dtype), d) for d in self._dst_local]
    return self._zeros

  def __call__(self, x: jax.Array | None) -> jax.Array | None:
    return self.exchange(x)[0]

  def exchange(self, x: jax.Array | None) -> tuple[jax.Array | None, jax.Array]:
    """(the value on the target mesh or None, the collective's output: an
    array that is ready once this process's part of the transfer is done)."""
    plan = self.plan
    blocks: list[jax.Array] = []
    if self._src_local:
      x = _source_on_wire(plan, x)
      shards = {s.device: s.data for s in x.addressable_shards}
      for d in self._src_local:
        data = shards[d]
        blocks.append(data.reshape((1,)) if self._scalar else data)
    blocks.extend(self._target_blocks())
    wire = jax.make_array_from_single_device_arrays(plan.wire_shape, self._wire, blocks)
    out = self._fn(wire)
    if not self._dst_local:
      return None, out
    got = {s.device: s.data for s in out.addressable_shards}
    pieces = [got[d].reshape(()) if self._scalar else got[d] for d in self._dst_local]
    y = jax.make_array_from_single_device_arrays(plan.shape, plan.wire_dst, pieces)
    if plan.wire_dst is not plan.target:
      y = jax.device_put(y, plan.target)
    return y, out


#: "pull" (default) or "collective": how values cross between meshes that
#: each belong to one process (the choice must be the same on every process).
ENV_TRANSFERS = knobs.MPMD_CROSS_PROCESS_TRANSFERS


def pull_applies(plan: TransferPlan, src_processes: tuple[int, ...],
                 dst_processes: tuple[int, ...]) -> bool:
  """Whether a transfer is a pull: meshes of the same shape, each owned by
  one process, and pulls not turned off (`MPMD_CROSS_PROCESS_TRANSFERS`).
  Decided from what every process knows alike.

  Not between CPU meshes of several devices: with jaxlib 0.10.2, pulling
  into a CPU mesh whose programs run collectives among its devices hung
  about one 2-process step in three (2 processes x 4 CPU devices, data
  sharded in the meshes; benchmarks/multiprocess.py); collectives never did.
  """
  try:
    mode = knobs.text(ENV_TRANSFERS)
  except knobs.KnobError as e:
    raise MpmdError(str(e)) from None
  cpu_mesh_of_several = (plan.num_src > 1 and
                         plan.union.devices.flat[0].platform == "cpu")
  return (mode == "pull" and plan.wire_dst is plan.target and len(src_processes) == 1
          and len(dst_processes) == 1 and src_processes != dst_processes
          and not cpu_mesh_of_several)


class _Servers:
  """This process's transfer servers: one per pair of processes and
  direction, so that each accepts exactly one connection, and is sealed
  (`_seal`) once that connection has carried a pull.

  For values this process offers to process `dst`: a server whose address
  is published under `mpmd/transfer-server/<me>/<dst>`; for values it pulls
  from process `src`: a server of its own (the connection's local end) that
  connects to `src`'s server for it. Once a pull from `src` has arrived, the
  pulling process seals its end and publishes `mpmd/transfer-sealed/<src>/<me>`;
  `src` seals its end when it reads that (`seal_connected`, at the end of
  each call of a program with pulls). A sealed server's listening sockets
  accept nothing more (the kernel refuses connections to them).

  Before that, from the moment a server starts, its listening sockets answer
  anyone's connection request but drop the rest of the handshake and every
  packet after it (a socket filter, `admission.admit_only`), except from the
  addresses of the connections its one peer makes to it: the pulling process
  publishes them as jaxlib makes them (`_announce`,
  `mpmd/transfer-peer/<src>/<me>`), the serving one admits them (`_admit`).
  So no other program reaches jaxlib's socket server, which aborts the
  process on a malformed frame. The pulling side's own server admits no one.
  The peer's first packets after the handshake are dropped too (TCP sends
  them again about 0.2 s later, admitted by then), once per run; connecting
  still starts when the program is compiled (`PullTransfer`, `connect_soon`).
  (Dropping the connection request itself, as before, cost 1 s per
  connection: TCP repeats a request after 1 s.)
  """

  def __init__(self):
    self.lock = threading.Lock()
    #: ("to", dst) / ("from", src) -> the server.
    self.servers: dict[tuple[str, int], Any] = {}
    #: Same keys -> its listening sockets not sealed yet: (fd, address).
    self.listeners: dict[tuple[str, int], list[tuple[int, Any]]] = {}
    #: Same keys -> the ports it listened on.
    self.ports: dict[tuple[str, int], list[int]] = {}
    self.connections: dict[int, Any] = {}
    #: src -> held while connecting to it (one connection per pair).
    self.connecting: dict[int, threading.Lock] = {}
    #: The processes this one has offered a value to.
    self.served: set[int] = set()
    #: src -> the first value pulled from it, until it has arrived.
    self.first_pull: dict[int, jax.Array] = {}
    #: Write ends of the pipes that replace closed listening sockets (`_seal`).
    self.quiet_pipes: list[int] = []

  def _start(self, key: tuple[str, int]) -> Any:
    """Starts the server `key` (called with the lock held)."""
    client = jax.local_devices()[0].client
    host = knobs.text(knobs.MPMD_TRANSFER_HOST)
    before = admission.listening_sockets()
    try:
      server = start_transfer_server(client, f"{host}:0")
    except Exception as e:  # noqa: BLE001
      raise DistributedError(
          f"cannot start JAX's transfer server on {host} ({type(e).__name__}: {e}): set "
          f"{ENV_TRANSFERS}=collective on every process to move values with collectives, "
          f"or {knobs.MPMD_TRANSFER_HOST} to an address of this host the others can reach") from e
    after = admission.listening_sockets()
    self.servers[key] = server
    self.listeners[key] = sorted(after.items() - before.items())
    self.ports[key] = sorted({address[1] for _, address in self.listeners[key]})
    try:
      for fd, _ in self.listeners[key]:  # nobody may connect yet (see `_admit`)
        admission.admit_only(fd, [], handshakes=True)
    except OSError as e:
      raise DistributedError(
          f"cannot filter the connections to JAX's transfer server ({e}), so any program "
          f"could reach it: set {ENV_TRANSFERS}=collective on every process to move values "
          "with collectives") from e
    return server

  def serving(self, dst: int) -> Any:
    """The server that offers this process's values to process `dst`."""
    key = ("to", dst)
    with self.lock:
      server = self.servers.get(key)
      if server is None:
        server = self._start(key)
        me = jax.process_index()
        dist.publish(f"mpmd/transfer-ports/{me}/{dst}", json.dumps(self.ports[key]))
        threading.Thread(target=self._admit, args=(key,), daemon=True,
                         name=f"mpmd-transfer-admit-{dst}").start()
        dist.publish(f"mpmd/transfer-server/{me}/{dst}", server.address())
      return server

  def _admit(self, key: tuple[str, int]) -> None:
    """Lets through each listening socket of server `key` exactly the
    connection the peer process says it made to that socket's port (it
    publishes their local addresses and remote ports under
    `mpmd/transfer-peer/<me>/<peer>`, see `_announce`); runs until both are
    established, the server is sealed, or `MPMD_DISTRIBUTED_TIMEOUT`.

    Per port, not the peer's addresses on every socket: the kernel gives
    connections to different destinations the same local port, so another
    program's connection to one port may come from the address of the
    peer's connection to the other (on Linux a program making connections
    to one port walks through every local port in about 14,000 of them)."""
    peer_key = f"mpmd/transfer-peer/{jax.process_index()}/{key[1]}"
    deadline = time.monotonic() + dist.timeout_seconds()
    admitted: list[tuple[str, int, int]] = []
    delay = 0.002
    try:
      while time.monotonic() < deadline:
        with self.lock:
          listeners = list(self.listeners.get(key, ()))
        if not listeners:
          return  # sealed
        text = dist.try_fetch(peer_key)
        peers = sorted({(ip, int(port), int(to)) for ip, port, to in json.loads(text)}
                       ) if text else []
        if peers != admitted:
          admitted = peers
          for fd, address in listeners:
            admission.admit_only(fd, admitted_on(address[1], admitted), handshakes=True)
          delay = 0.002
        ports = {address[1] for _, address in listeners}
        if admitted and ports <= admission.accepted_ports([(ip, port)
                                                           for ip, port, _ in admitted]):
          return  # every listener has its connection
        time.sleep(delay)
        delay = min(2 * delay, 0.05)
    except Exception:  # noqa: BLE001 -- the process is ending (the service is gone)
      return

  def offer(self, dst: int, uuid: int, arrays: list[jax.Array]) -> None:
    """Offers `arrays` to process `dst` under `uuid`."""
    self.serving(dst).await_pull(uuid, arrays)
    if dst not in self.served:
      with self.lock:
        self.served.add(dst)

  def connection(self, src: int) -> Any:
    """The connection that pulls values from process `src` (made once)."""
    with self.lock:
      found = self.connections.get(src)
      if found is not None:
        return found
      connecting = self.connecting.setdefault(src, threading.Lock())
    with connecting:
      with self.lock:
        found = self.connections.get(src)
        if found is not None:
          return found
        server = self.servers.get(("from", src)) or self._start(("from", src))
      me = jax.process_index()
      key = f"mpmd/transfer-server/{src}/{me}"
      deadline = time.monotonic() + dist.timeout_seconds()
      dist.wait_for_any({key: f"the transfer server address of process {src}"}, deadline)
      ports = json.loads(dist.try_fetch(f"mpmd/transfer-ports/{src}/{me}"))
      connection = server.connect(dist.try_fetch(key))
      announce = threading.Thread(target=_announce, args=(src, me, set(ports), deadline),
                                  daemon=True, name=f"mpmd-transfer-announce-{src}")
      announce.start()
      with self.lock:
        self.connections[src] = connection
      return connection

  def connect_soon(self, src: int) -> None:
    """Makes the connection to process `src` in the background (its first
    attempts wait for admission, see `_admit`), so that the first pull
    finds it made; a failure is left for the first pull to raise."""
    if src in self.connections:
      return

    def connect():
      try:
        self.connection(src)
      except Exception:  # noqa: BLE001 -- the first pull tries again and raises
        pass

    threading.Thread(target=connect, daemon=True, name=f"mpmd-transfer-connect-{src}").start()

  def pulled(self, src: int, y: jax.Array) -> None:
    """Notes a value pulled from `src` (the first one tells when to seal)."""
    if ("from", src) in self.listeners and src not in self.first_pull:
      with self.lock:
        self.first_pull.setdefault(src, y)

  def seal_connected(self, wait: bool) -> None:
    """Seals the ends of connections that have carried a pull: this
    process's end of a pull from another process once the first value has
    arrived (publishing it), then the ends of the pulls other processes
    make from this one once they say so (waiting for that if
    `wait`: the other process's call that publishes it needs nothing more of
    this one, as every call waits for its own work; else looking once)."""
    me = jax.process_index()
    for src, y in list(self.first_pull.items()):
      try:
        arrived = y.is_ready()
      except Exception:  # noqa: BLE001 -- deleted since (donated): it had arrived
        arrived = True
      if arrived:
        self._seal(("from", src))
        del self.first_pull[src]
        dist.publish(f"mpmd/transfer-sealed/{src}/{me}", "1")
    for key in [k for k in self.listeners if k[0] == "to"]:
      flag = f"mpmd/transfer-sealed/{me}/{key[1]}"
      if wait and key[1] in self.served:  # (else it may not be pulled from in this call)
        deadline = time.monotonic() + dist.timeout_seconds()
        dist.wait_for_any({flag: f"process {key[1]} to say its first pull from process {me} "
                                 "arrived"}, deadline)
      elif dist.try_fetch(flag) is None:
        continue
      self._seal(key)

  def _seal(self, key: tuple[str, int]) -> None:
    """Closes the listening sockets of server `key` (its established
    connection keeps working).

    Each listening socket's descriptor is replaced (`dup2`) by the read end
    of a pipe nobody writes to: the socket itself is closed, so its port
    refuses connections, while jaxlib's event loop, which still watches that
    descriptor number, never sees it ready. (Shutting the socket down
    instead left it ready for ever: the loop spun on it, taking a core.)"""
    with self.lock:
      listeners = self.listeners.pop(key, [])
    for fd, address in listeners:
      sock = socket.socket(fileno=fd)
      try:
        ours = sock.getsockname() == address  # (still the server's socket)
      except OSError:
        ours = False
      finally:
        sock.detach()
      if not ours:
        continue
      read_end, write_end = os.pipe()
      os.dup2(read_end, fd)
      os.close(read_end)
      self.quiet_pipes.append(write_end)  # open for ever: no end-of-file either

  def unsealed(self) -> list[tuple[str, int]]:
    """The servers whose listening sockets are still open."""
    with self.lock:
      return sorted(k for k, v in self.listeners.items() if v)


def admitted_on(port: int, announced: list[tuple[str, int, int]]) -> list[tuple[str, int]]:
  """The addresses a listening socket on `port` lets through, of the peer's
  `announced` connections (local ip, local port, remote port): those made
  to `port` (see `_Servers._admit`)."""
  return sorted({(ip, local) for ip, local, remote in announced if remote == port})


def _announce(src: int, me: int, ports: set[int], deadline: float) -> None:
  """Publishes (`mpmd/transfer-peer/<src>/<me>`) the local addresses of this
  process's TCP connections to `ports` of process `src`'s transfer server,
  each with the port it goes to (ip, port, remote port), as jaxlib makes them, until one to each port is established (or
  `deadline`): `src` lets exactly those through its listening sockets."""
  published: list[tuple[str, int, int]] = []
  delay = 0.002
  try:
    while time.monotonic() < deadline and ("from", src) in _SERVERS.listeners:
      found = admission.own_connections(ports)
      mine = sorted({(*local, remote_port) for local, remote_port, _ in found})
      if mine != published:
        dist.publish(f"mpmd/transfer-peer/{src}/{me}", json.dumps(mine))
        published = mine
        delay = 0.002
      if {port for _, port, established in found if established} >= ports:
        return
      time.sleep(delay)
      delay = min(2 * delay, 0.05)
  except Exception:  # noqa: BLE001 -- the process is ending (the service is gone)
    return


_SERVERS = _Servers()


class PullTransfer:
  """This process's part in one transfer between single-process meshes of
  the same shape: the source offers each call's value under a fresh id, the
  target pulls it (`jax.experimental.transfer`). Same interface as
  `CrossProcessTransfer`; ids agree because both processes make the same
  calls of the transfer in the same order."""

  def __init__(self, plan: TransferPlan, key: str, src_process: int, dst_process: int):
    self.plan = plan
    me = jax.process_index()
    self._sends = me == src_process
    self._receives = me == dst_process
    self._peer = dst_process if self._sends else src_process
    self._base = int(hashlib.sha256(key.encode()).hexdigest()[:10], 16) << 20
    self._count = 0
    self._spec = [jax.ShapeDtypeStruct(plan.shape, plan.dtype, sharding=plan.target)]
    #: Offer a copy of the value, not its buffer (set by `keep_offered`
    #: where a later instruction of this process consumes the value).
    self.offers_copy = False
    self._copier: Any = None
    # The connection is made now, in the background: the peer's admission
    # (`_Servers._admit`) takes about 2 s, which then overlaps the rest of
    # the compile instead of delaying the first call.
    if self._sends:
      _SERVERS.serving(self._peer)
    elif self._receives:
      _SERVERS.connect_soon(self._peer)

  @property
  def sends(self) -> bool:
    return self._sends

  @property
  def receives(self) -> bool:
    return self._receives

  def __call__(self, x: jax.Array | None) -> jax.Array | None:
    return self.exchange(x)[0]

  def exchange(self, x: jax.Array | None) -> tuple[jax.Array | None, jax.Array]:
    """(the value on the target mesh or None, an array that is ready once
    this process's part is done: the pulled value, or the offered one)."""
    uuid = self._base | (self._count & 0xFFFFF)
    self._count += 1
    if self._sends:
      wire = _source_on_wire(self.plan, x)
      if self.offers_copy and wire is x:
        wire = self._copy(x)
      _SERVERS.offer(self._peer, uuid, [wire])
      return None, wire
    y = _SERVERS.connection(self._peer).pull(uuid, self._spec)[0]
    _SERVERS.pulled(self._peer, y)
    return y, y

  def _copy(self, x: jax.Array) -> jax.Array:
    """A copy of `x` in a buffer of its own (same layout and devices)."""
    if self._copier is None:
      self._copier = make_array_copier(self.plan.wire_src, self.plan.wire_src,
                                       len(self.plan.shape), always_copy=True) or (
          lambda a: jax.device_put(a, self.plan.wire_src, may_alias=False))
    return self._copier(x)


def keep_offered(instructions: Sequence[Any], consumed: Callable[[int, int], bool]) -> int:
  """Makes the pulls this process serves offer a copy of their value where
  `consumed(index, value)` says that an instruction after `index` (the
  send's) consumes the value: donates it to a fragment call, or deletes it
  (an argument the caller donated, at its last use). Returns how many.

  The transfer server reads an offered buffer only when the other process
  pulls it, while a call consumes a donated buffer when it is dispatched
  (and a deletion is immediate): without the copy, a pull that comes later
  than this process's dispatch of that call failed on the other process
  (`CopyRawSubBufferToHost() called on deleted or donated buffer`). The
  copy lives until the pull has read it (the server holds it); the value
  itself goes on to be consumed as compiled. (Waiting for the pull instead
  needs word from the other process, which the source side never gets from
  the transfer server.)
  """
  count = 0
  for index, inst in enumerate(instructions):
    transfer = getattr(inst, "transfer", None)
    if (isinstance(transfer, PullTransfer) and transfer.sends
        and consumed(index, inst.operands[0])):
      transfer.offers_copy = True
      count += 1
  return count


def seal_connected(wait: bool = True) -> None:
  """Seals the transfer servers' listening sockets whose one connection has
  carried a pull (see `_Servers`); `Program.run` calls it at the end of each
  call of a program with pulls, once its own work is done (`wait`; else
  whatever is done by then). Cheap once every server is sealed."""
  if _SERVERS.listeners:
    _SERVERS.seal_connected(wait=wait)


def unsealed_servers() -> list[tuple[str, int]]:
  """("to", dst) / ("from", src) of this process's transfer servers that
  still accept connections (for tests and diagnostics)."""
  return _SERVERS.unsealed()


def server_ports() -> dict[tuple[str, int], list[int]]:
  """("to", dst) / ("from", src) -> the TCP ports that transfer server of
  this process listened on, sealed or not (for tests and diagnostics)."""
  with _SERVERS.lock:
    return dict(_SERVERS.ports)
