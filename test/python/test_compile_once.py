"""Compile cost flat in microbatches: fragments of different microbatches
that differ only in constants (slice offsets, loop indices) share one program
(-mpmd-parameterize-fragment-constants), for every way of writing microbatches.

Counts of distinct fragment programs are deterministic; numerics are checked
against plain `jax.jit` of the same step.
"""

from __future__ import annotations

import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import mpmd
from mpmd import jaxpp

WIDTH = 8


def _topology(num_meshes: int = 2):
  devices = np.array(jax.devices())
  return {f"m{i}": jax.sharding.Mesh(devices[i:i + 1], ("data",)) for i in range(num_meshes)}


def _stage(w, h):
  return jnp.tanh(h @ w)


def _loss(params, x, y):
  h = mpmd.named_computation(_stage, name="s0")(params[0], x)
  h = mpmd.named_computation(_stage, name="s1")(params[1], h)
  return jnp.mean((h - y) ** 2)


def _accumulate(params, x, y, grads, total):
  loss, g = jax.value_and_grad(_loss)(params, x, y)
  return jax.tree.map(jnp.add, grads, g), total + loss


def _zeros(params):
  return jax.tree.map(jnp.zeros_like, params), jnp.zeros(())


def step_list(params, xs, ys):
  """Microbatches as a list of arrays."""
  grads, total = _zeros(params)
  for i, (x, y) in enumerate(zip(xs, ys)):
    grads, total = mpmd.call(functools.partial(_accumulate, params), call_counter=i)(
        x, y, grads, total)
  return total, grads


def step_stacked(params, xs, ys):
  """`xs[i]` on a stacked array."""
  grads, total = _zeros(params)
  for i in range(xs.shape[0]):
    grads, total = mpmd.call(functools.partial(_accumulate, params), call_counter=i)(
        xs[i], ys[i], grads, total)
  return total, grads


def step_fori(params, xs, ys):
  """`mpmd.fori_loop` with the loop index slicing a stacked array."""
  def body(i, carry):
    grads, total = carry
    x = jax.lax.dynamic_index_in_dim(xs, i, keepdims=False)
    y = jax.lax.dynamic_index_in_dim(ys, i, keepdims=False)
    return _accumulate(params, x, y, grads, total)
  grads, total = mpmd.fori_loop(xs.shape[0], body, _zeros(params))
  return total, grads


def _params():
  keys = jax.random.split(jax.random.key(0), 2)
  return [jax.random.normal(k, (WIDTH, WIDTH)) / np.sqrt(WIDTH) for k in keys]


def _batches(m: int):
  xs = jax.random.normal(jax.random.key(1), (m, 2, WIDTH))
  ys = jax.random.normal(jax.random.key(2), (m, 2, WIDTH))
  return xs, ys


def _assert_close(got, want):
  got, want = jax.tree.leaves(got), jax.tree.leaves(want)
  num = np.sqrt(sum(float(np.sum((np.asarray(a) - np.asarray(b)) ** 2)) for a, b in zip(got, want)))
  den = np.sqrt(sum(float(np.sum(np.asarray(b) ** 2)) for b in want))
  assert num <= 1e-5 * max(den, 1.0), (num, den)


def _num_programs(lowered: mpmd.Lowered) -> int:
  return len(lowered.partition.functions)


@pytest.mark.parametrize("step", [step_list, step_stacked, step_fori], ids=lambda f: f.__name__)
def test_distinct_programs_do_not_grow_with_microbatches(step):
  config = mpmd.make_config(_topology(), {"s0": "m0", "s1": "m1"}, pipeline_schedule="1F1B")
  params = _params()
  counts = {}
  for m in (3, 6):
    xs, ys = _batches(m)
    args = (params, list(xs), list(ys)) if step is step_list else (params, xs, ys)
    lowered = mpmd.jit(step, config).lower(*args)
    counts[m] = _num_programs(lowered)
    if m == 6:
      compiled = lowered.compile()
      _assert_close(compiled(*args), jax.jit(step)(*args))
      # Every fragment program is compiled once per (program, mesh).
      assert len(compiled.program.fragments) == counts[m]
  assert counts[3] == counts[6], counts


