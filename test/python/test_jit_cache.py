"""`mpmd.jit` meets JAX users where they are: wrappers of the same function
and an equivalent config share compiles (so `mpmd.jit(f, config)(...)` inline
in a loop compiles once), `static_argnames` / `donate_argnames`,
`mpmd.__version__` and the `jit` docstring."""

from __future__ import annotations

import copy
import gc
import logging
import pathlib
import re
import tomllib
import weakref

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import mpmd
from mpmd.jit import MpmdJitted
from models import init_mlp, make_batch, make_topology, mlp_loss

RTOL = 1e-5
ASSIGNMENT = {"stage0": "m0", "stage1": "m1"}


def _config(**kwargs):
  return mpmd.make_config(make_topology(2, 4), dict(ASSIGNMENT), **kwargs)


def _params():
  """`init_mlp`'s parameters without weak types (a step's outputs have none,
  so the second step would otherwise compile again, as under `jax.jit`)."""
  return jax.tree.map(lambda a: a.astype(jnp.float32), init_mlp(2))


def _new_step():
  """A new function object each time, so that tests do not share compiles."""
  def step(params, x, y, lr=0.1):
    loss, grads = jax.value_and_grad(mlp_loss)(params, x, y)
    return loss, jax.tree.map(lambda p, g: p - lr * g, params, grads)
  return step


@pytest.fixture
def lowers(monkeypatch):
  """How many times `MpmdJitted.lower` ran (a trace, partition and compile each)."""
  count = []
  real = MpmdJitted.lower
  def lower(self, *args, **kwargs):
    count.append(self)
    return real(self, *args, **kwargs)
  monkeypatch.setattr(MpmdJitted, "lower", lower)
  return count


# --- Sharing --------------------------------------------------------------------


def test_inline_jit_in_a_loop_compiles_once_and_matches_jax_jit(lowers, caplog):
  step = _new_step()
  config = _config()
  params = _params()
  x, y = make_batch()
  ref_params = params
  with caplog.at_level(logging.INFO, logger="mpmd"):
    for _ in range(3):
      loss, params = mpmd.jit(step, config)(params, x, y)
      ref_loss, ref_params = jax.jit(step)(ref_params, x, y)
      np.testing.assert_allclose(loss, ref_loss, rtol=RTOL)
  assert len(lowers) == 1
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=RTOL), params, ref_params)
  assert caplog.text.count("compiling step") == 1
  assert caplog.text.count("step: reusing the program compiled by an earlier mpmd.jit") == 2


def test_wrappers_share_one_cache_and_log_reuse_once_each(lowers, caplog):
  step = _new_step()
  config = _config()
  a, b = mpmd.jit(step, config), mpmd.jit(step, config)
  assert a._cache is b._cache
  params = _params()
  x, y = make_batch()
  a(params, x, y)
  with caplog.at_level(logging.INFO, logger="mpmd"):
    b(params, x, y)
    b(params, x, y)
    a(params, x, y)
  assert len(lowers) == 1
  assert caplog.text.count("reusing the program compiled by an earlier mpmd.jit") == 1
  # New shapes compile (and say so) once, for both wrappers.
  x2, y2 = make_batch(batch=4)
  with caplog.at_level(logging.INFO, logger="mpmd"):
    b(params, x2, y2)
  assert "compiling step again: new argument structure, shapes, dtypes or static values" in caplog.text
  a(params, x2, y2)
  assert len(lowers) == 2 and len(a._cache) == 2


def test_an_equivalent_config_rebuilt_with_make_config_shares():
  step = _new_step()
  first = _config(pipeline_schedule="1F1B", partitioning_options={"mpmd_infer_transfers": True},
                  input_mesh_assignment=(["m0", "m1"], None, None),
                  fragment_merge_rules=[mpmd.FragmentMergeRule("m1", ["F0", "B0"])])
  again = mpmd.make_config(make_topology(2, 4), {"stage1": "m1", "stage0": "m0"},
                           pipeline_schedule="1F1B",
                           partitioning_options={"mpmd_infer_transfers": True},
                           input_mesh_assignment=(["m0", "m1"], None, None),
                           fragment_merge_rules=[mpmd.FragmentMergeRule("m1", ("F0", "B0"))])
  assert first is not again and first.cache_key() == again.cache_key()
  hash(first.cache_key())
  assert mpmd.jit(step, first)._cache is mpmd.jit(step, again)._cache


