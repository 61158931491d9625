"""What one program call costs on a platform, for the partitioner's merges.

Units of one mesh that run back to back, with nothing arriving from another
mesh in between, may run as one program (`-mpmd-merge-back-to-back-units`):
the mesh then saves one call's fixed cost, and what the first unit sends to
other meshes leaves later, by the second unit's run time. The pass merges
where the second unit's estimated run time is at most the call cost it saves,
estimated from the platform's figures here:

* ``call_us``: microseconds a call of a one-op program costs when calls follow each
  other (host dispatch and device launch, whichever bounds);
* ``kernel_us``: microseconds each further op of a program adds (small matrix
  products and their tanh: launch and synchronisation, not arithmetic);
* ``gflops``: billions of floating-point operations per second of a
  mid-sized matrix product.

The figures are measured (`measure`, run by ``python benchmarks/dispatch_cost.py``,
which prints the row for the platform it runs on) and kept per platform in
`MEASURED`, so that every process of a run, and every run, partitions the
same program: a decision taken from a fresh timing would differ between
processes and between runs. `MPMD_DISPATCH_COST` replaces the row (a user
who measured their machine) or turns merging off (``0``).
"""

from __future__ import annotations

import dataclasses
import time

import jax
import jax.numpy as jnp

from mpmd import _mpmd, knobs
from mpmd.errors import KnobError

__all__ = ["DispatchCost", "MEASURED", "for_platform", "measure", "parse"]


@dataclasses.dataclass(frozen=True)
class DispatchCost:
  """A platform's cost of a program call and of each op in it
  (microseconds), and its arithmetic rate (GFLOP/s). A zero call cost: no
  merging."""
  call_us: float = 0.0
  kernel_us: float = 0.0
  gflops: float = 0.0

  def typed(self) -> _mpmd.DispatchCost:
    """The figures as the partitioner takes them."""
    typed = _mpmd.DispatchCost()
    typed.call_us, typed.kernel_us, typed.gflops = self.call_us, self.kernel_us, self.gflops
    return typed

  def __str__(self) -> str:
    return f"{self.call_us:g},{self.kernel_us:g},{self.gflops:g}"


#: Platform -> its measured figures (`python benchmarks/dispatch_cost.py`;
#: benchmarks/RESULTS.md section (n) gives the runs). A platform not listed
#: is not merged for.
MEASURED: dict[str, DispatchCost] = {
    # A 2-core x86 VM, jax 0.12.0.1, one CPU device in the process: the median of 5 runs
    # (`python benchmarks/dispatch_cost.py --repeat 5`).
    "cpu": DispatchCost(call_us=16.6, kernel_us=0.33, gflops=108),
}


def parse(text: str) -> DispatchCost:
  """`MPMD_DISPATCH_COST`'s value: ``CALL_US,KERNEL_US,GFLOPS`` (microseconds,
  microseconds, billions of flops per second), or ``0`` for no merging."""
  if text.strip() == "0":
    return DispatchCost()
  parts = text.split(",")
  try:
    call, kernel, gflops = (float(p) for p in parts)
  except ValueError:
    call = kernel = gflops = -1.0
  if len(parts) != 3 or min(call, kernel, gflops) < 0:
    raise KnobError(f"{knobs.MPMD_DISPATCH_COST}={text!r}: expected CALL_US,KERNEL_US,GFLOPS "
                    f"(three non-negative numbers, e.g. '30,5,1000'), or 0 to merge nothing")
  return DispatchCost(call, kernel, gflops)


def for_platform(platform: str) -> DispatchCost:
  """The figures the partitioner merges by on `platform` ("cpu", "gpu",
  ...): `MPMD_DISPATCH_COST` when set, else `MEASURED`'s row (none: no
  merging)."""
  text = knobs.text(knobs.MPMD_DISPATCH_COST)
  if text is not None:
    return parse(text)
  return MEASURED.get(platform, DispatchCost())


def _per_call(fn, x, calls: int) -> float:
  """Seconds per call of compiled `fn`, calls following each other on `x`."""
  y = fn(x)
  jax.block_until_ready(y)
  best = float("inf")
  for _ in range(5):
    t = time.perf_counter()
    y = x
    for _ in range(calls):
      y = fn(y)
    jax.block_until_ready(y)
    best = min(best, (time.perf_counter() - t) / calls)
  return best


def measure(device: jax.Device | None = None, *, calls: int = 200) -> DispatchCost:
  """Measures `device`'s figures (default: the first device): a one-op
  program; 32 small matrix products and their tanh (64 ops) in one program; a 512 x 512 x 512
  product. Best of five runs of `calls` calls each (fewer for the product)."""
  device = device or jax.devices()[0]
  put = lambda a: jax.device_put(a, device)  # noqa: E731

  def chain(x):
    for _ in range(32):
      x = jnp.tanh(x @ x)
    return x

  small = put(jnp.full((8,), 0.5, jnp.float32))
  call = _per_call(jax.jit(lambda x: x + 1.0), small, calls)
  eight = put(jnp.eye(8, dtype=jnp.float32) * 0.5)
  kernel = max(_per_call(jax.jit(chain), eight, calls) - call, 0.0) / 64
  big = put(jnp.eye(512, dtype=jnp.float32))
  product = max(_per_call(jax.jit(lambda x: x @ x), big, max(calls // 20, 5)) - call, 1e-9)
  return DispatchCost(call * 1e6, kernel * 1e6, 2 * 512 ** 3 / product / 1e9)