def test_stacked_batch_constants_are_operands_placed_once():
  config = mpmd.make_config(_topology(), {"s0": "m0", "s1": "m1"}, pipeline_schedule="GPipe")
  params = _params()
  xs, ys = _batches(4)
  lowered = mpmd.jit(step_stacked, config).lower(params, xs, ys)
  constants = lowered.partition.constants
  # One offset per microbatch and mesh that slices the batch there.
  offsets = [c for c in constants if not c.donated]
  assert sorted(int(c.value) for c in offsets if c.mesh == "m0") == [0, 1, 2, 3]
  assert {c.dtype for c in offsets} == {"int32"}
  # The zeros the first microbatch's accumulators start from (consumed: each
  # step gets a fresh copy).
  zeros = [c for c in constants if c.donated]
  assert zeros and all(float(c.value) == 0.0 for c in zeros), zeros
  assert {tuple(c.shape) for c in zeros} >= {(WIDTH, WIDTH)}
  compiled = lowered.compile()
  placed = compiled.program.constants
  assert set(placed) == {c.id for c in offsets}
  for c in offsets:
    assert int(placed[c.id]) == int(c.value)
    assert placed[c.id].sharding.device_set == set(lowered.config.topology[c.mesh].devices.flat)
  # The zeros are made afresh for the call that consumes them, in one dispatch.
  consumers = [i for i in compiled.instructions if getattr(i, "fresh", ())]
  assert {i.mesh for i in consumers} == {c.mesh for c in zeros}
  for inst in consumers:
    made = inst.fill()
    assert len(made) == len(inst.fresh)
    for x in made:
      np.testing.assert_array_equal(x, np.zeros(x.shape))
      assert x.sharding.device_set == set(lowered.config.topology[inst.mesh].devices.flat)
  # Several steps reuse the same placed offsets.
  first = compiled(params, xs, ys)
  second = compiled(params, xs, ys)
  _assert_close(second, first)
  assert not any(x.is_deleted() for x in placed.values())
  _assert_close(first, jax.jit(step_stacked)(params, xs, ys))


def _jaxpp_step(params, xs, ys, schedule):
  def loss(params, x, y):
    h = x
    for p in params:
      h = jaxpp.api.pipeline_enter_stage(jnp.tanh(h @ p))
    return jnp.mean((h - y) ** 2)
  losses, grads = jaxpp.api.treduce(lambda b: jax.value_and_grad(loss)(params, *b), (xs, ys),
                                    schedule=schedule)
  return losses, grads


def test_treduce_programs_do_not_grow_with_microbatches():
  devices = np.array(jax.devices()[:2]).reshape(2, 1)
  mesh = jaxpp.api.MpmdMesh(jax.sharding.Mesh(devices, ("stage", "data")), "stage")
  params = _params()
  counts = {}
  for m in (2, 4):
    xs, ys = _batches(m)
    schedule = jaxpp.api.Std1F1B(2)
    step = functools.partial(_jaxpp_step, schedule=schedule)
    fn = jaxpp.api.mpmd_jit_with_loop(step, mesh)
    lowered = fn.lower(params, xs, ys)
    counts[m] = _num_programs(lowered)
    if m == 4:
      compiled = fn.compile(params, xs, ys)
      _assert_close(compiled(params, xs, ys), jax.jit(step)(params, xs, ys))
      # Every microbatch calls one lowered function (not one wrapper per
      # microbatch around it), and the partitioned program keeps no copy of
      # the inlined functions.
      text = lowered.as_text("stablehlo")
      callees = re.findall(r"mpmd\.call @([\w.$-]+)", text)
      assert len(callees) == 4 and len(set(callees)) == 1, callees
      assert "func.func private" not in lowered.as_text("mpmd")
  assert counts[2] == counts[4], counts


def _block(w, h):
  return jnp.tanh(h @ w)


def _blocks_loss(params, x):
  h = x
  for k, w in enumerate(params):
    h = mpmd.named_computation(_block, name=f"b{k}")(w, h)
  return jnp.sum(h ** 2)


