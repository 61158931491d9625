"""Built-in pipeline schedules, by name.

Every builder takes ``(num_meshes, num_microbatches, virtual_stages=...)`` and
returns a `Schedule`. ``get_schedule(name)`` looks one up case-insensitively
(``_`` and ``-`` are ignored, so Shardy's registry names such as
``ZERO_BUBBLE_H1`` work too); ``SCHEDULES`` maps canonical names to
`BuiltinSchedule` entries.

Where the orders are defined:

- GPipe, 1F1B, GPipeBut1F1BForLastMesh, Circular and
  CircularWithReversedBackward, the schedules built into the compiler under
  Shardy:MPMD's names: once, in C++ (include/mpmd/BuiltinSchedules.h, sort
  keys over a mesh's units), read here through the extension; `mpmd-opt`'s
  ``-mpmd-builtin-schedule`` orders a program's fragments by the same keys.
- Shardy:MPMD's other comparators, applied with
  `comparators.order_by_relation`: ZeroBubbleH1,
  ZeroBubbleH2{Zero,Half,Full}TxLatency, ParallelPipelinesWithWrapAround.
- JaxPP's: Eager1F1B, Interleaved1F1B (PyTorch's definition, = Megatron's
  when ``M % P == 0``), KimiK2.
- PyTorch's and the papers': LoopedBFS, ZBV, DualPipeV.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from mpmd import _mpmd
from mpmd.schedule import comparators as cmp
from mpmd.schedule.core import (Schedule, ScheduleError, Unit, looped_placement,
                                v_placement)


def _check_params(name: str, num_meshes: int, num_microbatches: int) -> None:
  for arg, v in (("num_meshes", num_meshes),
                 ("num_microbatches", num_microbatches)):
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
      raise ScheduleError(f"{name}: {arg} must be a positive int; got {v!r}")


def _one_stage_per_mesh(name: str, virtual_stages: int | None) -> None:
  if virtual_stages not in (None, 1):
    raise ScheduleError(f"{name} runs one stage per mesh; virtual_stages must "
                        f"be 1, got {virtual_stages!r}")


def _virtual(name: str, virtual_stages: int | None, default: int) -> int:
  v = default if virtual_stages is None else virtual_stages
  if not isinstance(v, int) or isinstance(v, bool) or v < 1:
    raise ScheduleError(f"{name}: virtual_stages must be a positive int; "
                        f"got {v!r}")
  return v


def _two_virtual(name: str, virtual_stages: int | None) -> int:
  if virtual_stages not in (None, 2):
    raise ScheduleError(f"{name} needs exactly 2 virtual stages per mesh "
                        f"(V-shaped placement); got {virtual_stages!r}")
  return 2


def _by_relation(name: str, num_meshes: int, num_microbatches: int,
                 before: cmp.Relation, *, stage_to_mesh: Sequence[int],
                 split: bool = False,
                 tie_key: Callable[[Unit], tuple] = cmp.kind_first) -> Schedule:
  """Orders every mesh's units with a Shardy must-happen-before relation."""
  kinds = ("F", "B", "W") if split else ("F", "B")
  orders = {}
  for mesh in range(num_meshes):
    stages = [s for s, k in enumerate(stage_to_mesh) if k == mesh]
    units = [Unit(kind, m, s) for s in stages for m in range(num_microbatches)
             for kind in kinds]
    orders[mesh] = cmp.order_by_relation(units, before, mesh, num_meshes,
                                         tie_key=tie_key)
  return Schedule(orders, num_microbatches=num_microbatches,
                  stage_to_mesh=stage_to_mesh, split_backward=split, name=name)


