"""Tests for mpmd.compile.fragment: compiling and running fragment programs on meshes."""

import io

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from mpmd.compile.fragment import (FragmentArgumentError, FragmentCompileError,
                                   FragmentExecutable, compile_fragment, transfer)

EXAMPLE = """
module @p0_stage0 attributes {mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<8x16xf32>, %arg1: tensor<16x16xf32>) -> (tensor<8x16xf32>) {
    %0 = stablehlo.dot_general %arg0, %arg1, contracting_dims = [1] x [0] : (tensor<8x16xf32>, tensor<16x16xf32>) -> tensor<8x16xf32>
    return %0 : tensor<8x16xf32>
  }
}
"""


@pytest.fixture(scope="module")
def meshes():
  devs = jax.devices()
  assert len(devs) >= 8, "conftest.py must request 8 CPU devices"
  return (Mesh(np.array(devs[0:4]), ("x",)), Mesh(np.array(devs[4:8]), ("x",)))


@pytest.fixture(scope="module")
def operands():
  rng = np.random.default_rng(0)
  a = rng.standard_normal((8, 16), dtype=np.float32)
  b = rng.standard_normal((16, 16), dtype=np.float32)
  return a, b


def _put(values, shardings):
  return [jax.device_put(v, s) for v, s in zip(values, shardings)]


@pytest.mark.parametrize("which", [0, 1])
def test_example_on_each_half(meshes, operands, which):
  mesh = meshes[which]
  frag = compile_fragment(EXAMPLE, mesh, name=f"stage{which}")
  assert isinstance(frag, FragmentExecutable)
  assert frag.devices == tuple(mesh.devices.flat)
  assert frag.num_outputs == 1 and frag.num_inputs == 2
  a, b = operands
  (out,) = frag(*_put(operands, frag.input_shardings))
  assert isinstance(out, jax.Array)
  assert out.sharding.device_set == set(mesh.devices.flat)
  assert out.sharding.is_equivalent_to(frag.output_shardings[0], 2)
  np.testing.assert_allclose(np.asarray(out), a @ b, rtol=1e-5, atol=1e-5)


def _generic_text_from_jax(mesh):
  """A JAX-emitted module printed in generic form with debug locations."""
  def f(a, b):
    c = jnp.sin(a) @ b
    return c, jnp.sum(c, axis=0).astype(jnp.bfloat16)
  lowered = jax.jit(f).lower(
      jax.ShapeDtypeStruct((8, 16), jnp.float32,
                           sharding=NamedSharding(mesh, P("x"))),
      jax.ShapeDtypeStruct((16, 16), jnp.float32,
                           sharding=NamedSharding(mesh, P())))
  buf = io.StringIO()
  lowered.compiler_ir("stablehlo").operation.print(
      file=buf, print_generic_op_form=True, enable_debug_info=True)
  return buf.getvalue(), f


