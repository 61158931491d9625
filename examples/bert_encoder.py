"""A BERT-like encoder trained with a masked-language-model loss, pipelined
over 2 (or 4) meshes of the 8 CPU devices and checked against `jax.jit`.

The encoder has bidirectional self-attention (no causal mask), post-LayerNorm
blocks as in BERT, learned position embeddings and an MLM head whose output
projection is tied to the input token embedding. Each stage is a
`mpmd.named_computation`; the first stage embeds the tokens, the last one runs
the MLM head. The tied embedding table is therefore used on two meshes: the
first (embedding lookup) and the last (output projection). The partitioning
option `mpmd_infer_cross_mesh_reductions` lets the compiler sum its two
gradient contributions across the meshes, and the SGD update of the table runs
once.

Each microbatch masks 15% of the tokens (replacing them by a [MASK] id); the
loss is the cross-entropy on the masked positions only.

  python examples/bert_encoder.py                           # 2 meshes x 4 devices, GPipe
  python examples/bert_encoder.py --meshes 4 --schedule 1F1B --layers 8
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import flax.linen as nn  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

import mpmd  # noqa: E402

MASK_ID = 0  # token id reserved for [MASK]; real tokens are 1..vocab-1


class EncoderBlock(nn.Module):
  """BERT's post-LayerNorm block: bidirectional attention, then an MLP."""
  num_heads: int

  @nn.compact
  def __call__(self, x):
    width = x.shape[-1]
    x = nn.LayerNorm()(x + nn.MultiHeadDotProductAttention(num_heads=self.num_heads)(x))
    h = nn.Dense(4 * width)(x)
    return nn.LayerNorm()(x + nn.Dense(width)(nn.gelu(h)))


class Embeddings(nn.Module):
  """Position embeddings and the embedding LayerNorm (the token table is
  passed in: it is shared with the MLM head)."""

  @nn.compact
  def __call__(self, table, tokens):
    x = jnp.take(table, tokens, axis=0)
    shape = (tokens.shape[1], table.shape[1])
    positions = self.param("positions", nn.initializers.normal(0.02), shape)
    return nn.LayerNorm()(x + positions)


class MlmHead(nn.Module):
  """Transform (dense, gelu, LayerNorm), then logits against the token table."""

  @nn.compact
  def __call__(self, table, x):
    x = nn.LayerNorm()(nn.gelu(nn.Dense(x.shape[-1])(x)))
    bias = self.param("bias", nn.initializers.zeros, (table.shape[0],))
    return x @ table.T + bias


class Stage(nn.Module):
  """Encoder blocks of one pipeline stage, with the embeddings (first stage)
  and the MLM head (last stage)."""
  num_blocks: int
  num_heads: int
  first: bool
  last: bool

  @nn.compact
  def __call__(self, table, x):
    if self.first:
      x = Embeddings(name="embeddings")(table, x)
    for i in range(self.num_blocks):
      x = EncoderBlock(self.num_heads, name=f"block_{i}")(x)
    if self.last:
      x = MlmHead(name="mlm_head")(table, x)
    return x


