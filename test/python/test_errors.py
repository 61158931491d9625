"""Bad input gets a clear error that names the offending name, mesh or value."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import mpmd
from models import init_mlp, make_batch, make_topology, mlp_loss, sgd_step


def test_assigned_name_that_no_computation_uses():
  config = mpmd.make_config(make_topology(2, 4),
                            {"stage0": "m0", "stage1": "m1", "decoder": "m1"})
  with pytest.raises(mpmd.PartitionError,
                     match='name "decoder" is assigned to mesh "m1" but no named computation or '
                           'named tensor uses it'):
    mpmd.jit(sgd_step, config).lower(init_mlp(2), *make_batch())


def test_computation_name_without_mesh_points_at_user_code():
  config = mpmd.make_config(make_topology(2, 4), {"stage0": "m0"})
  with pytest.raises(mpmd.PartitionError) as info:
    mpmd.jit(sgd_step, config).lower(init_mlp(2), *make_batch())
  message = str(info.value)
  assert 'named computation "stage1" is not assigned to a mesh' in message
  # The diagnostic carries the user's source location (models.py, where the
  # named computation is created).
  assert "models.py" in message


def test_mesh_not_in_topology():
  with pytest.raises(mpmd.ConfigError, match=r"name 'stage1' is assigned to mesh 'm7', which is "
                                             r"not in the topology \(meshes: m0, m1\)"):
    mpmd.make_config(make_topology(2, 4), {"stage0": "m0", "stage1": "m7"})


def test_topology_errors():
  devices = np.array(jax.devices())
  m = jax.sharding.Mesh
  with pytest.raises(mpmd.ConfigError, match="non-empty dict"):
    mpmd.make_config({}, {})
  with pytest.raises(mpmd.ConfigError, match="device .* is in both mesh 'a' and mesh 'b'"):
    mpmd.make_config({"a": m(devices[:4], ("x",)), "b": m(devices[2:6], ("x",))}, {})
  with pytest.raises(mpmd.ConfigError, match="mesh name 'a@b' is invalid"):
    mpmd.make_config({"a@b": m(devices[:4], ("x",))}, {})
  with pytest.raises(mpmd.ConfigError, match="must be a jax.sharding.Mesh"):
    mpmd.make_config({"a": devices[:4]}, {})


def test_assignment_and_option_errors():
  topology = make_topology(2, 4)
  with pytest.raises(mpmd.ConfigError, match="stage of 'stage0' must be an int >= 0"):
    mpmd.make_config(topology, {"stage0": "m0"}, name_to_stage_assignment={"stage0": -1})
  with pytest.raises(mpmd.ConfigError, match="'other' has a stage .* but no mesh"):
    mpmd.make_config(topology, {"stage0": "m0"}, name_to_stage_assignment={"other": 0})
  with pytest.raises(mpmd.ConfigError, match="unknown partitioning option 'mpmd_bogus'"):
    mpmd.make_config(topology, {"stage0": "m0"}, partitioning_options={"mpmd_bogus": True})
  with pytest.raises(mpmd.ConfigError, match="partitioning option 'mpmd_infer_transfers' must be "
                                             "a bool, got 'yes'"):
    mpmd.make_config(topology, {"stage0": "m0"},
                     partitioning_options={"mpmd_infer_transfers": "yes"})
  with pytest.raises(mpmd.ConfigError, match="input_mesh_assignment entry is assigned to mesh 'm9'"):
    mpmd.make_config(topology, {"stage0": "m0"}, input_mesh_assignment=("m9",))
  with pytest.raises(mpmd.ConfigError, match="needs an MpmdConfig"):
    mpmd.jit(sgd_step, {"stage0": "m0"})


def test_io_assignment_not_a_prefix():
  config = mpmd.make_config(make_topology(2, 4), {"stage0": "m0", "stage1": "m1"},
                            input_mesh_assignment=(("m0", "m1"), "m1", "m1"))
  with pytest.raises(mpmd.ConfigError, match="input_mesh_assignment is not a pytree prefix"):
    mpmd.jit(sgd_step, config).lower(init_mlp(2), *make_batch())


def _two_sided(a, b):
  x = mpmd.named_computation(lambda a: a * 2, name="left")(a)
  y = mpmd.named_computation(lambda b: b * 3, name="right")(b)
  return jnp.sin(x) * y  # an unlabelled op needing values from both meshes


def test_unimplied_transfer_names_value_and_meshes():
  config = mpmd.make_config(make_topology(2, 4), {"left": "m0", "right": "m1"})
  with pytest.raises(mpmd.PartitionError) as info:
    mpmd.jit(_two_sided, config).lower(jnp.ones(4), jnp.ones(4))
  message = str(info.value)
  assert ("'stablehlo.multiply' on mesh \"m0\" needs result #0 of named computation "
          "\"right\", which is on mesh \"m1\": no label implies this transfer") in message
  assert "mpmd_infer_transfers" in message
  assert "test_errors.py" in message  # the user's source line


def test_a_deep_call_chain_is_named_up_to_eight_callers():
  """A location names the user's frame and at most 8 callers, then how many
  more (JAX 0.12 writes up to 100 frames into a location, mostly the test
  runner's or a framework's)."""
  config = mpmd.make_config(make_topology(2, 4), {"left": "m0", "right": "m1"})

  def two_sided(a, b):  # (its own function: JAX keeps the source info of a traced one)
    return _two_sided(a, b)

  def nested(depth: int):
    if depth == 0:
      return mpmd.jit(two_sided, config).lower(jnp.ones(4), jnp.ones(4))
    return nested(depth - 1)

  with pytest.raises(mpmd.PartitionError) as info:
    nested(12)
  line = next(l for l in str(info.value).splitlines() if "no label implies this transfer" in l)
  assert line.count("called from ") == 8, line
  assert "<locals>.nested at " in line and " more callers)" in line, line


def test_infer_transfers_option_allows_it():
  config = mpmd.make_config(make_topology(2, 4), {"left": "m0", "right": "m1"},
                            partitioning_options={"mpmd_infer_transfers": True})
  a, b = jnp.arange(4.0), jnp.arange(4.0) + 1
  np.testing.assert_allclose(mpmd.jit(_two_sided, config)(a, b), jax.jit(_two_sided)(a, b),
                             rtol=1e-6)


def test_wrong_argument_shape_at_call():
  config = mpmd.make_config(make_topology(2, 4), {"stage0": "m0", "stage1": "m1"})
  compiled = mpmd.jit(sgd_step, config).lower(init_mlp(2), *make_batch()).compile()
  x, y = make_batch(batch=4)
  with pytest.raises(mpmd.MpmdError, match=r"argument args\[1\] has shape \(4, 16\)"):
    compiled(init_mlp(2), x, y)
  with pytest.raises(mpmd.MpmdError, match="arguments have structure"):
    compiled(init_mlp(2), *make_batch(), 1.0)


def test_bad_names():
  with pytest.raises(ValueError, match="reserved"):
    mpmd.named_computation(lambda x: x, name="main")
  with pytest.raises(ValueError, match="non-empty"):
    mpmd.named_computation(lambda x: x, name="")


def test_pipeline_laid_out_backwards_gets_a_hint():
  """stage0 on the second mesh: a built-in schedule cannot run it, and the
  error says which way the topology must go."""
  def step(params, xs, ys):
    loss = jnp.zeros(())
    grads = jax.tree.map(jnp.zeros_like, params)
    for i, (x, y) in enumerate(zip(xs, ys)):
      def microbatch(loss, grads, x, y):
        value, g = jax.value_and_grad(mlp_loss)(params, x, y)
        return loss + value, jax.tree.map(jnp.add, grads, g)
      loss, grads = mpmd.call(microbatch, call_counter=i)(loss, grads, x, y)
    return loss, grads

  config = mpmd.make_config(make_topology(2, 4), {"stage0": "m1", "stage1": "m0"},
                            pipeline_schedule="1F1B")
  batches = [make_batch(seed=s) for s in range(4)]
  with pytest.raises(mpmd.PartitionError) as info:
    mpmd.jit(step, config).lower(init_mlp(2), [b[0] for b in batches], [b[1] for b in batches])
  message = str(info.value)
  assert "the pipeline schedule deadlocks" in message
  assert ("hint: built-in schedule '1F1B' runs stage i on the i-th mesh of the topology (m0, m1)"
          in message)
  assert "placed stage0 -> m1, stage1 -> m0" in message and "reorder the topology" in message



def test_errors_are_exported_mpmd_errors():
  """Every error users catch is `mpmd.<Name>` (listed in `__all__`, defined
  in mpmd.errors), an `MpmdError`, and keeps its standard base class; the
  modules that raise it still export it under its old name."""
  import mpmd.errors
  import mpmd.jaxpp
  import mpmd.compile.fragment

  bases = {"ConfigError": ValueError, "PartitionError": ValueError,
           "FragmentCompileError": RuntimeError, "FragmentArgumentError": ValueError,
           "FragmentExecutionError": RuntimeError, "FragmentRuntimeError": RuntimeError,
           "DistributedError": RuntimeError, "StageError": ValueError}
  old_homes = {"FragmentCompileError": mpmd.compile.fragment,
               "FragmentArgumentError": mpmd.compile.fragment,
               "FragmentExecutionError": mpmd.compile.fragment,
               "FragmentRuntimeError": mpmd.run.program,
               "DistributedError": mpmd.distributed,
               "StageError": mpmd.jaxpp}
  for name, base in bases.items():
    error = getattr(mpmd, name)
    assert name in mpmd.__all__, name
    assert error is getattr(mpmd.errors, name), name
    assert issubclass(error, mpmd.MpmdError) and issubclass(error, base), name
    if name in old_homes:
      assert getattr(old_homes[name], name) is error, name


# --- Arguments jax.jit would name clearly -----------------------------------


def _two_mesh_config():
  devices = np.array(jax.devices())
  return mpmd.make_config({"m0": jax.sharding.Mesh(devices[0:4], ("data",)),
                           "m1": jax.sharding.Mesh(devices[4:8], ("data",))}, {"a": "m0", "b": "m1"})


def _a_then_b(x):
  h = mpmd.named_computation(lambda x: x * 2, name="a")(x)
  return mpmd.named_computation(lambda h: jnp.sum(h), name="b")(h)


def test_shardings_that_do_not_fit_the_value_are_named():
  config = _two_mesh_config()
  with pytest.raises(mpmd.ConfigError, match=r"in_shardings for argument 0: dimension 0 of shape "
                                             r"\(6,\) has size 6, which mesh axes \('data',\)"):
    mpmd.jit(_a_then_b, config, in_shardings=jax.sharding.PartitionSpec("data"))(jnp.ones(6))
  with pytest.raises(mpmd.ConfigError, match=r"out_shardings for output 0: P\('data',\) has 1 "
                                             r"entries but the value has rank 0"):
    mpmd.jit(_a_then_b, config, out_shardings=jax.sharding.PartitionSpec("data"))(jnp.ones(8))


@pytest.mark.parametrize("bad", ["abc", object()], ids=["str", "object"])
def test_arguments_that_are_not_arrays_are_named(bad):
  with pytest.raises(mpmd.MpmdError, match=r"argument args\[0\]\['x'\] of _a_then_b_dict is an? "):
    def _a_then_b_dict(d):
      return _a_then_b(d["x"])
    mpmd.jit(_a_then_b_dict, _two_mesh_config())({"x": bad})


@pytest.mark.parametrize("transform", [jax.grad, jax.vmap, jax.jit], ids=["grad", "vmap", "jit"])
def test_tracing_an_mpmd_jit_function_says_it_is_not_supported(transform):
  f = mpmd.jit(_a_then_b, _two_mesh_config())
  x = jnp.ones((2, 8)) if transform is jax.vmap else jnp.ones(8)
  with pytest.raises(mpmd.MpmdError, match=r"called with a traced value as argument args\[0\]: "
                                           "mpmd.jit programs run on concrete arrays"):
    transform(f)(x)


def test_merge_remat_without_remat_is_an_error():
  with pytest.raises(mpmd.ConfigError, match="does nothing without it: set 'mpmd_fragment_remat'"):
    mpmd.make_config(_two_mesh_config().topology, {"a": "m0"},
                     partitioning_options={"mpmd_merge_remat_fragments": True})


def test_duplicate_call_counters_are_a_warning(caplog):
  import logging  # noqa: PLC0415

  def step(w, xs):
    total = jnp.zeros(())
    for x in xs:  # every microbatch with call_counter 0: a copy-pasted counter
      total = mpmd.call(lambda t, x: t + _a_then_b(x * w), call_counter=0)(total, x)
    return total

  with caplog.at_level(logging.WARNING, logger="mpmd"):
    mpmd.jit(step, _two_mesh_config()).lower(jnp.ones(8), [jnp.ones(8), jnp.ones(8)])
  assert "mpmd.call with call_counter 0 runs the same named computations as an earlier" in caplog.text
  assert "give each microbatch its own call_counter" in caplog.text
