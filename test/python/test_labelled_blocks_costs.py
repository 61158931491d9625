"""What a finely labelled model with a tied embedding costs per step.

A GPT-style model with every block labelled on its own (two blocks to a
mesh) and its LM head tied to the token embedding: whatever the labels, a
mesh runs one forward and one backward call per microbatch
(`-mpmd-merge-user-fragments-into-scheduling-units`), and the embedding's
gradient from the head crosses once per step, not once per microbatch
(`-mpmd-sum-at-source`). Counts are deterministic: they are asserted; the
numbers still equal jax.jit's.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import mpmd
from models import assert_close_over_the_tree, make_topology

VOCAB, WIDTH, SEQ, LAYERS, MESHES = 64, 16, 8, 8, 4


class _Conv1D(nn.Module):
  """A dense layer whose kernel is stored (out, in) and read transposed, as
  Hugging Face's GPT-2 stores its `Conv1D` kernels."""
  features: int

  @nn.compact
  def __call__(self, x):
    kernel = self.param("kernel", nn.initializers.normal(0.02), (self.features, x.shape[-1]))
    return x @ kernel.T + self.param("bias", nn.initializers.zeros, (self.features,))


class _Block(nn.Module):
  conv: bool = False
  width: int = WIDTH

  @nn.compact
  def __call__(self, x):
    dense = _Conv1D if self.conv else nn.Dense
    h = dense(2 * self.width)(nn.LayerNorm()(x))
    return x + dense(self.width)(nn.gelu(h))


class _TiedLM(nn.Module):
  """No mpmd in it: labelled from outside. `remat`: blocks in `nn.remat`;
  `conv`: their kernels read transposed (`_Conv1D`)."""
  remat: bool = False
  conv: bool = False
  width: int = WIDTH

  @nn.compact
  def __call__(self, tokens):
    wte = nn.Embed(VOCAB, self.width, name="wte")
    h = wte(tokens)
    block = nn.remat(_Block) if self.remat else _Block
    for i in range(LAYERS):
      h = block(conv=self.conv, width=self.width, name=f"h_{i}")(h)
    return wte.attend(nn.LayerNorm()(h))


def _label(next_fun, args, kwargs, context):
  name = context.module.name or ""
  if name.startswith("h_") and context.method_name == "__call__":
    return mpmd.named_computation(lambda *a: next_fun(*a, **kwargs), name=f"block{name[2:]}")(*args)
  return next_fun(*args, **kwargs)


def _step_fn(model, optimizer, microbatches, labelled):
  def loss_fn(params, tokens):
    if labelled:
      with nn.intercept_methods(_label):
        logits = model.apply({"params": params}, tokens[:, :-1])
    else:
      logits = model.apply({"params": params}, tokens[:, :-1])
    return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()

  grad_fn = jax.jit(jax.value_and_grad(loss_fn))

  def step(params, opt_state, tokens):
    grads = jax.tree.map(jnp.zeros_like, params)
    loss = jnp.zeros(())
    for i in range(microbatches):
      fn = mpmd.call(grad_fn, call_counter=i) if labelled else grad_fn
      l, g = fn(params, tokens[i])
      loss, grads = loss + l, jax.tree.map(jnp.add, grads, g)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss / microbatches

  return step


def _compile(model, optimizer, microbatches, **options):
  """The labelled step compiled for two blocks to a mesh (1F1B with
  microbatches), and its arguments."""
  tokens = jax.random.randint(jax.random.key(1), (microbatches, 2, SEQ + 1), 0, VOCAB)
  params = model.init(jax.random.key(0), tokens[0, :, :-1])["params"]
  opt_state = optimizer.init(params)
  per_mesh = LAYERS // MESHES
  config = mpmd.make_config(
      make_topology(MESHES, 1), {f"block{i}": f"m{i // per_mesh}" for i in range(LAYERS)},
      pipeline_schedule="1F1B" if microbatches > 1 else None,
      partitioning_options={"mpmd_infer_cross_mesh_reductions": True, **options})
  step = _step_fn(model, optimizer, microbatches, labelled=True)
  args = (params, opt_state, tokens)
  return mpmd.jit(step, config).lower(*args).compile(), args


