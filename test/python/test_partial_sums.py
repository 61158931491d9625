"""Gradient accumulators held as unreduced partial sums on data-parallel meshes.

On a mesh of several devices that splits each microbatch over its axis,
every microbatch's backward program adds its per-device partial gradients to
an accumulator held unreduced (decided by -mpmd-mark-partial-sums, whose lit
test pins the chains; read by `mpmd.partition.partial`); the one all-reduce
per step happens in the update. Without it, each backward call all-reduces
every gradient. The numbers equal jax.jit's either way.
"""

import functools
import re

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import PartitionSpec as P

import mpmd
from models import assert_close_over_the_tree, make_topology
from mpmd import knobs

VOCAB, WIDTH, SEQ, LAYERS, MESHES, MICROBATCHES = 64, 16, 8, 4, 4, 4


# ------------------------------------------------------------------ end to end
class _Block(nn.Module):
  @nn.compact
  def __call__(self, x):
    h = nn.Dense(2 * WIDTH)(nn.LayerNorm()(x))
    return x + nn.Dense(WIDTH)(nn.gelu(h))


class _LM(nn.Module):
  @nn.compact
  def __call__(self, tokens):
    h = nn.Embed(VOCAB, WIDTH, name="wte")(tokens)
    for i in range(LAYERS):
      h = _Block(name=f"h_{i}")(h)
    return nn.Dense(VOCAB)(nn.LayerNorm()(h))


def _label(next_fun, args, kwargs, context):
  name = context.module.name or ""
  if name.startswith("h_") and context.method_name == "__call__":
    return mpmd.named_computation(lambda *a: next_fun(*a, **kwargs), name=f"block{name[2:]}")(*args)
  return next_fun(*args, **kwargs)


def _step_fn(model, optimizer, labelled):
  def loss_fn(params, tokens):
    with nn.intercept_methods(_label if labelled else lambda f, a, k, c: f(*a, **k)):
      logits = model.apply({"params": params}, tokens[:, :-1])
    # An L2 term: its gradient is the same on every device (not a sum over
    # the split batch), added to the batch's partial sums.
    l2 = sum(jnp.sum(w ** 2) for w in jax.tree.leaves(params) if w.ndim == 2)
    return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean() + 1e-3 * l2

  grad_fn = jax.jit(jax.value_and_grad(loss_fn))

  def step(params, opt_state, tokens):
    grads, loss = jax.tree.map(jnp.zeros_like, params), jnp.zeros(())
    for i in range(MICROBATCHES):
      l, g = (mpmd.call(grad_fn, call_counter=i) if labelled else grad_fn)(params, tokens[i])
      loss, grads = loss + l, jax.tree.map(jnp.add, grads, g)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss / MICROBATCHES

  return step


def _reduced_shapes(call) -> list[str]:
  """The operand shapes of the all-reduces in a call's compiled program."""
  text = call.fragment.as_text() or ""
  shapes = []
  for line in text.splitlines():
    m = re.search(r"=(.*?)\sall-reduce(-start)?\(", line)
    if m:
      shapes += re.findall(r"f32\[[\d,]*\]", m.group(1))
  return shapes


@functools.cache
def _problem():
  """The model, its arguments and `jax.jit`'s step of the unlabelled model from
  them, made once: the tests differ only in how mpmd compiles the step, and
  the reference does not depend on that."""
  model, optimizer = _LM(), optax.adamw(1e-2)
  tokens = jax.random.randint(jax.random.key(1), (MICROBATCHES, 4, SEQ + 1), 0, VOCAB)
  params = model.init(jax.random.key(0), tokens[0, :, :-1])["params"]
  opt_state = optimizer.init(params)
  want = jax.jit(_step_fn(model, optimizer, False))(params, opt_state, tokens)
  return model, optimizer, (params, opt_state, tokens), want


def _lowered():
  model, optimizer, (params, opt_state, tokens), _ = _problem()
  config = mpmd.make_config(
      make_topology(MESHES, 2), {f"block{i}": f"m{i}" for i in range(LAYERS)},
      pipeline_schedule="1F1B")
  step = mpmd.jit(_step_fn(model, optimizer, True), config,
                  in_shardings=(None, None, P(None, "x")))
  return step.lower(params, opt_state, tokens)


def test_the_partitioner_marks_each_meshs_accumulator_chain(monkeypatch):
  """The compiler's decision reaches the runtime in the partitioned program:
  on every mesh, each microbatch's backward call holds its accumulators
  unreduced, each adding a term to the previous microbatch's; the first
  adds to the zeros the program starts from (marked `partial`) or, where
  it is not given any (the last mesh, whose first backward makes its
  gradients: -1), starts the chain itself. With `MPMD_PARTIAL_SUMS=0`
  nothing is marked."""
  program = _lowered().partition
  partial_zeros = {c.id for c in program.constants if c.partial}
  backward = {}
  for inst in program.program:
    if inst.kind == "call" and inst.unit and "B" in inst.unit:
      backward.setdefault(inst.mesh, []).append(inst)
  assert sorted(backward) == [f"m{i}" for i in range(MESHES)]
  for mesh, calls in backward.items():
    assert len(calls) == MICROBATCHES, mesh
    first, *later = calls
    assert first.partial_results, (mesh, first.unit)
    starts = {first.operands[k] for _, k in first.partial_results if k >= 0}
    assert starts <= partial_zeros, mesh
    for before, call in zip(calls, later):
      held = {before.results[j] for j, _ in before.partial_results}
      assert all(k >= 0 for _, k in call.partial_results), (mesh, call.unit)
      assert {call.operands[k] for _, k in call.partial_results} <= held, (mesh, call.unit)
      assert len(call.partial_results) == len(first.partial_results), (mesh, call.unit)
  monkeypatch.setenv(knobs.MPMD_PARTIAL_SUMS, "0")
  program = _lowered().partition
  assert not any(c.partial for c in program.constants)
  assert not any(inst.partial_results for inst in program.program if inst.kind == "call")