def _by_compiler(name: str, num_meshes: int, num_microbatches: int, *,
                 stage_to_mesh: Sequence[int]) -> Schedule:
  """Orders every mesh's units by the compiler's built-in schedule `name`
  (include/mpmd/BuiltinSchedules.h: the one definition of its order)."""
  assert name in _mpmd.BUILTIN_SCHEDULES, name
  orders = {}
  for mesh in range(num_meshes):
    stages = [s for s, k in enumerate(stage_to_mesh) if k == mesh]
    units = [Unit(kind, m, s) for s in stages for m in range(num_microbatches)
             for kind in ("F", "B")]
    order = _mpmd.builtin_schedule_order(
        name, [_mpmd.Unit("", u.kind, u.microbatch, u.stage) for u in units], mesh, num_meshes)
    orders[mesh] = [units[i] for i in order]
  return Schedule(orders, num_microbatches=num_microbatches, stage_to_mesh=stage_to_mesh,
                  name=name)


# --------------------------------------------------------------- Shardy ones
def gpipe(num_meshes: int, num_microbatches: int,
          virtual_stages: int | None = None) -> Schedule:
  """GPipe (fill-drain): every forward, then every backward, both in
  microbatch order (Shardy comparator: same t -> cc ascending, else t1 < t2)."""
  _check_params("GPipe", num_meshes, num_microbatches)
  _one_stage_per_mesh("GPipe", virtual_stages)
  return _by_compiler("GPipe", num_meshes, num_microbatches,
                      stage_to_mesh=looped_placement(num_meshes))


def one_f_one_b(num_meshes: int, num_microbatches: int,
                virtual_stages: int | None = None) -> Schedule:
  """1F1B / PipeDream-flush: on mesh i, ``P-1-i`` warm-up forwards, then
  alternate one forward and one backward, then the remaining backwards.

  Shardy's comparator: ``B(k) < F(k+P-i)``, ``F(k+P-i-1) < B(k)``. For
  ``M < P - i`` it leaves forwards and backwards unordered; forwards go first
  (as JaxPP's Std1F1B does).
  """
  _check_params("1F1B", num_meshes, num_microbatches)
  _one_stage_per_mesh("1F1B", virtual_stages)
  return _by_compiler("1F1B", num_meshes, num_microbatches,
                      stage_to_mesh=looped_placement(num_meshes))


def gpipe_but_1f1b_for_last_mesh(num_meshes: int, num_microbatches: int,
                                 virtual_stages: int | None = None) -> Schedule:
  """GPipe on every mesh but the last, which runs 1F1B (so the last mesh,
  whose forward and backward of a microbatch are adjacent, needs no remat)."""
  name = "GPipeBut1F1BForLastMesh"
  _check_params(name, num_meshes, num_microbatches)
  _one_stage_per_mesh(name, virtual_stages)
  return _by_compiler(name, num_meshes, num_microbatches,
                      stage_to_mesh=looped_placement(num_meshes))


def zero_bubble_h1(num_meshes: int, num_microbatches: int,
                   virtual_stages: int | None = None) -> Schedule:
  """ZB-H1 (split backward): 1F1B's forward/backward interleaving, with the
  weight-gradient part W of microbatch k on mesh i run after ``B(k+i)`` and
  before ``F(k+P)``, so later meshes defer W into their cool-down bubble.
  Same activation memory as 1F1B, about a third of its bubble when F=B=W."""
  _check_params("ZeroBubbleH1", num_meshes, num_microbatches)
  _one_stage_per_mesh("ZeroBubbleH1", virtual_stages)
  return _by_relation("ZeroBubbleH1", num_meshes, num_microbatches,
                      cmp.zero_bubble_h1, split=True,
                      stage_to_mesh=looped_placement(num_meshes))


