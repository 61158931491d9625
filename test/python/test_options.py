"""The one table of boolean partitioning options and everything read from it.

`MPMD_PARTITION_FLAGS` (include/mpmd/Pipeline.h) defines each flag once;
`mpmd.options` (user options, defaults, the docs table), the binding's
`PartitionOptions`, the `mpmd-opt` pipelines' text options and the replay
arguments the C++ driver renders come from it. These tests fail when any of
them disagree.
"""

import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import mpmd
from mpmd import _mpmd
from mpmd import options as options_table
from mpmd.partition import partitioner as partition
from mpmd.config import KNOWN_PARTITIONING_OPTIONS
from mpmd.trace.tracing import trace_and_lower

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


def _replay_args(options) -> dict[str, list[str]]:
  """Per phase, the text options of the replay argument the C++ driver
  renders for `options` (an identity program on one mesh)."""
  spec = _mpmd.ProgramSpec()
  spec.topology = [_mpmd.MeshSpec("m0", [("x", 1)])]
  imported = _mpmd.import_program(_minimal_module(), spec, options)
  assert imported.ok, imported.error
  args = list(imported.finish([], options).mpmd_opt_args)
  assert [a.partition("=")[0] for a in args] == [
      f"-mpmd-{phase}-pipeline" for phase in options_table.PHASES], args
  return {phase: arg.partition("=")[2].split()
          for phase, arg in zip(options_table.PHASES, args)}


def test_replay_arguments_at_the_defaults_name_only_the_topology():
  assert _replay_args(_mpmd.PartitionOptions()) == {
      "import": ["topology=m0:x=1"], "optimize": [], "export": []}


@pytest.mark.parametrize("flag", options_table.FLAGS, ids=lambda f: f.name)
def test_replay_arguments_write_each_flag_that_differs_in_its_pipeline(flag):
  """C++ renders the replay arguments from the same table: a flag away from
  its default appears, by its spelling, in its own pipeline's options only."""
  options = _mpmd.PartitionOptions()
  setattr(options, flag.name, not flag.default)
  written = f"{flag.text}={'false' if flag.default else 'true'}"
  args = _replay_args(options)
  assert written in args[flag.phase], args
  for phase in options_table.PHASES:
    if phase == flag.phase:
      continue
    if phase == "import" and flag.text == "merge-inferred":
      # The import's own merge-inferred (merge now) is the opposite.
      assert "merge-inferred=false" in args[phase], args
      continue
    assert not any(a.startswith(flag.text + "=") for a in args[phase]), args


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