@pytest.mark.parametrize("change", [
    dict(pipeline_schedule="GPipe"),
    dict(assignment={"stage0": "m1", "stage1": "m0"}),
    dict(num_meshes=3),
    dict(axis="data"),
    dict(partitioning_options={"mpmd_infer_transfers": True}),
    dict(read_input_mesh_from_arguments=True),
    dict(input_mesh_assignment=(["m1", "m1"], None, None)),
    dict(output_mesh_assignment=("m1", None)),
    dict(fragment_merge_rules=[mpmd.FragmentMergeRule("m1", ["F0", "B1"])]),
])
def test_a_different_config_does_not_share(change):
  step = _new_step()
  base = dict(pipeline_schedule="1F1B", input_mesh_assignment=(["m0", "m1"], None, None),
              fragment_merge_rules=[mpmd.FragmentMergeRule("m1", ["F0", "B0"])])
  other = {**base, **change}
  assignment = other.pop("assignment", ASSIGNMENT)
  topology = make_topology(other.pop("num_meshes", 2), 2, other.pop("axis", "x"))
  a = mpmd.make_config(make_topology(2, 2), ASSIGNMENT, **base)
  b = mpmd.make_config(topology, assignment, **other)
  assert a.cache_key() != b.cache_key()
  assert mpmd.jit(step, a)._cache is not mpmd.jit(step, b)._cache


def test_schedule_objects_are_compared_by_identity():
  step = _new_step()
  schedule = mpmd.schedule.get_schedule("1F1B")
  a, b = _config(pipeline_schedule=schedule), _config(pipeline_schedule=schedule)
  assert a.cache_key() == b.cache_key()
  assert mpmd.jit(step, a)._cache is mpmd.jit(step, b)._cache
  c = _config(pipeline_schedule=copy.copy(schedule))
  assert mpmd.jit(step, a)._cache is not mpmd.jit(step, c)._cache


def test_different_static_or_donated_arguments_or_shardings_do_not_share():
  step = _new_step()
  config = _config()
  plain = mpmd.jit(step, config)
  assert mpmd.jit(step, config, static_argnums=3)._cache is not plain._cache
  assert mpmd.jit(step, config, donate_argnums=0)._cache is not plain._cache
  assert (mpmd.jit(step, config, donate_argnums=0)._cache
          is not mpmd.jit(step, config, donate_argnums=1)._cache)
  # The same positions however they are written share.
  assert (mpmd.jit(step, config, static_argnums=-1)._cache
          is mpmd.jit(step, config, static_argnames="lr")._cache)
  assert (mpmd.jit(step, config, donate_argnums=(1, 0))._cache
          is mpmd.jit(step, config, donate_argnames=["params", "x"])._cache)
  sharded = mpmd.jit(step, config, in_shardings=(None, P("x"), P("x")))
  assert sharded._cache is not plain._cache
  assert mpmd.jit(step, config, in_shardings=(None, P("x"), P("x")))._cache is sharded._cache
  assert mpmd.jit(step, config, in_shardings=(None, P("x"), P()))._cache is not sharded._cache
  assert mpmd.jit(step, config, out_shardings=(P(), None))._cache is not plain._cache


def test_a_new_function_object_does_not_share_as_in_jax_jit(lowers):
  config = _config()
  params = _params()
  x, y = make_batch()
  for _ in range(2):
    loss = mpmd.jit(lambda p, x, y: mlp_loss(p, x, y), config)(params, x, y)
  assert len(lowers) == 2
  np.testing.assert_allclose(loss, jax.jit(mlp_loss)(params, x, y), rtol=RTOL)


def test_a_function_that_cannot_be_weakly_referenced_is_not_shared():
  class Step:  # (jax.jit itself needs weak references: only construction is checked)
    __slots__ = ()
    def __call__(self, params, x, y):
      return mlp_loss(params, x, y)
  step, config = Step(), _config()
  with pytest.raises(TypeError):
    weakref.ref(step)
  assert mpmd.jit(step, config)._cache is not mpmd.jit(step, config)._cache