def zero_bubble_h2(num_meshes: int, num_microbatches: int,
                   virtual_stages: int | None = None, *,
                   latency_fraction: float = 0.0) -> Schedule:
  """ZB-H2 (split backward): ``init_fwd(i) = floor(2(P-i)-1 + 2(P-i-1)λ)``
  warm-up forwards on mesh i, so that the warm-up hides a transfer latency of
  ``λ`` (in units of F); W of microbatch k is deferred behind ``c-1`` later
  activation-gradient units, ``c = init_fwd(P-1-i)``.

  The relation leaves ``W(k)`` and ``F(k + init_fwd)`` unordered (both fall
  between the same two B's), and a W with fewer than ``c-1`` B's after it
  unordered against those B's. Like every relation-based builtin we break
  ties forwards first, then by microbatch: the forward goes before the W, and
  such a W waits until the mesh's last B (the deferral ``c`` asks for).
  Shardy's own sort would keep program order there (W right after its B),
  which on the last meshes gives up to 2x the bubble for M < init_fwd(0).
  """
  name = {0.0: "ZeroBubbleH2ZeroTxLatency", 0.5: "ZeroBubbleH2HalfTxLatency",
          1.0: "ZeroBubbleH2FullTxLatency"}.get(
              latency_fraction, f"ZeroBubbleH2(λ={latency_fraction})")
  _check_params(name, num_meshes, num_microbatches)
  _one_stage_per_mesh(name, virtual_stages)
  if not 0.0 <= latency_fraction:
    raise ScheduleError(f"{name}: latency_fraction must be >= 0")
  return _by_relation(name, num_meshes, num_microbatches,
                      cmp.zero_bubble_h2(latency_fraction), split=True,
                      stage_to_mesh=looped_placement(num_meshes))


def zero_bubble_h2_zero_tx_latency(num_meshes: int, num_microbatches: int,
                                   virtual_stages: int | None = None) -> Schedule:
  """ZB-H2 tuned for no transfer latency (λ = 0)."""
  return zero_bubble_h2(num_meshes, num_microbatches, virtual_stages,
                        latency_fraction=0.0)


def zero_bubble_h2_half_tx_latency(num_meshes: int, num_microbatches: int,
                                   virtual_stages: int | None = None) -> Schedule:
  """ZB-H2 tuned for a transfer latency of half a forward (λ = 0.5)."""
  return zero_bubble_h2(num_meshes, num_microbatches, virtual_stages,
                        latency_fraction=0.5)


def zero_bubble_h2_full_tx_latency(num_meshes: int, num_microbatches: int,
                                   virtual_stages: int | None = None) -> Schedule:
  """ZB-H2 tuned for a transfer latency of one forward (λ = 1)."""
  return zero_bubble_h2(num_meshes, num_microbatches, virtual_stages,
                        latency_fraction=1.0)


def circular(num_meshes: int, num_microbatches: int,
             virtual_stages: int | None = 2) -> Schedule:
  """Circular (looped placement, GPipe-like): every forward before every
  backward; microbatches go round the meshes in phases of P
  (``phase = m // P``). Forwards run in (phase, stage, microbatch) order,
  backwards in (phase, -stage, microbatch) order."""
  v = _virtual("Circular", virtual_stages, 2)
  _check_params("Circular", num_meshes, num_microbatches)
  return _by_compiler("Circular", num_meshes, num_microbatches,
                      stage_to_mesh=looped_placement(num_meshes, v))


def circular_with_reversed_backward(num_meshes: int, num_microbatches: int,
                                    virtual_stages: int | None = 2) -> Schedule:
  """Circular whose backward is the exact reverse of its forward order
  (descending phase, stage, microbatch), as autodiff of a circular loop."""
  name = "CircularWithReversedBackward"
  v = _virtual(name, virtual_stages, 2)
  _check_params(name, num_meshes, num_microbatches)
  return _by_compiler(name, num_meshes, num_microbatches,
                      stage_to_mesh=looped_placement(num_meshes, v))


