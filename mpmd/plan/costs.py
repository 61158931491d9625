"""Costs the planner works with, and how they are measured.

`UnitCost` and `ProgramCosts` are plain data: the search (`mpmd.plan.search`)
only reads them, so tests and other tools can build them by hand. They are
measured from the program itself (`measure_units`): every unit's forward and
backward (see `mpmd.plan.units`) is compiled once with `jax.jit` on one
device and

- ``estimate="time"``: run a few times after a warm-up, median wall time;
- ``estimate="cost_analysis"``: not run; XLA's cost analysis (flops, bytes
  accessed) turned into seconds with a `Roofline`.

The backward is measured as the pipeline runs it: with the weight gradients
added to an accumulator (microbatched training accumulates them). For split
backward schedules it is also measured in its two parts: the activation
gradient (``B``) and the accumulated weight gradient (``W``). XLA's memory
analysis gives each program's scratch (temp) bytes.

`measure_transfer` times `jax.device_put` of arrays of the sizes that cross
stage boundaries between two meshes and fits ``seconds + bytes x
seconds_per_byte`` (`TransferCost`).
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.extend.core as jcore
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec, SingleDeviceSharding

from mpmd.plan.errors import PlanError
from mpmd.plan.units import Outside, TracedUnits, UnitProgram

__all__ = ["ESTIMATES", "ProgramCosts", "Roofline", "TransferCost", "UnitCost", "measure_transfer",
           "measure_units"]

#: Values of ``estimate``.
ESTIMATES = ("time", "cost_analysis")


@dataclasses.dataclass(frozen=True)
class UnitCost:
  """What one unit costs for one microbatch.

  Attributes:
    name: the unit (named computation).
    forward: seconds of its forward.
    backward: seconds of its whole backward (weight gradients accumulated).
    backward_input: seconds of the activation-gradient part (``B`` of a split
      backward); None when not measured (split schedules are then skipped).
    weight: seconds of the weight-gradient part (``W``); None when not measured.
    param_bytes: bytes of its parameters.
    stash_bytes: bytes kept from its forward to its backward.
    temp_bytes: XLA scratch bytes of its largest program.
  """

  name: str
  forward: float
  backward: float
  backward_input: float | None = None
  weight: float | None = None
  param_bytes: int = 0
  stash_bytes: int = 0
  temp_bytes: int = 0

  @property
  def total(self) -> float:
    """Forward plus whole backward."""
    return self.forward + self.backward

  @property
  def splits(self) -> bool:
    """Whether the split backward was measured."""
    return self.backward_input is not None and self.weight is not None

  def work(self, split: bool = False) -> float:
    """Seconds of one microbatch: F + B, or F + B + W of a split backward."""
    if split and self.splits:
      return self.forward + self.backward_input + self.weight
    return self.total


@dataclasses.dataclass(frozen=True)
class ProgramCosts:
  """The costs of a step run with `microbatches` microbatches.

  Attributes:
    microbatches: the number of microbatches these costs are for.
    units: per unit, in pipeline order.
    forward_cut_bytes: per cut ``c`` (between unit ``c`` and ``c + 1``), bytes
      one microbatch sends forward across it; default none.
    backward_cut_bytes: the same for the activation gradients; default: the
      forward figures.
    state_factor: resident bytes per parameter byte: the parameters, their
      gradient accumulator and the optimizer state (2 for SGD, 4 for Adam).
    update_seconds_per_byte: time of the work outside the units per byte of
      parameters and optimizer state (zeroing the gradient accumulator,
      the update after the last microbatch): each mesh does it for its own
      units, ``(state_factor - 1) x param_bytes`` bytes of it.
    outside_seconds: per microbatch, the seconds of the unlabelled work
      counted with the first unit's forward and backward and with the last
      unit's forward (``trace_units(..., outside=True)``; already in those
      units' costs): (before, forward; before, backward; after).
  """

  microbatches: int
  units: tuple[UnitCost, ...]
  forward_cut_bytes: tuple[int, ...] = ()
  backward_cut_bytes: tuple[int, ...] | None = None
  state_factor: float = 2.0
  update_seconds_per_byte: float = 0.0
  outside_seconds: tuple[float, float, float] = (0.0, 0.0, 0.0)

  def __post_init__(self):
    n = len(self.units)
    if n == 0:
      raise PlanError("no units to plan")
    fwd = tuple(self.forward_cut_bytes) or (0,) * (n - 1)
    bwd = fwd if self.backward_cut_bytes is None else tuple(self.backward_cut_bytes)
    if len(fwd) != n - 1 or len(bwd) != n - 1:
      raise PlanError(f"cut bytes need one figure per cut ({n - 1}), got {len(fwd)} and "
                      f"{len(bwd)}")
    object.__setattr__(self, "units", tuple(self.units))
    object.__setattr__(self, "forward_cut_bytes", fwd)
    object.__setattr__(self, "backward_cut_bytes", bwd)

  @property
  def names(self) -> tuple[str, ...]:
    return tuple(u.name for u in self.units)

  @property
  def splits(self) -> bool:
    """Whether every unit has split-backward costs."""
    return all(u.splits for u in self.units)


@dataclasses.dataclass(frozen=True)
class TransferCost:
  """Time to move an array between two meshes: ``seconds + bytes x seconds_per_byte``
  (nothing for 0 bytes)."""

  seconds: float = 0.0
  seconds_per_byte: float = 0.0

  def __call__(self, nbytes: int) -> float:
    return 0.0 if nbytes <= 0 else self.seconds + nbytes * self.seconds_per_byte


@dataclasses.dataclass(frozen=True)
class Roofline:
  """Turns XLA's cost analysis into seconds: ``max(flops / flops_per_second,
  bytes accessed / bytes_per_second)``."""

  flops_per_second: float
  bytes_per_second: float

  @classmethod
  def default(cls, platform: str) -> Roofline:
    """Rough per-device rates of a platform (CPU: one core's worth). Give
    your own for absolute predictions; the choice between candidates only
    depends on their ratios (and on the transfer cost)."""
    return {"gpu": cls(5e13, 2e12), "cuda": cls(5e13, 2e12), "rocm": cls(5e13, 2e12),
            "tpu": cls(1e14, 1e12)}.get(platform, cls(1e11, 2e10))

  def seconds(self, cost: dict[str, float]) -> float:
    return max(cost.get("flops", 0.0) / self.flops_per_second,
               cost.get("bytes accessed", 0.0) / self.bytes_per_second)


def _median_seconds(run: Callable[[], Any], repeats: int) -> float:
  jax.block_until_ready(run())  # warm-up
  times = []
  for _ in range(max(1, repeats)):
    t0 = time.perf_counter()
    jax.block_until_ready(run())
    times.append(time.perf_counter() - t0)
  return statistics.median(times)


def _filler(aval: Any) -> Any:
  shape, dtype = tuple(aval.shape), aval.dtype
  if jax.dtypes.issubdtype(dtype, jax.dtypes.extended):
    return jax.random.split(jax.random.key(0), shape) if shape else jax.random.key(0)
  if np.issubdtype(dtype, np.inexact):
    return np.full(shape, 0.1, dtype)
  return np.zeros(shape, dtype)


def _first_cost(cost: Any) -> dict[str, float]:
  if isinstance(cost, (list, tuple)):
    cost = cost[0] if cost else {}
  return dict(cost or {})


def _temp_bytes(compiled: Any) -> int:
  try:
    stats = compiled.memory_analysis()
  except Exception:  # noqa: BLE001 - a backend without memory analysis
    return 0
  return int(getattr(stats, "temp_size_in_bytes", 0) or 0)


class _Measurer:
  """Compiles and measures unit programs on one device (one instance per plan).

  Timing is round-robin: every program of a batch is compiled and run once
  (warm-up), then each round runs every program once, and each program's
  time is its median over the rounds. A burst of other work on a shared
  machine then slows every program of the batch alike instead of a few.
  """

  def __init__(self, device: Any, estimate: str, repeats: int, roofline: Roofline | None):
    if estimate not in ESTIMATES:
      raise PlanError(f"estimate must be one of {ESTIMATES}, got {estimate!r}")
    self.device, self.estimate, self.repeats = device, estimate, max(1, repeats)
    self.roofline = roofline or Roofline.default(device.platform)
    self.cache: dict[Any, UnitCost] = {}
    self.compiles = 0

  def _inputs(self, avals: Sequence[Any]) -> list[Any]:
    """Arguments at ``avals`` (a list whose items may be lists of avals)."""
    if self.estimate == "cost_analysis":
      sharding = SingleDeviceSharding(self.device)
      make = lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sharding)  # noqa: E731
    else:
      make = lambda a: jax.device_put(_filler(a), self.device)  # noqa: E731
    return [[make(x) for x in a] if isinstance(a, list) else make(a) for a in avals]

  def _measure(self, jobs: Sequence[tuple[Callable[..., Any], Sequence[Any]]]
               ) -> list[tuple[float, int]]:
    """(seconds, temp bytes) of each ``(fn, avals)``, timed round-robin."""
    runs, out = [], []
    for fn, avals in jobs:
      inputs = self._inputs(avals)
      compiled = jax.jit(fn).lower(*inputs).compile()
      self.compiles += 1
      out.append([0.0, _temp_bytes(compiled)])
      if self.estimate == "cost_analysis":
        out[-1][0] = self.roofline.seconds(_first_cost(compiled.cost_analysis()))
      else:
        runs.append((len(out) - 1, compiled, inputs))
    if runs:
      for _, compiled, inputs in runs:  # warm-up
        jax.block_until_ready(compiled(*inputs))
      times: dict[int, list[float]] = {k: [] for k, _, _ in runs}
      for _ in range(self.repeats):
        for k, compiled, inputs in runs:
          t0 = time.perf_counter()
          jax.block_until_ready(compiled(*inputs))
          times[k].append(time.perf_counter() - t0)
      for k, ts in times.items():
        out[k][0] = statistics.median(ts)
    return [(t, temp) for t, temp in out]

  def update(self, nbytes: int) -> float:
    """Seconds per byte of an SGD-like update with the accumulator zeroed
    (``p - lr * g`` and ``zeros_like(g)``), on float32 arrays of ``nbytes``
    (at most 64 MiB)."""
    n = max(1024, min(int(nbytes), 64 << 20) // 4)
    aval = jax.ShapeDtypeStruct((n,), np.float32)
    [(seconds, _)] = self._measure([(lambda p, g: (p - 0.01 * g, g * 0.0), [aval, aval])])
    return seconds / (4 * n)

  @staticmethod
  def _key(program: UnitProgram, split: bool) -> tuple:
    return (str(program.forward), str(program.backward), program.activation_grads,
            program.weight_grads, split)

  @staticmethod
  def _jobs(program: UnitProgram, split: bool) -> list[tuple[Callable[..., Any], list[Any]]]:
    """The programs that measure a unit: F, whole B (and B, W when split)."""
    fwd_fun = jcore.jaxpr_as_fun(program.forward)
    jobs: list[tuple[Callable[..., Any], list[Any]]] = [
        (lambda *xs: fwd_fun(*xs), list(program.forward.in_avals))]
    if program.backward is None:
      return jobs
    bwd_fun = jcore.jaxpr_as_fun(program.backward)
    act, weight = program.activation_grads, program.weight_grads
    acc_avals = [program.backward.out_avals[k] for k in weight]
    in_avals = list(program.backward.in_avals)

    def whole(acc, *xs):
      outs = bwd_fun(*xs)
      return [outs[k] for k in act], [a + outs[k] for a, k in zip(acc, weight)]

    def activation_part(*xs):
      outs = bwd_fun(*xs)
      return [outs[k] for k in act]

    def weight_part(acc, *xs):
      outs = bwd_fun(*xs)
      return [a + outs[k] for a, k in zip(acc, weight)]

    jobs.append((whole, [acc_avals, *in_avals]))
    if split:
      if act:
        jobs.append((activation_part, in_avals))
      jobs.append((weight_part, [acc_avals, *in_avals]))
    return jobs

  def units(self, programs: Sequence[UnitProgram], split: bool) -> list[UnitCost]:
    """The costs of ``programs`` (identical ones measured once)."""
    todo: dict[tuple, UnitProgram] = {}
    for p in programs:
      key = self._key(p, split)
      if key not in self.cache:
        todo.setdefault(key, p)
    jobs, spans = [], {}
    for key, p in todo.items():
      unit_jobs = self._jobs(p, split)
      spans[key] = (len(jobs), len(unit_jobs))
      jobs.extend(unit_jobs)
    results = self._measure(jobs)
    for key, p in todo.items():
      first, count = spans[key]
      got = results[first:first + count]
      f, f_temp = got[0]
      b, b_temp = got[1] if p.backward is not None else (0.0, 0)
      b_in = w = None
      if split and p.backward is not None:
        b_in = got[2][0] if p.activation_grads else 0.0
        w = got[-1][0]
      self.cache[key] = UnitCost(p.name, f, b, b_in, w, p.param_bytes, p.stash_bytes,
                                 max(f_temp, b_temp))
    return [dataclasses.replace(self.cache[self._key(p, split)], name=p.name)
            for p in programs]


def measure_units(traced: TracedUnits, microbatches: int, measurer: _Measurer, *,
                  split: bool = True, state_factor: float = 2.0,
                  update_seconds_per_byte: float = 0.0) -> ProgramCosts:
  """The `ProgramCosts` of the traced step (run with `microbatches` microbatches).

  Identical units (same programs at the same shapes) are measured once.
  """
  units = list(measurer.units(traced.units, split))
  outside = (0.0, 0.0, 0.0)
  if traced.outside is not None:
    units, outside = _fold_outside(units, traced.outside, measurer, split)
  return ProgramCosts(microbatches, tuple(units), traced.forward_cut_bytes,
                      traced.backward_cut_bytes, state_factor, update_seconds_per_byte, outside)


def _fold_outside(units: list[UnitCost], outside: Outside, measurer: _Measurer, split: bool
                  ) -> tuple[list[UnitCost], tuple[float, float, float]]:
  """The units' costs with the work outside them added where the compiler
  runs it: the first unit's forward gets what feeds it (an embedding lookup)
  and its backward (and ``W``) what its backward feeds (the embedding's
  gradient); the last unit's forward gets what follows it (a head and loss
  that are not a unit, their backward: the last stage runs a microbatch's
  forward and backward back to back there). Returns the units and the
  seconds (before: forward, before: backward, after)."""
  def seconds(program):
    if program is None:
      return 0.0, 0
    [cost] = measurer.units([program], split)
    return cost.forward, cost.temp_bytes

  (bf, bf_temp), (bb, bb_temp), (af, af_temp) = (
      seconds(outside.before_forward), seconds(outside.before_backward), seconds(outside.after))
  first = units[0]
  units[0] = dataclasses.replace(
      first, forward=first.forward + bf, backward=first.backward + bb,
      weight=first.weight + bb if first.weight is not None else None,
      param_bytes=first.param_bytes + outside.before_param_bytes,
      temp_bytes=max(first.temp_bytes, bf_temp, bb_temp))
  last = units[-1]
  units[-1] = dataclasses.replace(
      last, forward=last.forward + af, param_bytes=last.param_bytes + outside.after_param_bytes,
      temp_bytes=max(last.temp_bytes, af_temp))
  return units, (bf, bb, af)


def make_measurer(device: Any, estimate: str = "time", repeats: int = 5,
                  roofline: Roofline | None = None) -> _Measurer:
  """A measurer of unit programs on ``device`` (see `measure_units`)."""
  return _Measurer(device, estimate, repeats, roofline)


def measure_transfer(source: jax.sharding.Mesh, target: jax.sharding.Mesh,
                     sizes: Sequence[int], repeats: int = 5) -> TransferCost:
  """Fits `TransferCost` to `jax.device_put` times between two meshes.

  Arrays of each size in ``sizes`` (bytes; a 1 KiB one is added) are put
  replicated on ``source`` and copied to ``target`` (replicated), median of
  ``repeats`` after a warm-up; a least-squares line through (bytes, seconds)
  gives the fixed and the per-byte cost (both clamped at 0).

  Raises:
    PlanError: a mesh has devices of other processes (pass ``transfer=``).
  """
  for mesh in (source, target):
    if any(d.process_index != jax.process_index() for d in mesh.devices.flat):
      raise PlanError("the meshes span several processes: the planner cannot time transfers "
                      "between them with device_put; pass transfer=TransferCost(seconds, "
                      "seconds_per_byte) measured with the runtime's cross-process transfers")
  points = sorted({1024, *(int(s) for s in sizes if s > 0)})
  if len(points) > 5:  # the smallest, the largest and a few between
    idx = np.linspace(0, len(points) - 1, 5).round().astype(int)
    points = [points[i] for i in sorted(set(idx))]
  src = NamedSharding(source, PartitionSpec())
  dst = NamedSharding(target, PartitionSpec())
  xs, ys = [], []
  for nbytes in points:
    x = jax.device_put(np.ones(max(1, nbytes // 4), np.float32), src)
    xs.append(float(nbytes))
    ys.append(_median_seconds(lambda x=x: jax.device_put(x, dst), repeats))
  if len(xs) == 1 or max(xs) == min(xs):
    return TransferCost(ys[0], 0.0)
  slope, intercept = np.polyfit(np.array(xs), np.array(ys), 1)
  slope = max(float(slope), 0.0)
  intercept = max(float(intercept), 0.0) if slope > 0 else float(np.median(ys))
  return TransferCost(intercept, slope)