def test_identical_stages_compile_once_and_run_on_their_own_devices():
  """Four identical blocks on four meshes of one device: the middle stages'
  programs are compiled once and loaded on the other meshes; every result
  lives on its own mesh and matches jax.jit."""
  topology = {f"m{i}": jax.sharding.Mesh(np.array(jax.devices()[i:i + 1]), ("data",))
              for i in range(4)}
  config = mpmd.make_config(topology, {f"b{k}": f"m{k}" for k in range(4)})
  keys = jax.random.split(jax.random.key(0), 4)
  params = [jax.random.normal(k, (WIDTH, WIDTH)) / np.sqrt(WIDTH) for k in keys]
  x = jax.random.normal(jax.random.key(9), (2, WIDTH))
  step = jax.value_and_grad(_blocks_loss)
  compiled = mpmd.jit(step, config).lower(params, x).compile()
  program = compiled.program
  assert program.num_loaded > 0
  assert program.num_xla_compiles + program.num_loaded == len(program.fragments)
  # Every call runs on the devices of its own mesh.
  for inst in compiled.instructions:
    if hasattr(inst, "fragment"):
      assert inst.fragment.devices == tuple(topology[inst.mesh].devices.flat)
  loss, grads = compiled(params, x)
  ref_loss, ref_grads = jax.jit(step)(params, x)
  _assert_close((loss, grads), (ref_loss, ref_grads))
  for k, g in enumerate(grads):
    assert g.sharding.device_set == set(topology[f"m{k}"].devices.flat)


def test_xla_compiles_of_a_pipeline_of_identical_blocks_do_not_grow():
  """8 identical blocks on 8 one-device meshes under 1F1B, microbatches from
  `mpmd.fori_loop`: the number of XLA compiles is the same for 2 and 4
  microbatches, and most programs are loaded on other meshes, not compiled."""
  n = 8
  topology = {f"m{i}": jax.sharding.Mesh(np.array(jax.devices()[i:i + 1]), ("data",))
              for i in range(n)}
  config = mpmd.make_config(topology, {f"b{k}": f"m{k}" for k in range(n)},
                            pipeline_schedule="1F1B")
  params = [jnp.eye(WIDTH) * 0.5 for _ in range(n)]
  compiles = {}
  for m in (2, 4):
    xs = jax.random.normal(jax.random.key(m), (m, 2, WIDTH))

    def step(params, xs, m=m):
      def body(i, carry):
        grads, total = carry
        x = jax.lax.dynamic_index_in_dim(xs, i, keepdims=False)
        loss, g = jax.value_and_grad(_blocks_loss)(params, x)
        return jax.tree.map(jnp.add, grads, g), total + loss
      return mpmd.fori_loop(m, body, (jax.tree.map(jnp.zeros_like, params), jnp.zeros(())))

    compiled = mpmd.jit(step, config).lower(params, xs).compile()
    compiles[m] = compiled.program.num_xla_compiles
    assert compiled.program.num_loaded > compiles[m]
    # First, middle and last stage, forward and backward: the first
    # microbatch shares them (its accumulators start from constant operands).
    assert compiles[m] <= 6, compiles
    if m == 4:
      _assert_close(compiled(params, xs), jax.jit(step)(params, xs))
  assert compiles[2] == compiles[4], compiles


_CACHE_SCRIPT = """
import os, sys
from mpmd.launch import _with_device_count
os.environ["XLA_FLAGS"] = _with_device_count(os.environ.get("XLA_FLAGS", ""), 8)
import jax, numpy as np
jax.config.update("jax_compilation_cache_dir", sys.argv[1])
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
events = []
jax.monitoring.register_event_listener(lambda name, **kw: events.append(name))
import mpmd
sys.path.insert(0, sys.argv[2])
from test_compile_once import step_list, _params, _batches
topology = {f"m{i}": jax.sharding.Mesh(np.array(jax.devices()[i:i + 1]), ("data",))
            for i in range(2)}
config = mpmd.make_config(topology, {"s0": "m0", "s1": "m1"}, pipeline_schedule="1F1B")
xs, ys = _batches(4)
compiled = mpmd.jit(step_list, config).lower(_params(), list(xs), list(ys)).compile()
hits = events.count("/jax/compilation_cache/cache_hits")
misses = events.count("/jax/compilation_cache/cache_misses")
print(f"RESULT {compiled.program.num_xla_compiles} {hits} {misses}")
"""