def parallel_pipelines_with_wrap_around(num_meshes: int, num_microbatches: int,
                                        virtual_stages: int | None = None
                                        ) -> Schedule:
  """Forward only: microbatch m enters the pipeline at mesh ``m % P`` and
  visits every mesh once, wrapping around (one pipeline per entry mesh).

  Each mesh runs microbatches in the order they arrive: by round
  ``m // P``, then by hops ``(mesh - m) mod P`` since entry. For ``M <= P``
  this is exactly Shardy's comparator (entry microbatch first; same side of
  the pivot descending, else ascending); larger M repeats it per round.
  """
  name = "ParallelPipelinesWithWrapAround"
  _check_params(name, num_meshes, num_microbatches)
  _one_stage_per_mesh(name, virtual_stages)
  P = num_meshes
  orders = {k: sorted((Unit("F", m, k) for m in range(num_microbatches)),
                      key=lambda u, k=k: (u.microbatch // P,
                                          (k - u.microbatch) % P))
            for k in range(P)}
  return Schedule(orders, num_microbatches=num_microbatches,
                  stage_to_mesh=looped_placement(P), forward_only=True,
                  wrap_around=True, name=name)


# ----------------------------------------------------------- JaxPP / PyTorch
def _warmup_then_alternate(stage: int, num_microbatches: int,
                           warmup: int) -> list[Unit]:
  """``warmup`` forwards, then B, F alternating, then the remaining B's."""
  nw = min(warmup, num_microbatches)
  order = [Unit("F", m, stage) for m in range(nw)]
  nxt = nw
  for b in range(num_microbatches):
    order.append(Unit("B", b, stage))
    if nxt < num_microbatches:
      order.append(Unit("F", nxt, stage))
      nxt += 1
  return order


def eager_1f1b(num_meshes: int, num_microbatches: int,
               virtual_stages: int | None = None) -> Schedule:
  """JaxPP's Eager1F1B: like 1F1B but mesh i runs ``2(P-i)-1`` warm-up
  forwards (capped at M) before its first backward, so sends overlap with
  compute; then backward and forward alternate."""
  _check_params("Eager1F1B", num_meshes, num_microbatches)
  _one_stage_per_mesh("Eager1F1B", virtual_stages)
  P = num_meshes
  orders = {i: _warmup_then_alternate(i, num_microbatches, 2 * (P - i) - 1)
            for i in range(P)}
  return Schedule(orders, num_microbatches=num_microbatches,
                  stage_to_mesh=looped_placement(P), name="Eager1F1B")


