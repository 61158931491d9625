"""The runtime at full strength: sharded meshes, donation, memory, caching,
faults (issue: export and runtime)."""

from __future__ import annotations

import dataclasses
import gc

import logging
import weakref

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import mpmd
from mpmd.run import program as run_program
from models import init_mlp, make_batch, make_topology, mlp_loss

RTOL = 1e-5
NUM_STAGES = 4


def _staged_loss(params, x, y):
  """MLP loss with stage s labelled "stage{s}"; y used only in the last stage."""
  h = x
  for s, p in enumerate(params):
    last = s == len(params) - 1
    if last:
      h = mpmd.named_computation(
          lambda p, h, y: jnp.mean((h @ p["w"] + p["b"] - y) ** 2), name=f"stage{s}")(p, h, y)
    else:
      h = mpmd.named_computation(lambda p, h: jnp.tanh(h @ p["w"] + p["b"]), name=f"stage{s}")(p, h)
  return h


def _microbatched_step(params, xs, ys, lr=0.1):
  """SGD on the mean gradient over microbatches (mpmd.call per microbatch)."""
  grads = None
  losses = []
  for i, (x, y) in enumerate(zip(xs, ys)):
    loss, g = mpmd.call(jax.value_and_grad(_staged_loss), call_counter=i)(params, x, y)
    losses.append(loss)
    grads = g if grads is None else jax.tree.map(jnp.add, grads, g)
  n = len(xs)
  return jnp.mean(jnp.stack(losses)), jax.tree.map(lambda p, g: p - lr * g / n, params, grads)


def _config(axis="data", schedule="1F1B", num_stages=NUM_STAGES):
  return mpmd.make_config(make_topology(num_stages, 8 // num_stages, axis),
                          {f"stage{s}": f"m{s}" for s in range(num_stages)},
                          pipeline_schedule=schedule)


def _batches(num_microbatches=4, batch=8, seed=0):
  keys = jax.random.split(jax.random.key(seed), 2 * num_microbatches)
  xs = [jax.random.normal(keys[i], (batch, 16)) for i in range(num_microbatches)]
  ys = [jax.random.normal(keys[num_microbatches + i], (batch, 4)) for i in range(num_microbatches)]
  return xs, ys


def _allclose(a, b, rtol=RTOL):
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
    np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=rtol, atol=1e-6)


# --- Data parallelism inside meshes -------------------------------------------


def test_data_parallel_inside_meshes_matches_jax_jit_on_8_devices():
  """4 meshes x 2 devices, batch sharded over "data" in every mesh, against
  jax.jit over all 8 devices with the batch sharded the same way."""
  config = _config()
  params = init_mlp(NUM_STAGES, width=32)
  xs, ys = _batches()
  step = mpmd.jit(_microbatched_step, config, in_shardings=(None, P("data"), P("data")))
  mesh8 = Mesh(np.array(jax.devices()[:8]), ("data",))
  batch8 = NamedSharding(mesh8, P("data"))
  ref_step = jax.jit(_microbatched_step, in_shardings=(NamedSharding(mesh8, P()), batch8, batch8))
  ref_params = params
  for _ in range(3):
    loss, params = step(params, xs, ys)
    ref_loss, ref_params = ref_step(ref_params, xs, ys)
    _allclose(loss, ref_loss)
    _allclose(params, ref_params)

  compiled = step.lower(params, xs, ys).compile()
  # The microbatches really are split over the two devices of their mesh,
  # and the fragments that read them were compiled for that layout.
  x_shardings = compiled.input_shardings[0][1]
  assert all(s.spec == P("data") for s in x_shardings)
  first = next(i for i in compiled.instructions
               if isinstance(i, run_program.CallInstruction) and i.unit == "F0")
  assert any(s.spec == P("data") for s in first.fragment.input_shardings
             if isinstance(s, NamedSharding))
  # Activations stay batch-sharded across the stage boundary (1/2 per device).
  to_next = next(i for i in compiled.instructions if isinstance(i, run_program.TransferInstruction)
                 and i.src_mesh == "m0" and i.mesh == "m1")
  assert to_next.sharding.shard_shape((8, 32)) == (4, 32)


def test_model_axis_sharded_params_match_jax_jit():
  """Params sharded over a "model" axis by in_shardings (data x model = 1 x 2
  per mesh): results equal jax.jit's and the params stay sharded."""
  config = _config(axis="model", num_stages=4)
  params = init_mlp(NUM_STAGES, width=32)
  xs, ys = _batches(num_microbatches=2)
  param_specs = [{"w": P(None, "model"), "b": P("model")}] * NUM_STAGES
  param_specs[-1] = {"w": P("model", None), "b": P()}
  step = mpmd.jit(_microbatched_step, config, in_shardings=(param_specs, None, None),
                  out_shardings=(None, param_specs))
  ref = params
  for _ in range(2):
    loss, params = step(params, xs, ys)
    ref_loss, ref = jax.jit(_microbatched_step)(ref, xs, ys)
    _allclose(loss, ref_loss)
    _allclose(params, ref)
  assert params[0]["w"].sharding.spec == P(None, "model")
  assert params[0]["w"].addressable_shards[0].data.shape == (16, 16)
  assert params[3]["w"].sharding.spec == P("model", None)


