"""Every example runs (at a tiny size) so that none can rot."""

from __future__ import annotations

import importlib.util
import pathlib
import sys

import pytest

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"


def _load(name: str):
  spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
  module = importlib.util.module_from_spec(spec)
  sys.modules[name] = module  # flax modules are dataclasses: their module must be importable
  spec.loader.exec_module(module)
  return module


@pytest.mark.parametrize("argv", [
    ["--steps", "2", "--width", "32", "--batch", "4", "--microbatches", "4"],
    ["--steps", "2", "--width", "32", "--batch", "4", "--microbatches", "4", "--stages", "2",
     "--devices-per-mesh", "4", "--schedule", "ZeroBubbleH1"],
])
def test_train_mlp(argv, capsys, tmp_path):
  assert _load("train_mlp").main(argv + ["--out", str(tmp_path)]) == 0
  out = capsys.readouterr().out
  assert list(tmp_path.glob("schedule-*.png")) and list(tmp_path.glob("schedule-*.json"))
  assert "largest relative difference from jax.jit" in out
  assert "stage0 on m0" in out


@pytest.mark.slow
def test_train_transformer(capsys, tmp_path):
  argv = ["--steps", "2", "--layers", "2", "--width", "16", "--heads", "2", "--vocab", "16",
          "--seq", "8", "--batch", "2", "--microbatches", "2", "--stages", "2",
          "--devices-per-mesh", "4", "--out", str(tmp_path)]
  assert _load("train_transformer").main(argv) == 0
  out = capsys.readouterr().out
  png, trace = tmp_path / "schedule-1f1b.png", tmp_path / "schedule-1f1b.json"
  assert png.stat().st_size > 0 and trace.stat().st_size > 0
  assert f"schedule picture: {png}" in out and f"Chrome trace:     {trace} (simulated)" in out
  measured = tmp_path / "runtime-1f1b.json"
  assert f"Chrome trace:     {measured} (measured)" in out
  assert '"traceEvents"' in measured.read_text()
  assert "largest relative difference from jax.jit" in out
  # The table has one row per step: step number, then the loss of both runs.
  rows = [line.split() for line in out.splitlines() if line.split()[:1] in (["0"], ["1"])]
  assert len(rows) == 2 and all(len(r) == 5 for r in rows)


@pytest.mark.slow
def test_bert_encoder(capsys):
  argv = ["--steps", "2", "--layers", "2", "--width", "16", "--heads", "2", "--vocab", "16",
          "--seq", "8", "--batch", "2", "--microbatches", "2"]
  assert _load("bert_encoder").main(argv) == 0
  out = capsys.readouterr().out
  assert "largest relative difference from jax.jit" in out
  assert "stage0 on m0, stage1 on m1" in out


@pytest.mark.parametrize("schedule", ["GPipe", "ParallelPipelinesWithWrapAround"])
def test_inference_pipeline(schedule, capsys, tmp_path):
  argv = ["--schedule", schedule, "--layers", "4", "--width", "16", "--heads", "2", "--seq", "4",
          "--batch", "2", "--microbatches", "4", "--repeats", "1", "--out", str(tmp_path)]
  assert _load("inference_pipeline").main(argv) == 0
  out = capsys.readouterr().out
  assert "largest relative difference from jax.jit" in out
  assert list(tmp_path.glob("schedule-inference-*.png"))
  ends = "0: m3, 1: m3, 2: m3, 3: m3" if schedule == "GPipe" else "0: m3, 1: m0, 2: m1, 3: m2"
  assert f"microbatch outputs end on: {ends}" in out
