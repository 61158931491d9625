"""The layout decision of the partition stage (`mpmd.partition.layouts`):
every value's sharding decided before anything compiles, each fragment's
text annotated for it, and the compile stage compiling that text as it is."""

from __future__ import annotations

import ast
import dataclasses
import pathlib
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import mpmd
from mpmd.compile.fragment import compile_laid_out
from mpmd.compile.compile_plan import _check_outputs
from mpmd.errors import MpmdError
from mpmd.partition.layouts import lay_out_fragment, lay_out_program
from models import init_mlp, make_batch, make_topology, sgd_step

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "mpmd"


def _mesh(n: int, start: int = 0) -> Mesh:
  return Mesh(np.array(jax.devices()[start:start + n]), ("x",))


def _text(fn, *avals) -> str:
  return jax.jit(fn).lower(*avals).as_text()


def _result_shardings(text: str) -> list[str]:
  """The `sdy.sharding` of each result of `@main` in `text`."""
  line = next(l for l in text.splitlines() if "@main(" in l)
  results = line[line.index(") -> (") + 5:]
  return re.findall(r"sdy\.sharding = (#sdy\.sharding<[^>]*>)", results)


@pytest.mark.parametrize("spec", [P("x"), P(None, "x"), P()])
def test_a_result_left_open_gets_what_xla_would_choose(spec):
  """Propagation's choice for a result left open equals the output sharding
  `jax.jit` reads back from XLA's compile of the same function."""
  mesh = _mesh(4)
  a = jax.ShapeDtypeStruct((8, 16), jnp.float32)
  b = jax.ShapeDtypeStruct((16, 16), jnp.float32)

  def f(x, w):
    return jnp.tanh(x @ w), (x * 2.0).sum(axis=0)

  ins = [NamedSharding(mesh, spec), NamedSharding(mesh, P())]
  layout = lay_out_fragment(_text(f, a, b), mesh, name="f", in_shardings=ins)
  compiled = jax.jit(f, in_shardings=ins).lower(a, b).compile()
  for decided, xla, aval in zip(layout.out_shardings, compiled.output_shardings,
                                layout.out_avals):
    assert decided.is_equivalent_to(xla, len(aval.shape)), (spec, decided, xla)
  # the text the compile stage gets has every result annotated
  assert len(_result_shardings(layout.module_text)) == 2, layout.module_text


def test_required_and_donated_results_keep_their_layouts():
  """A required result sharding is kept; a result reusing a donated
  argument's buffer gets that argument's layout."""
  mesh = _mesh(4)
  a = jax.ShapeDtypeStruct((8, 16), jnp.float32)
  text = jax.jit(lambda acc, g: (acc + g, g * 2.0), donate_argnums=(0,)).lower(a, a).as_text()
  ins = [NamedSharding(mesh, P(None, "x")), NamedSharding(mesh, P("x"))]
  layout = lay_out_fragment(text, mesh, name="acc", in_shardings=ins, donated_args=[0],
                            out_shardings=[None, NamedSharding(mesh, P())])
  assert layout.out_shardings[0].is_equivalent_to(ins[0], 2)
  assert layout.out_shardings[1].is_equivalent_to(NamedSharding(mesh, P()), 2)
  assert layout.donated_args == (0,)


def test_a_mesh_of_one_device_is_replicated_without_propagation():
  mesh = _mesh(1)
  a = jax.ShapeDtypeStruct((4, 4), jnp.float32)
  layout = lay_out_fragment(_text(lambda x: x + 1.0, a), mesh, name="one")
  assert layout.out_shardings == (NamedSharding(mesh, P()),)


def test_every_value_of_a_program_is_laid_out_before_anything_compiles(caplog):
  """`lay_out_program` decides a sharding for every value of every mesh and
  annotates every distinct fragment; the compiled programs lay their results
  out as decided, and the step equals `jax.jit`'s."""
  topology = make_topology(4, 2)
  config = mpmd.make_config(topology, {f"stage{i}": f"m{i}" for i in range(4)})
  params = init_mlp(4)
  x, y = make_batch()
  lowered = mpmd.jit(sgd_step, config, in_shardings=(None, P("x"), P("x"))).lower(params, x, y)
  sig = lowered.signature
  partition = lowered.partition
  laid_out = lay_out_program(partition, topology,
                             [lowered._arg_shardings[i] for i in sig.kept],  # pylint: disable=protected-access
                             sig.out_shardings)
  values = set(partition.input_ids) | {c.id for c in partition.constants}
  for inst in partition.program:
    values.update(inst.results)
  assert values <= set(laid_out.sharding_of), values - set(laid_out.sharding_of)
  assert len(laid_out.instructions) == len(partition.program)
  for fragment in laid_out.fragments.values():
    assert len(_result_shardings(fragment.module_text)) == len(fragment.out_avals), fragment.name
  # the batch split over each mesh's devices: activations are laid out split
  assert any(not s.is_fully_replicated for f in laid_out.fragments.values()
             for s in f.out_shardings)
  with caplog.at_level("INFO", logger="mpmd"):
    compiled = lowered.compile()
  said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("laid out ")]
  assert len(said) == 1 and f"laid out {len(laid_out.sharding_of)} values on 4 meshes" in said[0]
  assert "through Shardy's propagation" in said[0], said
  loss, new_params = compiled(params, x, y)
  ref_loss, ref_params = jax.jit(sgd_step)(params, x, y)
  np.testing.assert_allclose(loss, ref_loss, rtol=1e-5)
  for got, want in zip(jax.tree.leaves(new_params), jax.tree.leaves(ref_params)):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_a_program_laid_out_otherwise_than_decided_is_refused():
  """The compile stage checks each program's result layouts against the
  decision its consumers were laid out for."""
  mesh = _mesh(4)
  a = jax.ShapeDtypeStruct((8, 16), jnp.float32)
  layout = lay_out_fragment(_text(lambda x: x * 2.0, a), mesh, name="twice",
                            in_shardings=[NamedSharding(mesh, P("x"))], mesh_name="m0")
  fragment = compile_laid_out(layout)
  _check_outputs(layout, fragment)  # as decided
  wrong = dataclasses.replace(layout, out_shardings=(NamedSharding(mesh, P(None, "x")),))
  with pytest.raises(MpmdError, match="fragment 'twice' on mesh 'm0'.*not as decided"):
    _check_outputs(wrong, fragment)