def test_in_shardings_errors_name_the_argument():
  config = _config()
  params = init_mlp(NUM_STAGES, width=32)
  xs, ys = _batches(num_microbatches=2)
  with pytest.raises(mpmd.MpmdError, match=r"in_shardings for argument \d+: .*'nope'"):
    mpmd.jit(_microbatched_step, config, in_shardings=(None, P("nope"), None)).lower(params, xs, ys)
  with pytest.raises(mpmd.ConfigError, match="in_shardings is not a pytree prefix"):
    mpmd.jit(_microbatched_step, config, in_shardings=(None, [P()], None)).lower(params, xs, ys)
  other = Mesh(np.array(jax.devices()[:3]), ("data",))
  with pytest.raises(mpmd.ConfigError, match=r"not the devices of any mesh"):
    mpmd.jit(_microbatched_step, config,
             in_shardings=(None, NamedSharding(other, P()), None)).lower(params, xs, ys)


# --- Caching and steady state -------------------------------------------------


def test_outputs_feed_the_next_step_without_copies_or_recompiles(monkeypatch):
  config = _config()
  step = mpmd.jit(_microbatched_step, config, in_shardings=(None, P("data"), P("data")))
  params = init_mlp(NUM_STAGES, width=32)
  xs, ys = _batches()
  loss, params = step(params, xs, ys)  # (init's biases are weak-typed: a new entry after)
  xs = [jax.device_put(x, s) for x, s in zip(xs, step.lower(params, xs, ys).compile()
                                             .input_shardings[0][1])]
  loss, params = step(params, xs, ys)  # now every argument is committed on its mesh
  entries = len(step._cache)
  loss, params = step(params, xs, ys)
  assert len(step._cache) == entries
  lowered, variants = list(step._cache.values())[-1]
  assert len(variants) == 1
  puts = []
  real_put = jax.device_put
  monkeypatch.setattr(jax, "device_put", lambda *a, **k: puts.append(a) or real_put(*a, **k))
  compiled, = variants.values()
  leaves = jax.tree.leaves(((params, xs, ys), {}))
  inputs = compiled._inputs.place(leaves)
  # Only the uncommitted ys are placed (on CPU from their host view); params
  # and xs are used as they are.
  assert len(puts) == len(ys), puts
  for (value, _), y in zip(puts, ys):
    np.testing.assert_array_equal(np.asarray(value), np.asarray(y))
  assert sum(x is leaves[i] for x, (i, *_) in zip(inputs, compiled._inputs.kept)) >= len(leaves) - len(ys)


def test_recompiles_when_argument_shardings_change(caplog):
  config = _config()
  step = mpmd.jit(_microbatched_step, config)
  params = init_mlp(NUM_STAGES, width=32)
  xs, ys = _batches(num_microbatches=2)
  step(params, xs, ys)
  step(params, xs, ys)
  (lowered, variants), = step._cache.values()
  assert len(variants) == 1
  m0 = config.topology["m0"]
  sharded = [jax.device_put(x, NamedSharding(m0, P("data"))) for x in xs]
  with caplog.at_level(logging.INFO, logger="mpmd"):
    loss, _ = step(params, sharded, ys)
  assert "recompiling" in caplog.text
  assert len(variants) == 2
  ref_loss, _ = jax.jit(_microbatched_step)(params, xs, ys)
  _allclose(loss, ref_loss)
  step(params, sharded, ys)
  assert len(variants) == 2 and len(step._cache) == 1


# --- Donation and memory --------------------------------------------------------


def _adam_like_step(state, xs, ys, lr=0.01):
  """SGD with momentum: state = (params, momentum)."""
  params, mom = state
  loss, new_params = _microbatched_step(params, xs, ys, lr=0.0)
  del new_params
  grads = None
  for i, (x, y) in enumerate(zip(xs, ys)):
    g = mpmd.call(jax.grad(_staged_loss), call_counter=i)(params, x, y)
    grads = g if grads is None else jax.tree.map(jnp.add, grads, g)
  mom = jax.tree.map(lambda m, g: 0.9 * m + g, mom, grads)
  params = jax.tree.map(lambda p, m: p - lr * m, params, mom)
  return loss, (params, mom)


def _live_bytes() -> int:
  return sum(x.nbytes for x in jax.live_arrays() if not x.is_deleted())


