"""Keeps every program but the run's own processes away from gloo's
listening socket.

On CPU, JAX runs collectives between processes with gloo. Each process's
gloo listens on one TCP port, opened when JAX's CPU backend starts (in
`mpmd.distributed.initialize`), on the address of the host's name (the
loopback on most single machines). Gloo makes its connections when a set of
devices first meets in a collective (each set once): one process of each
pair connects to the other's port and writes 8 bytes, the sequence number
the other process gave that pair; the other hands the connection to the pair
waiting for that number. It has no other check. A connection from anyone
that writes a number some pair still waits for (16 zero bytes is number 0)
takes that pair's place: the real peer's connection is parked, and both
processes wait in that collective for ever (the waiting side has no
timeout). A connection that writes anything else is parked for good (one
file descriptor each); one that sends nothing is read from until it closes.

So, as soon as gloo listens, its socket gets a filter (`admission.admit_only`)
that answers anyone's connection request but drops the rest of the
handshake and all data, except from the addresses admitted: the
connections the run's own processes make to it. Each process watches its
own new sockets (`/proc/self/fd`; every 20 ms after a connection to gloo,
else every 100 ms); one connected to a process's gloo port is announced to
that process through JAX's key-value store (`mpmd/gloo-bell/<process>/<n>`),
whose thread admits its address at once. The connection's first data is
dropped, and TCP sends it again about 0.2 s later, now admitted: each of
gloo's connections takes about 0.2 s longer to make, once per set of
devices and pair of processes. A connection still not admitted after
`_STALL_SECONDS` is reported by the process that made it, naming the
other process and its port; after `MPMD_GLOO_ADMISSION_TIMEOUT` seconds
(30) that process ends, with that error, and so the run (`steps`).

Nothing else is changed: gloo itself, its connections once made, and the
collectives are JAX's. `MPMD_GLOO_ADMISSION=0` (on every process) turns the
filter off.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import socket
import struct
import sys
import threading
import time
from typing import Any

import jax

from mpmd import knobs
from mpmd._jax.distributed_client import distributed_client
from mpmd.distributed import admission
from mpmd.errors import DistributedError

__all__ = ["ENV_GLOO_ADMISSION", "ENV_GLOO_ADMISSION_TIMEOUT", "install", "status"]

logger = logging.getLogger("mpmd")

#: "0" turns the filter on gloo's listening socket off (on every process).
ENV_GLOO_ADMISSION = knobs.MPMD_GLOO_ADMISSION
#: Seconds a connection to another process's gloo port may stay unadmitted
#: before the process that made it ends, naming it (default 30).
ENV_GLOO_ADMISSION_TIMEOUT = knobs.MPMD_GLOO_ADMISSION_TIMEOUT

_ADDRESS_KEY = "mpmd/gloo-listener/{}"
_COUNT_KEY = "mpmd/gloo-count/{}"
_BELL_KEY = "mpmd/gloo-bell/{}/{}"
_POLL_FAST, _POLL_SLOW = 0.02, 0.1
#: Poll fast for this long after a connection to gloo was seen.
_FAST_FOR = 5.0
#: An admitted address is let in for this long (the connection is made
#: long before; it keeps the filter it was made under).
_ADMIT_FOR = 120.0
#: A connection not admitted after this long is reported.
_STALL_SECONDS = 3.0
#: Seconds the admitting thread waits for an announcement at a time.
_WAIT_SECONDS = 0.25

_guard: _Guard | None = None


class _Guard:
  """The filter on this process's gloo socket and the two threads that keep
  it: `_announce_loop` (this process's connections to gloo ports) and
  `_admit_loop` (what the others announce to this one)."""

  def __init__(self, fd: int, address: tuple[str, int], addresses: dict[tuple[str, int], int],
               me: int, client: Any):
    self.fd, self.address, self.addresses = fd, address, addresses
    self.me, self.client = me, client
    self.lock = threading.Lock()
    #: Admitted source address -> when.
    self.admitted: dict[tuple[str, int], float] = {}
    self.admitted_total = 0
    self.announced_total = 0
    self.stalled: list[str] = []
    self.stopping = threading.Event()
    self.threads = [
        threading.Thread(target=self._announce_loop, name="mpmd.gloo-announce", daemon=True),
        threading.Thread(target=self._admit_loop, name="mpmd.gloo-admit", daemon=True)]

  def start(self) -> None:
    for thread in self.threads:
      thread.start()
    atexit.register(self.stop)

  def stop(self) -> None:
    """Ends both threads (at exit: a thread still inside a call of JAX's
    client when Python finalizes aborts the process)."""
    self.stopping.set()
    for thread in self.threads:
      thread.join(timeout=2 * _WAIT_SECONDS + 1)

  def admit(self, source: tuple[str, int]) -> None:
    with self.lock:
      self.admitted[source] = time.monotonic()
      self.admitted_total += 1
      self._refilter()

  def expire(self) -> None:
    with self.lock:
      old = [a for a, t in self.admitted.items() if time.monotonic() - t > _ADMIT_FOR]
      for a in old:
        del self.admitted[a]
      if old:
        self._refilter()

  def _refilter(self) -> None:
    newest = sorted(self.admitted, key=self.admitted.get)[-admission.MAX_ADMITTED:]
    admission.admit_only(self.fd, newest, handshakes=True)

  def _admit_loop(self) -> None:
    """Admits the connections the other processes announce to this one
    (waiting in the key-value store for the next announcement)."""
    n, failures = 1, 0
    while not self.stopping.is_set():
      try:
        text = self.client.blocking_key_value_get(_BELL_KEY.format(self.me, n),
                                                  int(_WAIT_SECONDS * 1000))
      except Exception as e:  # noqa: BLE001 -- a timeout, or the service is gone
        if "DEADLINE_EXCEEDED" not in str(e):
          failures += 1
          if failures > 5:
            return
          time.sleep(0.2)
        self.expire()
        continue
      failures = 0
      n += 1
      _, source = json.loads(text)
      self.admit((source[0], int(source[1])))

  def _announce(self, process: int, source: tuple[str, int]) -> None:
    self.announced_total += 1
    if process == self.me:  # a pair between devices of this process
      self.admit(source)
      return
    n = self.client.key_value_increment(_COUNT_KEY.format(process), 1)
    self.client.key_value_set(_BELL_KEY.format(process, n), json.dumps([self.me, list(source)]))

  def _announce_loop(self) -> None:
    """Announces each new connection of this process to a gloo port of the
    run, and reports the ones that stay unadmitted."""
    examined: dict[int, str] = {}  # fd -> its socket, once looked at
    watched: dict[int, tuple[str, tuple[str, int], int, float]] = {}
    last = time.monotonic()
    try:
      while not self.stopping.is_set():
        now = time.monotonic()
        current: dict[int, str] = {}
        for name in os.listdir("/proc/self/fd"):
          try:
            link = os.readlink(f"/proc/self/fd/{name}")
          except OSError:
            continue
          if not link.startswith("socket:"):
            continue
          fd = int(name)
          current[fd] = link
          if examined.get(fd) == link:
            continue
          names = admission.socket_names(fd)
          if names is not None and names[1] is None:
            continue  # not connected (yet): look again next time
          examined[fd] = link
          process = self.addresses.get(names[1]) if names else None
          if process is None:
            continue
          last = now
          self._announce(process, names[0])
          watched[fd] = (link, names[0], process, now)
        for fd in [fd for fd in examined if fd not in current]:
          del examined[fd]
        self._check(watched, current, now)
        self.stopping.wait(_POLL_FAST if now - last < _FAST_FOR else _POLL_SLOW)
    except Exception:  # noqa: BLE001 -- the process is ending (the service is gone)
      return

  def _check(self, watched: dict, current: dict[int, str], now: float) -> None:
    """Reports a watched connection whose data is still being sent again
    `_STALL_SECONDS` after it was announced (not admitted), and ends this
    process, naming it, once that has lasted `MPMD_GLOO_ADMISSION_TIMEOUT`
    seconds (the collective that needs it would wait for ever); forgets the
    others."""
    for fd, (link, source, process, since) in list(watched.items()):
      age = now - since
      if age < _STALL_SECONDS:
        continue
      if current.get(fd) != link or not _retransmitting(fd):
        del watched[fd]
        continue
      peer = next(a for a, p in self.addresses.items() if p == process)
      what = (f"gloo's connection from {source[0]}:{source[1]} to process {process}'s gloo "
              f"port {peer[0]}:{peer[1]} was not let in")
      if not any(what in m for m in self.stalled):
        self._say(f"[mpmd] process {self.me}: {what} within {_STALL_SECONDS:.0f} s (process "
                  f"{process} did not admit it: is it alive? does its host see this "
                  "connection's address as sent?); the collectives between the two processes "
                  f"wait for it, for up to {ENV_GLOO_ADMISSION_TIMEOUT}={_give_up():.0f} s. "
                  "MPMD_GLOO_ADMISSION=0 on every process turns admission off "
                  "(docs/multiprocess.md)")
      if age >= _give_up():
        from mpmd.distributed import steps  # noqa: PLC0415
        reason = (f"{what} within {ENV_GLOO_ADMISSION_TIMEOUT}={_give_up():.0f} s: process "
                  f"{process} did not admit it")
        self._say(f"[mpmd] process {self.me}: {reason}; ending this process (a collective "
                  f"with process {process} would wait for ever)")
        steps.publish_failure(f"DistributedError: {reason}")
        os._exit(1)

  def _say(self, message: str) -> None:
    self.stalled.append(message)
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


def _give_up() -> float:
  return knobs.number(ENV_GLOO_ADMISSION_TIMEOUT)


def _retransmitting(fd: int) -> bool:
  """Whether TCP socket `fd` has data the other end has not acknowledged
  and has sent it again (its packets are dropped, not merely slow to read)."""
  try:
    sock = socket.socket(fileno=fd)
  except OSError:
    return False
  try:
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
  except OSError:
    return False
  finally:
    sock.detach()
  retransmits, unacked = info[2], struct.unpack_from("I", info, 24)[0]
  return retransmits > 0 and unacked > 0


def _strangers(address: tuple[str, int]) -> list[tuple[str, int]]:
  """Who has a connection to `address` (gloo's, before any of the run's:
  so strangers) that got in before its filter: whole handshakes, accepted
  or waiting to be (half-made ones need their last packet, which the filter
  drops)."""
  return sorted({remote for local, remote, state, _ in admission.tcp_table()
                 if local == address
                 and state not in (admission.LISTEN, admission.SYN_RECV, admission.TIME_WAIT)})


def _close_strangers(address: tuple[str, int], strangers: list[tuple[str, int]]) -> int:
  """Shuts down this process's ends of the strangers' connections to
  `address` (gloo accepts them from its queue within moments): one gloo has
  parked is then a closed connection, so a pair it is handed to fails at
  once instead of waiting for ever. How many were found."""
  wanted, closed = set(strangers), set()
  deadline = time.monotonic() + 0.5
  while closed != wanted and time.monotonic() < deadline:
    for name in os.listdir("/proc/self/fd"):
      names = admission.socket_names(int(name))
      if names is None or names[0] != address or names[1] not in wanted - closed:
        continue
      sock = socket.socket(fileno=int(name))
      try:
        sock.shutdown(socket.SHUT_RDWR)
      except OSError:
        pass
      finally:
        sock.detach()
      closed.add(names[1])
    time.sleep(0.01)
  return len(closed)


def _start_filtered() -> tuple[int, tuple[str, int]] | None:
  """Starts JAX's backends (gloo opens its listening socket) and filters
  that socket as soon as it is open (a thread watches for it meanwhile).
  The socket (fd, address), or None when not exactly one was opened."""
  before = admission.listening_sockets()
  filtered: dict[int, tuple[str, int]] = {}
  done = threading.Event()

  def watch() -> None:
    examined: set[tuple[int, str]] = set()
    while True:
      last = done.is_set()
      for name in os.listdir("/proc/self/fd"):
        try:
          key = (int(name), os.readlink(f"/proc/self/fd/{name}"))
        except (OSError, ValueError):
          continue
        if key in examined or not key[1].startswith("socket:") or key[0] in before:
          continue
        names = admission.socket_names(key[0])
        if names is None or names[1] is not None:
          examined.add(key)
          continue
        if _listens(key[0]):
          admission.admit_only(key[0], [], handshakes=True)
          filtered[key[0]] = tuple(names[0])
          examined.add(key)
      if last:
        return
      time.sleep(0.0005)

  watcher = threading.Thread(target=watch, name="mpmd.gloo-filter", daemon=True)
  watcher.start()
  try:
    jax.devices()
  finally:
    done.set()
    watcher.join()
  opened = sorted(set(admission.listening_sockets().items()) - set(before.items()))
  if len(opened) != 1:
    for fd in filtered:
      _unfilter(fd)
    if opened:
      logger.warning("mpmd: JAX's backends opened %d listening sockets (%s), not gloo's one: "
                     "none is filtered", len(opened), [a for _, a in opened])
    return None
  fd, address = opened[0][0], tuple(opened[0][1][:2])
  if fd not in filtered:
    admission.admit_only(fd, [], handshakes=True)
  strangers = _strangers(address)
  if strangers:
    closed = _close_strangers(address, strangers)
    sys.stderr.write(
        f"[mpmd] process {jax.process_index()}: {', '.join(f'{a}:{p}' for a, p in strangers)} "
        f"connected to gloo's port {address[0]}:{address[1]} in the moment before it was "
        f"filtered; {closed} of their connections closed. Should one have written a sequence "
        "number gloo waits for, the collective that needs it fails (a closed connection) "
        "instead of waiting\n")
    sys.stderr.flush()
  return fd, address


def _listens(fd: int) -> bool:
  try:
    sock = socket.socket(fileno=fd)
  except OSError:
    return False
  try:
    return bool(sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN))
  except OSError:
    return False
  finally:
    sock.detach()


def _unfilter(fd: int) -> None:
  try:
    sock = socket.socket(fileno=fd)
  except OSError:
    return
  try:
    sock.setsockopt(socket.SOL_SOCKET, getattr(socket, "SO_DETACH_FILTER", 27), 0)
  except OSError:
    pass
  finally:
    sock.detach()


def install(timeout: float) -> bool:
  """Filters gloo's listening socket in this process (a multi-process run on
  CPU with gloo collectives), publishes its address and starts admitting the
  run's connections. Starts JAX's backends. Called by `initialize`, before
  anything else touches the devices; waits up to `timeout` seconds for the
  other processes' addresses. Whether the filter is on."""
  global _guard
  client = distributed_client()
  if _guard is not None or client is None:
    return _guard is not None
  gloo = jax.config.jax_cpu_collectives_implementation == "gloo"
  if not gloo or not knobs.flag(ENV_GLOO_ADMISSION):
    if gloo and jax.process_count() > 1:  # (the others, filtered, would wait for ever)
      client.key_value_set(_ADDRESS_KEY.format(jax.process_index()), "off",
                           allow_overwrite=True)
    return False
  found = _start_filtered()
  me, count = jax.process_index(), jax.process_count()
  if count < 2:
    return False
  if found is None:
    client.key_value_set(_ADDRESS_KEY.format(me), "off", allow_overwrite=True)
    return False
  fd, address = found
  client.key_value_set(_ADDRESS_KEY.format(me), json.dumps(list(address)), allow_overwrite=True)
  addresses = {}
  for p in range(count):
    try:
      text = client.blocking_key_value_get(_ADDRESS_KEY.format(p), int(timeout * 1000))
    except Exception as e:  # noqa: BLE001 -- a timeout
      raise DistributedError(
          f"process {me}: process {p} did not say where gloo listens within {timeout:.0f} s "
          f"({type(e).__name__}: {str(e).splitlines()[0]}): it failed, or runs an mpmd that "
          "does not filter gloo's socket") from e
    if text == "off":
      raise DistributedError(
          f"process {me} filters gloo's listening socket and process {p} does not "
          f"({ENV_GLOO_ADMISSION}=0 there, or its backends opened no single gloo socket): "
          f"their collectives could never connect. Set the same {ENV_GLOO_ADMISSION} on every "
          "process")
    ip, port = json.loads(text)
    addresses[(ip, int(port))] = p
  _guard = _Guard(fd, address, addresses, me, client)
  _guard.start()
  return True


def status() -> dict[str, Any]:
  """What the filter on this process's gloo socket has done (for tests and
  diagnostics): its address, how many connections this process announced
  and admitted, and the reports of connections not admitted."""
  if _guard is None:
    return {"on": False}
  with _guard.lock:
    return {"on": True, "address": _guard.address, "announced": _guard.announced_total,
            "admitted": _guard.admitted_total, "stalled": list(_guard.stalled)}
