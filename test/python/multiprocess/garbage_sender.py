"""Another program on the host, sending garbage to the ports of a run (the
stray-connection tests of test_faults_multiprocess.py start it, as user
`nobody` when they run as root).

Reads the ports to send to from `--ports` (a JSON list the test rewrites as
it finds more), every 20 ms. To each port, as soon as it is listed, it sends
every payload `--rounds` times, each on a connection of its own that it
keeps open, idle, until it exits; afterwards, until `--stop` exists, it
keeps sending every payload to every port on short-lived connections. At
exit it prints, per port, how many connections it made (`sent {port: n}`).
"""

import argparse
import json
import os
import random
import socket
import struct
import sys
import threading
import time

#: What other programs send: 16 zero bytes (a frame jaxlib's transfer server
#: aborts on, and gloo's sequence number 0), random bytes, an HTTP request,
#: an HTTP/2 preface + SETTINGS, nothing (an idle connection), and the
#: sequence numbers gloo gives its first connections, each alone.
PAYLOADS = {
    "zeros": b"\0" * 16,
    "random": random.Random(0).randbytes(4096),
    "http": b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
    "http2": b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\0\0\0\x04\0\0\0\0\0",
    "idle": b"",
    **{f"gloo-sequence-{n}": struct.pack("<Q", n) for n in range(8)},
}


def _send(port: int, payload: bytes, timeout: float) -> socket.socket | None:
  """Connects to 127.0.0.1:port and sends `payload`; the socket, or None
  when the connection was refused or timed out."""
  try:
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
  except OSError:
    return None
  try:
    if payload:
      s.sendall(payload)
  except OSError:
    pass
  return s


def main(argv=None) -> int:
  parser = argparse.ArgumentParser()
  parser.add_argument("--ports", required=True)
  parser.add_argument("--stop", required=True)
  parser.add_argument("--rounds", type=int, default=3)
  parser.add_argument("--kinds", default="", help="comma-separated PAYLOADS names (default all)")
  args = parser.parse_args(argv)
  payloads = ({k: PAYLOADS[k] for k in args.kinds.split(",")} if args.kinds else PAYLOADS)
  held: list[socket.socket] = []
  sent: dict[int, int] = {}
  lock = threading.Lock()

  def first_rounds(port: int) -> None:
    for _ in range(args.rounds):
      for payload in payloads.values():
        s = _send(port, payload, 0.3)
        with lock:
          sent[port] = sent.get(port, 0) + 1
          if s is not None:
            held.append(s)

  started: set[int] = set()
  threads = []
  while not os.path.exists(args.stop):
    try:
      with open(args.ports) as f:
        ports = json.load(f)
    except (OSError, ValueError):
      ports = []
    for port in ports:
      if port not in started:
        started.add(port)
        threads.append(threading.Thread(target=first_rounds, args=(port,), daemon=True))
        threads[-1].start()
    for port in sorted(started):  # and more, on connections closed at once
      for payload in payloads.values():
        s = _send(port, payload, 0.05)
        if s is not None:
          s.close()
    time.sleep(0.02)
  for thread in threads:
    thread.join(timeout=5)
  for s in held:
    s.close()
  print(f"sent {json.dumps(sent)} as uid {os.getuid()}", flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
