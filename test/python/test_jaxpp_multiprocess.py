"""`mpmd.jaxpp` across processes: each process holds its own group's outputs
(`MpmdArray`s without a local copy elsewhere), feeds them all back, and the
values match `jax.jit`."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

_SCRIPT = textwrap.dedent("""
    import mpmd.distributed
    mpmd.distributed.initialize()
    import jax, jax.numpy as jnp, numpy as np
    from mpmd import jaxpp

    devices = np.array(jax.devices()).reshape(2, 1)   # group i: process i's device
    mesh = jaxpp.MpmdMesh(jax.sharding.Mesh(devices, ("stage", "data")), "stage")

    def loss(ws, x, y):
      for w in ws:
        x = jaxpp.mark_stage_end(jnp.tanh(x @ w))
      return jnp.mean((x - y) ** 2)

    def step(ws, xs, ys):
      losses, grads = jaxpp.treduce(lambda b: jax.value_and_grad(loss)(ws, *b), (xs, ys),
                                    schedule=jaxpp.Std1F1B(2))
      return [w - 0.1 * g for w, g in zip(ws, grads)], losses.mean()

    ws = ref = [jnp.eye(8) * 0.7, jnp.eye(8) * 0.3]
    xs = jax.random.normal(jax.random.key(1), (4, 2, 8))
    ys = jnp.zeros((4, 2, 8))
    fn = jaxpp.mpmd_jit_with_loop(step, mesh)
    for _ in range(2):
      ws, l = fn(ws, xs, ys)                  # MpmdArrays, fed back as they are
      ref, ref_l = jax.jit(step)(ref, xs, ys)
    me = jax.process_index()
    assert [w.is_partially_addressable for w in ws] == [me == 0, me == 1]
    assert [w.to_mpmd_local_array is None for w in ws] == [me != 0, me != 1]
    assert [w.mpmd_idxs for w in ws] == [{0}, {1}]
    assert l.is_partially_addressable == (me == 1)   # the loss ends on the last group
    values = mpmd.distributed.gather([x.for_group(None) for x in (*ws, l)])
    np.testing.assert_allclose(values[2], np.asarray(ref_l), rtol=1e-5)
    for got, want in zip(values[:2], ref):
      np.testing.assert_allclose(got, np.asarray(want), rtol=1e-5, atol=1e-6)
    print("process", me, "matches jax.jit")
""")


@pytest.mark.slow
def test_two_processes_hold_their_own_groups(tmp_path):
  script = tmp_path / "jaxpp_two_processes.py"
  script.write_text(_SCRIPT)
  env = dict(os.environ)
  # (XLA_FLAGS is inherited: the launcher replaces its device count and keeps the rest.)
  run = subprocess.run([sys.executable, "-m", "mpmd.launch", "--processes", "2",
                        "--devices-per-process", "1", "--timeout", "240", str(script)],
                       capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
  assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
  for p in (0, 1):
    assert f"process {p} matches jax.jit" in run.stdout, run.stdout[-3000:]
