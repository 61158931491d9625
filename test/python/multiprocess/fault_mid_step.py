"""examples/train_multiprocess.py with a fragment of process 1 failing half-way
through step 1 (the fault test of test_multiprocess.py).

Process 1 raises in the middle of its instruction list, after process 0 has
issued its part of the step: process 0 is then blocked in a collective with
process 1 and must fail on its own rather than hang.
"""

import importlib.util
import os
import sys

import jax

from mpmd.run import program as run_program

_EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..",
                        "examples", "train_multiprocess.py")
FAILING_PROCESS = 1


def _inject_failure() -> None:
  calls = {"done": 0, "fail_at": None}
  execute, run = run_program.CallInstruction.execute, run_program.Program.run

  def counting_run(self, inputs, check=None):
    if calls["fail_at"] is None:  # the middle of the second step
      per_step = sum(isinstance(i, run_program.CallInstruction) for i in self.instructions)
      calls["fail_at"] = per_step + per_step // 2
    return run(self, inputs, check)

  def failing_execute(self, env):
    calls["done"] += 1
    if jax.process_index() == FAILING_PROCESS and calls["done"] == calls["fail_at"]:
      raise RuntimeError(f"injected failure in {self.describe()}")
    return execute(self, env)

  run_program.Program.run = counting_run
  run_program.CallInstruction.execute = failing_execute


def main() -> int:
  spec = importlib.util.spec_from_file_location("train_multiprocess", _EXAMPLE)
  example = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(example)
  _inject_failure()
  return example.main(sys.argv[1:])


if __name__ == "__main__":
  sys.exit(main())
