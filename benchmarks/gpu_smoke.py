"""GPU smoke test: mpmd.jit against jax.jit on whatever accelerator JAX finds.

    python benchmarks/gpu_smoke.py             # on a GPU machine: pip install "jax[cuda12]==0.10.2"
    python benchmarks/gpu_smoke.py --size quick   # small models, 3 steps (the CPU default)

Builds meshes from the devices of JAX's default backend (the GPUs, one or more per
mesh; 1 device per mesh when that is all there is) and runs, under mpmd.jit and
jax.jit of the same step on the same devices:

* the 2-mesh MLP (one dense layer per mesh, SGD), and
* the demo transformer (examples/train_transformer.py through benchmarks/runtime.py's
  `Transformer`: flax attention + MLP blocks, AdamW, 1F1B over 4 microbatches; 4 meshes
  when there are at least 4 devices, else 2), the batch split over each mesh's "data"
  axis (jax.jit: over all the devices used);

then prints, per model, the normwise relative difference of the loss and of the
parameters from jax.jit's after the last step, and the median step times. Exits 1 when
a difference exceeds its tolerance: on CPU 1e-5 for the loss and 1e-4 for the
parameters (as `make demo`; AdamW amplifies rounding differences in tiny gradients).
On an accelerator XLA may run float32 matmuls in TF32, so the script measures how far
TF32 moves jax.jit itself: the same jax.jit steps again at
`jax.default_matmul_precision("highest")` (the "TF32 effect" columns); a difference from
jax.jit up to 4 times that effect (two runs each within it of the exact result, with
room for another order of summation), and never less than the CPU's tolerance, is
rounding. `--precision highest` runs everything at full float32 precision, where the
CPU's tolerances apply.

Without an accelerator it runs on 8 virtual CPU devices and says so. With a single
accelerator device the meshes share it (`make_config(shared_devices=True)`: 4 meshes of
that one device, taking turns on it) and jax.jit runs on it alone. Where it has been run
on a GPU is recorded in benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import sys
import time

# Only affects the CPU backend (the fallback); set before JAX starts.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

import mpmd  # noqa: E402


def pick_devices(one_device: bool = False) -> tuple[list, str]:
  """(the devices to use, a note on where they come from). A single
  accelerator device (or the first device, with `one_device`) is listed 4
  times: the meshes then share it (`make_config(shared_devices=True)`), one
  device each."""
  backend = jax.default_backend()
  devices = jax.devices()[:1] if one_device else jax.devices()
  if backend == "cpu" and not one_device:
    return devices, f"no accelerator found: running on {len(devices)} virtual CPU devices"
  if len(devices) < 2:
    return (devices * 4, f"one {backend} device ({devices[0].device_kind}) shared by the "
            "meshes, one device each")
  return devices, f"{len(devices)} {backend} devices ({devices[0].device_kind})"


def shares_devices(devices: list) -> bool:
  """Whether `devices` lists a device twice (meshes sharing one GPU)."""
  return len(set(devices)) < len(devices)


def rel_diff(got, want) -> float:
  """Largest leaf-wise |got - want| / |want| (normwise)."""
  worst = 0.0
  for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    worst = max(worst, float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-12)))
  return worst


def alternate(ours, ours_state, ref, ref_state, data, ref_data, *, steps: int, warmup: int):
  """Runs both steps in turn; (final states and losses, median ms of each)."""
  ours_t, ref_t = [], []
  for i in range(warmup + steps):
    t0 = time.perf_counter()
    ours_state, loss = jax.block_until_ready(ours(ours_state, data))
    t1 = time.perf_counter()
    ref_state, ref_loss = jax.block_until_ready(ref(ref_state, ref_data))
    t2 = time.perf_counter()
    if i >= warmup:
      ours_t.append(t1 - t0)
      ref_t.append(t2 - t1)
  return (ours_state, loss, ref_state, ref_loss,
          1e3 * statistics.median(ours_t), 1e3 * statistics.median(ref_t))


# ----------------------------------------------------------------------- the MLP
def mlp_case(devices, args):
  shared = shares_devices(devices)
  per_mesh = 1 if shared else len(devices) // 2
  topology = {f"m{i}": Mesh(np.array(devices[i * per_mesh:(i + 1) * per_mesh]), ("data",))
              for i in range(2)}
  config = mpmd.make_config(topology, {"stage0": "m0", "stage1": "m1"}, shared_devices=shared)
  width, batch = args.mlp_width, args.mlp_batch * 2 * per_mesh

  def loss_fn(params, x, y):
    h = mpmd.named_computation(lambda p, x: jnp.tanh(x @ p["w"] + p["b"]), name="stage0")(
        params[0], x)
    out = mpmd.named_computation(lambda p, h: h @ p["w"] + p["b"], name="stage1")(params[1], h)
    return jnp.mean((out - y) ** 2)

  def step(params, batch_xy):
    x, y = batch_xy
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    return jax.tree.map(lambda p, g: p - 0.05 * g, params, grads), loss

  k = jax.random.split(jax.random.key(0), 4)
  params = [{"w": jax.random.normal(k[0], (width, width)) / np.sqrt(width), "b": jnp.zeros(width)},
            {"w": jax.random.normal(k[1], (width, width)) / np.sqrt(width), "b": jnp.zeros(width)}]
  data = (jax.random.normal(k[2], (batch, width)), jax.random.normal(k[3], (batch, width)))
  all_devices = Mesh(np.array(list(dict.fromkeys(devices[:2 * per_mesh]))), ("data",))
  ours = mpmd.jit(step, config, in_shardings=(None, P("data")))
  ref = jax.jit(step, in_shardings=(NamedSharding(all_devices, P()),
                                    NamedSharding(all_devices, P("data"))))
  ref_data = jax.device_put(data, NamedSharding(all_devices, P("data")))
  label = (f"MLP, 2 meshes x {per_mesh}" + (" (one device, shared)" if shared else "")
           + f", width {width}, batch {batch}")
  return label, ours, params, ref, lambda: params, data, ref_data


# --------------------------------------------------------------- the transformer
def transformer_case(devices, args):
  import runtime  # noqa: PLC0415 -- benchmarks/runtime.py (imports flax, optax)
  meshes = 4 if len(devices) >= 4 else 2
  per_mesh = len(devices) // meshes
  # Meshes over the first devices of jax.devices() (= `devices`); the batch splits over
  # each mesh (mpmd.jit) and over all meshes x per_mesh devices (jax.jit).
  model = runtime.Transformer(layers=args.layers, width=args.width, seq=args.seq,
                              batch=args.batch * meshes * per_mesh,
                              microbatches=args.microbatches, meshes=meshes, per_mesh=per_mesh,
                              shared=shares_devices(devices))
  ours, ref = model.mpmd_jit(), model.jax_jit()
  ref_data = jax.device_put(model.data, NamedSharding(model.mesh8, P("data")))
  label = (f"transformer, {meshes} meshes x {per_mesh}, {args.layers} blocks of width "
           f"{args.width}, {args.microbatches} microbatches of {args.batch * meshes * per_mesh}, "
           "AdamW, 1F1B")
  return label, ours, model.state(), ref, model.state, model.data, ref_data


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--size", choices=("auto", "quick", "full"), default="auto",
                      help="quick: small models, 3 steps; full: the sizes below; auto: full "
                      "on an accelerator, quick on the CPU")
  parser.add_argument("--steps", type=int, default=None, help="timed steps (default 10; quick: 3)")
  parser.add_argument("--warmup", type=int, default=None,
                      help="untimed steps first (default 2; quick: 1)")
  parser.add_argument("--mlp-width", type=int, default=1024)
  parser.add_argument("--mlp-batch", type=int, default=256,
                      help="rows per device (of both meshes)")
  parser.add_argument("--layers", type=int, default=8)
  parser.add_argument("--width", type=int, default=256)
  parser.add_argument("--seq", type=int, default=128)
  parser.add_argument("--batch", type=int, default=4,
                      help="sequences per microbatch per device (of all the meshes)")
  parser.add_argument("--microbatches", type=int, default=4)
  parser.add_argument("--one-device", action="store_true",
                      help="all meshes on the first device (as with a single GPU)")
  parser.add_argument("--precision", choices=("default", "highest"), default="default",
                      help="highest: float32 matmuls at full precision everywhere (no TF32)")
  args = parser.parse_args(argv)
  if args.precision == "highest":
    jax.config.update("jax_default_matmul_precision", "highest")

  devices, note = pick_devices(args.one_device)
  platform = devices[0].platform
  quick = args.size == "quick" or (args.size == "auto" and platform == "cpu")
  # --steps / --warmup given on the command line win over the size's defaults.
  args.steps = args.steps if args.steps is not None else 3 if quick else 10
  args.warmup = args.warmup if args.warmup is not None else 1 if quick else 2
  if quick:
    args.mlp_width, args.mlp_batch = 128, 8
    args.layers, args.width, args.seq, args.batch = 4, 64, 32, 2
  loss_tol, params_tol = 1e-5, 1e-4
  # On an accelerator: how far TF32 moves jax.jit's own result (nothing to measure
  # on the CPU, or when every matmul already runs at full precision).
  tf32 = platform != "cpu" and args.precision == "default"
  print(f"jax {jax.__version__}, default backend {jax.default_backend()}: {note}")
  if platform == "cpu":
    print("(a CPU run is a smoke test of this script, not a GPU measurement)")
  print(f"\n| model | mpmd.jit step (ms) | jax.jit step (ms) | ratio | loss diff | params diff |"
        " TF32 effect on jax.jit: loss | params | tolerances: loss | params |")
  print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
  ok = True
  for case in (mlp_case, transformer_case):
    label, ours, ours_state, ref, ref_state_of, data, ref_data = case(devices, args)
    ours_state, loss, ref_state, ref_loss, ours_ms, ref_ms = alternate(
        ours, ours_state, ref, ref_state_of(), data, ref_data, steps=args.steps,
        warmup=args.warmup)
    params_of = (lambda s: s[0]) if case is transformer_case else (lambda s: s)
    d_loss, d_state = rel_diff(loss, ref_loss), rel_diff(params_of(ours_state), params_of(ref_state))
    case_loss_tol, case_params_tol, effect = loss_tol, params_tol, "- | -"
    if tf32:
      exact_state = ref_state_of()
      with jax.default_matmul_precision("highest"):
        for _ in range(args.warmup + args.steps):
          exact_state, exact_loss = ref(exact_state, ref_data)
      e_loss = rel_diff(ref_loss, exact_loss)
      e_state = rel_diff(params_of(ref_state), params_of(exact_state))
      case_loss_tol, case_params_tol = max(loss_tol, 4 * e_loss), max(params_tol, 4 * e_state)
      effect = f"{e_loss:.1e} | {e_state:.1e}"
    ok &= d_loss < case_loss_tol and d_state < case_params_tol
    print(f"| {label} | {ours_ms:.2f} | {ref_ms:.2f} | {ours_ms / ref_ms:.2f}x | {d_loss:.1e} | "
          f"{d_state:.1e} | {effect} | {case_loss_tol:.1e} | {case_params_tol:.1e} |", flush=True)
  print(f"\n{args.warmup + args.steps} steps each, alternating, medians of the last "
        f"{args.steps}; differences from jax.jit after the last step, normwise relative; "
        "matmul precision " + args.precision + "." + (
            " TF32 effect: jax.jit against itself at full float32 precision; tolerance: 4 "
            "times it, at least the CPU's." if tf32 else ""))
  print("all results match jax.jit" if ok else "MISMATCH: a difference exceeds the tolerance")
  return 0 if ok else 1


if __name__ == "__main__":
  sys.exit(main())