@pytest.mark.slow
def test_fragments_use_jaxs_persistent_compilation_cache(tmp_path):
  """A second process compiling the same step takes every fragment program
  from JAX's persistent compilation cache; corrupt entries are compiled again."""
  import os  # noqa: PLC0415
  import subprocess  # noqa: PLC0415
  import sys  # noqa: PLC0415

  def run():
    out = subprocess.run([sys.executable, "-c", _CACHE_SCRIPT, str(tmp_path / "cache"),
                          os.path.dirname(__file__)], capture_output=True, text=True, timeout=300,
                         check=True).stdout
    line = next(l for l in out.splitlines() if l.startswith("RESULT"))
    return [int(v) for v in line.split()[1:]]

  compiles, hits, misses = run()
  assert compiles > 0 and misses >= compiles and hits == 0
  compiles, hits, misses = run()
  assert hits >= compiles and misses == 0
  # Corrupt entries: JAX warns and compiles again (no crash, no wrong program).
  for entry in (tmp_path / "cache").iterdir():
    if entry.is_file():
      entry.write_bytes(b"not an executable")
  compiles, hits, misses = run()
  assert misses >= compiles and hits == 0


def test_progress_line_on_long_compiles(monkeypatch, capsys):
  from mpmd.compile import fragment_cache  # noqa: PLC0415
  config = mpmd.make_config(_topology(), {"s0": "m0", "s1": "m1"}, pipeline_schedule="1F1B")
  xs, ys = _batches(2)
  args = (_params(), list(xs), list(ys))
  mpmd.jit(step_list, config).lower(*args).compile()
  assert "[mpmd] fragment programs" not in capsys.readouterr().err  # silent by default
  monkeypatch.setenv("MPMD_PROGRESS", "1")
  monkeypatch.setattr(fragment_cache, "_PROGRESS_AFTER", 0.0)
  compiled = mpmd.jit(step_list, config).lower(*args).compile()
  err = capsys.readouterr().err
  total = len({(i.mesh, i.fragment.name) for i in compiled.instructions if hasattr(i, "fragment")})
  assert f"[mpmd] fragment programs {total}/{total} (" in err, err


def test_only_the_slices_a_mesh_uses_cross_to_it():
  """A stacked batch holding inputs and labels, used on the first and the
  last mesh: it lives on the first, and the last receives only its slices of
  the labels, never the whole batch."""
  config = mpmd.make_config(_topology(), {"s0": "m0", "s1": "m1"}, pipeline_schedule="1F1B")

  def step(params, batch):
    grads, total = _zeros(params)
    for i in range(batch.shape[0]):
      grads, total = mpmd.call(functools.partial(_accumulate, params), call_counter=i)(
          batch[i, 0], batch[i, 1], grads, total)
    return total, grads

  params = _params()
  batch = jax.random.normal(jax.random.key(3), (4, 2, 2, WIDTH))
  lowered = mpmd.jit(step, config).lower(params, batch)
  moved = [inst.value_type for inst in lowered.partition.program if inst.kind == "transfer"]
  assert moved and f"tensor<4x2x2x{WIDTH}xf32>" not in moved, moved
  assert sum(t.startswith("tensor<1x1x2x") for t in moved) == 4, moved  # one label slice each
  _assert_close(lowered.compile()(params, batch), jax.jit(step)(params, batch))


def test_every_microbatch_shares_one_program_per_stage_with_an_optimizer_step():
  """With an update after the loop, every microbatch (the first, whose
  accumulators start from zeros, and the last, after which the update runs)
  calls the same forward and backward program of each stage (on the last
  stage, forward and backward merged into one); the update is a fragment of
  its own on each mesh."""
  config = mpmd.make_config(_topology(), {"s0": "m0", "s1": "m1"}, pipeline_schedule="1F1B")

  def train(params, xs, ys):
    total, grads = step_list(params, xs, ys)
    return total, [p - 0.1 * g for p, g in zip(params, grads)]

  params = _params()
  xs, ys = _batches(4)
  lowered = mpmd.jit(train, config).lower(params, list(xs), list(ys))
  callees: dict[tuple, set] = {}
  for inst in lowered.partition.program:
    if inst.kind == "call" and inst.origins:
      callees.setdefault((inst.mesh, tuple(inst.origins)), set()).add(inst.callee)
  assert set(callees) == {("m0", ("s0",)), ("m0", ("s0(1)",)), ("m1", ("s1", "s1(1)"))}, callees
  assert all(len(c) == 1 for c in callees.values()), callees
  inferred = [inst for inst in lowered.partition.program if inst.kind == "call" and not inst.origins]
  assert {inst.mesh for inst in inferred} == {"m0", "m1"}, [str(i.callee) for i in inferred]
  _assert_close(lowered.compile()(params, list(xs), list(ys)),
                jax.jit(train)(params, list(xs), list(ys)))
