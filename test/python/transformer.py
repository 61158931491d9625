"""The seed tutorial's transformer (attention + MLP blocks, LayerNorm, remat),
scaled down for CPU, with pipeline labels on block groups only."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from flax.training import train_state

import mpmd

D_MODEL = 32
NUM_HEADS = 4
MLP_DIM = 4 * D_MODEL


class Block(nn.Module):
  """Attention + MLP with residuals and LayerNorm, rematerialised."""

  @nn.remat
  @nn.jit
  @nn.compact
  def __call__(self, x):
    attn = nn.MultiHeadDotProductAttention(num_heads=NUM_HEADS, qkv_features=D_MODEL)(x)
    x = nn.LayerNorm()(x + attn)
    h = nn.Dense(features=MLP_DIM)(x)
    h = nn.gelu(h)
    h = nn.Dense(features=x.shape[-1])(h)
    return nn.LayerNorm()(x + h)


class BlockGroup(nn.Module):
  """`num_blocks` consecutive blocks: one pipeline stage."""
  num_blocks: int

  @nn.compact
  def __call__(self, x):
    for i in range(self.num_blocks):
      x = Block(name=f"block_{i}")(x)
    return x


class Transformer(nn.Module):
  num_groups: int
  blocks_per_group: int

  @nn.compact
  def __call__(self, x):
    for g in range(self.num_groups):
      x = BlockGroup(self.blocks_per_group, name=f"group_{g}")(x)
    return x


def _frozen_key_bias(params):
  """Labels: the attention key biases are "frozen", everything else "train"."""
  return jax.tree_util.tree_map_with_path(
      lambda path, _: "frozen" if "['key']['bias']" in jax.tree_util.keystr(path) else "train",
      params)


def make_state(num_groups: int = 4, blocks_per_group: int = 2, batch: int = 4, seq: int = 8,
               learning_rate: float = 1e-3) -> train_state.TrainState:
  """AdamW on every parameter but the attention key biases.

  The gradient of a key bias is identically zero (softmax is invariant to a
  constant added to all logits of a query), so what AD computes for it is
  rounding noise, and Adam turns noise into +-learning-rate steps whose sign
  depends on how the compiler fused the math. Training them is meaningless and
  would make any two compilations of the model disagree; they are kept fixed.
  """
  model = Transformer(num_groups, blocks_per_group)
  params = model.init(jax.random.key(0), jnp.ones((batch, seq, D_MODEL)))["params"]
  tx = optax.multi_transform({"train": optax.adamw(learning_rate=learning_rate),
                              "frozen": optax.set_to_zero()}, _frozen_key_bias(params))
  return train_state.TrainState.create(apply_fn=model.apply, params=params, tx=tx)


def make_data(batch: int = 4, seq: int = 8, seed: int = 1):
  kx, ky = jax.random.split(jax.random.key(seed))
  return (jax.random.normal(kx, (batch, seq, D_MODEL)),
          jax.random.normal(ky, (batch, seq, D_MODEL)))


def pipelined_apply(params, x, num_groups: int, blocks_per_group: int):
  """Runs the model group by group, each group a named computation `stage{g}`."""
  group = BlockGroup(blocks_per_group)
  for g in range(num_groups):
    x = mpmd.named_computation(lambda p, h: group.apply({"params": p}, h),
                               name=f"stage{g}")(params[f"group_{g}"], x)
  return x


def train_step(state: train_state.TrainState, x, y):
  num_groups = len(state.params)
  blocks = len(state.params["group_0"])

  def loss_fn(params):
    predictions = pipelined_apply(params, x, num_groups, blocks)
    return jnp.mean((predictions - y) ** 2)

  loss, grads = jax.value_and_grad(loss_fn)(state.params)
  return state.apply_gradients(grads=grads), loss
