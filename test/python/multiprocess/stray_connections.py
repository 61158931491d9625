"""examples/train_multiprocess.py's model over 2 processes, with other
programs connecting to its ports (the stray-connection test of
test_faults_multiprocess.py).

After its first step each process writes the TCP ports it listens on to
`<dir>/ports.<process>` (JSON) and waits for `<dir>/go`, which the test
writes once it has sent garbage to every one of them; the remaining steps
then run (the test keeps sending) and are compared with `jax.jit`.

With `--hold-first-call S`, each process writes its pid to
`<dir>/pid.<process>` as soon as it joined the run (gloo listens; it makes
its connections in the first call), and its first call holds for S seconds
in a host callback after its stage's update (so after every pull of the
call, before the transfer servers are sealed at its end): the test sends
garbage to the ports as they open, while gloo makes its connections and
during that call. With `--wait-for-go-first` too, the first call starts only
once the test has sent garbage to every port then open (gloo's included).

Each process prints what the filter on gloo's socket did
(`mpmd.distributed.gloo_admission.status()`).
"""

import argparse
import importlib.util
import json
import os
import sys
import time

import jax
import numpy as np

import mpmd

_EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..",
                        "examples", "train_multiprocess.py")


def listening_ports(pid: int | str = "self") -> list[int]:
  """The TCP ports process `pid` listens on (its sockets in /proc/net/tcp*)."""
  inodes = set()
  fd_dir = f"/proc/{pid}/fd"
  for fd in os.listdir(fd_dir):
    try:
      target = os.readlink(os.path.join(fd_dir, fd))
    except OSError:
      continue
    if target.startswith("socket:["):
      inodes.add(target[len("socket:["):-1])
  ports = set()
  for table in ("/proc/net/tcp", "/proc/net/tcp6"):
    try:
      lines = open(table).read().splitlines()[1:]
    except OSError:
      continue
    for line in lines:
      fields = line.split()
      if fields[3] == "0A" and fields[9] in inodes:  # LISTEN
        ports.add(int(fields[1].rsplit(":", 1)[1], 16))
  return sorted(ports)


def _wait_for(path: str, seconds: float = 60) -> bool:
  deadline = time.monotonic() + seconds
  while not os.path.exists(path):
    if time.monotonic() > deadline:
      return False
    time.sleep(0.05)
  return True


def main(argv=None) -> int:
  parser = argparse.ArgumentParser()
  parser.add_argument("--dir", required=True)
  parser.add_argument("--steps", type=int, default=6)
  parser.add_argument("--hold-first-call", type=float, default=0.0)
  parser.add_argument("--wait-for-go-first", action="store_true")
  args = parser.parse_args(argv)
  spec = importlib.util.spec_from_file_location("train_multiprocess", _EXAMPLE)
  ex = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(ex)

  mpmd.distributed.initialize()
  me = jax.process_index()
  config = ex.make_config("1F1B")
  params = ex.init_params(len(config.topology), 32, 16, 4)
  xs, ys = ex.make_data(4, 8, 16, 4)
  train_step = ex.train_step
  if args.hold_first_call:
    with open(os.path.join(args.dir, f"pid.{me}"), "w") as f:
      f.write(str(os.getpid()))
    if args.wait_for_go_first and not _wait_for(os.path.join(args.dir, "go-first")):
      print(f"process {me}: no go-first from the test", flush=True)
      return 2
    held = []

    def hold(_):
      if not held:  # the first call only
        held.append(True)
        time.sleep(args.hold_first_call)

    def train_step(params, xs, ys):
      loss, params = ex.train_step(params, xs, ys)
      for stage in params:  # after each stage's update, on its mesh
        jax.debug.callback(hold, stage[0]["w"])
      return loss, params

  step = mpmd.jit(train_step, config)
  reference = jax.jit(ex.train_step)
  ref_params = jax.device_put(params, jax.local_devices()[0])
  worst = 0.0
  for i in range(args.steps):
    loss, params = step(params, xs, ys)
    loss = float(mpmd.distributed.gather(loss))
    ref_loss, ref_params = reference(ref_params, xs, ys)
    worst = max(worst, abs(loss - float(ref_loss)) / abs(float(ref_loss)))
    print(f"process {me}: step {i} loss {loss:.6f} (jax.jit {float(ref_loss):.6f})", flush=True)
    if i == 0:
      path = os.path.join(args.dir, f"ports.{me}")
      with open(path + ".tmp", "w") as f:
        json.dump({"pid": os.getpid(), "ports": listening_ports()}, f)
      os.replace(path + ".tmp", path)
      from mpmd.run import crossprocess  # noqa: PLC0415
      print(f"process {me}: listening on {listening_ports()}; transfer servers still "
            f"accepting connections: {crossprocess.unsealed_servers()}", flush=True)
      transfer_ports = sorted(p for ports in crossprocess.server_ports().values() for p in ports)
      print(f"process {me}: transfer server ports {json.dumps(transfer_ports)}", flush=True)
      if not _wait_for(os.path.join(args.dir, "go")):
        print(f"process {me}: no go from the test", flush=True)
        return 2
  final = mpmd.distributed.gather(params)
  params_err = max(float(np.max(np.abs(a - np.asarray(b)) / (np.abs(np.asarray(b)) + 1e-6)))
                   for a, b in zip(jax.tree.leaves(final), jax.tree.leaves(ref_params)))
  print(f"process {me}: largest relative difference from jax.jit: loss {worst:.1e}, "
        f"params {params_err:.1e}", flush=True)
  from mpmd.distributed import gloo_admission  # noqa: PLC0415
  print(f"process {me}: gloo admission {json.dumps(gloo_admission.status())}", flush=True)
  return 0 if worst < 1e-4 and params_err < 1e-3 else 1


if __name__ == "__main__":
  sys.exit(main())
