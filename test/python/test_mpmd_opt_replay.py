"""`mpmd-opt` redoes a compile from the lowered module alone.

`Lowered.mpmd_opt_args()` renders the partition request (topology,
assignments, schedule, merge rules, remat and validation flags) as the text
options of `mpmd-opt`'s import, optimize and export pipelines; running
`mpmd-opt` on the lowered module with them prints `as_text("mpmd")`, for
scheduled programs too.
"""

from __future__ import annotations

import functools
import os
import pathlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import mpmd
from mpmd import opt
from models import init_mlp, make_batch, make_topology, sgd_step

WIDTH = 8


def _binary() -> str:
  try:
    return opt.find_mpmd_opt()
  except opt.OptError:
    pytest.skip("no mpmd-opt binary")


def _stage(name, w, h):
  return mpmd.named_computation(lambda w, h: jnp.tanh(h @ w), name=name)(w, h)


def _loss(params, x, y):
  h = _stage("s0", params[0], x)
  h = _stage("s1", params[1], h)
  return jnp.mean((h - y) ** 2)


def _accumulate(params, x, y, grads, total):
  loss, g = jax.value_and_grad(_loss)(params, x, y)
  return jax.tree.map(jnp.add, grads, g), total + loss


def step_list(params, xs, ys):
  grads = jax.tree.map(jnp.zeros_like, params)
  total = jnp.zeros(())
  for i, (x, y) in enumerate(zip(xs, ys)):
    grads, total = mpmd.call(functools.partial(_accumulate, params), call_counter=i)(
        x, y, grads, total)
  return total, grads


def _pipeline_args(m: int = 4):
  keys = jax.random.split(jax.random.key(0), 2)
  params = [jax.random.normal(k, (WIDTH, WIDTH)) / np.sqrt(WIDTH) for k in keys]
  xs = list(jax.random.normal(jax.random.key(1), (m, 2, WIDTH)))
  ys = list(jax.random.normal(jax.random.key(2), (m, 2, WIDTH)))
  return params, xs, ys


def _replay(lowered: mpmd.Lowered, tmp_path: pathlib.Path) -> str:
  """`python -m mpmd.opt` on the readable text `as_text("stablehlo")` prints."""
  path = tmp_path / "lowered.mlir"
  path.write_text(lowered.as_text("stablehlo"))
  proc = subprocess.run([sys.executable, "-m", "mpmd.opt", str(path), *lowered.mpmd_opt_args()],
                        capture_output=True, text=True, timeout=120,
                        env={**os.environ, "MPMD_OPT": _binary()})
  assert proc.returncode == 0, proc.stderr
  return proc.stdout


def test_unscheduled_program(tmp_path):
  config = mpmd.make_config(make_topology(2, 4), {"stage0": "m0", "stage1": "m1"})
  lowered = mpmd.jit(sgd_step, config).lower(init_mlp(2), *make_batch())
  assert lowered.mpmd_opt_args() == [
      "-mpmd-import-pipeline=topology=m0:x=4;m1:x=4 assignment=stage0@m0,stage1@m1",
      # The optimize pipeline runs with its defaults (the last stage's forward
      # and backward merge, as the driver's do).
      "-mpmd-optimize-pipeline",
      "-mpmd-export-pipeline"]
  assert _replay(lowered, tmp_path).strip() == lowered.as_text("mpmd").strip()
  # The generic text the driver partitions gives the same through the binary.
  path = tmp_path / "generic.mlir"
  path.write_text(lowered.lowering.text)
  proc = subprocess.run([_binary(), str(path), *lowered.mpmd_opt_args()], capture_output=True,
                        text=True, timeout=120)
  assert proc.returncode == 0, proc.stderr
  assert proc.stdout.strip() == lowered.as_text("mpmd").strip()


@pytest.mark.parametrize("schedule,options", [
    ("1F1B", {}),
    ("GPipe", {"fragment_merge_rules": [mpmd.FragmentMergeRule("m1", ["F0", "B0"]),
                                        mpmd.FragmentMergeRule("m1", ["F1", "B1"])]}),
    ("1F1B", {"partitioning_options": {"mpmd_fragment_remat": True,
                                       "mpmd_merge_remat_fragments": True}}),
    ("ZeroBubbleH1", {}),
], ids=["1F1B", "GPipe+merge-rules", "1F1B+remat", "ZeroBubbleH1"])
def test_scheduled_program(tmp_path, schedule, options):
  config = mpmd.make_config(make_topology(2, 2), {"s0": "m0", "s1": "m1"},
                            pipeline_schedule=schedule, **options)
  lowered = mpmd.jit(step_list, config).lower(*_pipeline_args())
  args = lowered.mpmd_opt_args()
  assert any(a.startswith("-mpmd-optimize-pipeline=schedule=\"m0: F0 F1 ") for a in args), args
  assert "merge-inferred=false" in args[0]
  assert _replay(lowered, tmp_path).strip() == lowered.as_text("mpmd").strip()
