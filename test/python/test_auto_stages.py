"""Automatic stages: an unlabelled training step and a topology are enough
(`mpmd.auto_stages`). The layers are found (the repeated module class), cut
into stages by the planner's costs, shown, run equal to `jax.jit`, and kept
as a dict that rebuilds the same config without planning again."""

from __future__ import annotations

import json

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import mpmd
from mpmd.plan import auto_stages_from_dict, find_layers
from models import accumulating
from models import make_topology

RTOL, ATOL = 2e-5, 2e-6


class Block(nn.Module):
  """A transformer block (pre-norm attention and MLP), written without mpmd."""
  d: int

  @nn.compact
  def __call__(self, h):
    causal = nn.make_causal_mask(jnp.ones(h.shape[:2], jnp.int32))
    h = h + nn.MultiHeadDotProductAttention(num_heads=2, deterministic=True)(
        nn.LayerNorm()(h), mask=causal)
    return h + nn.Dense(self.d)(nn.gelu(nn.Dense(4 * self.d)(nn.LayerNorm()(h))))


class LM(nn.Module):
  vocab: int = 32
  d: int = 16
  layers: int = 8

  @nn.compact
  def __call__(self, ids):
    h = nn.Embed(self.vocab, self.d)(ids)
    for _ in range(self.layers):
      h = Block(self.d)(h)
    return nn.Dense(self.vocab)(nn.LayerNorm()(h))


def _training(model):
  ids = jax.random.randint(jax.random.key(0), (4, 8), 0, model.vocab)
  params = model.init(jax.random.key(1), ids)
  tx = optax.adam(1e-3, eps=1e-3)

  def step(params, opt_state, ids):
    def loss_fn(params):
      logits = model.apply(params, ids)
      return optax.softmax_cross_entropy_with_integer_labels(logits[:, :-1], ids[:, 1:]).mean()
    loss, grads = jax.value_and_grad(loss_fn)(params)
    updates, opt_state = tx.update(grads, opt_state, params)
    return loss, optax.apply_updates(params, updates), opt_state

  return step, (params, tx.init(params), ids)


def _steps_equal_jax_jit(jitted, step, params, opt_state, ids, steps=2):
  ref = (params, opt_state)
  for _ in range(steps):
    loss, params, opt_state = jitted(params, opt_state, ids)
    ref_loss, *ref = jax.jit(step)(*ref, ids)
    np.testing.assert_allclose(loss, ref_loss, rtol=RTOL)
  for a, b in zip(jax.tree.leaves((params, opt_state)), jax.tree.leaves(ref)):
    np.testing.assert_allclose(a, b, rtol=RTOL, atol=ATOL)


@pytest.mark.slow
def test_unlabelled_8_block_transformer_over_4_meshes_equals_jax_jit():
  step, args = _training(LM())
  topology = make_topology(4, 2)
  auto = mpmd.auto_stages(step, topology, *args, estimate="cost_analysis")

  assert auto.layers.layer_type is Block and auto.layers.calls == 8
  assert auto.plan.units == tuple(f"layer{k}" for k in range(8))
  # Consecutive layers per mesh, every mesh used, in pipeline order.
  stages = auto.stages()
  assert [mesh for mesh, _ in stages] == ["m0", "m1", "m2", "m3"]
  assert [d for _, layers in stages for d in layers] == list(auto.layers.descriptions)
  assert all(layers for _, layers in stages)
  # Identical layers: an even cut.
  assert [len(layers) for _, layers in stages] == [2, 2, 2, 2]
  summary = auto.summary()
  assert "8 layers (Block) over 4 meshes" in summary and "m3: 2 layer(s)" in summary
  assert "predicted step" in summary

  jitted = auto.jit()
  compiled = jitted.lower(*args).compile()
  placed = {(i.mesh, o) for i in compiled.instructions for o in getattr(i, "origins", ())}
  for mesh, group in zip(auto.plan.stage_meshes, auto.plan.groups):
    assert all((mesh, unit) in placed for unit in group), sorted(placed)
  _steps_equal_jax_jit(jitted, step, *args)

  # Kept as a dict (JSON), the cut rebuilds without tracing or measuring.
  data = json.loads(json.dumps(auto.to_dict()))
  assert data["layer_type"].endswith(":Block") and data["num_layers"] == 8
  labelled, config = auto_stages_from_dict(data, step, topology, layer_type=Block)
  assert config.name_to_mesh_assignment == auto.config.name_to_mesh_assignment
  imported = mpmd.jit(labelled, config).lower(*args).as_text("mpmd-import")
  for mesh, group in zip(auto.plan.stage_meshes, auto.plan.groups):
    for unit in group:
      assert f'mpmd.fragment<mesh="{mesh}", origin=["{unit}"' in imported


