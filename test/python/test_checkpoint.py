"""Checkpointing a pipelined training state with orbax-checkpoint: the
parameters and optimizer state an `mpmd.jit` step returns (arrays placed on
several meshes) save and restore bit-equal, onto the meshes the program takes
them on (`Compiled.input_shardings` as the restore target), in the same
process or in a fresh one, and training continues as if never stopped."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest

ocp = pytest.importorskip("orbax.checkpoint")

import mpmd  # noqa: E402
from models import init_mlp, make_batch  # noqa: E402

# The training step, shared by this process and the fresh one (as source).
STEP_SOURCE = textwrap.dedent("""
    import jax
    import optax
    import mpmd
    from models import init_mlp, make_batch, make_topology, mlp_loss

    tx = optax.adamw(1e-2)

    def step(params, opt_state, x, y):
      loss, grads = jax.value_and_grad(mlp_loss)(params, x, y)
      updates, opt_state = tx.update(grads, opt_state, params)
      return loss, optax.apply_updates(params, updates), opt_state

    def make_step():
      config = mpmd.make_config(make_topology(2, 4), {"stage0": "m0", "stage1": "m1"})
      return mpmd.jit(step, config)

    def restore_target(compiled, state):
      '''Abstract arrays of `state` placed as `compiled` takes its arguments.'''
      params_shardings, opt_shardings = compiled.input_shardings[0][:2]
      return jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
                          state, {"params": params_shardings, "opt_state": opt_shardings})
""")

FRESH_PROCESS = textwrap.dedent("""
    import os, sys
    import numpy as np
    import jax
    import orbax.checkpoint as ocp
    from train_step import init_mlp, make_batch, make_step, restore_target, tx

    checkpoint, out = sys.argv[1], sys.argv[2]
    x, y = make_batch()
    # Shapes only: this process never builds the initial state.
    abstract = jax.eval_shape(lambda: {"params": init_mlp(2),
                                       "opt_state": tx.init(init_mlp(2))})
    jitted = make_step()
    compiled = jitted.lower(abstract["params"], abstract["opt_state"], x, y).compile()
    state = ocp.StandardCheckpointer().restore(checkpoint, restore_target(compiled, abstract))
    loss, params, _ = jitted(state["params"], state["opt_state"], x, y)
    np.savez(out, loss=np.asarray(loss),
             **{str(i): np.asarray(a) for i, a in enumerate(jax.tree.leaves(params))})
""")


@pytest.fixture
def train_step(tmp_path, monkeypatch):
  """The step module (written to disk so that a fresh process imports the same code)."""
  (tmp_path / "train_step.py").write_text(STEP_SOURCE)
  monkeypatch.syspath_prepend(str(tmp_path))
  sys.modules.pop("train_step", None)
  import train_step  # noqa: PLC0415
  yield train_step
  sys.modules.pop("train_step", None)


def _trained(train_step, steps=2):
  jitted = train_step.make_step()
  params = init_mlp(2)
  opt_state = train_step.tx.init(params)
  x, y = make_batch()
  for _ in range(steps):
    _, params, opt_state = jitted(params, opt_state, x, y)
  return jitted, {"params": params, "opt_state": opt_state}, (x, y)


def _assert_bit_equal(got, want):
  assert jax.tree.structure(got) == jax.tree.structure(want)
  for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
    assert a.dtype == b.dtype and a.shape == b.shape
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def _save(state, path):
  checkpointer = ocp.StandardCheckpointer()
  checkpointer.save(path, state)
  checkpointer.wait_until_finished()


def test_save_and_restore_onto_the_program_meshes_then_train_on(train_step, tmp_path):
  jitted, state, (x, y) = _trained(train_step)
  topology = jitted.config.topology
  # The state lives on both meshes: stage i's parameters and moments on mesh i.
  for i, mesh in enumerate(("m0", "m1")):
    assert state["params"][i]["w"].sharding.mesh == topology[mesh]
    assert state["opt_state"][0].mu[i]["w"].sharding.mesh == topology[mesh]
  _save(state, tmp_path / "ckpt")

  compiled = jitted.lower(state["params"], state["opt_state"], x, y).compile()
  restored = ocp.StandardCheckpointer().restore(tmp_path / "ckpt",
                                                train_step.restore_target(compiled, state))
  _assert_bit_equal(restored, state)
  for got, want in zip(jax.tree.leaves(restored), jax.tree.leaves(state)):
    assert got.sharding == want.sharding

  # Training goes on from the restored state exactly as from the saved one.
  loss, params, opt_state = jitted(restored["params"], restored["opt_state"], x, y)
  ref_loss, ref_params, ref_opt_state = jitted(state["params"], state["opt_state"], x, y)
  np.testing.assert_array_equal(loss, ref_loss)
  _assert_bit_equal((params, opt_state), (ref_params, ref_opt_state))
  # ... and as jax.jit's training from the same checkpoint.
  host = jax.device_get(restored)  # (jax.jit takes its arguments on one device set)
  jax_loss, jax_params, _ = jax.jit(train_step.step)(host["params"], host["opt_state"], x, y)
  np.testing.assert_allclose(loss, jax_loss, rtol=1e-5)
  for got, want in zip(jax.tree.leaves(params), jax.tree.leaves(jax_params)):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_restore_in_a_fresh_process_with_input_shardings_as_target(train_step, tmp_path):
  jitted, state, (x, y) = _trained(train_step)
  _save(state, tmp_path / "ckpt")
  (tmp_path / "fresh.py").write_text(FRESH_PROCESS)
  here = pathlib.Path(__file__).resolve().parent
  env = dict(os.environ, PYTHONPATH=os.pathsep.join(
      [str(tmp_path), str(here), os.environ.get("PYTHONPATH", "")]))
  env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8")
  run = subprocess.run([sys.executable, str(tmp_path / "fresh.py"), str(tmp_path / "ckpt"),
                        str(tmp_path / "out.npz")], env=env, capture_output=True, text=True,
                       timeout=600)
  assert run.returncode == 0, run.stderr[-3000:]

  loss, params, _ = jitted(state["params"], state["opt_state"], x, y)
  out = np.load(tmp_path / "out.npz")
  np.testing.assert_array_equal(out["loss"], np.asarray(loss))
  for i, a in enumerate(jax.tree.leaves(params)):
    np.testing.assert_array_equal(out[str(i)], np.asarray(a))