def test_generic_form_with_locations(meshes, operands):
  text, f = _generic_text_from_jax(meshes[0])
  assert '"func.func"' in text and "loc(" in text and '"sdy.mesh"' in text
  mesh = meshes[1]  # compile it somewhere else than it was lowered for
  frag = compile_fragment(text, mesh, name="generic",
                          in_shardings=[NamedSharding(mesh, P("x")),
                                        NamedSharding(mesh, P())])
  outs = frag(*_put(operands, frag.input_shardings))
  ref = f(*operands)
  assert [o.dtype for o in outs] == [jnp.float32, jnp.bfloat16]
  np.testing.assert_allclose(np.asarray(outs[0]), ref[0], rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(np.asarray(outs[1], np.float32),
                             np.asarray(ref[1], np.float32), rtol=2e-2,
                             atol=2e-2)


def test_sharded_input_and_output_shardings_read_back(meshes, operands):
  mesh = meshes[0]
  frag = compile_fragment(EXAMPLE, mesh, name="sharded",
                          in_shardings=[NamedSharding(mesh, P("x")),
                                        NamedSharding(mesh, P())])
  assert frag.input_shardings[0].is_equivalent_to(NamedSharding(mesh, P("x")), 2)
  # XLA propagates the row sharding of arg0 to the result.
  (out_s,) = frag.output_shardings
  assert isinstance(out_s, jax.sharding.Sharding)
  assert out_s.is_equivalent_to(NamedSharding(mesh, P("x")), 2)
  assert frag.out_avals[0].shape == (8, 16)
  x, w = _put(operands, frag.input_shardings)
  (out,) = frag(x, w)
  assert out.sharding.is_equivalent_to(out_s, 2)
  assert out.addressable_shards[0].data.shape == (2, 16)
  np.testing.assert_allclose(np.asarray(out), operands[0] @ operands[1],
                             rtol=1e-5, atol=1e-5)
  # Replicated default: outputs read back as replicated.
  rep = compile_fragment(EXAMPLE, mesh, name="replicated")
  assert rep.output_shardings[0].is_fully_replicated


def test_donation_deletes_input(meshes, operands):
  mesh = meshes[1]
  frag = compile_fragment(EXAMPLE, mesh, name="donating", donated_args=[0])
  assert frag.donated_args == (0,)
  x, w = _put(operands, frag.input_shardings)
  (out,) = frag(x, w)
  assert x.is_deleted() and not w.is_deleted()
  np.testing.assert_allclose(np.asarray(out), operands[0] @ operands[1],
                             rtol=1e-5, atol=1e-5)
  # Calling again with the donated (deleted) buffer is a clear error, not a
  # crash; nothing else is consumed.
  with pytest.raises(FragmentArgumentError, match="donating.*argument 0.*deleted"):
    frag(x, w)
  assert not w.is_deleted()


def test_wrong_devices_raise(meshes, operands):
  mesh0, mesh1 = meshes
  frag = compile_fragment(EXAMPLE, mesh1, name="frag_b")
  x, w = _put(operands, frag.input_shardings)
  frag(x, w)  # warm the fast path with the good signature
  wrong = jax.device_put(operands[1], NamedSharding(mesh0, P()))
  with pytest.raises(ValueError, match=r"frag_b.*argument 1.*devices \[4, 5, 6, 7\]"
                     r".*devices \[0, 1, 2, 3\]"):
    frag(x, wrong)
  # Same devices, different sharding.
  with pytest.raises(ValueError, match="frag_b.*argument 0.*sharding"):
    frag(jax.device_put(operands[0], NamedSharding(mesh1, P("x"))), w)
  # An equivalent sharding on another Mesh object over the same devices is ok.
  other = Mesh(np.array(mesh1.devices.flat).reshape(2, 2), ("a", "b"))
  (out,) = frag(jax.device_put(operands[0], NamedSharding(other, P())), w)
  np.testing.assert_allclose(np.asarray(out), operands[0] @ operands[1],
                             rtol=1e-5, atol=1e-5)


def test_wrong_shape_dtype_arity_raise(meshes, operands):
  mesh = meshes[0]
  frag = compile_fragment(EXAMPLE, mesh, name="frag_shape")
  rep = NamedSharding(mesh, P())
  x, w = _put(operands, frag.input_shardings)
  with pytest.raises(ValueError, match=r"frag_shape.*argument 0.*float32\[8, 16\]"
                     r".*float32\[16, 16\]"):
    frag(jax.device_put(operands[1], rep), w)
  with pytest.raises(ValueError, match=r"frag_shape.*argument 1.*int32"):
    frag(x, jax.device_put(operands[1].astype(np.int32), rep))
  with pytest.raises(ValueError, match="frag_shape.*expected 2 arguments"):
    frag(x)
  with pytest.raises(ValueError, match="frag_shape.*argument 1.*ndarray"):
    frag(x, operands[1])
  assert not x.is_deleted() and not w.is_deleted()


def test_transfer_between_meshes(meshes, operands):
  mesh0, mesh1 = meshes
  x = jax.device_put(operands[0], NamedSharding(mesh0, P("x")))
  y = transfer(x, NamedSharding(mesh1, P()))
  assert y.sharding.device_set == set(mesh1.devices.flat)
  assert y.sharding.is_fully_replicated
  np.testing.assert_array_equal(np.asarray(y), operands[0])
  # Chain: stage on mesh0, transfer, stage on mesh1.
  f0 = compile_fragment(EXAMPLE, mesh0, name="s0",
                        in_shardings=[NamedSharding(mesh0, P("x")),
                                      NamedSharding(mesh0, P())])
  f1 = compile_fragment(EXAMPLE, mesh1, name="s1")
  (h,) = f0(x, jax.device_put(operands[1], NamedSharding(mesh0, P())))
  (out,) = f1(transfer(h, f1.input_shardings[0]),
              jax.device_put(operands[1], f1.input_shardings[1]))
  a, b = operands
  np.testing.assert_allclose(np.asarray(out), (a @ b) @ b, rtol=1e-4, atol=1e-4)


def test_bad_modules_name_the_fragment(meshes):
  mesh = meshes[0]
  unparsable = EXAMPLE.replace("%arg1)", "%argX)").replace(
      "%arg0, %arg1,", "%arg0, %argX,")
  with pytest.raises(FragmentCompileError, match="broken_parse"):
    compile_fragment(unparsable, mesh, name="broken_parse")
  xla_rejects = """
  module @bad {
    func.func public @main(%a: tensor<4xf32>) -> tensor<4xf32> {
      %0 = stablehlo.custom_call @no_such_custom_call_target(%a) : (tensor<4xf32>) -> tensor<4xf32>
      return %0 : tensor<4xf32>
    }
  }"""
  with pytest.raises(FragmentCompileError,
                     match="broken_xla(.|\n)*no_such_custom_call_target"):
    compile_fragment(xla_rejects, mesh, name="broken_xla")
  unknown_op = """
  module @bad2 {
    func.func public @main(%a: tensor<4xf32>) -> tensor<4xf32> {
      %0 = "foo.bar"(%a) : (tensor<4xf32>) -> tensor<4xf32>
      return %0 : tensor<4xf32>
    }
  }"""
  with pytest.raises(FragmentCompileError, match="broken_op(.|\n)*foo.bar"):
    compile_fragment(unknown_op, mesh, name="broken_op")
  with pytest.raises(FragmentCompileError, match="no_main(.|\n)*@main"):
    compile_fragment("module {}", mesh, name="no_main")


def test_bad_compile_arguments(meshes):
  mesh0, mesh1 = meshes
  with pytest.raises(ValueError, match="bad_args.*2 arguments.*1 in_shardings"):
    compile_fragment(EXAMPLE, mesh0, name="bad_args",
                     in_shardings=[NamedSharding(mesh0, P())])
  with pytest.raises(ValueError, match="bad_args.*in_shardings\\[1\\]"):
    compile_fragment(EXAMPLE, mesh0, name="bad_args",
                     in_shardings=[NamedSharding(mesh0, P()),
                                   NamedSharding(mesh1, P())])
  with pytest.raises(ValueError, match="bad_args.*donated argument index 5"):
    compile_fragment(EXAMPLE, mesh0, name="bad_args", donated_args=[5])


def test_multiple_and_zero_results(meshes):
  mesh = meshes[0]
  text = """
  module @multi {
    func.func public @main(%a: tensor<8xi32>) -> (tensor<8xi32>, tensor<i32>) {
      %c = stablehlo.constant dense<0> : tensor<i32>
      %0 = stablehlo.add %a, %a : tensor<8xi32>
      %1 = stablehlo.reduce(%a init: %c) applies stablehlo.add across dimensions = [0] : (tensor<8xi32>, tensor<i32>) -> tensor<i32>
      return %0, %1 : tensor<8xi32>, tensor<i32>
    }
  }"""
  frag = compile_fragment(text, mesh, name="multi",
                          in_shardings=[NamedSharding(mesh, P("x"))])
  assert frag.num_outputs == 2 and len(frag.output_shardings) == 2
  x = jax.device_put(np.arange(8, dtype=np.int32), frag.input_shardings[0])
  doubled, total = frag(x)
  np.testing.assert_array_equal(np.asarray(doubled), 2 * np.arange(8))
  assert int(total) == 28
  none = compile_fragment(
      "module { func.func public @main(%a: tensor<8xi32>) -> () { return } }",
      mesh, name="none", in_shardings=[NamedSharding(mesh, P("x"))])
  assert none(x) == [] and none.num_outputs == 0


_CACHE_SCRIPT = """
import jax, numpy as np, os
import jax.monitoring
events = []
jax.monitoring.register_event_listener(lambda e, **kw: events.append(e))
from jax.sharding import Mesh
from mpmd.compile.fragment import compile_fragment
from test_runtime_fragment import EXAMPLE
mesh = Mesh(np.array(jax.devices()[4:8]), ("x",))
frag = compile_fragment(EXAMPLE, mesh, name="cached")
x, w = (jax.device_put(np.ones(s, np.float32), frag.input_shardings[0 if s == (8, 16) else 1])
        for s in ((8, 16), (16, 16)))
(out,) = frag(x, w)
assert float(np.asarray(out)[0, 0]) == 16.0
print("hit" if "/jax/compilation_cache/cache_hits" in events else "miss")
print(sorted(os.listdir(os.environ["JAX_COMPILATION_CACHE_DIR"])))
"""


def test_persistent_compilation_cache(tmp_path):
  """With JAX's persistent cache enabled, fragments are written to it and a
  second process reads them back (same entries, no new ones)."""
  import os
  import pathlib
  import subprocess
  import sys
  here = pathlib.Path(__file__).resolve().parent
  env = dict(os.environ,
             JAX_COMPILATION_CACHE_DIR=str(tmp_path),
             JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
             JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0",
             JAX_PLATFORMS="cpu",
             XLA_FLAGS="--xla_force_host_platform_device_count=8",
             PYTHONPATH=os.pathsep.join([str(here.parents[1]), str(here),
                                         os.environ.get("PYTHONPATH", "")]))
  runs = [subprocess.run([sys.executable, "-c", _CACHE_SCRIPT], env=env,
                         capture_output=True, text=True, timeout=120)
          for _ in range(2)]
  for r in runs:
    assert r.returncode == 0, r.stderr
  (hit1, first), (hit2, second) = (r.stdout.strip().splitlines()[-2:]
                                   for r in runs)
  assert "p0_stage0-" in first  # the module's own name keys the entry
  assert (hit1, hit2) == ("miss", "hit")
  assert first == second


def test_element_types_are_read_whole_by_concurrent_compiles():
  """Compile threads parse modules at once: each sees the whole element-type
  table (a table filled in place was once seen half-built: 'unsupported
  element type i1' for a boolean mask)."""
  import concurrent.futures
  from mpmd._jax import parsing as jp
  jp._element_types.cache_clear()
  text = ("func.func public @main(%a: tensor<2xi1>, %b: tensor<2xbf16>) -> tensor<2xi1> {\n"
          "  return %a : tensor<2xi1>\n}\n")
  def read(_):
    return jp.main_signature(jp.parse_fragment_module(text))
  with concurrent.futures.ThreadPoolExecutor(8) as pool:
    results = list(pool.map(read, range(32)))
  for ins, outs in results:
    assert [a.dtype for a in ins] == [np.dtype(bool), jnp.bfloat16]
    assert outs[0].dtype == np.dtype(bool)
