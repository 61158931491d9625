"""`mpmd.run.program`: each instruction drops exactly the values whose
last use it is, and deletes the donated caller arguments among them.

Freeing a value one instruction late leaves every result right, so only these
tests see it: it holds memory longer, and a donated argument whose last use
is the final instruction would never be deleted.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import mpmd
from models import init_mlp, make_batch, make_topology, sgd_step
from mpmd.run.program import Program, ProgramParts, TransferInstruction


def _last_uses(instructions, keep: set[int]) -> list[set[int]]:
  """Per instruction, the values (not in `keep`) that no later one reads."""
  later: set[int] = set()
  out: list[set[int]] = []
  for inst in reversed(instructions):
    out.append({v for v in inst.operands if v not in later and v not in keep})
    later.update(inst.operands)
  return out[::-1]


def _transfer(src: int, dst: int, value: int, result: int) -> TransferInstruction:
  devices = jax.devices()
  return TransferInstruction(src_mesh=f"d{src}", mesh=f"d{dst}", operands=(value,),
                             results=(result,), location="",
                             sharding=jax.sharding.SingleDeviceSharding(devices[dst]))


def _chain_program() -> Program:
  """Three transfers; value 1 (a donated input) is last read by the final one.

      0: v0 d0->d1 -> v2    (last use of v0)
      1: v2 d1->d2 -> v3    (v2 is an output: kept)
      2: v1 d0->d2 -> v4    (last use of v1)
  """
  devices = jax.devices()
  on = [jax.sharding.SingleDeviceSharding(d) for d in devices[:3]]
  instructions = [_transfer(0, 1, 0, 2), _transfer(1, 2, 2, 3), _transfer(0, 2, 1, 4)]
  return Program(ProgramParts(instructions, input_ids=[0, 1], output_ids=[2, 3, 4], num_values=5,
                              input_shardings=[on[0], on[0]],
                              output_shardings=[on[1], on[2], on[2]],
                              donated_inputs=[False, True]))


def test_each_instruction_frees_the_values_it_reads_last():
  program = _chain_program()
  assert [inst.frees for inst in program.instructions] == [(0,), (), (1,)]


def test_a_donated_argument_last_read_by_the_final_instruction_is_deleted():
  program = _chain_program()
  kept = jax.device_put(jnp.arange(4.0), jax.devices()[0])
  donated = jax.device_put(jnp.arange(4.0) + 10, jax.devices()[0])
  outputs = program.run([kept, donated])
  assert donated.is_deleted()
  assert not kept.is_deleted()  # read last by the first instruction, but not donated
  np.testing.assert_array_equal(outputs[0], np.arange(4.0))
  np.testing.assert_array_equal(outputs[1], np.arange(4.0))
  np.testing.assert_array_equal(outputs[2], np.arange(4.0) + 10)


def test_frees_of_a_compiled_two_mesh_step():
  """Every instruction of a real program (calls and transfers) frees the
  values whose last use it is, the final instruction included; every value
  read and not an output is freed exactly once."""
  config = mpmd.make_config(make_topology(2, 4), {"stage0": "m0", "stage1": "m1"})
  compiled = mpmd.jit(sgd_step, config).lower(init_mlp(2), *make_batch()).compile()
  program = compiled.program
  instructions = program.instructions
  keep = set(program.output_ids)
  expected = _last_uses(instructions, keep)
  assert [set(inst.frees) for inst in instructions] == expected
  assert expected[-1], "the step's final instruction reads a value that is not an output"
  freed = [v for inst in instructions for v in inst.frees]
  assert len(freed) == len(set(freed))
  assert set(freed) == {v for inst in instructions for v in inst.operands} - keep