def microbatches_per_round(num_meshes: int, num_microbatches: int,
                           name: str = "Interleaved1F1B") -> int:
  """Interleaved schedules run microbatches in rounds of equal size.

  ``rounds = max(1, M // P)`` and every round has ``M / rounds``
  microbatches, so M must be divisible by ``max(1, M // P)`` (true for every
  multiple of P and every ``M < 2P``).
  """
  rounds = max(1, num_microbatches // num_meshes)
  per_round, rem = divmod(num_microbatches, rounds)
  if rem:
    raise ScheduleError(
        f"{name} runs microbatches in {rounds} equal rounds (max(1, M // P) "
        f"with M={num_microbatches}, P={num_meshes}), but {num_microbatches} "
        f"is not divisible by {rounds}; use a multiple of P or M < 2P")
  return per_round


def interleaved_plan(num_meshes: int, num_microbatches: int,
                     virtual_stages: int, rank: int, extra_warmup: int = 0,
                     name: str = "Interleaved1F1B"
                     ) -> tuple[list[Unit], list[tuple[Unit, Unit]], list[Unit]]:
  """Mesh ``rank``'s Interleaved1F1B order as (warm-up, steady, cool-down).

  With ``g`` = microbatches per round, ``warmup = min((V-1)·g + 2(P-1-rank)
  + extra_warmup, V·M)`` forwards. The k-th forward of the mesh belongs to
  virtual stage ``(k // g) % V``; the j-th backward to ``V-1 - (j // g) % V``;
  within a stage microbatches run in order. The steady state pairs forward
  ``warmup + j`` with backward ``j``; the cool-down runs the backwards left.
  """
  P, M, V = num_meshes, num_microbatches, virtual_stages
  g = microbatches_per_round(P, M, name)
  total = V * M
  warmup = min((V - 1) * g + 2 * (P - 1 - rank) + extra_warmup, total)
  next_mb: dict[tuple[str, int], int] = {}

  def take(kind: str, local: int) -> Unit:
    stage = local * P + rank
    m = next_mb.get((kind, stage), 0)
    next_mb[(kind, stage)] = m + 1
    return Unit(kind, m, stage)

  fwd = [take("F", (k // g) % V) for k in range(total)]
  bwd = [take("B", V - 1 - (j // g) % V) for j in range(total)]
  steady = [(fwd[warmup + j], bwd[j]) for j in range(total - warmup)]
  return fwd[:warmup], steady, bwd[total - warmup:]


def _interleaved(name: str, num_meshes: int, num_microbatches: int,
                 virtual_stages: int | None, extra_warmup: int) -> Schedule:
  v = _virtual(name, virtual_stages, 2)
  _check_params(name, num_meshes, num_microbatches)
  orders = {}
  for r in range(num_meshes):
    warm, steady, cool = interleaved_plan(num_meshes, num_microbatches, v, r,
                                          extra_warmup, name)
    orders[r] = warm + [u for pair in steady for u in pair] + cool
  return Schedule(orders, num_microbatches=num_microbatches,
                  stage_to_mesh=looped_placement(num_meshes, v), name=name)


def interleaved_1f1b(num_meshes: int, num_microbatches: int,
                     virtual_stages: int | None = 2) -> Schedule:
  """Interleaved 1F1B (Megatron's virtual-pipeline schedule, PyTorch's
  definition as ported by JaxPP): V looped virtual stages per mesh,
  depth-first in rounds of ``g = M / max(1, M // P)`` microbatches (g = P
  when P divides M); warm-up ``(V-1)·g + 2(P-1-i)`` forwards on mesh i, then
  one forward and one backward alternately. See `interleaved_plan`."""
  return _interleaved("Interleaved1F1B", num_meshes, num_microbatches,
                      virtual_stages, 0)


def kimi_k2(num_meshes: int, num_microbatches: int,
            virtual_stages: int | None = 2) -> Schedule:
  """JaxPP's KimiK2: Interleaved1F1B with one more warm-up forward per mesh
  (so a forward can overlap the communication of a backward)."""
  return _interleaved("KimiK2", num_meshes, num_microbatches, virtual_stages, 1)


def looped_bfs(num_meshes: int, num_microbatches: int,
               virtual_stages: int | None = 2) -> Schedule:
  """Breadth-first / looped BFS (PyTorch ScheduleLoopedBFS): each mesh runs
  all M forwards of its first virtual stage, then of the next; the backwards
  run the virtual stages in reverse, each with microbatches in descending
  order. GPipe-like memory, fewer weight loads (pairs well with FSDP)."""
  v = _virtual("LoopedBFS", virtual_stages, 2)
  _check_params("LoopedBFS", num_meshes, num_microbatches)
  P, M = num_meshes, num_microbatches
  orders = {}
  for r in range(P):
    stages = [k * P + r for k in range(v)]
    orders[r] = ([Unit("F", m, s) for s in stages for m in range(M)]
                 + [Unit("B", m, s) for s in reversed(stages)
                    for m in reversed(range(M))])
  return Schedule(orders, num_microbatches=M,
                  stage_to_mesh=looped_placement(P, v), name="LoopedBFS")


def zbv(num_meshes: int, num_microbatches: int,
        virtual_stages: int | None = 2) -> Schedule:
  """ZB-V (zero-bubble paper §6; PyTorch's ScheduleZBVZeroBubble), split
  backward, V-shaped placement (mesh i holds stages i and 2P-1-i).

  On mesh i, with chunk 0 = stage i, chunk 1 = stage 2P-1-i, and
  ``n = max(M, 2P-1)``:
  1. ``2(P-i)-1`` forwards of chunk 0;
  2. i times: forward chunk 1, forward chunk 0;
  3. ``P-i`` times: forward chunk 1, then B and W of chunk 1;
  4. steady, while forwards remain: [forward chunk 0], B W chunk 0,
     forward chunk 1, B W chunk 1;
  5. i times: B chunk 0, B chunk 1; ``P-i`` times: B chunk 0, W chunk 0;
     then the W's left, chunk 1 first.
  Units of microbatches >= M (padding when M < 2P-1) are dropped.
  """
  _two_virtual("ZBV", virtual_stages)
  _check_params("ZBV", num_meshes, num_microbatches)
  P, M = num_meshes, num_microbatches
  n = max(M, 2 * P - 1)
  orders = {}
  for r in range(P):
    s0, s1 = r, 2 * P - 1 - r
    seq: list[Unit] = []
    cnt = {("F", s0): 0, ("F", s1): 0, ("B", s0): 0, ("B", s1): 0,
           ("W", s0): 0, ("W", s1): 0}

    def run(kind: str, stage: int) -> None:
      seq.append(Unit(kind, cnt[(kind, stage)], stage))
      cnt[(kind, stage)] += 1

    for _ in range(2 * (P - r) - 1):
      run("F", s0)
    for _ in range(r):
      run("F", s1)
      run("F", s0)
    for _ in range(P - r):
      run("F", s1)
      run("B", s1)
      run("W", s1)
    while cnt[("F", s1)] < cnt[("F", s0)] or cnt[("F", s0)] < n:
      if cnt[("F", s0)] < n:
        run("F", s0)
      run("B", s0)
      run("W", s0)
      run("F", s1)
      run("B", s1)
      run("W", s1)
    for _ in range(r):
      run("B", s0)
      run("B", s1)
    for _ in range(P - r):
      run("B", s0)
      run("W", s0)
    while cnt[("W", s1)] < cnt[("B", s1)]:
      run("W", s1)
    while cnt[("W", s0)] < cnt[("B", s0)]:
      run("W", s0)
    orders[r] = [u for u in seq if u.microbatch < M]
  return Schedule(orders, num_microbatches=M, stage_to_mesh=v_placement(P, 2),
                  split_backward=True, name="ZBV")


def dual_pipe_v(num_meshes: int, num_microbatches: int,
                virtual_stages: int | None = 2) -> Schedule:
  """DualPipeV (DeepSeek; the 8 phases as in PyTorch's ScheduleDualPipeV),
  split backward, V-shaped placement: mesh i holds chunk 0 = stage i and
  chunk 1 = stage 2P-1-i. "F0" is a forward of chunk 0, "B1" a full
  backward of chunk 1 (B and W back to back), "I1" only its B with the W
  queued; "W" runs the oldest queued W. With ``n = max(M, 2P)``:

  1. ``2(P-i-1)`` x F0;            2. ``i+1`` x (F0, F1);
  3. ``P-i-1`` x (I1, W, F1);      4. ``n-2P+i+1`` x (F0 B1, F1 B0)
     (overlapped pairs; on the last mesh the first pair is not overlapped);
  5. ``P-i-1`` x (B1, F1 B0);      6. ``i+1`` x (B1, B0), switching to I1/I0
     from iteration ``(i+1)//2`` on (odd meshes from B1, even from B0);
  7. ``P-i-1`` x (W, I0);          8. ``i+1`` x W.

  An overlapped pair "F B" is written as the forward, then the backward.
  For ``M < 2P`` the schedule for 2P microbatches is built and the units of
  microbatches >= M are dropped (still deadlock-free: it is a sub-order).
  """
  _two_virtual("DualPipeV", virtual_stages)
  _check_params("DualPipeV", num_meshes, num_microbatches)
  P, M = num_meshes, num_microbatches
  n = max(M, 2 * P)
  orders = {}
  for r in range(P):
    s0, s1 = r, 2 * P - 1 - r
    seq: list[Unit] = []
    nf = {s0: 0, s1: 0}
    nb = {s0: 0, s1: 0}
    queued: list[Unit] = []

    def fwd(stage: int) -> None:
      seq.append(Unit("F", nf[stage], stage))
      nf[stage] += 1

    def bwd(stage: int, split: bool) -> None:
      m = nb[stage]
      nb[stage] += 1
      seq.append(Unit("B", m, stage))
      if split:
        queued.append(Unit("W", m, stage))
      else:
        seq.append(Unit("W", m, stage))

    def weight() -> None:
      if queued:
        seq.append(queued.pop(0))

    for _ in range(2 * (P - r - 1)):
      fwd(s0)
    for _ in range(r + 1):
      fwd(s0)
      fwd(s1)
    for _ in range(P - r - 1):
      bwd(s1, split=True)
      weight()
      fwd(s1)
    for i in range(n - 2 * P + r + 1):
      fwd(s0)
      bwd(s1, split=False)
      fwd(s1)
      bwd(s0, split=False)
    for _ in range(P - r - 1):
      bwd(s1, split=False)
      fwd(s1)
      bwd(s0, split=False)
    zb = False
    for i in range(r + 1):
      if i == (r + 1) // 2 and r % 2 == 1:
        zb = True
      bwd(s1, split=zb)
      if i == (r + 1) // 2 and r % 2 == 0:
        zb = True
      bwd(s0, split=zb)
    for _ in range(P - r - 1):
      weight()
      bwd(s0, split=zb)
    for _ in range(r + 1):
      weight()
    assert not queued, "DualPipeV: weight queue not drained"
    orders[r] = [u for u in seq if u.microbatch < M]
  return Schedule(orders, num_microbatches=M, stage_to_mesh=v_placement(P, 2),
                  split_backward=True, name="DualPipeV")


# ------------------------------------------------------------------ registry
@dataclasses.dataclass(frozen=True)
class BuiltinSchedule:
  """A registered schedule: call it with ``(P, M[, V])`` to get a Schedule.

  Attributes:
    name: canonical name.
    build: the builder ``(num_meshes, num_microbatches, virtual_stages)``.
    summary: one-line description.
    virtual_stages: ``"1"`` (one stage per mesh), ``"2"`` (exactly two,
      V-shaped) or ``"any"`` (looped, default 2).
    split_backward: whether the schedule uses a split backward (B + W).
    source: where the definition comes from.
    aliases: other accepted names.
  """

  name: str
  build: Callable[..., Schedule]
  summary: str
  virtual_stages: str
  split_backward: bool
  source: str
  aliases: tuple[str, ...] = ()

  @property
  def default_virtual_stages(self) -> int:
    return 1 if self.virtual_stages == "1" else 2

  def __call__(self, num_meshes: int, num_microbatches: int,
               virtual_stages: int | None = None) -> Schedule:
    return self.build(num_meshes, num_microbatches, virtual_stages)


def _entries() -> list[BuiltinSchedule]:
  shardy = "Shardy:MPMD comparator"
  compiler = "Shardy:MPMD's schedule, the compiler's key (include/mpmd/BuiltinSchedules.h)"
  return [
      BuiltinSchedule("GPipe", gpipe, "all forwards, then all backwards",
                      "1", False, compiler, ("GPIPE",)),
      BuiltinSchedule("1F1B", one_f_one_b,
                      "PipeDream-flush: P-1-i warm-up forwards, then "
                      "alternate F and B", "1", False, compiler,
                      ("OneFOneB", "ONE_FWD_ONE_BWD", "Std1F1B",
                       "PipeDreamFlush")),
      BuiltinSchedule("Eager1F1B", eager_1f1b,
                      "1F1B with 2(P-i)-1 warm-up forwards", "1", False,
                      "JaxPP Eager1F1B"),
      BuiltinSchedule("GPipeBut1F1BForLastMesh", gpipe_but_1f1b_for_last_mesh,
                      "GPipe, except 1F1B on the last mesh", "1", False,
                      compiler),
      BuiltinSchedule("Circular", circular,
                      "looped virtual stages, GPipe-style, in phases of P "
                      "microbatches", "any", False, compiler),
      BuiltinSchedule("CircularWithReversedBackward",
                      circular_with_reversed_backward,
                      "Circular with the backward in exactly reversed order",
                      "any", False, compiler),
      BuiltinSchedule("Interleaved1F1B", interleaved_1f1b,
                      "Megatron's interleaved 1F1B over V looped virtual "
                      "stages", "any", False,
                      "PyTorch/JaxPP Interleaved1F1B", ("Interleaved", "VPP")),
      BuiltinSchedule("LoopedBFS", looped_bfs,
                      "breadth-first: all microbatches of a virtual stage "
                      "before the next", "any", False,
                      "PyTorch ScheduleLoopedBFS",
                      ("BFS", "BreadthFirst")),
      BuiltinSchedule("KimiK2", kimi_k2,
                      "Interleaved1F1B with one more warm-up forward", "any",
                      False, "JaxPP KimiK2"),
      BuiltinSchedule("ZeroBubbleH1", zero_bubble_h1,
                      "ZB-H1: 1F1B with W deferred into bubbles (1x memory)",
                      "1", True, shardy, ("ZBH1", "ZB1P", "ZeroBubble")),
      BuiltinSchedule("ZeroBubbleH2ZeroTxLatency",
                      zero_bubble_h2_zero_tx_latency,
                      "ZB-H2 (2x memory, ~no bubble), no transfer latency",
                      "1", True, shardy, ("ZBH2", "ZeroBubbleH2")),
      BuiltinSchedule("ZeroBubbleH2HalfTxLatency",
                      zero_bubble_h2_half_tx_latency,
                      "ZB-H2 with warm-up for a latency of F/2", "1", True,
                      shardy),
      BuiltinSchedule("ZeroBubbleH2FullTxLatency",
                      zero_bubble_h2_full_tx_latency,
                      "ZB-H2 with warm-up for a latency of F", "1", True,
                      shardy),
      BuiltinSchedule("ZBV", zbv,
                      "zero-bubble V schedule: 2 V-shaped stages per mesh",
                      "2", True,
                      "ZB paper §6 / PyTorch ScheduleZBVZeroBubble", ("ZBVZeroBubble", "ZB-V")),
      BuiltinSchedule("DualPipeV", dual_pipe_v,
                      "DeepSeek's DualPipeV: overlapped F&B pairs on 2 "
                      "V-shaped stages per mesh", "2", True,
                      "DeepSeek DualPipe / PyTorch ScheduleDualPipeV"),
      BuiltinSchedule("ParallelPipelinesWithWrapAround",
                      parallel_pipelines_with_wrap_around,
                      "forward only: microbatch m enters at mesh m % P and "
                      "wraps around", "1", False, shardy),
  ]


SCHEDULES: dict[str, BuiltinSchedule] = {e.name: e for e in _entries()}
"""Canonical name -> `BuiltinSchedule`, in documentation order."""


def _normalize(name: str) -> str:
  return name.replace("_", "").replace("-", "").replace(" ", "").lower()


_LOOKUP: dict[str, BuiltinSchedule] = {}
for _e in SCHEDULES.values():
  for _n in (_e.name,) + _e.aliases:
    _LOOKUP[_normalize(_n)] = _e


def schedule_names() -> list[str]:
  """Canonical names of the built-in schedules."""
  return list(SCHEDULES)


def get_schedule(name: str) -> BuiltinSchedule:
  """Looks a built-in schedule up by name (case, ``_`` and ``-`` ignored).

  Raises:
    ScheduleError: unknown name; the message lists the known ones.
  """
  entry = _LOOKUP.get(_normalize(str(name)))
  if entry is None:
    raise ScheduleError(f"unknown schedule {name!r}; known schedules: "
                        + ", ".join(SCHEDULES))
  return entry


def build_schedule(name: str, num_meshes: int, num_microbatches: int,
                   virtual_stages: int | None = None) -> Schedule:
  """``get_schedule(name)(num_meshes, num_microbatches, virtual_stages)``."""
  return get_schedule(name)(num_meshes, num_microbatches, virtual_stages)
