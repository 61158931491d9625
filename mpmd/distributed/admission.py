"""Who may connect to a listening TCP socket: a socket filter (classic BPF,
`SO_ATTACH_FILTER`) that drops every packet except from admitted addresses,
and the look-ups that find the sockets to filter and the addresses to admit.

Used for the sockets of JAX's transfer server (`mpmd.run.crossprocess`)
and gloo's (`mpmd.distributed.gloo_admission`), which trust whatever
connects to them. The filter runs in the kernel on each packet the listening
socket gets (the handshake's included); a connection it lets through keeps
the filter it was made under, which admits its own address.
"""

from __future__ import annotations

import ctypes
import os
import socket
import struct
from typing import Any

__all__ = ["MAX_ADMITTED", "accepted_ports", "admit_only", "listening_sockets", "own_connections",
           "own_socket_inodes", "socket_names", "tcp_table"]

# Classic BPF, as the kernel runs it on each packet a listening TCP socket
# gets: the packet starts at its TCP header, the IP header is at SKF_NET_OFF.
_LDB_ABS, _LDH_ABS, _LDW_ABS = 0x30, 0x28, 0x20
_AND_K, _JEQ_K, _RET_K = 0x54, 0x15, 0x06
_SKF_NET_OFF = (1 << 32) - 0x100000
_IPV4_SOURCE = 12  # offset of the source address in the IPv4 header
_TCP_FLAGS = 13  # offset of the flags byte in the TCP header
_SYN, _ACK = 0x02, 0x10
_ACCEPT, _DROP = 0xFFFFFFFF, 0
_SO_ATTACH_FILTER = getattr(socket, "SO_ATTACH_FILTER", 26)
#: At most this many admitted addresses per filter (the kernel's limit is
#: 4096 instructions, 5 per address).
MAX_ADMITTED = 512


def admit_only(fd: int, peers: list[tuple[str, int]], *, handshakes: bool = False) -> None:
  """Makes listening socket `fd` drop every packet except from the addresses
  `peers` ((ip, port); on an IPv6 socket the port alone is checked).
  Replaces the socket's previous filter; connections already made keep theirs.

  With `handshakes`, a connection request (SYN) from anyone is answered, so
  that the client's side of the connection is made at once and its address
  can be admitted after it; the rest of its handshake, and its data, are
  dropped until then (TCP sends them again, after about 0.2 s), so the
  listening program never sees the connection. Without, the request is
  dropped too (the client sends it again after 1 s)."""
  if len(peers) > MAX_ADMITTED:
    raise ValueError(f"at most {MAX_ADMITTED} admitted addresses per socket, not {len(peers)}")
  program: list[tuple[int, int, int, int]] = []
  if handshakes:
    program += [(_LDB_ABS, 0, 0, _TCP_FLAGS), (_AND_K, 0, 0, _SYN | _ACK),
                (_JEQ_K, 0, 1, _SYN), (_RET_K, 0, 0, _ACCEPT)]
  for ip, port in peers:
    try:
      ipv4 = int.from_bytes(socket.inet_pton(socket.AF_INET, ip), "big")
    except OSError:
      ipv4 = None
    if ipv4 is None:  # the source port only
      program += [(_LDH_ABS, 0, 0, 0), (_JEQ_K, 0, 1, port), (_RET_K, 0, 0, _ACCEPT)]
    else:  # the source port, then the source address
      program += [(_LDH_ABS, 0, 0, 0), (_JEQ_K, 0, 3, port),
                  (_LDW_ABS, 0, 0, _SKF_NET_OFF + _IPV4_SOURCE), (_JEQ_K, 0, 1, ipv4),
                  (_RET_K, 0, 0, _ACCEPT)]
  program.append((_RET_K, 0, 0, _DROP))
  code = ctypes.create_string_buffer(b"".join(struct.pack("HBBI", *i) for i in program))
  fprog = struct.pack("HxxxxxxQ" if struct.calcsize("P") == 8 else "HxxI", len(program),
                      ctypes.addressof(code))
  sock = socket.socket(fileno=fd)
  try:
    sock.setsockopt(socket.SOL_SOCKET, _SO_ATTACH_FILTER, fprog)
  finally:
    sock.detach()


