"""JaxPP's tutorial program, scaled down to 8 CPU devices, on mpmd.

The program of JaxPP's tutorial notebook (a transformer of attention + MLP
blocks with `pipeline_enter_stage` markers, `treduce` over 4 microbatches,
optax AdamW through a flax TrainState, `mpmd_jit_with_loop` with FSDP
PartitionSpecs on an `MpmdMesh` of 4 stages) with one change: the import
(``from mpmd import jaxpp`` instead of ``import jaxpp.api``). Differences
from the notebook, all for a CPU run: smaller sizes (flags below), random
inputs and targets instead of all-ones (which make every LayerNorm input
constant), no profiler trace, and the step also runs under plain `jax.jit`
for comparison:

  python examples/jaxpp_tutorial.py                       # Interleaved1F1B(4 stages, mpmd_dim 4)
  python examples/jaxpp_tutorial.py --schedule Interleaved1F1B --stages 8   # 2 stages per group
  python examples/jaxpp_tutorial.py --schedule ZeroBubble --steps 3

It prints the losses of both runs and the largest relative differences of
the losses (elementwise) and of the parameters and optimizer state
(normwise per leaf), and exits non-zero if they exceed ``--rtol``. The
attention key biases are compared separately: their gradient is zero in
exact arithmetic (softmax ignores a constant added to all logits of a query),
so Adam turns rounding noise into steps of about the learning rate whose sign
depends on how XLA fused the math; they are checked against that bound
(``2 * lr * steps``) instead.
"""

import argparse
import os
import sys
import time

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

from functools import partial  # noqa: E402

import flax.linen as nn  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
from flax.training import train_state  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

from mpmd import jaxpp  # noqa: E402  (JaxPP: import jaxpp.api)

pipeline_yield = jaxpp.api.pipeline_enter_stage

# Model parameters (the notebook: 4, 8, 2048, 1024, 4 * 1024, 8); set by main().
NUM_MB = 4
BATCH_SIZE = 8
SEQ_LEN = 16
D_MODEL = 64
MLP_DIM = 4 * D_MODEL
NUM_LAYERS = 8
LEARNING_RATE = 0.001

SCHEDULES = ("Interleaved1F1B", "Std1F1B", "Eager1F1B", "GPipe", "ZeroBubble", "KimiK2")


