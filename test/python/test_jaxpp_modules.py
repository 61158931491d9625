"""`mpmd.jaxpp`'s module layout (JaxPP's), `install_as_jaxpp()`, and the
schedule classes' validation as JaxPP words it."""

from __future__ import annotations

import subprocess
import sys
import types

import pytest

import mpmd.jaxpp as mj
from mpmd.schedule import task_lists as sched_task_lists

# Each JaxPP module and names it offers.
LAYOUT = {
    "api": ["MpmdArray", "MpmdSharding", "MpmdMesh", "mpmd_jit_with_loop", "mpmd_jit_by_yield",
            "mark_stage_end", "pipeline_enter_stage", "treduce", "treduce_i", "Add", "Concat",
            "Max", "BaseSchedule", "Std1F1B", "Eager1F1B", "Interleaved1F1B", "KimiK2",
            "ZeroBubble", "DualPipeV", "spmd_to_mpmd_reshard", "mpmd_to_spmd_reshard",
            "cross_mpmd_all_reduce", "cross_mpmd_stack", "collect_task_times_ms"],
    "schedules": ["Task", "FusedTask", "TaskType", "BaseSchedule", "InterleavedBaseSchedule",
                  "Std1F1B", "Eager1F1B", "GPipe", "ZeroBubble", "Interleaved1F1B", "KimiK2",
                  "InterleavedGPipe", "DualPipeV"],
    "mesh": ["MpmdMesh"],
    "types": ["MpmdSharding", "TaskType"],
    "array": ["MpmdArray", "spmd_to_mpmd_reshard", "mpmd_to_spmd_reshard"],
    "pipelining": ["mark_stage_end", "pipeline_enter_stage", "yield_scope"],
    "training": ["treduce", "treduce_i", "Add", "Concat", "Max", "Op"],
    "core": ["mpmd_jit_with_loop", "mpmd_jit_by_yield"],
}


@pytest.mark.parametrize("module", sorted(LAYOUT))
def test_module_layout(module):
  mod = getattr(mj, module)
  assert mod.__name__ == f"mpmd.jaxpp.{module}"
  for name in LAYOUT[module]:
    value = getattr(mod, name)
    # One object per name, whichever module it is reached through.
    same = getattr(mj.api, name, None) or getattr(mj.pipelining, name)
    assert value is same, (module, name)
  assert set(LAYOUT[module]) <= set(mod.__all__)


def test_top_level_offers_the_api_names():
  assert mj.__version__ == "0.9.2"
  for name in mj.api.__all__:
    assert getattr(mj, name) is getattr(mj.api, name), name
  assert mj.schedules.Std1F1B(1).tasks(2)  # JaxPP's `jaxpp.schedules.Std1F1B(1)`


def test_yield_scope_numbers_the_markers():
  import jax
  import jax.numpy as jnp

  def f(x):
    with mj.pipelining.yield_scope():
      return mj.mark_stage_end(mj.mark_stage_end(x) * 2)

  eqns = jax.make_jaxpr(f)(jnp.ones(2)).eqns
  assert [e.params["stage"] for e in eqns if "stage" in e.params] == [0, 1]


_INSTALL = r"""
import importlib, sys
try:
  import jaxpp
except ModuleNotFoundError:
  pass
else:
  raise SystemExit("a module named jaxpp was importable before install_as_jaxpp()")
import mpmd.jaxpp
mpmd.jaxpp.install_as_jaxpp()
mpmd.jaxpp.install_as_jaxpp()  # a second call changes nothing
import jaxpp
import jaxpp.api
import jaxpp.schedules
from jaxpp.schedules import DualPipeV, InterleavedGPipe
from jaxpp.types import MpmdSharding
from jaxpp.mesh import MpmdMesh
from jaxpp.pipelining import yield_scope
from jaxpp.array import MpmdArray
assert jaxpp is mpmd.jaxpp and jaxpp.api is mpmd.jaxpp.api
assert jaxpp.schedules.DualPipeV is mpmd.jaxpp.api.DualPipeV is DualPipeV
assert MpmdSharding is mpmd.jaxpp.types.MpmdSharding
# Every submodule is the already-loaded object, never a second copy.
import jaxpp.markers
assert jaxpp.markers is mpmd.jaxpp.markers
assert importlib.import_module("jaxpp.treduce") is sys.modules["mpmd.jaxpp.treduce"]
try:
  import jaxpp.no_such_module
except ModuleNotFoundError:
  pass
else:
  raise SystemExit("jaxpp.no_such_module imported")
print("installed", jaxpp.__version__)
"""


