"""The socket filter that keeps everyone but the run's own processes away
from a transfer server's listening sockets (`mpmd.run.crossprocess`) and
gloo's (`mpmd.distributed.gloo_admission`), on plain sockets of this process:
a filtered listener lets no connection in except from the admitted addresses."""

from __future__ import annotations

import errno
import socket

import pytest

from mpmd.distributed import admission, gloo_admission
from mpmd.run import crossprocess


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
  admission.admit_only(listener.fileno(), [])
  with _client_port() as client:
    assert not _connects(client, listener.getsockname())
  listener.settimeout(0.2)
  with pytest.raises(TimeoutError):
    listener.accept()


def test_only_the_admitted_address_gets_through(listener):
  admitted, other = _client_port(), _client_port()
  try:
    admission.admit_only(listener.fileno(), [admitted.getsockname()])
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
    admission.admit_only(listener.fileno(), [("127.0.0.2", port)])
    assert not _connects(client, listener.getsockname())


def test_a_later_filter_admits_a_connection_being_made(listener):
  """The peer's first attempt is dropped; TCP sends it again (after 1 s),
  and it gets through once its address is admitted."""
  admission.admit_only(listener.fileno(), [])
  with _client_port() as client:
    client.setblocking(False)
    assert client.connect_ex(listener.getsockname()) in (errno.EINPROGRESS, errno.EAGAIN)
    ports = {listener.getsockname()[1]}
    (found,) = admission.own_connections(ports)
    assert found == (client.getsockname(), listener.getsockname()[1], False)  # SYN sent
    admission.admit_only(listener.fileno(), [client.getsockname()])
    listener.settimeout(5)
    conn, peer = listener.accept()
    assert peer == client.getsockname()
    assert admission.accepted_ports([client.getsockname()]) == ports
    conn.close()


def test_many_admitted_addresses_fit_the_filter(listener):
  clients = [_client_port() for _ in range(admission.MAX_ADMITTED)]
  try:
    admission.admit_only(listener.fileno(), [c.getsockname() for c in clients])
    assert _connects(clients[-1], listener.getsockname())
    assert _connects(clients[0], listener.getsockname())
  finally:
    for c in clients:
      c.close()


def test_too_many_admitted_addresses_are_refused(listener):
  with pytest.raises(ValueError, match="at most"):
    admission.admit_only(listener.fileno(), [("127.0.0.1", 1)] * (admission.MAX_ADMITTED + 1))


def test_with_handshakes_a_stranger_connects_but_is_never_accepted(listener):
  """gloo's filter: anyone's handshake is answered (the client's side is
  made), but the listener never gets the connection nor its data."""
  admission.admit_only(listener.fileno(), [], handshakes=True)
  with _client_port() as client:
    assert _connects(client, listener.getsockname())  # the client side is made
    client.sendall(b"\0" * 16)
    listener.settimeout(0.5)
    with pytest.raises(TimeoutError):
      listener.accept()


def test_with_handshakes_an_admitted_connection_gets_in_with_its_data(listener):
  """The client's connection is made at once; admitted afterwards, it gets
  in when TCP sends its data again, and keeps its filter when the
  listener's changes."""
  admission.admit_only(listener.fileno(), [], handshakes=True)
  with _client_port() as client:
    assert _connects(client, listener.getsockname())
    client.sendall(b"seq-0001")
    admission.admit_only(listener.fileno(), [client.getsockname()], handshakes=True)
    listener.settimeout(5)
    conn, peer = listener.accept()
    assert peer == client.getsockname()
    conn.settimeout(5)
    assert conn.recv(8) == b"seq-0001"
    admission.admit_only(listener.fileno(), [], handshakes=True)  # the listener's changes
    client.sendall(b"more")
    assert conn.recv(4) == b"more"
    conn.close()


def test_socket_names_of_a_connection_and_of_a_listener(listener):
  with _client_port() as client:
    client.connect(listener.getsockname())
    assert admission.socket_names(client.fileno()) == (client.getsockname(),
                                                       listener.getsockname())
    assert admission.socket_names(listener.fileno()) == (listener.getsockname(), None)


def test_strangers_are_the_connections_made_before_the_filter(listener):
  """What gloo's filter looks for once it is on: a whole handshake with the
  listening address is someone who got in before it."""
  address = listener.getsockname()
  assert gloo_admission._strangers(address) == []
  with _client_port() as early:
    early.connect(address)
    admission.admit_only(listener.fileno(), [], handshakes=True)
    with _client_port() as late:
      assert _connects(late, address)  # half made: its last packet is dropped
      assert gloo_admission._strangers(address) == [early.getsockname()]


def test_strangers_connections_are_closed(listener):
  """What gloo's filter does with a connection made before it: this
  process's end (which gloo would have accepted) is shut down."""
  address = listener.getsockname()
  with _client_port() as early:
    early.connect(address)
    conn, _ = listener.accept()  # as gloo accepts it
    try:
      assert gloo_admission._close_strangers(address, [early.getsockname()]) == 1
      early.settimeout(2)
      assert early.recv(1) == b""  # closed
    finally:
      conn.close()


def test_a_transfer_servers_sockets_each_admit_only_the_connection_to_their_port():
  """A transfer server listens on two ports; the peer's connection to one
  comes from an address another program's connection to the other may come
  from too (the kernel reuses local ports across destinations, here forced
  with SO_REUSEADDR): each socket lets in only the connection to its port."""
  first, second = _listener(), _listener()
  peer, stranger = _client_port(), socket.socket(socket.AF_INET, socket.SOCK_STREAM)
  peer_to_second = _client_port()
  try:
    peer.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    stranger.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    stranger.bind(peer.getsockname())  # the peer's address, as a reused port is
    announced = [(*peer.getsockname(), first.getsockname()[1]),
                 (*peer_to_second.getsockname(), second.getsockname()[1])]
    for server in (first, second):
      admission.admit_only(server.fileno(),
                           crossprocess.admitted_on(server.getsockname()[1], announced),
                           handshakes=True)
    assert crossprocess.admitted_on(first.getsockname()[1], announced) == [peer.getsockname()]
    assert _connects(peer, first.getsockname())
    assert _connects(stranger, second.getsockname())  # half made (handshakes answered)
    stranger.sendall(b"\0" * 16)
    assert _connects(peer_to_second, second.getsockname())
    for server, client in ((first, peer), (second, peer_to_second)):
      server.settimeout(5)
      conn, address = server.accept()  # the peer's, not the stranger's
      assert address == client.getsockname()
      conn.close()
    second.settimeout(0.5)
    with pytest.raises(TimeoutError):
      second.accept()
  finally:
    for s in (first, second, peer, stranger, peer_to_second):
      s.close()
