"""A 2-stage 1F1B training loop over 2 processes (stage i on process i's
devices) that meets one fault; the fault tests of test_faults_multiprocess.py.

    --mode sigterm    runs until stopped; the test sends SIGTERM to process 1
                      (its pid is in <dir>/pid.1 once step 2 is done); an
                      `on_termination` hook writes <dir>/checkpoint.<process>
    --mode blocked    as sigterm, but process 1's main thread is blocked where
                      no signal reaches it when the signal comes (SIGTERM masked
                      in that thread, sleeping), like a thread stuck in C++: its
                      Python signal handler cannot run
    --mode forever    runs until stopped (the test signals a process: SIGKILL,
                      SIGSTOP; pids in <dir>/pid.<process> once step 2 is done)
    --mode stall      process 1 sleeps --stall seconds before step 3
    --mode callback   a host callback in stage1 raises in step 3 (process 1)
    --mode oom        process 1 runs out of memory in a stage1 fragment in step 3
                      (--failing 0: process 0, in a stage0 fragment)

The failing process writes the time of the fault to <dir>/fault.<process>.
"""

import argparse
import os
import signal
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

import mpmd

FAIL = {"on": False}
OOM = {"on": False}


def _maybe_fail():
  if FAIL["on"]:
    raise ValueError("injected callback failure in stage1")


def _first(w, h):
  return jnp.tanh(h @ w)


def _second(w, h):
  jax.debug.callback(_maybe_fail)
  return jnp.tanh(h @ w)


def step(params, xs):
  def loss(params, x):
    h = mpmd.named_computation(_first, name="stage0")(params[0], x)
    h = mpmd.named_computation(_second, name="stage1")(params[1], h)
    return jnp.sum(h ** 2)

  total, grads = jnp.zeros(()), jax.tree.map(jnp.zeros_like, params)
  for i in range(xs.shape[0]):
    def microbatch(x, total, grads):
      value, g = jax.value_and_grad(loss)(params, x)
      return total + value, jax.tree.map(jnp.add, grads, g)
    total, grads = mpmd.call(microbatch, call_counter=i)(xs[i], total, grads)
  return total, [p - 0.01 * g for p, g in zip(params, grads)]


def _inject_oom() -> None:
  """Once `OOM["on"]`, the next call of this process's stage runs out of memory: a real XLA
  allocation failure, raised where the fragment is dispatched. (Installed
  before the compile, which binds the calls' dispatch.)"""
  from mpmd.run import program as run_program  # noqa: PLC0415
  execute = run_program.CallInstruction.execute
  huge = jax.jit(lambda: jnp.zeros((2 ** 38,), jnp.float32))  # 1 TiB

  def failing(self, env):
    if OOM["on"] and any(o.startswith(f"stage{jax.process_index()}") for o in self.origins):
      OOM["on"] = False
      huge()
    return execute(self, env)

  run_program.CallInstruction.execute = failing


def main(argv=None) -> int:
  parser = argparse.ArgumentParser()
  parser.add_argument("--dir", required=True)
  parser.add_argument("--mode", required=True,
                      choices=["sigterm", "blocked", "forever", "stall", "callback", "oom"])
  parser.add_argument("--failing", type=int, default=1, help="the process that fails")
  parser.add_argument("--steps", type=int, default=6)
  parser.add_argument("--stall", type=float, default=6.0)
  args = parser.parse_args(argv)

  mpmd.distributed.initialize()
  me = jax.process_index()
  if args.mode == "oom":
    _inject_oom()

  @mpmd.distributed.on_termination
  def last_checkpoint():
    with open(os.path.join(args.dir, f"checkpoint.{me}"), "w") as f:
      f.write(f"step {done}\n")
    print(f"process {me}: wrote its last checkpoint after step {done}", flush=True)

  devices = jax.devices()
  topology = {f"p{p}": jax.sharding.Mesh(np.array([d for d in devices if d.process_index == p]),
                                         ("data",)) for p in range(jax.process_count())}
  config = mpmd.make_config(topology, {"stage0": "p0", "stage1": "p1"},
                            pipeline_schedule="1F1B")
  rng = np.random.default_rng(0)
  params = [rng.standard_normal((32, 32)).astype(np.float32) * 0.1 for _ in range(2)]
  xs = rng.standard_normal((4, 8, 32)).astype(np.float32)
  compiled = mpmd.jit(step, config)
  forever = args.mode in ("sigterm", "blocked", "forever")
  done = 0
  while forever or done < args.steps:
    if done == 3 and me == args.failing:
      if args.mode in ("callback", "oom"):
        with open(os.path.join(args.dir, f"fault.{me}"), "w") as f:
          f.write(repr(time.time()))
      if args.mode == "stall":
        print(f"process {me}: stalling {args.stall} s before step {done}", flush=True)
        time.sleep(args.stall)
      elif args.mode == "callback":
        FAIL["on"] = True
      elif args.mode == "oom":
        OOM["on"] = True
    loss, params = compiled(params, xs)
    loss = float(mpmd.distributed.gather(loss))
    print(f"process {me}: step {done} loss {loss:.6f}", flush=True)
    done += 1
    if done == 2:
      path = os.path.join(args.dir, f"pid.{me}")
      with open(path + ".tmp", "w") as f:
        f.write(str(os.getpid()))
      os.replace(path + ".tmp", path)
      if args.mode == "blocked" and me == 1:
        print(f"process {me}: main thread blocked", flush=True)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        time.sleep(120)
  print(f"process {me}: finished {done} steps", flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