class _Dense:
  """A layer of a model in plain Python classes (no library)."""

  def __init__(self, key, d):
    self.w = jax.random.normal(key, (d, d)) / np.sqrt(d)

  def __call__(self, params, h):
    return jnp.tanh(h @ params)


def test_plain_class_layers_and_a_heavier_layer_shift_the_cut():
  widths = [16, 16, 16, 16, 64, 16]   # layer 4 is a wider (costlier) layer
  layers = [_Dense(k, d) for k, d in zip(jax.random.split(jax.random.key(0), 6), widths)]

  def loss(params, x):
    h = x
    for layer, p in zip(layers, params):
      h = h[:, :p.shape[0]]
      h = jnp.pad(h, ((0, 0), (0, p.shape[0] - h.shape[1])))
      h = layer(p, h)
    return jnp.mean(h ** 2)

  def step(params, x):
    value, grads = jax.value_and_grad(loss)(params, x)
    return value, [p - 0.1 * g for p, g in zip(params, grads)]

  params = [layer.w for layer in layers]
  x = jax.random.normal(jax.random.key(1), (64, 16))
  found = find_layers(step, params, x)
  assert found.layer_type is _Dense and found.calls == 6
  auto = mpmd.auto_stages(step, make_topology(2, 1), params, x, estimate="cost_analysis")
  # The wide layer weighs more than the others: it is not in the bigger half.
  groups = [len(g) for g in auto.plan.groups]
  assert sum(groups) == 6 and groups[0] > groups[1], auto.summary()
  got = auto.jit()(params, x)
  want = jax.jit(step)(params, x)
  for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
    np.testing.assert_allclose(a, b, rtol=RTOL, atol=ATOL)


def test_layers_in_one_scan_body_are_a_clear_error():
  class ScanBlock(nn.Module):
    @nn.compact
    def __call__(self, h, _):
      return jnp.tanh(nn.Dense(16)(h)), None

  class Scanned(nn.Module):
    @nn.compact
    def __call__(self, h):
      return nn.scan(ScanBlock, variable_axes={"params": 0}, split_rngs={"params": True},
                     length=4)()(h, None)[0]

  model = Scanned()
  x = jnp.ones((4, 16))
  params = model.init(jax.random.key(0), x)

  def step(params, x):
    return jax.value_and_grad(lambda p: jnp.mean(model.apply(p, x) ** 2))(params)

  with pytest.raises(mpmd.PlanError, match="the calls of .*ScanBlock run inside a scan body "
                     r"\(e.g. nn.scan or lax.scan over the layers\), which cannot be cut"):
    mpmd.auto_stages(step, make_topology(2, 1), params, x, estimate="cost_analysis")


class _Layer:
  def __call__(self, p, h):
    return jnp.tanh(h @ p["w"] + p["b"])


def test_a_step_with_a_microbatch_loop_gets_a_schedule_and_microbatch_count():
  layers = [_Layer() for _ in range(8)]

  def loss_fn(params, x, y):
    h = x
    for layer, p in zip(layers, params):
      h = layer(p, h)
    return jnp.mean((h - y) ** 2)

  step = accumulating(loss_fn)

  keys = jax.random.split(jax.random.key(0), 8)
  params = [{"w": jax.random.normal(k, (16, 16)) / 4, "b": jnp.zeros(16)} for k in keys]
  x, y = jax.random.normal(jax.random.key(1), (32, 16)), jnp.zeros((32, 16))
  auto = mpmd.auto_stages(step, make_topology(4, 2), params, x, y, batch_argnums=(1, 2),
                          microbatches=(4, 8), schedules=["1F1B", "GPipe"],
                          estimate="cost_analysis")
  # Each microbatch's forward calls the 8 layers: the units are layer0..7 for all.
  assert auto.layers.calls == 8 and auto.scheduled
  assert auto.config.pipeline_schedule == auto.plan.schedule.name
  assert auto.to_dict()["schedule"] in ("1F1B", "GPipe")
  args = auto.plan.split_batch(params, x, y)
  got, want = auto.jit()(*args), jax.jit(step)(*args)
  for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
    np.testing.assert_allclose(a, b, rtol=RTOL, atol=ATOL)