def _assert_equal_to_jax_jit(compiled, model, optimizer, microbatches, *args):
  """One step of `compiled` equals `jax.jit`'s of the unlabelled step: the
  loss, and the parameters normwise over the whole tree."""
  want = jax.jit(_step_fn(model, optimizer, microbatches, labelled=False))(*args)
  got = compiled(*args)
  np.testing.assert_allclose(float(got[2]), float(want[2]), rtol=1e-6)
  # (In NumPy, float64: no compile per leaf shape.)
  assert_close_over_the_tree(got[0], want[0])


@pytest.mark.parametrize("microbatches", [1, 4])
@pytest.mark.slow
def test_one_forward_and_one_backward_per_mesh_and_microbatch(microbatches):
  model, optimizer = _TiedLM(), optax.adamw(1e-2)
  compiled, (params, opt_state, tokens) = _compile(model, optimizer, microbatches)
  per_mesh = LAYERS // MESHES
  calls = [i for i in compiled.instructions if isinstance(i, mpmd.run.program.CallInstruction)]
  units = [c for c in calls if c.origins]
  # One forward and one backward call per mesh and microbatch; the last
  # mesh's forward and backward of a microbatch run as one call.
  assert len(units) == microbatches * (2 * MESHES - 1)
  for call in units:
    blocks = {o.split("(")[0] for o in call.origins}
    assert len(blocks) == per_mesh, call  # both blocks of the mesh in one call
  # The embedding's gradient from the head (last mesh) crosses once per step.
  embedding_sized = [
      i for i in compiled.instructions
      if not isinstance(i, mpmd.run.program.CallInstruction) and i.src_mesh == f"m{MESHES - 1}"
      and i.mesh == "m0" and i.sharding.shard_shape((VOCAB, WIDTH)) == (VOCAB, WIDTH)
      and _value_shape(compiled, i.operands[0]) == (VOCAB, WIDTH)]
  assert len(embedding_sized) == 1

  _assert_equal_to_jax_jit(compiled, model, optimizer, microbatches, params, opt_state, tokens)

  # The memory report covers microbatched programs (the runtime's constants
  # included). Its estimate counts each call's scratch space (XLA's temp
  # buffers), which the measurement between calls cannot see, so at this tiny
  # size it is the larger; it must not miss what lives between calls. (On
  # GPT-2 the two agree within 1%: benchmarks/RESULTS.md, section (j).)
  report = compiled.memory_report(params, opt_state, tokens)
  for mesh in report.meshes:
    assert mesh.estimated_peak >= 0.85 * mesh.measured_peak, mesh


@pytest.mark.parametrize("microbatches", [1, 4])
@pytest.mark.slow
def test_remat_blocks_send_each_activation_once(microbatches):
  """Blocks in `nn.remat`: `jax.checkpoint` puts an optimization barrier over
  what each block's recomputation reads (its input, its parameters). The
  barrier runs with the recomputation, so a mesh's input activation crosses
  once per microbatch (the forward and the recomputation read that one
  transfer), no forward returns copies of its parameters, and the
  recomputation runs in the backward call: one forward and one backward call
  per mesh and microbatch, with or without microbatches."""
  model, optimizer = _TiedLM(remat=True), optax.adamw(1e-2)
  compiled, (params, opt_state, tokens) = _compile(model, optimizer, microbatches,
                                                   mpmd_pack_fragment_values=False)
  calls = [i for i in compiled.instructions if isinstance(i, mpmd.run.program.CallInstruction)]
  assert len([c for c in calls if c.origins]) == microbatches * (2 * MESHES - 1)
  activation = (2, SEQ, WIDTH)
  for s in range(MESHES - 1):
    forward = [i for i in compiled.instructions
               if not isinstance(i, mpmd.run.program.CallInstruction)
               and (i.src_mesh, i.mesh) == (f"m{s}", f"m{s + 1}")
               and _value_shape(compiled, i.operands[0]) == activation]
    assert len(forward) == microbatches, (s, [str(i) for i in forward])
  block_params = {tuple(x.shape) for x in jax.tree.leaves(params["h_0"])}
  for call in calls:
    if call.origins and not any("(" in o for o in call.origins):  # a forward
      returned = {tuple(a.shape) for a in call.fragment.out_avals}
      assert not returned & (block_params - {activation}), (call, returned)

  _assert_equal_to_jax_jit(compiled, model, optimizer, microbatches, params, opt_state, tokens)


