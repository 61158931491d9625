"""Every example runs (at a tiny size) so that none can rot."""

from __future__ import annotations

import importlib.util
import pathlib

import pytest

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"


def _load(name: str):
  spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
  module = importlib.util.module_from_spec(spec)
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
