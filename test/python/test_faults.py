"""A failed step is contained (single process). A call returns once its work
is dispatched, as `jax.jit`'s does; the next call that finds the failure
raises, naming the fragment, origins and mesh where it began, before it
consumes anything. With `MPMD_ASYNC_CALLS=0` the failing call itself raises.
Either way the calls after it run clean and equal `jax.jit`, and no array of
a call but its outputs outlives it. (Multi-process faults:
test_faults_multiprocess.py.)"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import mpmd

_FAIL = {"on": False}


def _maybe_fail():
  # (no array argument: the failure's traceback, which logging keeps, would hold it)
  if _FAIL["on"]:
    raise ValueError("injected callback failure")


@jax.jit
def _later(tree):
  """`tree` unchanged, but ready only after about a second of arithmetic: a
  call given it has work it cannot start at once. (A program with a host
  callback runs on the calling thread when its inputs are ready, as jax.jit's
  does on CPU, so a blocking callback cannot hold a call's work back.)"""
  m = jnp.full((1024, 1024), 1e-3, jnp.float32)
  s = jax.lax.fori_loop(0, 120, lambda i, a: jnp.tanh(a @ m), m)
  zero = jnp.sum(s) * 0  # (x + 0 is x exactly)
  return jax.tree.map(lambda x: x + zero, tree)


def _first(w, h):
  return jnp.tanh(h @ w)


def _second(w, h):
  jax.debug.callback(_maybe_fail)
  return jnp.tanh(h @ w)


def _step(params, xs):
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
  return total, grads


def _compiled(devices_per_mesh: int, microbatches: int = 4):
  devices = np.array(jax.devices())
  d = devices_per_mesh
  topology = {"m0": jax.sharding.Mesh(devices[0:d], ("data",)),
              "m1": jax.sharding.Mesh(devices[d:2 * d], ("data",))}
  rng = np.random.default_rng(0)
  params = [rng.standard_normal((64, 64)).astype(np.float32) * 0.1 for _ in range(2)]
  xs = rng.standard_normal((microbatches, 8, 64)).astype(np.float32)
  config = mpmd.make_config(topology, {"stage0": "m0", "stage1": "m1"},
                            pipeline_schedule="1F1B")
  compiled = mpmd.jit(_step, config).lower(params, xs).compile()
  return compiled, params, xs


def _assert_equals_jit(got, params, xs):
  want = jax.jit(_step)(params, xs)
  for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-5)


@pytest.fixture(autouse=True)
def _no_failure():
  _FAIL["on"] = False
  yield
  _FAIL["on"] = False


def _wait_done(tree) -> None:
  """Waits until every leaf is computed or failed, without raising."""
  for x in jax.tree.leaves(tree):
    while not x.is_ready():
      time.sleep(0.001)


@pytest.mark.parametrize("devices_per_mesh,max_inflight", [(4, None), (4, "2"), (1, None)])
def test_failed_step_raises_in_its_call_and_the_next_runs_clean(devices_per_mesh, max_inflight,
                                                                monkeypatch):
  if max_inflight is not None:  # a small window: the failure is seen in the middle of the step
    monkeypatch.setenv("MPMD_MAX_INFLIGHT", max_inflight)
  monkeypatch.setenv("MPMD_ASYNC_CALLS", "0")  # each call waits for its work
  compiled, params, xs = _compiled(devices_per_mesh)
  assert compiled.program.wait_for_calls
  _assert_equals_jit(compiled(params, xs), params, xs)
  _FAIL["on"] = True
  with pytest.raises(mpmd.FragmentRuntimeError) as info:
    compiled(params, xs)  # the call itself raises, not a later read
  jax.effects_barrier()
  message = str(info.value)
  # Named where it began: the fragment of stage1 on m1 (its first microbatch),
  # not a transfer or a fragment computed from its result.
  head = message.split(" failed: ")[0]
  assert "of stage1" in head and "on mesh 'm1'" in head, message
  assert "transfer" not in head, message
  assert "injected callback failure" in message
  _FAIL["on"] = False
  for _ in range(3):  # every later call runs clean and equals jax.jit
    _assert_equals_jit(compiled(params, xs), params, xs)


def _live_ids() -> set[int]:
  gc.collect()
  return {id(x) for x in jax.live_arrays()}


@pytest.mark.parametrize("devices_per_mesh", [4, 1])
def test_nothing_of_a_step_outlives_it_but_its_outputs(devices_per_mesh):
  compiled, params, xs = _compiled(devices_per_mesh, microbatches=8)
  params = jax.device_put(params)
  xs = jax.device_put(xs)
  jax.block_until_ready(compiled(params, xs))
  before = _live_ids()
  outputs = compiled(params, xs)
  after = _live_ids()
  kept = {id(x) for x in jax.tree.leaves(outputs)}
  assert after - before == kept, (len(after - before), len(kept))


def test_nothing_of_a_failed_step_outlives_it(monkeypatch):
  monkeypatch.setenv("MPMD_ASYNC_CALLS", "0")
  compiled, params, xs = _compiled(4)
  params = jax.device_put(params)
  xs = jax.device_put(xs)
  jax.block_until_ready(compiled(params, xs))
  before = _live_ids()
  _FAIL["on"] = True
  with pytest.raises(mpmd.FragmentRuntimeError):
    compiled(params, xs)
  jax.effects_barrier()
  jax.block_until_ready(params)
  assert _live_ids() - before == set()