def test_a_saved_cut_whose_layer_class_cannot_be_imported_says_pass_layer_type():
  data = {"layer_type": "no_such_module_here:Block", "num_layers": 2, "groups": [["layer0"],
          ["layer1"]], "stage_meshes": ["m0", "m1"], "virtual_stages": 1, "schedule": None}
  with pytest.raises(mpmd.PlanError, match="cannot import the layer class "
                     "no_such_module_here:Block .* pass layer_type="):
    auto_stages_from_dict(data, lambda: None, make_topology(2, 1))
  step, config = auto_stages_from_dict(data, lambda: None, make_topology(2, 1),
                                       layer_type=_Layer)
  assert config.name_to_mesh_assignment == {"layer0": "m0", "layer1": "m1"}


# --------------------------------------------- a heavy head outside the layers
class _MLPBlock:
  """A residual MLP block of a language model in plain JAX."""

  def __call__(self, p, h):
    return h + jnp.tanh(h @ p["w1"]) @ p["w2"]


def _language_model(vocab=256, d=16, layers=8, tokens=64):
  """(init params, unlabelled step, labelled step, ids, targets): an
  embedding, `layers` blocks and an LM head over ``vocab`` (about 2.5
  blocks of work at these sizes) with the softmax cross-entropy; SGD over
  microbatches. The labelled step names `embed`, `block0`.. and `head`."""
  blocks = [_MLPBlock() for _ in range(layers)]
  keys = iter(jax.random.split(jax.random.key(0), 2 * layers + 2))
  normal = lambda *shape: jax.random.normal(next(keys), shape) / np.sqrt(shape[0])  # noqa: E731
  params = {"embed": normal(vocab, d),
            "blocks": [{"w1": normal(d, 4 * d), "w2": normal(4 * d, d)} for _ in range(layers)],
            "head": normal(d, vocab)}

  def embed(w, ids):
    return w[ids]

  def head(w, h, targets):
    logp = jax.nn.log_softmax(h @ w)
    return -jnp.mean(jnp.take_along_axis(logp, targets[:, None], axis=-1))

  def loss(labelled, params, ids, targets):
    name = (lambda f, n: mpmd.named_computation(f, name=n)) if labelled else (lambda f, n: f)
    h = name(embed, "embed")(params["embed"], ids)
    for i, (block, p) in enumerate(zip(blocks, params["blocks"])):
      h = name(block.__call__, f"block{i}")(p, h) if labelled else block(p, h)
    return name(head, "head")(params["head"], h, targets)

  def make_step(labelled):
    def step(params, ids, targets):
      def microbatch(carry, i, batch):
        total, grads = carry
        value, g = jax.value_and_grad(lambda p: loss(labelled, p, *batch))(params)
        return total + value, jax.tree.map(jnp.add, grads, g)
      init = (jnp.zeros(()), jax.tree.map(jnp.zeros_like, params))
      total, grads = mpmd.enumerated_for(microbatch, init, (ids, targets))
      m = ids.shape[0]
      return total / m, jax.tree.map(lambda p, g: p - 0.1 * g / m, params, grads)
    return step

  ids = jax.random.randint(jax.random.key(1), (tokens,), 0, vocab)
  targets = jax.random.randint(jax.random.key(2), (tokens,), 0, vocab)
  return params, make_step(False), make_step(True), ids, targets


