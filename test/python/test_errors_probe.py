"""Messages a JAX user meets first (issue #18, item 9: the re-probe).

Each test pins one message that used to be unclear (an internal error, JAX's
message without the argument, or nothing at all): it must name the offending
argument, function, axis or schedule, say what to do, and be an `MpmdError`
or the exception type `jax.jit` raises (`ConfigError` is a `ValueError`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import mpmd
from models import init_mlp, make_batch, make_topology, mlp_loss


def _config(**kwargs):
  devices = np.array(jax.devices())
  return mpmd.make_config({"m0": Mesh(devices[0:4], ("data",)),
                           "m1": Mesh(devices[4:8], ("data",))}, {"a": "m0", "b": "m1"}, **kwargs)


def _a_then_b(x):
  h = mpmd.named_computation(lambda x: x * 2, name="a")(x)
  return mpmd.named_computation(lambda h: jnp.sum(h), name="b")(h)


def _a_then_b_vector(x):
  h = mpmd.named_computation(lambda x: x * 2, name="a")(x)
  return mpmd.named_computation(lambda h: h + 1, name="b")(h)


def _two(x, y):
  return _a_then_b(x) + jnp.sum(y)


# -- static and donated positions ---------------------------------------------


@pytest.mark.parametrize("what", ["static_argnums", "donate_argnums"])
def test_positions_past_the_parameters_are_named_at_once(what):
  """Was JAX's `ValueError: Jitted function has static_argnums=(5,), but only
  accepts 2 positional arguments` at the first call."""
  with pytest.raises(mpmd.ConfigError, match=rf"{what} position 5 is out of range: _two has 2 "
                                             r"positional parameters \(x, y\); positions count "
                                             "from 0"):
    mpmd.jit(_two, _config(), **{what: 5})
  assert issubclass(mpmd.ConfigError, ValueError)  # what jax.jit raises
  mpmd.jit(lambda *xs: _a_then_b(xs[0]), _config(), static_argnums=5)  # *args takes it


def test_unhashable_static_argument_is_named():
  """Was `TypeError: unhashable type: 'list'` from the compilation cache."""
  f = mpmd.jit(lambda x, n: _a_then_b(x * len(n)), _config(), static_argnums=1)
  message = (r"static argument 1 \(n\) of <lambda> is a list \(\[1, 2\]\), which cannot be "
             r"hashed .*pass a tuple instead of a list")
  with pytest.raises(mpmd.ConfigError, match=message):
    f(jnp.ones(8), [1, 2])
  with pytest.raises(mpmd.ConfigError, match=message):
    f.lower(jnp.ones(8), [1, 2])
  assert float(f(jnp.ones(8), (1, 2))) == 32.0


# -- JAX transformations -------------------------------------------------------


def test_mpmd_jit_under_jax_jit_without_traced_arguments():
  """Was no error: the program ran while jax.jit traced, and its outputs
  became constants of the caller's program (later calls did not run it)."""
  f = mpmd.jit(lambda: _a_then_b(jnp.ones(8)), _config())
  with pytest.raises(mpmd.MpmdError, match="an mpmd.jit function.* was called inside a JAX "
                                           r"transformation \(jax.jit, jax.grad, jax.vmap, "
                                           r"...\): mpmd.jit programs run on concrete arrays"):
    jax.jit(f)()
  assert float(f()) == 16.0  # at the top level


@pytest.mark.parametrize("transform", [jax.jit, jax.grad], ids=["jit", "grad"])
def test_compiled_under_a_jax_transformation(transform):
  """Was JAX's ConcretizationTypeError about `is_deleted()` on a tracer."""
  compiled = mpmd.jit(_a_then_b, _config()).lower(jnp.ones(8)).compile()
  with pytest.raises(mpmd.MpmdError, match=r"the Compiled program of _a_then_b was called with a "
                                           r"traced value as argument args\[0\]: mpmd.jit "
                                           "programs run on concrete arrays"):
    transform(compiled)(jnp.ones(8))


# -- calling a Compiled --------------------------------------------------------


def test_compiled_called_with_another_structure_says_what_differs():
  """Was only the two PyTreeDefs."""
  compiled = mpmd.jit(_two, _config()).lower(jnp.ones(8), jnp.ones(8)).compile()
  with pytest.raises(mpmd.MpmdError, match=r"it takes 2 positional \(non-static\) arguments, got "
                                           r"1; missing args\[1\]; call the mpmd.jit function "
                                           "instead"):
    compiled(jnp.ones(8))
  with pytest.raises(mpmd.MpmdError, match=r"missing args\[1\]; unexpected kwargs\['y'\]"):
    compiled(jnp.ones(8), y=jnp.ones(8))
  compiled = mpmd.jit(lambda d: _a_then_b(d["x"]), _config()).lower({"x": jnp.ones(8)}).compile()
  with pytest.raises(mpmd.MpmdError, match=r"^arguments have structure .*: missing "
                                           r"args\[0\]\['x'\]; unexpected args\[0\]\['y'\]"):
    compiled({"y": jnp.ones(8)})


# -- shardings -----------------------------------------------------------------


def test_partition_spec_axis_typo_names_the_axis():
  """Was an `MpmdError` ending in JAX's `Resource axis: dta of P('dta',) is
  not found in mesh`, without what to do."""
  with pytest.raises(mpmd.ConfigError, match=r"in_shardings for argument 0: P\('dta',\) does not "
                                             r"fit mesh 'm0' .*: it names axis 'dta', which the "
                                             r"mesh does not have: use the meshes' axis names "
                                             r"\('data'\)"):
    mpmd.jit(_a_then_b, _config(), in_shardings=P("dta"))(jnp.ones(8))
  with pytest.raises(mpmd.ConfigError, match=r"out_shardings for output 0: .*names axis 'dta'"):
    mpmd.jit(_a_then_b_vector, _config(), out_shardings=P(("data", "dta")))(jnp.ones(8))


def test_named_sharding_off_the_topology_says_what_to_give():
  devices = np.array(jax.devices())
  sharding = NamedSharding(Mesh(devices[2:6], ("data",)), P("data"))
  with pytest.raises(mpmd.ConfigError, match=r"not the devices of any mesh of the topology "
                                             r"\(\['m0', 'm1'\]\): give a PartitionSpec .* or a "
                                             r"NamedSharding over the devices of one mesh "
                                             r"\(m0: \[0, 1, 2, 3\], m1: \[4, 5, 6, 7\]\)"):
    mpmd.jit(_a_then_b, _config(), in_shardings=sharding)(jnp.ones(8))


def test_in_shardings_not_a_prefix_says_what_to_give():
  """Was JAX's pytree error alone (`tree_map tree`...)."""
  with pytest.raises(mpmd.ConfigError, match=r"in_shardings is not a pytree prefix of the "
                                             r"arguments: give one sharding .* for all arguments, "
                                             r"or a tuple with one entry per positional argument "
                                             r"\(2\)"):
    mpmd.jit(_two, _config(), in_shardings=(P("data"),))(jnp.ones(8), jnp.ones(8))
  with pytest.raises(mpmd.ConfigError, match="out_shardings is not a pytree prefix of the "
                                             "outputs: give one sharding"):
    mpmd.jit(_a_then_b, _config(), out_shardings=(P(), P()))(jnp.ones(8))


# -- arguments -----------------------------------------------------------------


def test_argument_of_object_dtype_names_the_dtype():
  """Was `is a ndarray (...), not an array or a number` (and `is a object`)."""
  f = mpmd.jit(_a_then_b, _config())
  with pytest.raises(mpmd.MpmdError, match=r"argument args\[0\] of _a_then_b is a ndarray of "
                                           r"dtype object \(.*\), not an array or a number: pass "
                                           "arrays of numbers"):
    f(np.array([object(), object()]))
  with pytest.raises(mpmd.MpmdError, match=r"of _a_then_b is an object \("):
    f(object())


# -- schedules -----------------------------------------------------------------


def _microbatched(params, xs, ys):
  loss = jnp.zeros(())
  for i, (x, y) in enumerate(zip(xs, ys)):
    loss = mpmd.call(lambda loss, x, y: loss + mlp_loss(params, x, y), call_counter=i)(loss, x, y)
  return loss


def test_schedule_function_with_the_wrong_parameters():
  """Was `TypeError: <lambda>() takes 1 positional argument but 3 were given`
  from inside the partitioner."""
  with pytest.raises(mpmd.ConfigError, match=r"pipeline_schedule '<lambda>' is a function of "
                                             r"\(n\), which cannot be called as a schedule "
                                             r"function .*: it must take \(num_meshes, "
                                             "num_microbatches, virtual_stages\\)"):
    mpmd.make_config(make_topology(2, 4), {"stage0": "m0", "stage1": "m1"},
                     pipeline_schedule=lambda n: None)


def test_schedule_tasks_returning_none():
  """Was `TypeError: 'NoneType' object is not iterable`."""
  class Tasks:
    def tasks(self, n):
      return None

  config = mpmd.make_config(make_topology(2, 4), {"stage0": "m0", "stage1": "m1"},
                            pipeline_schedule=Tasks())
  batches = [make_batch(seed=s) for s in range(2)]
  with pytest.raises(mpmd.PartitionError, match=r"pipeline_schedule Tasks.tasks\(2\) returned "
                                                "NoneType, not task lists: tasks"
                                                r"\(n_microbatches\) must return one list of "
                                                r"tasks per mesh"):
    mpmd.jit(_microbatched, config).lower(init_mlp(2), [b[0] for b in batches],
                                          [b[1] for b in batches])