def test_no_compile_or_run_module_reads_or_rewrites_fragment_text():
  """The compile stage and the runtime compile and run what the partition
  stage laid out: none of their modules imports what reads, annotates or
  rewrites a fragment's text, except `compile_laid_out` handing the text to
  XLA (parse, compile) and the two entry points that run the decision."""
  text_tools = {
      "mpmd._jax.annotation": None, "mpmd._jax.unreduced": None, "mpmd._jax.mlir_text": None,
      "mpmd._jax.parsing": {"mpmd.compile.fragment": {"parse_fragment_module"}},
      "mpmd.partition.layouts": {
          "mpmd.compile.fragment": {"lay_out_fragment"},  # compile_fragment = lay out + compile
          "mpmd.compile.compile_program": {"lay_out_program"},  # runs the decision
      },
  }
  deciding = {"lay_out_fragment", "lay_out_program"}
  offending = []
  for room in ("compile", "run"):
    for path in sorted((PACKAGE / room).glob("*.py")):
      module = f"mpmd.{room}.{path.stem}"
      for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
          continue
        if isinstance(node, ast.Import):
          imported = [(a.name, None) for a in node.names]
        else:
          imported = [(node.module, a.name) for a in node.names]
          imported += [(f"{node.module}.{a.name}", None) for a in node.names]
        for source, name in imported:
          if source not in text_tools:
            continue
          rules = text_tools[source]
          if rules is None:
            offending.append((module, source, name))
          elif source == "mpmd.partition.layouts" and name not in deciding:
            continue  # the decision's types and helpers
          elif name not in rules.get(module, set()):
            offending.append((module, source, name))
  assert not offending, offending


@pytest.mark.parametrize("text,parsed", [
    ('#sdy.sharding<@mesh, [{"x"}, {}]>', ((("x",), None), frozenset())),
    ('#sdy.sharding<@mesh, [{"x", "y"}, {?}], replicated={"z"}>', ((("x", "y"), None), frozenset())),
    ('#sdy.sharding<@mesh, [{}, {}], unreduced={"x"}>', ((None, None), frozenset({"x"}))),
    ('#sdy.sharding<mesh<["x"=4], device_ids=[3,2,1,0]>, [{"x", ?}]>', ((("x",),), frozenset())),
    ('#sdy.sharding<@mesh, [{"x":(1)2}, {"x":(2)2}]>', ((("x:(1)2",), ("x:(2)2",)), frozenset())),
    ("#sdy.sharding_per_value<[]>", None),
])
def test_propagated_shardings_are_read_as_written(text, parsed):
  from mpmd._jax.annotation import parse_tensor_sharding  # noqa: PLC0415
  assert parse_tensor_sharding(text) == parsed


def test_a_result_split_over_a_sub_axis_is_laid_out_replicated_and_said(caplog):
  """No `PartitionSpec` names a sub-axis: such a result is laid out
  replicated (correct, maybe slower), and the `mpmd` logger says so."""
  from mpmd.partition.layouts import _from_propagation  # noqa: PLC0415
  mesh = _mesh(4)
  with caplog.at_level("INFO", logger="mpmd"):
    got = _from_propagation(((("x:(1)2",), None), frozenset()), mesh, 2, "fragment 'r'")
  assert got == NamedSharding(mesh, P())
  assert "fragment 'r': propagation split a result over axes the mesh does not name" in caplog.text
  assert _from_propagation(((("x",), None), frozenset()), mesh, 2, "w") == NamedSharding(mesh, P("x"))
  partial = _from_propagation(((None,), frozenset({"x"})), mesh, 1, "w")
  assert partial.spec.unreduced == frozenset({"x"})