def test_donated_state_is_consumed_and_memory_stays_flat():
  config = _config()
  step = mpmd.jit(_microbatched_step, config, donate_argnums=(0,))
  ref_step = jax.jit(_microbatched_step)
  params = init_mlp(NUM_STAGES, width=32)
  ref = params
  xs, ys = _batches()
  live = []
  for i in range(10):
    old = params
    loss, params = step(params, xs, ys)
    if i > 0:  # from the second step on, the params are the previous outputs
      assert all(p.is_deleted() for p in jax.tree.leaves(old))
    ref_loss, ref = ref_step(ref, xs, ys)
    del old
    jax.block_until_ready(params)
    live.append(_live_bytes())
  _allclose(params, ref)
  # Flat once the in-flight windows of the multi-device meshes (which hold a
  # result of each of the last calls and transfers there, across steps) are
  # full: from the third step on.
  assert len(set(live[2:])) == 1, live
  # The compiler marked the consumed values: donated function arguments exist.
  compiled = step.lower(params, xs, ys).compile()
  assert any(inst.donated for inst in compiled.instructions
             if isinstance(inst, run_program.CallInstruction))
  assert "jax.buffer_donor = true" in compiled.as_text()


def _layered_stages_step(pack: bool):
  """Two stages of three layers of one shape each, 4 microbatches (1F1B),
  accumulating their gradients; the compiled step, its inputs, and the step."""
  topology = make_topology(2, 1, "data")
  config = mpmd.make_config(topology, {"s0": "m0", "s1": "m1"}, pipeline_schedule="1F1B",
                            partitioning_options={"mpmd_pack_fragment_values": pack})
  keys = jax.random.split(jax.random.key(3), 8)
  params = [[{"w": 0.3 * jax.random.normal(keys[2 * s + i], (16, 16)), "b": jnp.zeros(16)}
             for i in range(3)] for s in range(2)]
  xs = [jax.random.normal(keys[6], (4, 16)) + i for i in range(4)]

  def stage(layers, h):
    for layer in layers:
      h = jnp.tanh(h @ layer["w"] + layer["b"])
    return h

  def loss(params, x):
    h = mpmd.named_computation(stage, name="s0")(params[0], x)
    return jnp.mean(mpmd.named_computation(stage, name="s1")(params[1], h) ** 2)

  @jax.jit
  def microbatch(params, x, grads):
    return jax.tree.map(jnp.add, grads, jax.grad(loss)(params, x))

  def step(params, xs):
    grads = jax.tree.map(jnp.zeros_like, params)
    for i, x in enumerate(xs):
      grads = mpmd.call(microbatch, call_counter=i)(params, x, grads)
    return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads)

  return mpmd.jit(step, config).lower(params, xs).compile(), (params, xs), step


def _copying_programs(compiled) -> set[str]:
  texts = {name: fragment.as_text() for (name, _, _), fragment in compiled.program.fragments.items()}
  return {name for name, t in texts.items()
          if any(" copy(" in line for line in t.split("ENTRY", 1)[-1].splitlines())}


def test_gradient_accumulators_are_updated_in_place():
  """A stage of several layers of one shape accumulates its gradients in the
  buffers it is given: its backward program returns them in the reverse
  order of its operands, and XLA, pairing donated buffers with results by
  position, copied every accumulator twice per microbatch. No fragment
  program copies anything now, and the step equals jax.jit's. (Accumulators
  passed one buffer each: with packing, see the next test.)"""
  compiled, args, step = _layered_stages_step(pack=False)
  texts = [fragment.as_text() for fragment in compiled.program.fragments.values()]
  assert any("input_output_alias" in t for t in texts)
  assert not _copying_programs(compiled), sorted(_copying_programs(compiled))
  _allclose(compiled(*args), jax.jit(step)(*args))


def test_packed_accumulators_are_not_copied():
  """With the accumulators packed into one buffer (the default), each
  backward takes and makes that buffer instead of one per parameter; XLA
  fuses the unpacking, the sums and the packing, which it cannot do in the
  donated buffer itself, so the packed buffer is not donated (the runtime
  frees it after the call) rather than copied. Equal to jax.jit."""
  compiled, args, step = _layered_stages_step(pack=True)
  unpacked, _, _ = _layered_stages_step(pack=False)

  def buffers(c):
    return sum(len(i.operands) + len(i.results) for i in c.program.instructions
               if hasattr(i, "fragment"))

  assert buffers(compiled) <= 0.55 * buffers(unpacked), (buffers(compiled), buffers(unpacked))
  assert not _copying_programs(compiled), sorted(_copying_programs(compiled))
  _allclose(compiled(*args), jax.jit(step)(*args))


def test_without_donation_inputs_are_intact():
  config = _config()
  params = init_mlp(NUM_STAGES, width=32)
  xs, ys = _batches()
  params = jax.tree.map(lambda p: jax.device_put(p, config.topology["m0"].devices.flat[0]), params)
  step = mpmd.jit(_microbatched_step, config)
  step(params, xs, ys)
  assert not any(p.is_deleted() for p in jax.tree.leaves((params, xs, ys)))