def test_the_cache_does_not_keep_the_function_alive():
  step = _new_step()
  params = _params()
  x, y = make_batch()
  jitted = mpmd.jit(step, _config())
  jitted(params, x, y)
  alive = weakref.ref(step)
  del step, jitted
  gc.collect()
  assert alive() is None


def test_clear_cache_compiles_again_for_every_sharing_wrapper(lowers):
  step = _new_step()
  config = _config()
  params = _params()
  x, y = make_batch()
  a, b = mpmd.jit(step, config), mpmd.jit(step, config)
  a(params, x, y)
  b.clear_cache()
  assert not a._cache
  a(params, x, y)
  assert len(lowers) == 2


# --- static_argnames and donate_argnames ----------------------------------------


def _scaled_step(params, x, y, scale, mode="mean"):
  loss = mlp_loss(params, x, y) * scale
  return loss if mode == "mean" else -loss


def test_static_argnames_are_static_by_position_or_keyword(lowers):
  config = _config()
  params = _params()
  x, y = make_batch()
  jitted = mpmd.jit(_scaled_step, config, static_argnames=("scale", "mode"))
  assert jitted.static_argnums == (3, 4)
  ref = jax.jit(_scaled_step, static_argnames=("scale", "mode"))
  np.testing.assert_allclose(jitted(params, x, y, 2.0), ref(params, x, y, 2.0), rtol=RTOL)
  np.testing.assert_allclose(jitted(params, x, y, scale=2.0), ref(params, x, y, 2.0), rtol=RTOL)
  assert len(lowers) == 1  # by keyword or by position: the same program
  np.testing.assert_allclose(jitted(params, x, y, 3.0, mode="neg"),
                             ref(params, x, y, 3.0, mode="neg"), rtol=RTOL)
  np.testing.assert_allclose(jitted(params, x=x, y=y, scale=3.0, mode="neg"),
                             ref(params, x, y, 3.0, mode="neg"), rtol=RTOL)
  assert len(lowers) == 2  # a new static value compiles again
  with pytest.raises(TypeError, match="multiple values for argument 'scale'"):
    jitted(params, x, y, 2.0, scale=2.0)


def test_static_argnames_combine_with_static_argnums():
  jitted = mpmd.jit(_scaled_step, _config(), static_argnums=4, static_argnames="scale")
  assert jitted.static_argnums == (3, 4) and set(jitted.static_argnames) == {"scale", "mode"}


def test_donate_argnames_donate_like_donate_argnums():
  config = _config()
  x, y = make_batch()
  step = _new_step()
  jitted = mpmd.jit(step, config, donate_argnames="params")
  assert jitted.donate_argnums == (0,) and jitted.donate_argnames == ("params",)
  params = ref_params = _params()
  for i in range(3):  # by position, then by keyword
    old = params
    loss, params = jitted(params, x, y) if i < 2 else jitted(params=params, x=x, y=y)
    ref_loss, ref_params = jax.jit(step)(ref_params, x, y)
    np.testing.assert_allclose(loss, ref_loss, rtol=RTOL)
    if i > 0:  # the previous step's outputs live on the meshes: consumed
      assert all(a.is_deleted() for a in jax.tree.leaves(old))
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=RTOL), params, ref_params)


def test_unknown_argnames_name_the_parameter_and_list_the_parameters():
  config = _config()
  with pytest.raises(mpmd.ConfigError,
                     match=r"static_argnames names 'lrate', which is not a parameter of "
                           r"_scaled_step \(its parameters: params, x, y, scale, mode\)"):
    mpmd.jit(_scaled_step, config, static_argnames="lrate")
  with pytest.raises(mpmd.ConfigError, match=r"donate_argnames names 'state'.*params, x, y"):
    mpmd.jit(_scaled_step, config, donate_argnames=["state"])
  with pytest.raises(mpmd.ConfigError, match=r"static_argnames must be strings"):
    mpmd.jit(_scaled_step, config, static_argnames=[3])
  with pytest.raises(mpmd.ConfigError, match=r"both static and donated"):
    mpmd.jit(_scaled_step, config, static_argnames="x", donate_argnums=1)

  def varargs(*args, **kwargs):
    return args
  with pytest.raises(mpmd.ConfigError, match=r"'kwargs', which is not a parameter.*\*args, \*\*kwargs"):
    mpmd.jit(varargs, config, static_argnames="kwargs")