@pytest.mark.slow
def test_forwards_do_not_hand_their_backwards_transposed_weights():
  """Kernels read transposed (`x @ kernel.T`, Hugging Face's `Conv1D`): JAX's
  differentiation saves `kernel.T` for the backward. The backward, on the
  same mesh, gets the kernel itself and transposes it
  (-mpmd-recompute-operand-views): no forward call returns a transposed
  kernel (it does with the pass off), and the step equals jax.jit's.
  (Kernels of 32 KiB: a view under 16 KiB that the backward would take as a
  new operand is handed over, packed with the forward's other values.)"""
  microbatches, width = 4, 64
  model, optimizer = _TiedLM(conv=True, width=width), optax.adamw(1e-2)
  transposed = {(width, 2 * width), (2 * width, width)}

  def forward_results(compiled):
    calls = [i for i in compiled.instructions
             if isinstance(i, mpmd.run.program.CallInstruction) and i.origins
             and not any("(" in o for o in i.origins)]  # the forwards
    assert len(calls) == microbatches * (MESHES - 1)
    return [tuple(a.shape) for c in calls for a in c.fragment.out_avals]

  # (Values unpacked: on CPU values up to 16 KiB travel packed in one buffer.)
  apart, _ = _compile(model, optimizer, microbatches, mpmd_pack_fragment_values=False,
                      mpmd_recompute_operand_views=False)
  assert sum(s in transposed for s in forward_results(apart)) == 2 * 2 * microbatches * (MESHES - 1)
  compiled, args = _compile(model, optimizer, microbatches, mpmd_pack_fragment_values=False)
  assert not any(s in transposed for s in forward_results(compiled))
  _assert_equal_to_jax_jit(compiled, model, optimizer, microbatches, *args)


def _value_shape(compiled, value):
  """The shape of a program value (an input or a call's result)."""
  program, sig = compiled.program, compiled.signature
  shapes = {v: tuple(a.shape) for v, a in zip(program.input_ids, sig.kept_avals)}
  for inst in program.instructions:
    if isinstance(inst, mpmd.run.program.CallInstruction):
      shapes.update((v, tuple(a.shape)) for v, a in zip(inst.results, inst.fragment.out_avals))
  return shapes.get(value)


@pytest.mark.parametrize("remat", [False, True])
@pytest.mark.slow
def test_weight_gradients_are_computed_once_for_the_microbatches(remat):
  """`mpmd_batch_weight_gradients`: each mesh computes the weight gradients
  of its microbatches in one call, from their inputs concatenated along the
  batch (-mpmd-batch-weight-gradients), instead of one W call per
  microbatch; the embedding's scatter-add of the rows the first mesh's
  backward returns goes into that call. On the first mesh the last
  microbatch's W unit stays apart: its embedding gradient is summed with the
  tied head's from the last mesh. Blocks in `nn.remat` recompute their
  forward for the microbatches at once. The step equals jax.jit's (the
  gradients summed in another order)."""
  microbatches = 4
  model, optimizer = _TiedLM(remat=remat), optax.adamw(1e-2)

  def weight_units(compiled):
    calls = [i for i in compiled.instructions if isinstance(i, mpmd.run.program.CallInstruction)]
    return sorted((c.mesh, c.unit) for c in calls if "W" in c.unit)

  per_microbatch, _ = _compile(model, optimizer, microbatches, mpmd_split_bwd_fragments=True)
  assert len(weight_units(per_microbatch)) >= MESHES * microbatches - 2  # (some merged with a B)
  compiled, args = _compile(model, optimizer, microbatches, mpmd_batch_weight_gradients=True)
  everything = "+".join(f"W{i}" for i in range(microbatches))
  but_last = "+".join(f"W{i}" for i in range(microbatches - 1))
  assert weight_units(compiled) == sorted(
      [("m0", but_last), ("m0", f"W{microbatches - 1}")]
      + [(f"m{s}", everything) for s in range(1, MESHES)])
  _assert_equal_to_jax_jit(compiled, model, optimizer, microbatches, *args)
