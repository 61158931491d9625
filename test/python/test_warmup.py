"""Warm-up at the end of `compile` (mpmd.compile.warmup): every program that
may safely run on zeros runs once, so the first call of the compiled step
does not pay XLA's first-execution set-up. Counts are deterministic; the
results are checked against plain `jax.jit`."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import mpmd

WIDTH = 8


def _topology():
  devices = np.array(jax.devices())
  return {"m0": jax.sharding.Mesh(devices[0:2], ("data",)),
          "m1": jax.sharding.Mesh(devices[2:4], ("data",))}


def _stage(w, h):
  return jnp.tanh(h @ w)


def _printing_stage(w, h):
  jax.debug.print("stage s1 ran")
  return jnp.tanh(h @ w)


def _step(params, xs, ys, *, second=_stage):
  def loss(params, x, y):
    h = mpmd.named_computation(_stage, name="s0")(params[0], x)
    h = mpmd.named_computation(second, name="s1")(params[1], h)
    return jnp.mean((h - y) ** 2)

  grads = jax.tree.map(jnp.zeros_like, params)
  total = jnp.zeros(())
  for i in range(xs.shape[0]):
    def microbatch(x, y, grads, total):
      value, g = jax.value_and_grad(loss)(params, x, y)
      return jax.tree.map(jnp.add, grads, g), total + value
    grads, total = mpmd.call(microbatch, call_counter=i)(xs[i], ys[i], grads, total)
  return total, jax.tree.map(lambda p, g: p - 0.1 * g, params, grads)


def _args(m: int = 4):
  rng = np.random.default_rng(0)
  params = [rng.standard_normal((WIDTH, WIDTH)).astype(np.float32) * 0.3 for _ in range(2)]
  xs = rng.standard_normal((m, 2, WIDTH)).astype(np.float32)
  ys = rng.standard_normal((m, 2, WIDTH)).astype(np.float32)
  return params, xs, ys


def _compile(step, monkeypatch=None, limit=None):
  if limit is not None:
    monkeypatch.setenv("MPMD_WARMUP_BYTES", str(limit))
  config = mpmd.make_config(_topology(), {"s0": "m0", "s1": "m1"}, pipeline_schedule="1F1B")
  return mpmd.jit(step, config).lower(*_args()).compile()


def _close(a, b):
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
    np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=2e-5, atol=2e-6)


def _num_fillers(program) -> int:
  return len({id(i.fill) for i in program.instructions if getattr(i, "fill", None)})


def _warmed_fragments(program) -> int:
  return program.num_warmed_up - _num_fillers(program)


def test_every_program_runs_once_when_compiled():
  compiled = _compile(_step)
  program = compiled.program
  assert _warmed_fragments(program) == len(program.fragments)
  assert program.num_warmed_up > 0
  _close(compiled(*_args()), jax.jit(_step)(*_args()))


def test_warm_up_can_be_turned_off_or_limited_by_size(monkeypatch):
  assert _compile(_step, monkeypatch, 0).program.num_warmed_up == 0
  # Every program here has arguments or results of more than 2 bytes.
  assert _compile(_step, monkeypatch, 2).program.num_warmed_up == 0


def _looping_stage(w, h):
  # A loop whose trip count depends on the data: on zeros it would not end.
  def cond(carry):
    return jnp.sum(jnp.abs(carry)) < 1.0

  grown = jax.lax.while_loop(cond, lambda c: c * 2.0, jax.lax.stop_gradient(h) + 0.5)
  return jnp.tanh((h + 1e-3 * jnp.sum(grown)) @ w)


def test_programs_with_loops_do_not_run_at_compile():
  step = functools.partial(_step, second=_looping_stage)
  compiled = _compile(step)  # (would hang if such a loop ran on zeros)
  program = compiled.program
  looping = {k for k in program.fragments if "_s1_fwd" in k[0]}  # (merged with its backward: s1_fwd_bwd)
  assert looping, list(program.fragments)
  assert _warmed_fragments(program) == len(program.fragments) - len(looping)
  _close(compiled(*_args()), jax.jit(step)(*_args()))


def test_programs_with_host_callbacks_do_not_run_at_compile(capfd):
  step = functools.partial(_step, second=_printing_stage)
  compiled = _compile(step)
  jax.effects_barrier()
  assert "stage s1 ran" not in capfd.readouterr().out
  program = compiled.program
  printing = {k for k in program.fragments if "_s1_fwd" in k[0]}  # (merged with its backward: s1_fwd_bwd)
  assert printing, list(program.fragments)
  assert _warmed_fragments(program) == len(program.fragments) - len(printing)
  _close(compiled(*_args()), jax.jit(step)(*_args()))
  jax.effects_barrier()
  assert "stage s1 ran" in capfd.readouterr().out


@pytest.mark.parametrize("second,effects,loops", [
    (_stage, False, False), (_printing_stage, True, False), (_looping_stage, False, True)])
def test_the_compiler_says_which_programs_have_effects_or_loops(second, effects, loops):
  # Read off the ops by the partitioner (the runtime never reads the text):
  # only the functions that run stage s1's forward call the host or loop.
  config = mpmd.make_config(_topology(), {"s0": "m0", "s1": "m1"}, pipeline_schedule="1F1B")
  lowered = mpmd.jit(functools.partial(_step, second=second), config).lower(*_args())
  functions = {f.name: f for f in lowered.partition.functions}
  s1_forward = {n for n in functions if "_s1_fwd" in n}
  assert s1_forward, list(functions)
  for name, f in functions.items():
    mine = name in s1_forward
    assert f.calls_host is (effects and mine), name
    assert f.has_side_effects is (effects and mine), name
    assert f.has_loops is (loops and mine), name


def test_the_compiler_names_the_accumulators_a_program_adds_to():
  # Each backward adds its microbatch's gradient to the accumulator it takes:
  # (result, argument) pairs of the same type; the forward-only programs
  # have none.
  config = mpmd.make_config(_topology(), {"s0": "m0", "s1": "m1"}, pipeline_schedule="1F1B")
  lowered = mpmd.jit(_step, config).lower(*_args())
  backward = [f for f in lowered.partition.functions if "bwd" in f.name]
  assert backward and all(f.accumulated for f in backward), [f.name for f in backward]
  for f in lowered.partition.functions:
    results = [j for j, _ in f.accumulated]
    arguments = [k for _, k in f.accumulated]
    assert len(set(arguments)) == len(arguments) and all(0 <= k < f.num_inputs for k in arguments)
    assert all(0 <= j < f.num_outputs for j in results)
    if "bwd" not in f.name:
      assert not f.accumulated, f.name