def socket_names(fd: int) -> tuple[Any, Any] | None:
  """(local address, remote address) of TCP socket `fd` of this process;
  the remote one is None while it is not connected (or listens). None when
  `fd` is not a TCP socket (any more)."""
  try:
    sock = socket.socket(fileno=fd)
  except OSError:
    return None
  try:
    if sock.family not in (socket.AF_INET, socket.AF_INET6) or sock.type != socket.SOCK_STREAM:
      return None
    local = sock.getsockname()
    try:
      remote = sock.getpeername()
    except OSError:
      remote = None
    return local[:2], (remote[:2] if remote else None)
  except OSError:
    return None
  finally:
    sock.detach()


def listening_sockets() -> dict[int, Any]:
  """This process's listening TCP sockets: file descriptor -> address."""
  found = {}
  for name in os.listdir("/proc/self/fd"):
    try:
      if not os.readlink(f"/proc/self/fd/{name}").startswith("socket:"):
        continue
      sock = socket.socket(fileno=int(name))
    except (OSError, ValueError):
      continue
    try:
      if sock.type == socket.SOCK_STREAM and sock.getsockopt(socket.SOL_SOCKET,
                                                             socket.SO_ACCEPTCONN):
        found[int(name)] = sock.getsockname()
    except OSError:
      pass
    finally:
      sock.detach()
  return found


def tcp_table() -> list[tuple[tuple[str, int], tuple[str, int], str, str]]:
  """The host's TCP sockets (this network namespace): (local address,
  remote address, state as in /proc/net/tcp, inode). Slow where the kernel's
  tables are large (13 ms on a 2-core VM): not for polling for long."""
  rows = []
  for table, family in (("/proc/net/tcp", socket.AF_INET), ("/proc/net/tcp6", socket.AF_INET6)):
    try:
      with open(table) as f:
        lines = f.read().splitlines()[1:]
    except OSError:
      continue
    for line in lines:
      fields = line.split()
      rows.append((_proc_address(fields[1], family), _proc_address(fields[2], family),
                   fields[3], fields[9]))
  return rows


def _proc_address(text: str, family: int) -> tuple[str, int]:
  """An address of /proc/net/tcp (hex, host-order 32-bit words) as (ip, port)."""
  ip_hex, port_hex = text.split(":")
  raw = bytes.fromhex(ip_hex)
  raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
  return socket.inet_ntop(family, raw), int(port_hex, 16)


def own_socket_inodes() -> set[str]:
  """The inodes of this process's sockets (as in /proc/net/tcp)."""
  inodes = set()
  for name in os.listdir("/proc/self/fd"):
    try:
      target = os.readlink(f"/proc/self/fd/{name}")
    except OSError:
      continue
    if target.startswith("socket:["):
      inodes.add(target[len("socket:["):-1])
  return inodes


#: States of /proc/net/tcp.
ESTABLISHED, SYN_SENT, SYN_RECV, TIME_WAIT, LISTEN = "01", "02", "03", "06", "0A"


def own_connections(ports: set[int]) -> list[tuple[tuple[str, int], int, bool]]:
  """This process's TCP connections (being made or made) to a remote port
  in `ports`: (local address, remote port, established)."""
  inodes = own_socket_inodes()
  return [(local, remote[1], state == ESTABLISHED)
          for local, remote, state, inode in tcp_table()
          if inode in inodes and remote[1] in ports and state in (SYN_SENT, ESTABLISHED)]


def accepted_ports(peers: list[tuple[str, int]]) -> set[int]:
  """The local ports of this process's established connections from `peers`."""
  inodes = own_socket_inodes()
  wanted = set(peers)
  return {local[1] for local, remote, state, inode in tcp_table()
          if inode in inodes and state == ESTABLISHED and remote in wanted}
