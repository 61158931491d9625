"""The typed partition boundary: `_mpmd.import_program` -> `ImportedProgram`
-> `finish`, and `mpmd.partition.partitioner`, which builds its inputs from a config."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import mpmd
from mpmd import _mpmd
from mpmd.partition import partitioner as partition
from mpmd import options as options_table
from mpmd.config import KNOWN_PARTITIONING_OPTIONS
from mpmd.trace.tracing import trace_and_lower


def _topology():
  devices = np.array(jax.devices())
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


def _train_step(w, xs):
  """`_step` with a backward: per microbatch, the loss and its gradient."""
  total, grad = jnp.zeros(()), jnp.zeros_like(w)
  for i, x in enumerate(xs):
    def mb(total, grad, x):
      def loss(w):
        h = mpmd.named_computation(lambda w, x: jnp.tanh(x @ w), name="s0")(w, x)
        return mpmd.named_computation(lambda h: jnp.sum(h ** 2), name="s1")(h)
      value, g = jax.value_and_grad(loss)(w)
      return total + value, grad + g
    total, grad = mpmd.call(mb, call_counter=i)(total, grad, x)
  return total, grad


def _inputs(config, fun=_step):
  w = jnp.eye(4)
  xs = [jnp.ones((2, 4)) * (i + 1) for i in range(2)]
  lowering = trace_and_lower(fun, (w, xs))
  hints = partition.mesh_hints(config, lowering, (w, xs), jax.tree.leaves((w, xs)), None, None)
  return lowering, partition.program_spec(config, lowering, hints)


def test_every_user_option_is_a_flag_of_the_typed_options():
  flags = {flag.name for flag in options_table.FLAGS}
  for option in KNOWN_PARTITIONING_OPTIONS:
    assert option.startswith("mpmd_") and option[len("mpmd_"):] in flags, option
  config = mpmd.make_config(_topology(), {"s0": "m0", "s1": "m1"},
                            partitioning_options={"mpmd_fragment_remat": True})
  options = partition.partition_options(config)
  assert options.fragment_remat and not options.infer_transfers


def test_spec_is_typed():
  config = mpmd.make_config(_topology(), {"s0": "m0", "s1": "m1"},
                            name_to_stage_assignment={"s1": 1})
  _, spec = _inputs(config)
  assert [(m.name, m.axes) for m in spec.topology] == [("m0", [("data", 1)]),
                                                       ("m1", [("data", 1)])]
  assert sorted((a.name, a.mesh, a.stage) for a in spec.assignment) == [("s0", "m0", -1),
                                                                        ("s1", "m1", 1)]


def test_finish_can_run_again_with_another_schedule():
  config = mpmd.make_config(_topology(), {"s0": "m0", "s1": "m1"})
  lowering, spec = _inputs(config)
  options = _mpmd.PartitionOptions()
  options.merge_inferred_after_scheduling = True
  imported = _mpmd.import_program(lowering.text, spec, options)
  assert imported.ok, imported.error
  units = [(u.mesh, u.kind, u.microbatch) for u in imported.units]
  assert sorted(units) == [("m0", "F", 0), ("m0", "F", 1), ("m1", "F", 0), ("m1", "F", 1)]
  orders = {}
  for name, order in (("in order", [0, 1]), ("reversed", [1, 0])):
    schedule = [[_mpmd.Unit(mesh, "F", mb) for mb in order] for mesh in ("m0", "m1")]
    result = imported.finish(schedule, options)
    assert result.ok, result.error
    orders[name] = {mesh: [inst.unit for inst in result.program
                           if inst.kind == "call" and inst.unit and inst.mesh == mesh]
                    for mesh in ("m0", "m1")}
  assert orders["in order"] == {"m0": ["F0", "F1"], "m1": ["F0", "F1"]}
  assert orders["reversed"] == {"m0": ["F1", "F0"], "m1": ["F1", "F0"]}


def test_schedule_lists_units_of_one_mesh_each():
  config = mpmd.make_config(_topology(), {"s0": "m0", "s1": "m1"})
  lowering, spec = _inputs(config)
  imported = _mpmd.import_program(lowering.text, spec, _mpmd.PartitionOptions())
  mixed = [[_mpmd.Unit("m0", "F", 0), _mpmd.Unit("m1", "F", 1)]]
  result = imported.finish(mixed, _mpmd.PartitionOptions())
  assert not result.ok
  assert 'the schedule of mesh "m0" lists unit F1 of mesh "m1"' in result.error


def test_import_errors_are_reported_not_raised():
  config = mpmd.make_config(_topology(), {"s0": "m0", "s1": "m1"})
  _, spec = _inputs(config)
  imported = _mpmd.import_program("module {", spec, _mpmd.PartitionOptions())
  assert not imported.ok and imported.error
  result = imported.finish([], _mpmd.PartitionOptions())
  assert not result.ok and "was not imported" in result.error


def test_deeply_nested_modules_give_an_error_not_a_crash():
  def nest(n):
    return ("func.func @deep() {" + '"t.op"() ({' * n + "}) : () -> ()" * n + " return }")
  ok, text = _mpmd.run_pipeline(nest(3000), "builtin.module(mpmd-import-pipeline{topology=m0:x=1 func=deep})")
  assert ok, text
  ok, text = _mpmd.run_pipeline(nest(5000), "")
  assert not ok and "more than 4096 deep" in text
  config = mpmd.make_config(_topology(), {"s0": "m0", "s1": "m1"})
  _, spec = _inputs(config)
  imported = _mpmd.import_program(nest(5000), spec, _mpmd.PartitionOptions())
  assert not imported.ok and "more than 4096 deep" in imported.error


def test_signature_maps_flat_arguments_to_program_inputs():
  config = mpmd.make_config(_topology(), {"s0": "m0", "s1": "m1"})

  def step(unused, w, xs):
    return _step(w, xs)

  w = jnp.eye(4)
  xs = [jnp.ones((2, 4)), jnp.ones((2, 4))]
  lowered = mpmd.jit(step, config).lower(jnp.zeros(3), w, xs)
  sig = lowered.signature
  assert sig.kept == (1, 2, 3)  # the unused argument is pruned
  assert sig.input_meshes[0] is None and sig.input_meshes[1] == "m0"
  with pytest.raises(mpmd.MpmdError, match="has shape"):
    sig.check_avals([jnp.zeros(3), jnp.eye(5), *xs])


def test_the_answer_travels_on_as_one_typed_value():
  """`partition` hands the C++ result on as a `PartitionedProgram` (read
  once; its status and warnings stay behind), which `Signature` and the
  runtime read."""
  config = mpmd.make_config(_topology(), {"s0": "m0", "s1": "m1"})
  lowered = mpmd.jit(_step, config).lower(jnp.eye(4), [jnp.ones((2, 4)), jnp.ones((2, 4))])
  program = lowered.partition
  assert isinstance(program, partition.PartitionedProgram)
  assert not hasattr(program, "ok") and not hasattr(program, "warnings")
  assert isinstance(program.program, tuple) and isinstance(program.functions, tuple)
  ids = {*program.input_ids, *program.output_ids,
         *(v for inst in program.program for v in (*inst.operands, *inst.results))}
  assert program.num_values == max(ids) + 1
  assert lowered.signature.output_meshes == program.output_meshes
  lines = program.describe().splitlines()
  assert len(lines) == len(program.program)
  assert sum("transfer m0 -> m1" in line for line in lines) == sum(
      inst.kind == "transfer" for inst in program.program) > 0


@pytest.mark.parametrize("settings,expected", [
    ({"input_mesh_assignment": ("m0", None), "output_mesh_assignment": ("m1", "m0")},
     ["input-assignment=0@m0", "output-assignment=0@m1,1@m0"]),
    ({"pipeline_schedule": "GPipe",
      "fragment_merge_rules": [mpmd.FragmentMergeRule("m1", ["F0", "B0"]),
                               mpmd.FragmentMergeRule("m1", ["F1", "B1"])]},
     ['merge-rules="m1: F0 B0; m1: F1 B1"', "merge-inferred=true"]),
    ({"pipeline_schedule": "1F1B",
      "partitioning_options": {"mpmd_fragment_remat": True, "mpmd_merge_remat_fragments": True}},
     ["fragment-remat=true", "merge-remat-fragments=true"]),
], ids=["placed-inputs-and-outputs", "GPipe+merge-rules", "1F1B+remat"])
def test_mpmd_opt_with_the_replay_arguments_gives_the_partition(tmp_path, settings, expected):
  """The C++ driver renders the `mpmd-opt` arguments of a partition from the
  request, schedule and options it ran with: the `mpmd-opt` binary on the
  generic text JAX lowered, with those arguments, prints the module the
  partition exported."""
  import subprocess  # noqa: PLC0415

  from mpmd import opt  # noqa: PLC0415
  try:
    binary = opt.find_mpmd_opt()
  except opt.OptError:
    pytest.skip("no mpmd-opt binary")
  config = mpmd.make_config(_topology(), {"s0": "m0", "s1": "m1"}, **settings)
  lowering, spec = _inputs(config, _train_step)
  result = partition.partition("step", config, lowering.text, spec,
                               partition.partition_options(config))
  args = result.mpmd_opt_args
  assert [a.partition("=")[0] for a in args] == [
      "-mpmd-import-pipeline", "-mpmd-optimize-pipeline", "-mpmd-export-pipeline"]
  assert args[0].startswith("-mpmd-import-pipeline=topology=m0:data=1;m1:data=1 "
                            "assignment=s0@m0,s1@m1")
  assert all(any(e in a for a in args) for e in expected), args
  if "pipeline_schedule" in settings:
    assert 'schedule="m0: F0 F1 B0 B1; m1: F0 ' in args[1] and "merge-inferred=false" in args[0]
  path = tmp_path / "lowered.mlir"
  path.write_text(lowering.text)
  proc = subprocess.run([binary, str(path), *args], capture_output=True, text=True, timeout=120)
  assert proc.returncode == 0, proc.stderr
  assert proc.stdout.strip() == result.program.exported_text.strip()


def test_fragment_functions_carry_their_types_as_the_program_says():
  # The runtime reads each fragment function's argument and result types
  # from the partition (`input_types`, `output_types`); they are those of
  # the program's `@main`, for every element type a step passes between
  # stages here (bfloat16, int8, uint32, bool, float32).
  from mpmd._jax.parsing import main_signature, parse_fragment_module  # noqa: PLC0415
  from mpmd.partition.layouts import avals  # noqa: PLC0415

  def step(w, x, n, flag, u):
    h = mpmd.named_computation(
        lambda w, x, n, flag, u: (jnp.tanh(x @ w).astype(jnp.bfloat16), n + 1, ~flag, u * 3),
        name="s0")(w, x, n, flag, u)
    return mpmd.named_computation(
        lambda h, n, flag, u: (h.astype(jnp.float32).sum() + n.sum() + flag.sum()
                               + u.sum().astype(jnp.float32)), name="s1")(*h)

  config = mpmd.make_config(_topology(), {"s0": "m0", "s1": "m1"})
  args = (jnp.eye(4), jnp.ones((2, 4)), jnp.arange(3, dtype=jnp.int8),
          jnp.array([True, False]), jnp.arange(2, dtype=jnp.uint32))
  lowered = mpmd.jit(step, config).lower(*args)
  dtypes = set()
  for f in lowered.partition.functions:
    want_in, want_out = main_signature(parse_fragment_module(f.module_text))
    assert avals(f.input_types, f.name, "argument") == want_in, f.name
    assert avals(f.output_types, f.name, "result") == want_out, f.name
    dtypes |= {t.dtype for t in (*f.input_types, *f.output_types)}
  assert {"bfloat16", "int8", "uint32", "bool", "float32"} <= dtypes, dtypes