def test_same_array_passed_twice_with_donation_is_an_error():
  config = mpmd.make_config(make_topology(2, 4), {"a": "m0"})
  f = mpmd.jit(lambda x, y: mpmd.named_computation(lambda x, y: x + y, name="a")(x, y), config,
               donate_argnums=(0,))
  x = jax.device_put(jnp.ones(4), NamedSharding(config.topology["m0"], P()))
  with pytest.raises(mpmd.MpmdError, match=r"same array is passed as arguments args\[0\].*args\[1\]"):
    f(x, x)


def test_memory_report_estimates_and_measures_each_mesh():
  config = _config()
  params = init_mlp(NUM_STAGES, width=64)
  xs, ys = _batches(num_microbatches=4, batch=16)
  compiled = mpmd.jit(_microbatched_step, config, donate_argnums=(0,)).lower(params, xs, ys).compile()
  report = compiled.memory_report(params, xs, ys)
  assert not any(p.is_deleted() for p in jax.tree.leaves(params))  # measured on copies
  assert [m.mesh for m in report.meshes] == ["m0", "m1", "m2", "m3"]
  for m in report.meshes:
    assert len(m.estimated) == len(compiled.instructions)
    assert m.estimated_peak >= max(m.estimated) > 0
    assert m.measured_peak is not None and m.measured_peak > 0
  # Mesh m0 holds the microbatch inputs (4 x 16 x 16 floats) and its params.
  x_bytes = sum(x.nbytes for x in xs)
  p0_bytes = sum(p.nbytes for p in jax.tree.leaves(params[0]))
  assert report["m0"].estimated_peak >= x_bytes + p0_bytes
  assert "estimated peak" in str(report) and "m3" in str(report)
  # Between calls the estimate counts what the instrumented run sees after an
  # instruction: its results beside the operands it used for the last time
  # (it counted them dropped already, 10-25% under the measurement).
  for m in report.meshes:
    assert abs(m.estimated_live_peak - m.measured_peak) <= 0.02 * m.measured_peak, (
        m.mesh, m.estimated_live_peak, m.measured_peak)


# --- Faults ---------------------------------------------------------------------


def test_failing_fragment_names_itself_and_leaves_inputs_intact(monkeypatch):
  config = _config()
  params = init_mlp(NUM_STAGES, width=32)
  xs, ys = _batches(num_microbatches=2)
  params = jax.tree.map(lambda p: jax.device_put(p, config.topology["m0"].devices.flat[0]), params)
  compiled = mpmd.jit(_microbatched_step, config).lower(params, xs, ys).compile()
  victim = next(i for i in compiled.instructions
                if isinstance(i, run_program.CallInstruction) and i.unit == "B1" and i.mesh == "m2")

  class Broken:
    name = victim.fragment.name

    def __call__(self, *args):
      raise jax.errors.JaxRuntimeError("INTERNAL: simulated device failure")

    def call_trusted(self, args):  # what the runtime calls
      return self(*args)

  broken = [run_program.CallInstruction(Broken(), i.mesh, i.operands, i.results, i.origins, i.location,
                                    i.unit, i.donated, i.frees) if i is victim else i
            for i in compiled.program.instructions]
  monkeypatch.setattr(compiled.program, "instructions", broken)
  before = [np.asarray(p) for p in jax.tree.leaves(params)]
  with pytest.raises(run_program.FragmentRuntimeError) as info:
    compiled(params, xs, ys)
  message = str(info.value)
  assert f"fragment {victim.fragment.name!r} (unit B1) of stage2(1)" in message
  assert "on mesh 'm2'" in message and "test_runtime.py" in message
  assert "simulated device failure" in message
  for p, b in zip(jax.tree.leaves(params), before):
    assert not p.is_deleted()
    np.testing.assert_array_equal(np.asarray(p), b)


def test_arrays_on_devices_outside_the_program_are_rejected_before_running():
  config = mpmd.make_config(make_topology(2, 2), {f"stage{s}": f"m{s}" for s in range(2)})
  params = init_mlp(2, width=32)
  x, y = make_batch()
  step = mpmd.jit(lambda p, x, y: _staged_loss(p, x, y), config)
  step(params, x, y)
  stray = jax.device_put(x, jax.devices()[7])
  with pytest.raises(mpmd.MpmdError,
                     match=r"argument args\[1\] is committed to devices \[7\], and \[7\] are on no mesh"):
    step(params, stray, y)


