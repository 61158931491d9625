"""The typed partition boundary: `_mpmd.import_program` -> `ImportedProgram`
-> `finish`, and `mpmd.partition`, which builds its inputs from a config."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import mpmd
from mpmd import _mpmd, partition
from mpmd import options as options_table
from mpmd.config import KNOWN_PARTITIONING_OPTIONS
from mpmd.tracing import trace_and_lower


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


def _inputs(config):
  w = jnp.eye(4)
  xs = [jnp.ones((2, 4)) * (i + 1) for i in range(2)]
  lowering = trace_and_lower(_step, (w, xs))
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


def test_mpmd_opt_replays_a_real_step_from_the_lowered_text(tmp_path):
  """The generic text JAX lowered, with the meshes given as an option, gives
  `mpmd-opt` the same program the Python driver builds."""
  import re  # noqa: PLC0415
  import subprocess  # noqa: PLC0415

  from models import init_mlp, make_batch, make_topology, sgd_step  # noqa: PLC0415

  from mpmd import opt  # noqa: PLC0415
  try:
    binary = opt.find_mpmd_opt()
  except opt.OptError:
    pytest.skip("no mpmd-opt binary")
  config = mpmd.make_config(make_topology(2, 4), {"stage0": "m0", "stage1": "m1"})
  lowered = mpmd.jit(sgd_step, config).lower(init_mlp(2), *make_batch())
  path = tmp_path / "lowered.mlir"
  path.write_text(lowered.lowering.text)
  out = subprocess.run(
      [binary, str(path), "-mpmd-import-pipeline=topology=m0:x=4;m1:x=4 "
       "assignment=stage0@m0,stage1@m1", "-mpmd-export-pipeline"],
      capture_output=True, text=True, check=True).stdout
  calls = re.compile(r"mpmd\.fragment_call<mesh=\"(\w+)\", origin=\[([^\]]*)\]>")
  assert calls.findall(out) == calls.findall(lowered.as_text("mpmd"))
  assert len(calls.findall(out)) == 4