def test_install_as_jaxpp_makes_import_jaxpp_resolve_here():
  run = subprocess.run([sys.executable, "-c", _INSTALL], capture_output=True, text=True,
                       timeout=300)
  assert run.returncode == 0, run.stderr[-3000:]
  assert run.stdout.strip() == "installed 0.9.2"


def test_install_as_jaxpp_refuses_when_another_jaxpp_is_imported(monkeypatch):
  monkeypatch.setitem(sys.modules, "jaxpp", types.ModuleType("jaxpp"))
  with pytest.raises(ImportError, match="a module named 'jaxpp' is already imported"):
    mj.install_as_jaxpp()


# ---------------------------------------------------------------------------
# Schedule validation, worded as JaxPP words it
# ---------------------------------------------------------------------------

ONE_STAGE_PER_RANK = [mj.Std1F1B, mj.Eager1F1B, mj.GPipe, mj.ZeroBubble]
INTERLEAVED = [mj.Interleaved1F1B, mj.KimiK2, mj.InterleavedGPipe]


@pytest.mark.parametrize("cls", ONE_STAGE_PER_RANK + INTERLEAVED, ids=lambda c: c.__name__)
def test_num_stages_must_be_positive(cls):
  extra = {"mpmd_dim": 1} if cls in INTERLEAVED else {}
  with pytest.raises(ValueError, match="The argument `num_stages` must be `>= 0`; got -1"):
    cls(num_stages=-1, **extra)
  with pytest.raises(ValueError, match="The argument `num_stages` must be `>= 1`; got 0"):
    cls(num_stages=0, **extra)
  with pytest.raises(ValueError, match="The argument `num_stages` must be an int; got 2.0"):
    cls(num_stages=2.0, **extra)


@pytest.mark.parametrize("cls", INTERLEAVED, ids=lambda c: c.__name__)
def test_interleaved_mpmd_dim(cls):
  assert issubclass(cls, mj.schedules.InterleavedBaseSchedule)
  with pytest.raises(ValueError, match="The argument `mpmd_dim` must be `>= 0`; got -1"):
    cls(num_stages=2, mpmd_dim=-1)
  with pytest.raises(ValueError, match=f"num_stages=2 can not be evenly divided by mpmd_dim=3 "
                                       f"\\({cls.__name__} puts stage s on rank s % mpmd_dim"):
    cls(num_stages=2, mpmd_dim=3)
  assert len(cls(num_stages=4, mpmd_dim=2).tasks(4)) == 2


def test_dual_pipe_v_limits():
  with pytest.raises(ValueError, match=r"DualPipeV only supports 2 \* mpmd_dim stages, "
                                       r"self.num_stages=4 requested with self.mpmd_dim=4"):
    mj.DualPipeV(num_stages=4, mpmd_dim=4)
  with pytest.raises(ValueError, match="use num_stages=8"):
    mj.DualPipeV(num_stages=12, mpmd_dim=4)
  with pytest.raises(ValueError, match="DualPipeV requires n_mubatches=5 >= self.num_stages=6"):
    mj.DualPipeV(num_stages=6, mpmd_dim=3).tasks(5)


def test_one_stage_per_rank_schedules_are_not_interleaved():
  for cls in ONE_STAGE_PER_RANK:
    assert not issubclass(cls, mj.schedules.InterleavedBaseSchedule)
    assert len(cls(num_stages=2).tasks(4)) == 2


# ---------------------------------------------------------------------------
# InterleavedGPipe
# ---------------------------------------------------------------------------


def test_interleaved_gpipe_tasks():
  tasks = mj.InterleavedGPipe(num_stages=4, mpmd_dim=2).tasks(3)
  assert [str(t) for t in tasks[1]] == [
      "fwd_1__0", "fwd_1__1", "fwd_3__0", "fwd_3__1", "fwd_1__2", "fwd_3__2",
      "bwd_3__0", "bwd_3__1", "bwd_1__0", "bwd_1__1", "bwd_3__2", "bwd_1__2"]
  assert mj.InterleavedGPipe(4, 2).stage_to_mesh == (0, 1, 0, 1)


@pytest.mark.parametrize("stages,mpmd_dim,microbatches",
                         [(4, 2, 4), (4, 2, 3), (6, 3, 5), (8, 4, 8), (3, 1, 2)])
def test_interleaved_gpipe_honours_dependencies(stages, mpmd_dim, microbatches):
  s = mj.InterleavedGPipe(stages, mpmd_dim).to_schedule(microbatches)
  s.validate()  # raises on a deadlock or a missing unit
  assert s.stage_to_mesh == tuple(k % mpmd_dim for k in range(stages))
  assert sum(len(order) for _, order in s.items()) == 2 * stages * microbatches
  assert sched_task_lists.InterleavedGPipe is mj.InterleavedGPipe