def test_wrong_shapes_recompile_under_jit_and_fail_clearly_on_compiled():
  config = mpmd.make_config(make_topology(2, 4), {f"stage{s}": f"m{s}" for s in range(2)})
  params = init_mlp(2, width=32)
  x, y = make_batch()
  f = lambda p, x, y: _staged_loss(p, x, y)  # noqa: E731
  compiled = mpmd.jit(f, config).lower(params, x, y).compile()
  x2, y2 = make_batch(batch=4)
  with pytest.raises(mpmd.MpmdError, match=r"argument args\[1\] has shape \(4, 16\)"):
    compiled(params, x2, y2)
  jitted = mpmd.jit(f, config)
  np.testing.assert_allclose(jitted(params, x2, y2), jax.jit(f)(params, x2, y2), rtol=RTOL)
  np.testing.assert_allclose(jitted(params, x, y), jax.jit(f)(params, x, y), rtol=RTOL)
  assert len(jitted._cache) == 2


# --- Logging --------------------------------------------------------------------


def test_logs_what_was_compiled_where(caplog):
  config = _config()
  params = init_mlp(NUM_STAGES, width=32)
  xs, ys = _batches(num_microbatches=2)
  with caplog.at_level(logging.INFO, logger="mpmd"):
    mpmd.jit(_microbatched_step, config)(params, xs, ys)
  assert "partitioned _microbatched_step into" in caplog.text
  assert "compiled p0_" in caplog.text and "for mesh 'm0' (2 devices)" in caplog.text
  assert "distinct fragment programs for" in caplog.text


# --- Runtime traces -------------------------------------------------------------


def test_trace_records_every_fragment_call_per_mesh(tmp_path):
  config = _config()
  params = init_mlp(NUM_STAGES, width=32)
  xs, ys = _batches()
  compiled = mpmd.jit(_microbatched_step, config, donate_argnums=(0,)).lower(params, xs, ys).compile()
  (loss, new_params), trace = compiled.trace(jax.tree.map(jnp.copy, params), xs, ys)
  ref_loss, ref_params = jax.jit(_microbatched_step)(params, xs, ys)
  _allclose(loss, ref_loss)
  _allclose(new_params, ref_params)
  calls = [i for i in compiled.instructions if isinstance(i, run_program.CallInstruction)]
  transfers = [i for i in compiled.instructions if not isinstance(i, run_program.CallInstruction)]
  assert len(trace.calls) == len(calls) and len(trace.transfers) == len(transfers) > 0
  for mesh in trace.meshes:  # each mesh runs its units in the schedule's order
    names = [u for e in trace.calls if e.mesh == mesh and e.name[0] in "FB"
             for u in e.name.split("+")]  # `F3+B3`: a forward merged with its backward
    order = [str(u) for u in compiled.schedule.order(int(mesh[1:]))]
    assert [n.split(".")[0] for n in names] == [o.split(".")[0] for o in order]
    spans = [(e.start, e.end) for e in trace.calls if e.mesh == mesh]
    assert all(s <= e for s, e in spans)
    assert all(e0 <= s1 for (_, e0), (s1, _) in zip(spans, spans[1:]))  # one at a time
  # Each transfer is from its source mesh to its destination, after its source is ready.
  assert sorted((e.source, e.mesh) for e in trace.transfers) == sorted(
      (i.src_mesh, i.mesh) for i in transfers)
  assert all(e.start <= e.end for e in trace.transfers)
  assert 0.0 <= trace.bubble_fraction < 1.0
  path = tmp_path / "out" / "trace.json"  # the folder is created
  trace.write_chrome_trace(str(path))
  import json
  events = json.loads(path.read_text())["traceEvents"]
  assert sum(e["ph"] == "X" and e["cat"] == "fragment" for e in events) == len(calls)
  assert sum(e["ph"] == "X" and e["cat"] == "transfer" for e in events) == len(transfers)
  rows = {e["args"]["name"] for e in events if e["ph"] == "M"}
  assert {f"transfers {i.src_mesh} -> {i.mesh}" for i in transfers} <= rows
  assert sum(e["ph"] == "s" for e in events) == sum(e["ph"] == "f" for e in events) == len(transfers)


def test_forward_only_program_flowing_backward_is_a_warning(caplog):
  """The export validator flags a forward-only program whose data goes from
  a later mesh to an earlier one (logged; the program still runs)."""
  config = mpmd.make_config(make_topology(2, 4), {"a": "m1", "b": "m0"})

  def f(x):
    y = mpmd.named_computation(lambda x: x * 2, name="a")(x)
    return mpmd.named_computation(lambda y: y + 1, name="b")(y)

  with caplog.at_level(logging.WARNING, logger="mpmd"):
    out = mpmd.jit(f, config)(jnp.ones(4))
  np.testing.assert_allclose(out, 3 * np.ones(4))
  assert "forward-only program flows backward" in caplog.text
  assert 'mesh "m0" reads a value computed by the call of' in caplog.text