def _compile_and_run():
  _, _, (params, opt_state, tokens), want = _problem()
  compiled = _lowered().compile()
  got = compiled(params, opt_state, tokens)
  np.testing.assert_allclose(float(got[2]), float(want[2]), rtol=1e-6)
  # (In NumPy, float64: no compile per leaf shape.)
  assert_close_over_the_tree(got[0], want[0])
  return compiled


def _backward_calls(compiled):
  """Per mesh, its backward calls (those of a unit named B... or F...+B...)
  in program order."""
  out = {}
  for inst in compiled.instructions:
    if isinstance(inst, mpmd.run.program.CallInstruction) and inst.unit and "B" in inst.unit:
      out.setdefault(inst.mesh, []).append(inst)
  return out


@pytest.mark.slow
def test_backward_calls_add_partial_sums_and_the_update_reduces_them():
  compiled = _compile_and_run()
  backward = _backward_calls(compiled)
  assert sorted(backward) == [f"m{i}" for i in range(MESHES)]
  for mesh, calls in backward.items():
    assert len(calls) == MICROBATCHES, mesh
    for call in calls:
      # Per microbatch, only the loss (a scalar) is reduced: not a gradient,
      # not even the embedding's (a scatter-add of the split batch's rows).
      assert set(_reduced_shapes(call)) <= {"f32[]"}, (mesh, call.unit, _reduced_shapes(call))
      held = [s for s in call.fragment.output_shardings if s.spec.unreduced]
      assert held, (mesh, call.unit)  # its accumulators stay partial sums
  # The updates reduce every gradient once.
  updates = [i for i in compiled.instructions
             if isinstance(i, mpmd.run.program.CallInstruction) and not i.unit]
  reduced = sum(len(_reduced_shapes(u)) for u in updates)
  assert reduced >= 2 * LAYERS  # (each block has two Dense kernels, among others)


def test_without_partial_sums_every_backward_call_reduces_its_gradients(monkeypatch):
  monkeypatch.setenv(knobs.MPMD_PARTIAL_SUMS, "0")
  compiled = _compile_and_run()
  for mesh, calls in _backward_calls(compiled).items():
    for call in calls:
      assert any(s != "f32[]" for s in _reduced_shapes(call)), (mesh, call.unit)
      assert not any(s.spec.unreduced for s in call.fragment.output_shardings)


class _PositionsLM(nn.Module):
  """`_LM` with learned positions looked up as Hugging Face's GPT-2 does:
  by indices made with `arange` (the same on every device, not split with
  the batch)."""

  @nn.compact
  def __call__(self, tokens):
    positions = jnp.broadcast_to(jnp.arange(tokens.shape[-1]), tokens.shape)
    h = nn.Embed(VOCAB, WIDTH, name="wte")(tokens) + nn.Embed(SEQ, WIDTH, name="wpe")(positions)
    for i in range(LAYERS):
      h = _Block(name=f"h_{i}")(h)
    return nn.Dense(VOCAB)(nn.LayerNorm()(h))


@pytest.mark.slow
def test_a_lookup_by_replicated_indices_is_reduced_and_the_step_equals_jax_jit():
  """The positions' gradient is a scatter-add of the split batch's rows at
  indices the backward receives whole (replicated): not a sum Shardy keeps
  split over the batch, so the scatter is computed whole (marking its result
  unreduced made XLA abort the process while compiling the first mesh's
  backward); the tokens' embedding, looked up by indices split with the
  batch, is still summed per device."""
  model, optimizer = _PositionsLM(), optax.adamw(1e-2)
  tokens = jax.random.randint(jax.random.key(1), (MICROBATCHES, 4, SEQ + 1), 0, VOCAB)
  params = model.init(jax.random.key(0), tokens[0, :, :-1])["params"]
  opt_state = optimizer.init(params)
  want = jax.jit(_step_fn(model, optimizer, False))(params, opt_state, tokens)
  config = mpmd.make_config(
      make_topology(MESHES, 2), {f"block{i}": f"m{i}" for i in range(LAYERS)},
      pipeline_schedule="1F1B")
  compiled = mpmd.jit(_step_fn(model, optimizer, True), config,
                      in_shardings=(None, None, P(None, "x"))).lower(
                          params, opt_state, tokens).compile()
  got = compiled(params, opt_state, tokens)
  np.testing.assert_allclose(float(got[2]), float(want[2]), rtol=1e-6)
  assert_close_over_the_tree(got[0], want[0])
  # The first mesh's backward calls still hold their accumulators as partial
  # sums (the positions' whole gradient is added to its accumulator's share),
  # and none of them reduces the tokens' embedding gradient.
  for call in _backward_calls(compiled)["m0"]:
    held = {tuple(a.shape) for a, s in zip(call.fragment.out_avals, call.fragment.output_shardings)
            if s.spec.unreduced}
    assert {(VOCAB, WIDTH), (SEQ, WIDTH)} <= held, (call.unit, held)
    assert f"f32[{VOCAB},{WIDTH}]" not in _reduced_shapes(call), (call.unit, _reduced_shapes(call))