def test_calls_return_before_their_work_and_a_failure_is_named_by_the_next():
  """By default a call returns once dispatched; a failure is reported by the
  next call, naming its fragment, before that call consumes anything; the
  calls after it run clean on the same arguments. (Meshes of one device: on
  CPU a call waits for its multi-device programs, `max_inflight`.)"""
  compiled, params, xs = _compiled(1)
  params = jax.device_put(params)
  xs = jax.device_put(xs)
  assert not compiled.program.wait_for_calls
  _assert_equals_jit(compiled(params, xs), params, xs)
  jax.block_until_ready(_later(xs))  # (compiled)
  outputs = compiled(params, _later(xs))  # its work waits for _later's
  assert not any(x.is_ready() for x in jax.tree.leaves(outputs))
  _assert_equals_jit(outputs, params, xs)

  _FAIL["on"] = True
  failed = compiled(params, _later(xs))  # returns before stage1's callback fails
  _wait_done(failed)  # the failure is in its outputs
  _FAIL["on"] = False
  with pytest.raises(mpmd.FragmentRuntimeError) as info:
    compiled(params, xs)  # the next call names it, before it runs anything
  with pytest.raises(Exception, match="injected callback failure"):
    jax.block_until_ready(failed)  # (JAX's error, where a result is read)
  del failed
  message = str(info.value)
  head = message.split(" failed")[0]
  assert "of stage1" in head and "on mesh 'm1'" in head, message
  assert "injected callback failure" in message, message
  assert "earlier call" in message, message
  del info
  jax.effects_barrier()
  for _ in range(2):  # nothing of the caller's was lost: the same arguments run clean
    _assert_equals_jit(compiled(params, xs), params, xs)


_STUCK = textwrap.dedent("""
    import os, sys, time
    import jax, jax.numpy as jnp, numpy as np
    import mpmd
    from mpmd import _mpmd

    def bad(x):
      raise ValueError("injected pure_callback failure")

    def second(w, h):
      s = jax.pure_callback(bad, jax.ShapeDtypeStruct(h.shape, h.dtype), h)
      return jnp.tanh((h + s) @ w)

    def step(params, x):
      def microbatch(x):
        h = mpmd.named_computation(lambda w, h: jnp.tanh(h @ w), name="a")(params[0], x)
        return mpmd.named_computation(second, name="b")(params[1], h).sum()
      return mpmd.call(microbatch, call_counter=0)(x)

    devices = np.array(jax.devices())
    topology = {"m0": jax.sharding.Mesh(devices[0:4], ("data",)),
                "m1": jax.sharding.Mesh(devices[4:8], ("data",))}
    config = mpmd.make_config(topology, {"a": "m0", "b": "m1"}, pipeline_schedule="GPipe")
    params = [np.ones((8, 8), np.float32) * 0.1 for _ in range(2)]
    x = np.ones((8, 8), np.float32)
    compiled = mpmd.jit(step, config).lower(params, x).compile()
    started = time.monotonic()
    for call in range(3):  # (the first call waits for its mesh of 4: it raises)
      try:
        compiled(params, x)
      except mpmd.FragmentRuntimeError as e:
        print(f"raised after {time.monotonic() - started:.1f} s: {e}", flush=True)
        print("abort note: " + _mpmd.abort_note_text(), flush=True)
        try:
          compiled(params, x)
        except mpmd.FragmentRuntimeError as again:
          print("the next call raised too:", again == e or str(again) == str(e), flush=True)
        break
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # (XLA would abort the process once its rendezvous times out)
    """)


@pytest.mark.slow
def test_a_callback_raising_on_one_device_of_four_is_named_before_xla_aborts(tmp_path):
  """A `jax.pure_callback` that raises on a mesh of 4 devices fails the
  fragment on one device while the other 3 wait in XLA's all-reduce
  rendezvous, which nothing can release (XLA aborts after about 60 s, as
  for jax.jit). Within seconds the runtime says so naming the fragment
  (stderr), the next call raises it, and the SIGABRT handler holds it."""
  script = tmp_path / "stuck.py"
  script.write_text(_STUCK)
  done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                        timeout=120, env={**os.environ, "MPMD_ASYNC_CALLS": "1"})
  out, err = done.stdout, done.stderr
  assert done.returncode == 0, (out, err)
  raised = [line for line in out.splitlines() if line.startswith("raised after ")]
  assert raised, (out, err)
  seconds = float(raised[0].split()[2])
  assert seconds < 10, (out, err)
  assert "fragment 'p1_b" in raised[0] and "on mesh 'm1'" in raised[0], out
  assert "injected pure_callback failure" in raised[0], out
  assert "XLA ends this process about 60 s after the failure" in raised[0], out
  assert "[mpmd] fragment 'p1_b" in err and "other device(s) of its mesh" in err, err
  assert "abort note: [mpmd] XLA aborted this process: fragment 'p1_b" in out, out
  assert "the next call raised too: True" in out, out