def test_the_work_outside_the_units_is_found_with_the_first_and_last_unit():
  from mpmd.plan import split_batch, trace_units  # noqa: PLC0415
  from mpmd.plan.auto import _labelled  # noqa: PLC0415
  params, step, _, ids, targets = _language_model()
  args = split_batch((params, ids, targets), (1, 2), 4)
  traced = trace_units(_labelled(step, _MLPBlock, 8, "__call__"), args, outside=True)
  outside = traced.outside
  prims = lambda program: [e.primitive.name for e in program.forward.jaxpr.eqns]  # noqa: E731
  assert "gather" in prims(outside.before_forward)         # the embedding lookup
  assert "scatter-add" in prims(outside.before_backward)   # its gradient
  # The head's forward and backward (logits, and both of its gradients' matmuls).
  assert prims(outside.after).count("dot_general") == 3
  assert outside.before_param_bytes == params["embed"].size * 4
  assert outside.after_param_bytes == params["head"].size * 4
  # The layers' own accumulations stay with them: none is in the first unit's part.
  assert prims(outside.before_backward).count("add") == 1   # the embedding's accumulator
  assert trace_units(_labelled(step, _MLPBlock, 8, "__call__"), args).outside is None


def test_auto_cut_of_a_model_with_a_heavy_head_equals_the_planners_labelled_choice():
  """With costs estimated (deterministic counts, nothing timed), the cut of
  the unlabelled step equals the planner's best plan of the same model with
  its embedding, blocks and head labelled; counting only the layers would
  cut evenly."""
  params, step, labelled, ids, targets = _language_model()
  topology = make_topology(2, 1)
  options = dict(batch_argnums=(1, 2), microbatches=(4,), schedules=["1F1B", "GPipe"],
                 estimate="cost_analysis", memory_budget=None)
  auto = mpmd.auto_stages(step, topology, params, ids, targets, **options)
  best = mpmd.plan(labelled, topology, params, ids, targets, **options)
  blind = mpmd.auto_stages(step, topology, params, ids, targets, count_outside=False, **options)

  layers = [[u.replace("layer", "block") for u in g] for g in auto.plan.groups]
  labelled_blocks = [[u for u in g if u.startswith("block")] for g in best.groups]
  assert layers == labelled_blocks, (auto.summary(), best.summary())
  assert best.groups[0][0] == "embed" and best.groups[-1][-1] == "head"
  assert (auto.plan.schedule.name, auto.plan.microbatches) == (best.schedule.name,
                                                               best.microbatches)
  # The head weighs: the last mesh holds fewer layers than without it.
  assert [len(g) for g in blind.plan.groups] == [4, 4]
  assert len(auto.plan.groups[-1]) < 4, auto.summary()
  assert "outside the layers, per microbatch" in auto.summary()

  got = auto.jit()(*auto.plan.split_batch(params, ids, targets))
  want = jax.jit(step)(*auto.plan.split_batch(params, ids, targets))
  for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
    np.testing.assert_allclose(a, b, rtol=RTOL, atol=ATOL)


@pytest.mark.slow
def test_benchmark_smallest(tmp_path):
  """benchmarks/auto_stages.py at its tiniest: two pinned processes plan the
  unlabelled and the labelled forms, then run the automatic cut, the best
  labelled plan, the even cut and the layers-only cut; it writes section (k)."""
  import importlib.util  # noqa: PLC0415
  import os  # noqa: PLC0415
  import pathlib  # noqa: PLC0415
  import sys  # noqa: PLC0415
  if len(os.sched_getaffinity(0)) < 2:
    pytest.skip("needs 2 CPUs")
  benchmarks = pathlib.Path(__file__).resolve().parents[2] / "benchmarks"
  sys.path.insert(0, str(benchmarks))
  try:
    spec = importlib.util.spec_from_file_location("auto_benchmark", benchmarks / "auto_stages.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
  finally:
    sys.path.remove(str(benchmarks))
  out = tmp_path / "RESULTS.md"
  assert module.main(["--quick", "--output", str(out)]) == 0
  section = out.read_text()
  section = section[section.index("## (k) Automatic stages"):]
  assert "Command: `python benchmarks/auto_stages.py --quick " in section
  assert "auto / best: median" in section and "8 layers (Block) over 2 meshes" in section
  # The five configs run the same arithmetic: their first-step losses agree.
  losses = section.split("the layers-only cut below): ")[1].split(".\n")[0]
  values = {float(part.split()[1]) for part in losses.split("; ")}
  assert len(losses.split("; ")) == 5 and max(values) - min(values) < 1e-4, losses
