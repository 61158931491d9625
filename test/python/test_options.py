"""The one table of boolean partitioning options and everything read from it.

`MPMD_PARTITION_FLAGS` (include/mpmd/Pipeline.h) defines each flag once;
`mpmd.options` (user options, defaults, replay flags, the docs table), the
binding's `PartitionOptions` and the `mpmd-opt` pipelines' text options come
from it. These tests fail when any of them disagree.
"""

import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import mpmd
from mpmd import _mpmd
from mpmd import options as options_table
from mpmd import partition
from mpmd.config import KNOWN_PARTITIONING_OPTIONS
from mpmd.tracing import trace_and_lower

_ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_rows_are_well_formed():
  names = [f.name for f in options_table.FLAGS]
  assert len(names) == len(set(names))
  for flag in options_table.FLAGS:
    assert flag.phase in options_table.PHASES, flag
    assert flag.text and " " not in flag.text and "_" not in flag.text, flag
    assert flag.doc.strip(), flag
  spellings = [(f.phase, f.text) for f in options_table.FLAGS]
  assert len(spellings) == len(set(spellings))


def test_user_options_and_defaults_come_from_the_table():
  users = {f.option: f for f in options_table.FLAGS if f.user}
  assert KNOWN_PARTITIONING_OPTIONS == {name: bool for name in users}
  config = mpmd.make_config(_topology(), {"s0": "m0", "s1": "m1"})
  typed = _mpmd.PartitionOptions()
  for name, flag in users.items():
    assert config.option(name) is flag.default, name
    assert options_table.default(name) is flag.default, name
  for flag in options_table.FLAGS:
    # The binding's fresh options (the driver's and mpmd-opt's defaults).
    assert getattr(typed, flag.name) is flag.default, flag.name
  with pytest.raises(KeyError, match="'mpmd_no_such' is not a partitioning option"):
    config.option("mpmd_no_such")
  # The runtime merges the last stage's forward and backward unless told not to.
  assert config.option("mpmd_merge_forward_with_backward") is True


def test_typed_sets_user_options_and_leaves_the_rest_at_their_defaults():
  options = options_table.typed({"mpmd_fragment_remat": True,
                                 "mpmd_merge_forward_with_backward": False})
  assert options.fragment_remat is True
  assert options.merge_forward_with_backward is False
  assert options.validate_no_backward_deps is True
  assert options.infer_transfers is False


def _minimal_module() -> str:
  return ('module {\n  func.func @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {\n'
          '    return %arg0 : tensor<4xf32>\n  }\n}\n')


@pytest.mark.parametrize("flag", options_table.FLAGS, ids=lambda f: f.name)
def test_each_flag_is_a_text_option_of_its_pipeline_only(flag):
  value = "false" if flag.default else "true"
  prefix = "topology=m0:x=1 " if flag.phase == "import" else ""
  extra = ("fragment-remat=true "
           if flag.name == "merge_remat_fragments" else "")
  ok, text = _mpmd.run_pipeline(
      _minimal_module(),
      f"builtin.module(mpmd-{flag.phase}-pipeline{{{prefix}{extra}{flag.text}={value}}})")
  assert ok, text
  for other in options_table.PHASES:
    if other == flag.phase or any(f.phase == other and f.text == flag.text
                                  for f in options_table.FLAGS):
      continue
    if other == "import" and flag.text == "merge-inferred":
      continue  # The import's own merge-inferred (its opposite).
    ok, text = _mpmd.run_pipeline(_minimal_module(),
                                  f"builtin.module(mpmd-{other}-pipeline{{{flag.text}={value}}})")
    assert not ok and flag.text in text, (other, text)


def test_text_options_write_what_differs_from_the_defaults():
  options = _mpmd.PartitionOptions()
  assert all(options_table.text_options(options, phase) == [] for phase in options_table.PHASES)
  options.merge_forward_with_backward = False
  options.infer_transfers = True
  options.validate_no_backward_deps = False
  assert options_table.text_options(options, "import") == ["infer-transfers=true"]
  assert options_table.text_options(options, "optimize") == ["merge-forward-with-backward=false"]
  assert options_table.text_options(options, "export") == ["validate-no-backward-deps=false"]


def test_docs_table_is_generated_from_the_table():
  text = (_ROOT / "docs" / "api.md").read_text()
  assert options_table.docs_table() in text, (
      "docs/api.md's partitioning options are stale: run `python -m mpmd.options_doc`")
  for flag in options_table.USER_FLAGS:
    assert f"| `{flag.option}` | `{flag.default}` |" in text


def test_with_docs_table_replaces_only_the_generated_part():
  stale = f"before\n{options_table.DOCS_BEGIN}\n| old |\n{options_table.DOCS_END}\nafter\n"
  assert options_table.with_docs_table(stale) == (
      f"before\n{options_table.docs_table()}\nafter\n")
  with pytest.raises(ValueError, match="no generated partitioning options table"):
    options_table.with_docs_table("no markers")


def _topology():
  devices = np.array(jax.devices()[:2])
  return {f"m{i}": jax.sharding.Mesh(devices[i:i + 1], ("data",)) for i in range(2)}


def _step(w, xs):
  total = jnp.zeros(())
  for i, x in enumerate(xs):
    def mb(total, x):
      h = mpmd.named_computation(lambda w, x: jnp.tanh(x @ w), name="s0")(w, x)
      h = mpmd.named_computation(lambda h: jnp.sum(h ** 2), name="s1")(h)
      return total + h
    total = mpmd.call(mb, call_counter=i)(total, x)
  return total


def _flags(options):
  return {f.name: getattr(options, f.name) for f in options_table.FLAGS}


def test_partition_leaves_the_callers_options_alone():
  config = mpmd.make_config(_topology(), {"s0": "m0", "s1": "m1"},
                            pipeline_schedule="ParallelPipelinesWithWrapAround")
  w, xs = jnp.eye(4), [jnp.ones((2, 4)) * (i + 1) for i in range(2)]
  lowering = trace_and_lower(_step, (w, xs))
  hints = partition.mesh_hints(config, lowering, (w, xs), jax.tree.leaves((w, xs)), None, None)
  spec = partition.program_spec(config, lowering, hints)
  options = partition.partition_options(config)
  before = _flags(options)
  result = partition.partition("step", config, lowering.text, spec, options)
  assert _flags(options) == before
  # The partition itself ran with the flags the schedule implies (a
  # wrap-around schedule sends values back on purpose: no check of that).
  assert "merge-inferred=false" in result.mpmd_opt_args[0]
  assert result.mpmd_opt_args[2] == "-mpmd-export-pipeline=validate-no-backward-deps=false"
