"""End to end: pipelined training steps against plain `jax.jit`."""

from __future__ import annotations

import logging

import jax
import numpy as np
import pytest

import mpmd
from models import init_mlp, make_batch, make_topology, sgd_step

RTOL = 1e-5
ATOL = 1e-6


def _assign(num_stages):
  return {f"stage{i}": f"m{i}" for i in range(num_stages)}


@pytest.mark.parametrize("num_stages,devices_per_mesh", [(2, 4), (4, 2)])
def test_training_matches_jax_jit(num_stages, devices_per_mesh):
  topology = make_topology(num_stages, devices_per_mesh)
  config = mpmd.make_config(topology, _assign(num_stages))
  step = mpmd.jit(sgd_step, config)
  reference = jax.jit(sgd_step)
  params = ref_params = init_mlp(num_stages)
  x, y = make_batch()
  for _ in range(5):
    loss, params = step(params, x, y)
    ref_loss, ref_params = reference(ref_params, x, y)
    np.testing.assert_allclose(loss, ref_loss, rtol=RTOL)
    for got, want in zip(jax.tree.leaves(params), jax.tree.leaves(ref_params)):
      np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
  # Each stage's parameters live on (and are updated on) that stage's mesh.
  for i, p in enumerate(params):
    for leaf in jax.tree.leaves(p):
      assert leaf.sharding.device_set == set(topology[f"m{i}"].devices.flat), (i, leaf.sharding)
  assert loss.sharding.device_set == set(topology[f"m{num_stages - 1}"].devices.flat)


def test_stages_api_and_program():
  topology = make_topology(2, 4)
  config = mpmd.make_config(topology, _assign(2))
  params = init_mlp(2)
  x, y = make_batch()
  lowered = mpmd.jit(sgd_step, config).lower(params, x, y)
  stablehlo = lowered.as_text("stablehlo")
  assert 'mpmd.named_computation<"stage1"(1)>' in stablehlo
  imported = lowered.as_text("mpmd-import")
  assert 'mpmd.fragment<mesh="m0", origin=["stage0"]>' in imported
  assert 'mpmd.fragment<mesh="m1", origin=["stage1"(1)]>' in imported
  program_text = lowered.as_text("mpmd")
  assert "mpmd.fragment_call" in program_text and "mpmd.fragment<" not in program_text
  # Inputs go to the mesh of the stage that uses them: params[0], params[1], x, y.
  assert lowered.input_meshes == ("m0", "m0", "m1", "m1", "m0", "m1")
  compiled = lowered.compile()
  kinds = [type(i).__name__ for i in compiled.instructions]
  # forward 0, transfer, forward 1 (with the loss), backward 1, transfer, backward 0.
  # m1's forward and the backward right after it are one program
  # (mpmd_merge_forward_with_backward, on by default).
  assert kinds == ["CallInstruction", "TransferInstruction", "CallInstruction",
                   "TransferInstruction", "CallInstruction"]
  origins = [i.origins for i in compiled.instructions if hasattr(i, "origins")]
  assert origins == [("stage0",), ("stage1", "stage1(1)"), ("stage0(1)",)]
  loss, new_params = compiled(params, x, y)
  ref_loss, ref_params = jax.jit(sgd_step)(params, x, y)
  np.testing.assert_allclose(loss, ref_loss, rtol=RTOL)
  shardings = compiled.input_shardings
  assert shardings[0][0][0]["w"].mesh.devices.flat[0] == topology["m0"].devices.flat[0]
  assert compiled.output_shardings[0].device_set == set(topology["m1"].devices.flat)
  assert "fragment_call" in compiled.as_text()


def test_call_caches_by_shape(caplog):
  config = mpmd.make_config(make_topology(2, 4), _assign(2))
  step = mpmd.jit(sgd_step, config)
  params = init_mlp(2)
  x, y = make_batch()
  with caplog.at_level(logging.INFO, logger="mpmd"):
    step(params, x, y)
    step(params, x, y)
  compiles = [r for r in caplog.records if r.getMessage().startswith("compiled ") and "distinct" in r.getMessage()]
  assert len(compiles) == 1, [r.getMessage() for r in compiles]
  # A new batch size is a new program.
  x2, y2 = make_batch(batch=16)
  with caplog.at_level(logging.INFO, logger="mpmd"):
    loss, _ = step(params, x2, y2)
  compiles = [r for r in caplog.records
              if r.getMessage().startswith("compiled ") and "distinct" in r.getMessage()]
  assert len(compiles) == 2
  np.testing.assert_allclose(loss, jax.jit(sgd_step)(params, x2, y2)[0], rtol=RTOL)


def test_outputs_feed_next_step_without_copies():
  config = mpmd.make_config(make_topology(2, 4), _assign(2))
  compiled = mpmd.jit(sgd_step, config).lower(init_mlp(2), *make_batch()).compile()
  _, params = compiled(init_mlp(2), *make_batch())
  # The updated parameters already have the placement the program expects.
  flat_in = jax.tree.leaves(compiled.input_shardings[0][0])
  for leaf, sharding in zip(jax.tree.leaves(params), flat_in):
    assert leaf.sharding == sharding


def test_output_mesh_assignment_moves_outputs():
  topology = make_topology(2, 4)
  config = mpmd.make_config(topology, _assign(2), output_mesh_assignment=("m0", None))
  loss, _ = mpmd.jit(sgd_step, config)(init_mlp(2), *make_batch())
  assert loss.sharding.device_set == set(topology["m0"].devices.flat)


def test_input_mesh_assignment():
  topology = make_topology(2, 4)
  config = mpmd.make_config(topology, _assign(2), input_mesh_assignment=(["m0", "m1"], "m1", "m1"))
  lowered = mpmd.jit(sgd_step, config).lower(init_mlp(2), *make_batch())
  assert lowered.input_meshes == ("m0", "m0", "m1", "m1", "m1", "m1")
  loss, _ = lowered.compile()(init_mlp(2), *make_batch())
  np.testing.assert_allclose(loss, jax.jit(sgd_step)(init_mlp(2), *make_batch())[0], rtol=RTOL)