def test_backward_deps_can_be_an_error():
  config = mpmd.make_config(make_topology(2, 4), {"a": "m1", "b": "m0"},
                            partitioning_options={"mpmd_fail_on_backward_deps": True})

  def f(x):
    y = mpmd.named_computation(lambda x: x * 2, name="a")(x)
    return mpmd.named_computation(lambda y: y + 1, name="b")(y)

  with pytest.raises(mpmd.PartitionError, match="error: forward-only program flows backward"):
    mpmd.jit(f, config).lower(jnp.ones(4))


def test_lean_steady_path_plan():
  """What each step does is worked out at compile time: transfers between
  meshes of the same shape copy with the value's layout kept (no
  `jax.device_put` bookkeeping), and only meshes of several devices take part
  in the CPU in-flight bound (one device runs no collectives)."""
  config = _config()
  params = init_mlp(NUM_STAGES, width=32)
  xs, ys = _batches(num_microbatches=2)
  compiled = mpmd.jit(_microbatched_step, config).lower(params, xs, ys).compile()
  transfers = [i for i in compiled.instructions if isinstance(i, run_program.TransferInstruction)]
  assert transfers and all(i.copier is not None for i in transfers)
  assert any(compiled.program._window_blocking)  # 2-device meshes on CPU
  one_device = mpmd.make_config(make_topology(NUM_STAGES, 1),
                                {f"stage{s}": f"m{s}" for s in range(NUM_STAGES)},
                                pipeline_schedule="1F1B")
  compiled = mpmd.jit(_microbatched_step, one_device).lower(params, xs, ys).compile()
  assert not any(compiled.program._window_blocking)
  loss, new_params = compiled(params, xs, ys)
  ref_loss, ref_params = jax.jit(_microbatched_step)(params, xs, ys)
  _allclose(loss, ref_loss)
  _allclose(new_params, ref_params)


def test_consecutive_transfers_go_out_as_one_batched_copy():
  """A run of same-layout transfers is one step (one C++ batched copy); a
  transfer that reads another one's result starts a new step."""
  from mpmd.run import program as program_mod  # noqa: PLC0415
  config = mpmd.make_config(make_topology(3, 1), {"a": "m0", "b": "m1", "c": "m2"})

  def f(x, y):
    u = mpmd.named_computation(lambda x, y: (x + 1, y * 2), name="a")(x, y)
    v = mpmd.named_computation(lambda u0, u1: u0 * u1, name="b")(*u)
    return mpmd.named_computation(lambda v, u0: v - u0, name="c")(v, u[0])

  compiled = mpmd.jit(f, config).lower(jnp.ones(4), jnp.arange(4.0)).compile()
  insts = compiled.instructions
  kinds = ["T" if isinstance(i, run_program.TransferInstruction) else "C" for i in insts]
  runs = program_mod._transfer_runs(insts)
  assert [len(g) for _, g in runs if len(g) > 1], (kinds, runs)
  assert len(compiled.program._steps) == len(runs) < len(insts)
  out = compiled(jnp.ones(4), jnp.arange(4.0))
  np.testing.assert_allclose(out, jax.jit(f)(jnp.ones(4), jnp.arange(4.0)))
  # A chain m0 -> m1 -> m2 of transfers is never one step.
  transfer = next(i for i in insts if isinstance(i, run_program.TransferInstruction))
  assert transfer.copier is not None
  apart = [dataclasses.replace(transfer, operands=(1,), results=(2,)),
           dataclasses.replace(transfer, operands=(5,), results=(6,))]
  assert [len(g) for _, g in program_mod._transfer_runs(apart)] == [2]
  chain = [dataclasses.replace(transfer, operands=(1,), results=(2,)),
           dataclasses.replace(transfer, operands=(2,), results=(3,))]
  assert [len(g) for _, g in program_mod._transfer_runs(chain)] == [1, 1]


def test_stages_report_ir_and_xla_analyses():
  config = _config()
  params = init_mlp(NUM_STAGES, width=32)
  xs, ys = _batches(num_microbatches=2)
  lowered = mpmd.jit(_microbatched_step, config).lower(params, xs, ys)
  assert "mpmd.named_computation" in str(lowered.compiler_ir())
  with pytest.raises(ValueError, match="compiler_ir has only dialect 'stablehlo'"):
    lowered.compiler_ir("mpmd")
  compiled = lowered.compile()
  costs, memory = compiled.cost_analysis(), compiled.memory_analysis()
  assert len(costs) == len(memory) == len(compiled.program.fragments)
  assert all(name.split(" on ")[1] in config.topology for name in costs)
  assert sum(c["flops"] for c in costs.values() if c) > 0
  assert all(m is None or m.temp_size_in_bytes >= 0 for m in memory.values())


# --- Steady-state calls ---------------------------------------------------------


def _scaled_step(w, x, scale):
  """The update `u` (on m0, after m1's `b`) is the only reader of `scale`
  and consumes the donated `w`: the instructions before it run while the
  arguments are checked."""
  h = mpmd.named_computation(lambda w, x: jnp.tanh(x * w), name="a")(w, x)
  y = mpmd.named_computation(lambda h: h * 2.0, name="b")(h)
  update = mpmd.named_computation(lambda w, h, y, s: w - 0.1 * h * jnp.sum(y) * s, name="u")
  return update(w, h, y, scale), y