def test_keyword_only_static_argnames_are_a_config_error_naming_the_parameter():
  def step(params, x, y, *, train):
    return mlp_loss(params, x, y)
  with pytest.raises(mpmd.ConfigError, match=r"'train', a keyword-only parameter of step"):
    mpmd.jit(step, _config(), static_argnames="train")


# --- Version and docstring ------------------------------------------------------


def test_version_is_the_pyproject_version():
  pyproject = pathlib.Path(__file__).resolve().parents[2] / "pyproject.toml"
  expected = tomllib.loads(pyproject.read_text())["project"]["version"]
  assert mpmd.__version__ == expected
  assert mpmd._version() == expected


def test_version_falls_back_to_pyproject_without_metadata(monkeypatch):
  import importlib.metadata
  def missing(name):
    raise importlib.metadata.PackageNotFoundError(name)
  monkeypatch.setattr(importlib.metadata, "version", missing)
  assert mpmd._version() == mpmd.__version__


def test_jit_docstring_says_what_it_returns_and_raises():
  doc = mpmd.jit.__doc__
  assert "Returns:" in doc and "Raises:" in doc
  raises = doc[doc.index("Raises:"):]
  for name in ("ConfigError", "PartitionError", "MpmdError", "FragmentCompileError",
               "FragmentRuntimeError"):
    assert re.search(rf"^\s+{name}:", raises, re.M), name
    assert hasattr(mpmd, name)


def test_cache_key_takes_unhashable_parts_by_identity():
  import dataclasses  # noqa: PLC0415
  config = _config()
  odd = dataclasses.replace(config, partitioning_options={"mpmd_infer_transfers": [True]})
  key = odd.cache_key()
  hash(key)
  assert key == odd.cache_key()
  assert key != dataclasses.replace(odd, partitioning_options=dict(
      odd.partitioning_options)).cache_key()


# --- lower().compile() then a call ---------------------------------------------


@pytest.fixture
def compiles(monkeypatch):
  """How many programs `Lowered.compile_for` compiled (every compile goes through it)."""
  count = []
  real = mpmd.Lowered.compile_for
  def compile_for(self, arg_shardings):
    count.append(self)
    return real(self, arg_shardings)
  monkeypatch.setattr(mpmd.Lowered, "compile_for", compile_for)
  return count


def test_a_call_after_lower_compile_reuses_that_compile_as_jax_jit_does(lowers, compiles):
  step = _new_step()
  f = mpmd.jit(step, _config())
  params = _params()
  x, y = make_batch()
  compiled = f.lower(params, x, y).compile()
  assert (len(lowers), len(compiles)) == (1, 1)
  loss, new_params = f(params, x, y)
  assert (len(lowers), len(compiles)) == (1, 1)
  np.testing.assert_allclose(loss, compiled(params, x, y)[0], rtol=RTOL)
  ref_loss, ref_params = jax.jit(step)(params, x, y)
  np.testing.assert_allclose(loss, ref_loss, rtol=RTOL)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=RTOL), new_params, ref_params)
  # New shapes are a new program, as under jax.jit.
  f(params, *make_batch(batch=16))
  assert (len(lowers), len(compiles)) == (2, 2)


def test_lower_compile_from_shape_dtype_structs_then_a_call(lowers, compiles):
  step = _new_step()
  f = mpmd.jit(step, _config())
  params = _params()
  x, y = make_batch()
  specs = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), (params, x, y))
  f.lower(*specs).compile()
  loss, _ = f(params, x, y)
  np.testing.assert_allclose(loss, jax.jit(step)(params, x, y)[0], rtol=RTOL)
  assert len(lowers) == 1
  assert len(compiles) <= 2  # (the call's layouts may differ from the specs', never a relower)
