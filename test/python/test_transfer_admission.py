"""The socket filter that keeps everyone but the peer process away from a
transfer server's listening sockets (`mpmd.runtime.crossprocess`), on plain
sockets of this process: a filtered listener completes no handshake except
from the admitted addresses."""

from __future__ import annotations

import errno
import socket

import pytest

from mpmd.runtime import crossprocess


def _listener() -> socket.socket:
  server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
  server.bind(("127.0.0.1", 0))
  server.listen(8)
  return server


def _client_port() -> socket.socket:
  """A client socket bound to a port of its own (known before it connects)."""
  client = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
  client.bind(("127.0.0.1", 0))
  return client


def _connects(client: socket.socket, address, timeout: float = 0.5) -> bool:
  client.settimeout(timeout)
  try:
    client.connect(address)
  except (TimeoutError, OSError):
    return False
  return True


@pytest.fixture
def listener():
  server = _listener()
  yield server
  server.close()


def test_a_listener_admitting_no_one_completes_no_handshake(listener):
  crossprocess._admit_only(listener.fileno(), [])
  with _client_port() as client:
    assert not _connects(client, listener.getsockname())
  listener.settimeout(0.2)
  with pytest.raises(TimeoutError):
    listener.accept()


def test_only_the_admitted_address_gets_through(listener):
  admitted, other = _client_port(), _client_port()
  try:
    crossprocess._admit_only(listener.fileno(), [admitted.getsockname()])
    assert not _connects(other, listener.getsockname())
    assert _connects(admitted, listener.getsockname())
    conn, peer = listener.accept()
    assert peer == admitted.getsockname()
    admitted.sendall(b"\0" * 16)
    assert conn.recv(16) == b"\0" * 16  # the admitted connection carries data both ways
    conn.close()
  finally:
    admitted.close()
    other.close()


def test_the_address_is_checked_not_only_the_port(listener):
  with _client_port() as client:
    port = client.getsockname()[1]
    crossprocess._admit_only(listener.fileno(), [("127.0.0.2", port)])
    assert not _connects(client, listener.getsockname())


def test_a_later_filter_admits_a_connection_being_made(listener):
  """The peer's first attempt is dropped; TCP sends it again (after 1 s),
  and it gets through once its address is admitted."""
  crossprocess._admit_only(listener.fileno(), [])
  with _client_port() as client:
    client.setblocking(False)
    assert client.connect_ex(listener.getsockname()) in (errno.EINPROGRESS, errno.EAGAIN)
    ports = {listener.getsockname()[1]}
    (found,) = crossprocess._own_connections(ports)
    assert found == (client.getsockname(), listener.getsockname()[1], False)  # SYN sent
    crossprocess._admit_only(listener.fileno(), [client.getsockname()])
    listener.settimeout(5)
    conn, peer = listener.accept()
    assert peer == client.getsockname()
    assert crossprocess._accepted_ports([client.getsockname()]) == ports
    conn.close()


def test_many_admitted_addresses_fit_the_filter(listener):
  clients = [_client_port() for _ in range(crossprocess._MAX_ADMITTED)]
  try:
    crossprocess._admit_only(listener.fileno(), [c.getsockname() for c in clients])
    assert _connects(clients[-1], listener.getsockname())
    assert _connects(clients[0], listener.getsockname())
  finally:
    for c in clients:
      c.close()