def _two_mesh_config(*on_m0: str):
  return mpmd.make_config(make_topology(2, 1),
                          {"a": "m0", "b": "m1", **{name: "m0" for name in on_m0}})


def _placed_scaled_step():
  compiled = mpmd.jit(_scaled_step, _two_mesh_config("u"), donate_argnums=(0,)).lower(
      jnp.ones(4), jnp.arange(4.0), jnp.float32(0.5)).compile()
  args = jax.device_put((jnp.ones(4), jnp.arange(4.0), jnp.float32(0.5)),
                        compiled.input_shardings[0])
  return compiled, args


def test_steady_calls_run_the_forwards_while_checking_the_rest():
  """The instructions before the first one that consumes an argument run
  while the arguments are checked; the checkpoint is that instruction."""
  compiled, (w, x, scale) = _placed_scaled_step()
  program = compiled.program
  inputs = set(program.input_ids)
  early = [program.instructions[s[4]] for s in program._early_steps]
  late = [program.instructions[s[4]] for s in program._late_steps]
  calls = [i for i in early if isinstance(i, run_program.CallInstruction)]
  assert [c.origins for c in calls] == [("a",), ("b",)], early
  assert not any(i.operands[k] in inputs for i in calls for k in i.donated)
  first = late[0]
  assert isinstance(first, run_program.CallInstruction)
  assert any(first.operands[k] in inputs for k in first.donated)  # consumes w
  ref = jax.jit(_scaled_step)
  expected_w, expected_y = ref(jnp.ones(4), jnp.arange(4.0), jnp.float32(0.5))
  for step in range(3):
    old = w
    w, y = compiled(w, x, scale)
    assert old.is_deleted()
    assert compiled._check_while_running
    if step == 0:
      _allclose(w, expected_w)
      _allclose(y, expected_y)


def test_steady_calls_fall_back_to_the_checked_path_with_nothing_lost():
  """An argument the early steps do not read, or one they do, that is not
  as compiled: the call runs (or fails) as the checked path does, donates
  nothing on failure, and later calls check before they start."""
  compiled, (w, x, scale) = _placed_scaled_step()
  w, _ = compiled(w, x, scale)  # checked
  w, _ = compiled(w, x, scale)  # steady
  assert compiled._check_while_running
  deleted = jax.device_put(jnp.float32(0.5), compiled.input_shardings[0][2])
  deleted.delete()
  with pytest.raises(mpmd.MpmdError, match=r"argument args\[2\] has been deleted or donated"):
    compiled(w, x, deleted)  # read only after the checkpoint
  assert not w.is_deleted()
  assert not compiled._check_while_running  # the check failed while running: check first now
  w_ref = jnp.array(np.asarray(w))
  new_w, y = compiled(w, x, np.float32(0.25))  # placed by the checked path
  expected_w, expected_y = jax.jit(_scaled_step)(w_ref, jnp.arange(4.0), jnp.float32(0.25))
  _allclose(new_w, expected_w)
  _allclose(y, expected_y)

  compiled, (w, x, scale) = _placed_scaled_step()
  w, _ = compiled(w, x, scale)
  x.delete()  # read by the first fragment: found before anything runs
  with pytest.raises(mpmd.MpmdError, match=r"argument args\[1\] has been deleted or donated"):
    compiled(w, x, scale)
  assert not w.is_deleted() and compiled._check_while_running


def test_a_misplaced_argument_takes_the_checked_path_without_an_exception():
  """An argument the first fragment reads, on another device than compiled
  for (a fresh batch on the default device, say): the steady path sees it
  before dispatching anything, so no dispatch fails and no exception's
  traceback holds the step's inputs; they are freed when the step returns,
  without the garbage collector."""
  compiled, (w, x, scale) = _placed_scaled_step()
  w, _ = compiled(w, x, scale)  # checked
  w, _ = compiled(w, x, scale)  # steady
  expected = jax.jit(_scaled_step)(jnp.array(np.asarray(w)), jnp.arange(4.0), jnp.float32(0.5))
  gc.collect()
  gc.disable()
  try:
    misplaced = jax.device_put(jnp.arange(4.0), jax.devices()[1])  # m0's input, on m1's device
    ref = weakref.ref(misplaced)
    w, y = compiled(w, misplaced, scale)
    del misplaced
    jax.block_until_ready((w, y))  # (the copy from its host view holds it until done)
    assert ref() is None
  finally:
    gc.enable()
  assert compiled._check_while_running
  _allclose(w, expected[0])
  _allclose(y, expected[1])


