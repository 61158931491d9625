"""Compiles and runs three fragment programs with JAX's persistent compilation
cache in `--cache` (the fresh-process half of test_persistent_cache.py).

`frag_add` and `frag_mul` have the same signature (two f32[8] -> f32[8]),
`frag_sum3` another (three f32[8] -> f32[8], f32[]). Each is compiled on a
mesh of 2 devices and run; the process prints one line per fragment,
`<name> ok` when its results equal NumPy's, else `<name> WRONG`. Then a
2-stage pipelined training step (`mpmd.jit`, a mesh of one device per stage)
runs and prints `pipeline ok` when it equals `jax.jit`. The process exits 0
only when all are right; a compile error propagates (exit code 1).
"""

import argparse
import os
import sys

from mpmd.launch import _with_device_count  # (imports no JAX)

# 2 CPU devices; the suite's other XLA flags (its optimisation level) are kept.
os.environ["XLA_FLAGS"] = _with_device_count(os.environ.get("XLA_FLAGS", ""), 2)

import jax  # noqa: E402

import numpy as np  # noqa: E402
from jax.sharding import Mesh  # noqa: E402

FRAGMENTS = {
    "frag_add": """
func.func public @main(%a: tensor<8xf32>, %b: tensor<8xf32>) -> tensor<8xf32> {
  %0 = stablehlo.add %a, %b : tensor<8xf32>
  return %0 : tensor<8xf32>
}""",
    "frag_mul": """
func.func public @main(%a: tensor<8xf32>, %b: tensor<8xf32>) -> tensor<8xf32> {
  %0 = stablehlo.multiply %a, %b : tensor<8xf32>
  return %0 : tensor<8xf32>
}""",
    "frag_sum3": """
func.func public @main(%a: tensor<8xf32>, %b: tensor<8xf32>, %c: tensor<8xf32>)
    -> (tensor<8xf32>, tensor<f32>) {
  %0 = stablehlo.add %a, %b : tensor<8xf32>
  %1 = stablehlo.add %0, %c : tensor<8xf32>
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %2 = stablehlo.reduce(%1 init: %z) applies stablehlo.add across dimensions = [0]
      : (tensor<8xf32>, tensor<f32>) -> tensor<f32>
  return %1, %2 : tensor<8xf32>, tensor<f32>
}""",
}


def expected(name: str, args: list[np.ndarray]) -> list[np.ndarray]:
  if name == "frag_add":
    return [args[0] + args[1]]
  if name == "frag_mul":
    return [args[0] * args[1]]
  total = args[0] + args[1] + args[2]
  return [total, total.sum()]


def main(argv=None) -> int:
  parser = argparse.ArgumentParser()
  parser.add_argument("--cache", required=True)
  args = parser.parse_args(argv)
  jax.config.update("jax_compilation_cache_dir", args.cache)
  jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
  jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
  from mpmd.compile.fragment import compile_fragment  # noqa: PLC0415

  mesh = Mesh(np.array(jax.devices()[:2]), ("x",))
  rng = np.random.default_rng(0)
  all_ok = True
  for name, body in FRAGMENTS.items():
    frag = compile_fragment(body, mesh, name=name)
    inputs = [rng.standard_normal(8).astype(np.float32) for _ in range(frag.num_inputs)]
    outs = frag(*[jax.device_put(x, s) for x, s in zip(inputs, frag.input_shardings)])
    want = expected(name, inputs)
    ok = len(outs) == len(want) and all(
        np.shape(o) == np.shape(w) and np.allclose(np.asarray(o), w, rtol=1e-5)
        for o, w in zip(outs, want))
    print(f"{name} {'ok' if ok else 'WRONG'}", flush=True)
    all_ok &= ok
  ok = pipeline()
  print(f"pipeline {'ok' if ok else 'WRONG'}", flush=True)
  return 0 if all_ok and ok else 1


def pipeline() -> bool:
  """A 2-stage pipelined SGD step on meshes of one device, against jax.jit."""
  import jax.numpy as jnp  # noqa: PLC0415

  import mpmd  # noqa: PLC0415

  def stage(i):
    return mpmd.named_computation(lambda w, h: jnp.tanh(h @ w), name=f"stage{i}")

  def loss_fn(ws, x):
    h = x
    for i, w in enumerate(ws):
      h = stage(i)(w, h)
    return jnp.mean(h ** 2)

  def step(ws, xs):
    loss, grads = jnp.zeros(()), [jnp.zeros_like(w) for w in ws]
    for i, x in enumerate(xs):
      def microbatch(loss, grads, x):
        l, g = jax.value_and_grad(loss_fn)(ws, x)
        return loss + l, [a + b for a, b in zip(grads, g)]
      loss, grads = mpmd.call(microbatch, call_counter=i)(loss, grads, x)
    return loss, [w - 0.1 * g for w, g in zip(ws, grads)]

  devices = jax.devices()
  topology = {f"m{i}": Mesh(np.array(devices[i:i + 1]), ("x",)) for i in range(2)}
  config = mpmd.make_config(topology, {"stage0": "m0", "stage1": "m1"})
  rng = np.random.default_rng(1)
  ws = [rng.standard_normal((8, 8)).astype(np.float32) for _ in range(2)]
  xs = [rng.standard_normal((4, 8)).astype(np.float32) for _ in range(2)]
  loss, new = mpmd.jit(step, config)(ws, xs)
  ref_loss, ref_new = jax.jit(step)(ws, xs)
  return bool(np.allclose(float(loss), float(ref_loss), rtol=1e-5) and all(
      np.allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-6)
      for a, b in zip(new, ref_new)))


if __name__ == "__main__":
  sys.exit(main())