class Block(nn.Module):
  @nn.remat
  @nn.jit
  @nn.compact
  def __call__(self, x):
    attn_output = nn.MultiHeadDotProductAttention(num_heads=8, qkv_features=D_MODEL // 8)(x)
    x = x + attn_output
    x = nn.LayerNorm()(x)

    # Feed-forward network
    mlp_output = nn.Dense(features=MLP_DIM)(x)
    mlp_output = nn.gelu(mlp_output)
    mlp_output = nn.Dense(features=x.shape[-1])(mlp_output)
    x = x + mlp_output
    x = nn.LayerNorm()(x)

    return x


class AnnotatedTransformer(nn.Module):
  num_stages: int

  @nn.compact
  def __call__(self, x):
    for i in range(NUM_LAYERS):
      x = Block(name=f"block_{i}")(x)
      if (i + 1) % (NUM_LAYERS // self.num_stages) == 0:
        x = pipeline_yield(x)  # NEW: added pipeline_yield
    return x


def init_state(model, dummy_input):
  key = jax.random.PRNGKey(0)
  params = model.init(key, dummy_input)["params"]
  optimizer = optax.adamw(learning_rate=LEARNING_RATE)
  return train_state.TrainState.create(apply_fn=model.apply, params=params, tx=optimizer)


def loss_fn(state, params, x, targets):
  x, targets = jax.lax.with_sharding_constraint((x, targets), jax.sharding.PartitionSpec("fsdp"))
  predictions = state.apply_fn({"params": params}, x)
  return jnp.mean((predictions - targets) ** 2)


def train_step(state, xs, targets, schedule):
  """Trains the model for one step."""

  grad_fn = jax.value_and_grad(partial(loss_fn, state))

  def scan_fn(in_):
    x, targets = in_
    return grad_fn(state.params, x, targets)

  loss_acc, grads_acc = jaxpp.api.treduce(  # NEW: replaced scan with treduce
      scan_fn,
      (
          xs.reshape(NUM_MB, -1, *xs.shape[1:]),
          targets.reshape(NUM_MB, -1, *targets.shape[1:]),
      ),
      schedule=schedule,  # NEW: added schedule
      operation=jaxpp.api.Add,  # State update operation
  )

  state = state.apply_gradients(grads=grads_acc)
  return state, loss_acc


def fsdp_in_shardings(state, mesh):
  """Data parallel + ZeRO 3 sharding on data."""
  return (
      jax.tree.map(
          lambda _: jax.NamedSharding(mesh, P("fsdp"))
          if len(getattr(_, "shape", [])) > 0
          else jax.NamedSharding(mesh, P()),
          state,
      ),
      jax.NamedSharding(mesh, P("fsdp")),
      jax.NamedSharding(mesh, P("fsdp")),
  )


def make_schedule(name: str, num_stages: int, mpmd_dim: int):
  cls = getattr(jaxpp.api, name)
  if name in ("Interleaved1F1B", "KimiK2"):
    return cls(num_stages=num_stages, mpmd_dim=mpmd_dim)
  return cls(num_stages)


def train(step, state, xs, targets, num_steps):
  losses = []
  for _ in range(num_steps):
    state, loss = step(state, xs, targets)
    losses.append(np.asarray(loss))
  jax.block_until_ready(state)
  return state, losses


def _is_key_bias(path) -> bool:
  return "['key']['bias']" in jax.tree_util.keystr(path)


def compare(got, want):
  """(largest normwise relative difference of the leaves that are not key
  biases, largest absolute difference of the key-bias parameters)."""
  worst, key_bias = 0.0, 0.0
  for (path, a), b in zip(jax.tree_util.tree_flatten_with_path(got)[0], jax.tree.leaves(want)):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if _is_key_bias(path):
      key_bias = max(key_bias, float(np.max(np.abs(a - b), initial=0.0)))
      continue
    ref = np.linalg.norm(b)
    err = np.linalg.norm(a - b)
    worst = max(worst, float(err / ref) if ref > 0 else float(err))
  return worst, key_bias


def main(argv=None) -> int:
  global NUM_MB, BATCH_SIZE, SEQ_LEN, D_MODEL, MLP_DIM, NUM_LAYERS
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--schedule", default="Interleaved1F1B", choices=SCHEDULES)
  parser.add_argument("--stages", type=int, default=4, help="pipeline stages (markers)")
  parser.add_argument("--mpmd-dim", type=int, default=4, help="groups along the 'stage' axis")
  parser.add_argument("--devices", type=int, default=len(jax.devices()),
                      help="devices to use (the first ones), split into the groups")
  parser.add_argument("--layers", type=int, default=8)
  parser.add_argument("--d-model", type=int, default=64, help="a multiple of 64 (8 heads)")
  parser.add_argument("--seq", type=int, default=16)
  parser.add_argument("--batch", type=int, default=8)
  parser.add_argument("--microbatches", type=int, default=4)
  parser.add_argument("--steps", type=int, default=4)
  parser.add_argument("--rtol", type=float, default=1e-5)
  args = parser.parse_args(argv)
  NUM_MB, BATCH_SIZE, SEQ_LEN = args.microbatches, args.batch, args.seq
  D_MODEL, MLP_DIM, NUM_LAYERS = args.d_model, 4 * args.d_model, args.layers
  if D_MODEL % 64 or NUM_LAYERS % args.stages or BATCH_SIZE % NUM_MB:
    parser.error("need d_model % 64 == 0, layers % stages == 0 and batch % microbatches == 0")
  devices = np.array(jax.devices()[:args.devices])
  if len(devices) % args.mpmd_dim:
    parser.error(f"{len(devices)} devices do not split into {args.mpmd_dim} groups")

  # MPMD mesh: the notebook's ("stage", "fsdp") mesh over all devices.
  mesh = jax.sharding.Mesh(devices.reshape(args.mpmd_dim, -1), ("stage", "fsdp"))
  mpmd_mesh = jaxpp.api.MpmdMesh(mesh, "stage")
  schedule = make_schedule(args.schedule, args.stages, mpmd_mesh.mpmd_dim)
  print(f"{schedule}: rank 0 runs {[str(t) for t in schedule.tasks(NUM_MB)[0] if t]}")

  kx, ky = jax.random.split(jax.random.key(1))
  xs = jax.random.normal(kx, (BATCH_SIZE, SEQ_LEN, D_MODEL))
  targets = jax.random.normal(ky, (BATCH_SIZE, SEQ_LEN, D_MODEL))
  ann_transformer = AnnotatedTransformer(num_stages=args.stages)
  ann_state = init_state(ann_transformer, xs)
  in_shardings = fsdp_in_shardings(ann_state, mesh)
  inputs = (ann_state, xs, targets)

  start = time.perf_counter()
  mpmd_in_specs = jax.tree.map(lambda _: _.spec, in_shardings)
  pp_train_step = jaxpp.api.mpmd_jit_with_loop(
      partial(train_step, schedule=schedule),
      in_specs=mpmd_in_specs,
      out_specs=(mpmd_in_specs[0], jax.sharding.PartitionSpec()),
      mpmd_mesh=mpmd_mesh,
  ).compile(*inputs)
  print(f"mpmd compile: {time.perf_counter() - start:.1f} s, "
        f"{len(pp_train_step.compiled.program.fragments)} programs")
  with jax.set_mesh(mesh):
    start = time.perf_counter()
    pp_state, pp_losses = train(pp_train_step, ann_state, xs, targets, args.steps)
    pp_time = time.perf_counter() - start

  # The same step under plain jax.jit (treduce is an accumulation loop), with
  # the SPMD layout of one stage: FSDP over the devices of one group.
  group_mesh = mpmd_mesh.lowering_mesh()
  with jax.set_mesh(group_mesh):
    reference = jax.jit(partial(train_step, schedule=schedule),
                        in_shardings=fsdp_in_shardings(ann_state, group_mesh))
    start = time.perf_counter()
    ref_state, ref_losses = train(reference, ann_state, xs, targets, args.steps)
    ref_time = time.perf_counter() - start

  for i, (a, b) in enumerate(zip(pp_losses, ref_losses)):
    print(f"step {i + 1}: loss mpmd {float(a):.7f}  jax.jit {float(b):.7f}")
  print(f"mpmd {pp_time:.2f} s, jax.jit {ref_time:.2f} s (both including compilation of jax.jit)")
  loss_diff = max(float(np.max(np.abs(a - b) / np.abs(b))) for a, b in zip(pp_losses, ref_losses))
  params_diff, params_kb = compare(pp_state.params, ref_state.params)
  opt_diff, _ = compare(pp_state.opt_state, ref_state.opt_state)
  bound = 2 * LEARNING_RATE * args.steps
  print(f"largest relative difference from jax.jit: loss {loss_diff:.2e}, params {params_diff:.2e},"
        f" optimizer state {opt_diff:.2e} (normwise per leaf); key biases "
        f"{params_kb:.2e} absolute (bound {bound:.0e})")
  block = pp_state.params["block_0"]["Dense_0"]["kernel"]
  print(f"block_0 Dense_0 kernel on group {mpmd_mesh.mpmd_idx_of(block)}: {block.sharding}")
  ok = max(loss_diff, params_diff, opt_diff) <= args.rtol and params_kb <= bound
  print("OK" if ok else f"MISMATCH (rtol {args.rtol})")
  return 0 if ok else 1


if __name__ == "__main__":
  sys.exit(main())
