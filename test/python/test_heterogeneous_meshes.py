"""Meshes of different shapes in one topology: a pipeline over meshes of 2,
1, 3 and 2 devices (one axis name, or each mesh its own) trains as `jax.jit`
does, each stage's state on its own mesh; what cannot fit a mesh is an error
naming it."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, PartitionSpec as P

import mpmd
from mpmd.plan import PlanError, plan
from models import accumulating_step, init_mlp

SIZES = (2, 1, 3, 2)
M = 6


def _topology(axis_names):
  devices, start, topology = jax.devices(), 0, {}
  for i, n in enumerate(SIZES):
    topology[f"m{i}"] = Mesh(np.array(devices[start:start + n]), (axis_names[i],))
    start += n
  return topology


_step = accumulating_step


def _data():
  params = init_mlp(len(SIZES), width=16)
  xs = jax.random.normal(jax.random.key(1), (M, 6, 16))
  ys = jax.random.normal(jax.random.key(2), (M, 6, 4))
  return params, xs, ys


def _config(topology):
  return mpmd.make_config(topology, {f"stage{s}": f"m{s}" for s in range(len(SIZES))},
                          pipeline_schedule="1F1B")


@pytest.mark.parametrize("axes", ["shared", "own"])
def test_pipeline_over_meshes_of_different_shapes_matches_jax_jit(axes):
  """1F1B, 6 microbatches, the state donated; with one axis name the batch
  is split over each mesh's `data` axis (2, 1, 3 and 2 ways)."""
  names = ["data"] * len(SIZES) if axes == "shared" else [f"ax{i}" for i in range(len(SIZES))]
  topology = _topology(names)
  spec = P(None, "data") if axes == "shared" else None
  params, xs, ys = _data()
  compiled = mpmd.jit(_step, _config(topology), in_shardings=(None, spec, spec),
                      donate_argnums=(0,)).lower(params, xs, ys).compile()
  reference = jax.jit(_step)
  got, want = params, params
  for _ in range(3):
    loss, got = compiled(got, xs, ys)
    ref_loss, want = reference(want, xs, ys)
    np.testing.assert_allclose(loss, ref_loss, rtol=1e-5)
  diff = sum(float(jnp.sum((a - b) ** 2)) for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)))
  norm = sum(float(jnp.sum(b ** 2)) for b in jax.tree.leaves(want))
  assert diff <= 1e-10 * norm, (diff, norm)
  for stage, layer in enumerate(got):
    for leaf in jax.tree.leaves(layer):
      assert leaf.sharding.mesh.devices.size == SIZES[stage]
      assert leaf.sharding.mesh.axis_names == (names[stage],)


def test_a_partition_spec_naming_an_axis_a_mesh_lacks_is_an_error():
  topology = _topology([f"ax{i}" for i in range(len(SIZES))])
  params, xs, ys = _data()
  spec = P(None, "ax0")
  with pytest.raises(mpmd.ConfigError, match="does not fit mesh 'm.' with axes .*it names axis "
                     "'ax0', which the mesh does not have"):
    mpmd.jit(_step, _config(topology), in_shardings=(None, spec, spec)).lower(params, xs, ys)


def test_the_planner_asks_for_meshes_of_one_shape():
  topology = _topology(["data"] * len(SIZES))
  params, xs, ys = _data()
  with pytest.raises(PlanError, match="mesh 'm1' has axes .* but mesh 'm0' has .*"
                     "needs meshes of one shape"):
    plan(_step, topology, params, xs, ys)