def test_a_fragment_with_host_callbacks_waits_for_the_checked_arguments():
  """A fragment with effects outside the program (jax.debug.print) never
  runs before the arguments are checked."""
  def step(w, x):
    def a(w, x):
      jax.debug.print("a ran")
      return jnp.tanh(x * w)
    h = mpmd.named_computation(a, name="a")(w, x)
    return mpmd.named_computation(lambda h: h * 2.0, name="b")(h)

  compiled = mpmd.jit(step, _two_mesh_config()).lower(jnp.ones(4), jnp.arange(4.0)).compile()
  program = compiled.program
  (call_a,) = [i for i in program.instructions
               if isinstance(i, run_program.CallInstruction) and i.origins == ("a",)]
  assert call_a.effects
  assert not program._early_steps  # the first instruction has effects
  plain, _ = _placed_scaled_step()
  assert not any(i.effects for i in plain.instructions if isinstance(i, run_program.CallInstruction))


def test_argument_transfers_wait_for_their_first_reader():
  """An argument two meshes read (a step count) is copied to the second
  mesh right before its reader there, not ahead of the first fragment
  (-mpmd-delay-argument-transfers)."""
  def step(w, x, count):
    h = mpmd.named_computation(lambda w, x, c: jnp.tanh(x * w) * c, name="a")(w, x, count)
    return mpmd.named_computation(lambda h, c: h * c, name="b")(h, count)

  args = (jnp.ones(4), jnp.arange(4.0), jnp.float32(3.0))
  compiled = mpmd.jit(step, _two_mesh_config()).lower(*args).compile()
  insts = compiled.instructions
  assert isinstance(insts[0], run_program.CallInstruction), [str(i) for i in insts]
  count_id = compiled.program.input_ids[2]
  (copy,) = [k for k, i in enumerate(insts)
             if isinstance(i, run_program.TransferInstruction) and i.operands == (count_id,)]
  assert copy > 0 and insts[copy].results[0] in insts[copy + 1].operands
  np.testing.assert_allclose(compiled(*args), jax.jit(step)(*args))


def test_pull_sends_go_out_right_after_their_value_is_computed():
  """A process offers a value to a pull as soon as the call computing it is
  issued (before a later call of its device that waits for the other
  process); receives and collectives keep their places."""
  from mpmd.run import crossprocess
  from mpmd.run.program import (CallInstruction, CrossProcessTransferInstruction,
                                    eager_sends)

  def pull(sends: bool) -> crossprocess.PullTransfer:
    transfer = object.__new__(crossprocess.PullTransfer)
    transfer._sends, transfer._receives = sends, not sends
    return transfer

  def call(name, operands, results):
    return CallInstruction(None, "a", operands, results, (name,), "", unit=name)

  def crossing(operand, result, transfer):
    return CrossProcessTransferInstruction("a", "b", (operand,), (result,), "", transfer=transfer)

  collective = object.__new__(crossprocess.CrossProcessTransfer)
  collective._src_local, collective._dst_local = True, False  # this process sends
  f0, f1 = call("F0", (0,), (1,)), call("F1", (0,), (2,))
  b0 = call("B0", (1, 5), (6,))
  send_f0, send_f1, send_input = crossing(1, 3, pull(True)), crossing(2, 4, pull(True)), \
      crossing(0, 9, pull(True))
  receive = crossing(7, 5, pull(False))
  gather = crossing(6, 8, collective)
  program = [f0, send_f0, f1, receive, b0, send_f1, gather, send_input]
  assert eager_sends(program) == [send_input, f0, send_f0, f1, send_f1, receive, b0, gather]


def test_a_call_waits_once_for_the_outputs_of_one_fragment(monkeypatch):
  """A step's state is many outputs of a few calls: the call waits for (and
  checks) one output per fragment call, not each output."""
  from mpmd.run import program as program_module
  config = mpmd.make_config(make_topology(2, 4), {"a": "m0", "b": "m1"})
  params = {f"w{i}": jnp.full((4,), float(i)) for i in range(40)}

  def f(params, x):
    y = mpmd.named_computation(lambda x: x * 2, name="a")(x)
    z = mpmd.named_computation(lambda y: y + 1, name="b")(y)
    return {k: v - 0.1 * z for k, v in params.items()}, z

  compiled = mpmd.jit(f, config).lower(params, jnp.ones(4)).compile()
  compiled(params, jnp.ones(4))
  checked = []
  original = program_module._check
  monkeypatch.setattr(program_module, "_check", lambda i, x: (checked.append(i), original(i, x))[1])
  out, _ = compiled(params, jnp.ones(4))
  np.testing.assert_allclose(out["w3"], 3 - 0.1 * 3 * np.ones(4))
  calls = sum(isinstance(i, mpmd.run.program.CallInstruction) for i in compiled.instructions)
  # At most once per instruction in the windows and once per call for the
  # outputs (each output on its own: over 40).
  assert len(checked) <= len(compiled.instructions) + calls < 40, (checked, compiled.instructions)