def make_model(num_meshes: int, layers: int, heads: int) -> list[Stage]:
  if layers % num_meshes:
    raise SystemExit(f"--layers {layers} must be a multiple of --meshes {num_meshes}")
  return [Stage(layers // num_meshes, heads, first=s == 0, last=s == num_meshes - 1)
          for s in range(num_meshes)]


def init_params(stages: Sequence[Stage], vocab: int, width: int, batch: int, seq: int):
  """`{"token_table": [vocab, width], "stages": [params of each stage]}`.

  Built part by part, as `Stage.init` would: every block has the same shapes,
  so one compiled block initializer serves all of them.
  """
  keys = iter(jax.random.split(jax.random.key(0), sum(s.num_blocks for s in stages) + 3))
  table = jax.random.normal(next(keys), (vocab, width)) * 0.02
  x = jnp.zeros((batch, seq, width))
  tokens = jnp.zeros((batch, seq), jnp.int32)
  init_block = jax.jit(lambda key: EncoderBlock(stages[0].num_heads).init(key, x)["params"])
  init_embeddings = jax.jit(lambda key: Embeddings().init(key, table, tokens)["params"])
  init_head = jax.jit(lambda key: MlmHead().init(key, table, x)["params"])
  params = []
  for stage in stages:
    p = {f"block_{i}": init_block(next(keys)) for i in range(stage.num_blocks)}
    if stage.first:
      p["embeddings"] = init_embeddings(next(keys))
    if stage.last:
      p["mlm_head"] = init_head(next(keys))
    expected = jax.eval_shape(stage.init, jax.random.key(0), table, tokens if stage.first else x)
    assert (jax.tree.structure(expected["params"]) == jax.tree.structure(p) and
            jax.tree.map(lambda a: a.shape, expected["params"]) == jax.tree.map(jnp.shape, p)), \
        "the parameters built part by part must match Stage.init's"
    params.append(p)
  return {"token_table": table, "stages": params}


def make_train_step(stages: Sequence[Stage], optimizer: optax.GradientTransformation):
  labelled = [mpmd.named_computation(
      lambda p, table, h, stage=stage: stage.apply({"params": p}, table, h), name=f"stage{s}")
      for s, stage in enumerate(stages)]

  def loss_fn(params, batch):
    h = batch["inputs"]
    for stage, p in zip(labelled, params["stages"]):
      h = stage(p, params["token_table"], h)
    ce = optax.softmax_cross_entropy_with_integer_labels(h, batch["labels"])
    return jnp.sum(ce * batch["weights"]) / jnp.sum(batch["weights"])

  def train_step(params, opt_state, microbatches):
    loss, grads = jnp.zeros(()), jax.tree.map(jnp.zeros_like, params)
    for i, batch in enumerate(microbatches):
      def microbatch(loss, grads, batch):
        l, g = jax.value_and_grad(loss_fn)(params, batch)
        return loss + l, jax.tree.map(jnp.add, grads, g)
      loss, grads = mpmd.call(microbatch, call_counter=i)(loss, grads, batch)
    n = len(microbatches)
    updates, opt_state = optimizer.update(jax.tree.map(lambda g: g / n, grads), opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss / n

  return train_step


def make_data(num_microbatches: int, batch: int, seq: int, vocab: int, seed: int = 1):
  """Sequences that are palindromes of random tokens (so a masked token can be
  recovered from its mirror position), with 15% of positions masked."""
  k_tok, k_mask = jax.random.split(jax.random.key(seed))
  half = jax.random.randint(k_tok, (num_microbatches * batch, (seq + 1) // 2), 1, vocab)
  tokens = jnp.concatenate([half, half[:, ::-1]], axis=1)[:, :seq].astype(jnp.int32)
  masked = jax.random.bernoulli(k_mask, 0.15, tokens.shape)
  masked = masked.at[:, 0].set(True)  # at least one masked position per sequence
  inputs = jnp.where(masked, MASK_ID, tokens)
  split = lambda a: jnp.split(a, num_microbatches)  # noqa: E731
  return [{"inputs": i, "labels": l, "weights": w.astype(jnp.float32)}
          for i, l, w in zip(split(inputs), split(tokens), split(masked))]


def frozen_key_biases(params):
  """Optimizer labels: "frozen" for the attention key biases, else "train".

  A key bias adds the same number to every attention logit of a query, which
  softmax ignores: its true gradient is zero and AD returns rounding noise.
  Training it would only move it by noise, differently in any two
  compilations of the model, so it is kept at its initial value.
  """
  return jax.tree_util.tree_map_with_path(
      lambda path, _: "frozen" if "['key']['bias']" in jax.tree_util.keystr(path) else "train",
      params)


def _mesh_of(array: jax.Array, topology) -> str:
  return next(name for name, mesh in topology.items()
              if set(mesh.devices.flat) == array.sharding.device_set)


def main(argv: Sequence[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                   formatter_class=argparse.ArgumentDefaultsHelpFormatter)
  parser.add_argument("--meshes", type=int, default=2, choices=(2, 4))
  parser.add_argument("--schedule", default="GPipe", help="a built-in schedule with one stage "
                      "per mesh (GPipe, 1F1B, Eager1F1B, ZeroBubbleH1, ...)")
  parser.add_argument("--microbatches", type=int, default=4)
  parser.add_argument("--layers", type=int, default=4, help="encoder blocks in all")
  parser.add_argument("--width", type=int, default=64)
  parser.add_argument("--heads", type=int, default=4)
  parser.add_argument("--vocab", type=int, default=96)
  parser.add_argument("--seq", type=int, default=16)
  parser.add_argument("--batch", type=int, default=8, help="sequences per microbatch")
  parser.add_argument("--steps", type=int, default=6)
  parser.add_argument("--learning-rate", type=float, default=0.2)
  args = parser.parse_args(argv)

  devices = np.array(jax.devices())
  per_mesh = len(devices) // args.meshes
  topology = {f"m{i}": jax.sharding.Mesh(devices[i * per_mesh:(i + 1) * per_mesh], ("data",))
              for i in range(args.meshes)}
  config = mpmd.make_config(topology, {f"stage{s}": f"m{s}" for s in range(args.meshes)},
                            partitioning_options={"mpmd_infer_cross_mesh_reductions": True},
                            pipeline_schedule=args.schedule)
  stages = make_model(args.meshes, args.layers, args.heads)
  params = init_params(stages, args.vocab, args.width, args.batch, args.seq)
  optimizer = optax.multi_transform(
      {"train": optax.sgd(args.learning_rate, momentum=0.9), "frozen": optax.set_to_zero()},
      frozen_key_biases(params))
  opt_state = optimizer.init(params)
  data = make_data(args.microbatches, args.batch, args.seq, args.vocab)
  train_step = make_train_step(stages, optimizer)

  t0 = time.perf_counter()
  compiled = mpmd.jit(train_step, config).lower(params, opt_state, data).compile()
  print(f"BERT-like encoder: {args.layers} blocks of width {args.width} on {args.meshes} meshes x "
        f"{per_mesh} CPU devices, schedule {args.schedule}, {args.microbatches} microbatches; "
        f"compiled in {time.perf_counter() - t0:.1f}s")
  reference = jax.jit(train_step)

  print(f"\n{'step':>4}  {'MLM loss':>9}  {'jax.jit':>9}  {'step ms':>8}")
  ref_params, ref_opt_state, worst = params, opt_state, 0.0
  for step in range(args.steps):
    t0 = time.perf_counter()
    params, opt_state, loss = jax.block_until_ready(compiled(params, opt_state, data))
    elapsed = time.perf_counter() - t0
    ref_params, ref_opt_state, ref_loss = reference(ref_params, ref_opt_state, data)
    loss, ref_loss = float(loss), float(ref_loss)
    worst = max(worst, abs(loss - ref_loss) / abs(ref_loss))
    print(f"{step:>4}  {loss:>9.5f}  {ref_loss:>9.5f}  {elapsed * 1e3:>8.1f}")
  params_err = max(float(np.linalg.norm(np.asarray(a, np.float64) - np.asarray(b, np.float64))
                         / max(np.linalg.norm(np.asarray(b, np.float64)), 1e-12))
                   for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(ref_params)))
  print(f"\nlargest relative difference from jax.jit: loss {worst:.1e}, "
        f"parameters {params_err:.1e} (normwise, per array)")
  print(f"the tied token table lives on {_mesh_of(params['token_table'], topology)}; "
        + ", ".join(f"stage{s} on {_mesh_of(jax.tree.leaves(p)[0], topology)}"
                    for s, p in enumerate(params["stages"])))
  return 0 if worst < 1e-5 and params_err < 1e-4 else 1


if __name__ == "__main__":
  sys.exit(main())
