"""Every benchmark script runs (at its tiniest size, into a temporary file).

No timing is asserted: only that the scripts run, write their own section of
the results file with the command that made it, and leave the others alone.
"""

from __future__ import annotations

import importlib.util
import os
import pathlib
import shutil
import sys

import pytest

BENCHMARKS = pathlib.Path(__file__).resolve().parents[2] / "benchmarks"


def _load(name: str):
  sys.path.insert(0, str(BENCHMARKS))
  try:
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
  finally:
    sys.path.remove(str(BENCHMARKS))
  return module


def _section(text: str, title: str) -> str:
  start = text.index(f"## {title}\n")
  end = text.find("\n## ", start + 1)
  return text[start:end if end >= 0 else len(text)]


def test_write_section_replaces_only_its_own(tmp_path):
  common = _load("_common")
  path = tmp_path / "RESULTS.md"
  common.write_section("b", "figures of b", path)
  text = path.read_text()
  assert text.startswith("# Benchmark results")
  for key, title in common.SECTIONS.items():
    expected = "figures of b" if key == "b" else f"Written by {common.WRITERS[key]}"
    assert expected in _section(text, title), key
  common.write_section("d", "first d", path)
  common.write_section("d", "second d\n\n## not a heading of ours? it is: kept inside d", path)
  text = path.read_text()
  assert "first d" not in text and "second d" in _section(text, common.SECTIONS["d"])
  assert "figures of b" in _section(text, common.SECTIONS["b"])
  assert [line for line in text.splitlines() if line.startswith("## (")] == [
      f"## {title}" for title in common.SECTIONS.values()]
  with pytest.raises(ValueError, match="unknown results section 'z'"):
    common.write_section("z", "x", path)


def test_markdown_table_aligns_columns():
  common = _load("_common")
  table = common.markdown_table(["name", "ms"], [["a", "1.5"], ["longer", "10.25"]])
  lines = table.splitlines()
  assert lines[0] == "| name   |    ms |"
  assert lines[1] == "|--------|------:|"
  assert lines[3] == "| longer | 10.25 |"


@pytest.mark.slow
def test_compile_time_smallest(tmp_path, capsys):
  out = tmp_path / "RESULTS.md"
  argv = ["--microbatches", "2", "--layers", "4", "--fixed-layers", "4",
          "--fixed-microbatches", "2", "--width", "8", "--batch", "2", "--no-warmup",
          "--output", str(out)]
  assert _load("compile_time").main(argv) == 0
  section = _section(out.read_text(), "(a) Compile time")
  assert "Command: `python benchmarks/compile_time.py --microbatches 2 " in section
  rows = [line for line in section.splitlines() if line.startswith("|      4 |")]
  assert len(rows) == 2  # the same size in both tables
  cells = [c.strip() for c in rows[0].strip("|").split("|")]
  programs, calls = (int(x) for x in cells[6].split("/"))
  assert 0 < programs <= calls
  assert float(cells[-1].rstrip("x")) > 0
  assert "Written by benchmarks/runtime.py" in _section(out.read_text(),
                                                        "(b) Step time vs jax.jit")
  assert "wrote section (a)" in capsys.readouterr().out


@pytest.mark.parametrize("per_pass", ["no", "yes"])
def test_pass_pipeline_smallest(tmp_path, per_pass):
  if per_pass == "yes" and shutil.which("mpmd-opt") is None:
    pytest.skip("mpmd-opt is not on PATH")
  out = tmp_path / "RESULTS.md"
  argv = ["--sizes", "4", "8", "--repeats", "1", "--per-pass", per_pass, "--output", str(out)]
  assert _load("pass_pipeline").main(argv) == 0
  section = _section(out.read_text(), "(d) C++ pass-pipeline time")
  assert "Command: `python benchmarks/pass_pipeline.py --sizes 4 8 " in section
  for family in ("chain", "chain+grad", "microbatched", "microbatched 1F1B"):
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in section.splitlines()
            if line.startswith("| ")]
    rows = [row for row in rows if row[0] == family and len(row) == 9]  # not the summary
    assert len(rows) == 2, family
    calls = [int(row[2]) for row in rows]
    if family.startswith("chain"):
      # Consecutive labels on one mesh run as one call (one forward and one
      # backward per mesh), however many there are.
      assert calls[1] == calls[0] > 0, family
    else:
      assert calls[1] > calls[0] > 0, family
  assert ("MergeInferredFragmentsPass" in section) == (per_pass == "yes")


def test_pass_pipeline_rejects_bad_sizes(tmp_path):
  with pytest.raises(SystemExit):
    _load("pass_pipeline").main(["--sizes", "6", "--output", str(tmp_path / "r.md")])


@pytest.mark.multiprocess
@pytest.mark.slow
def test_multiprocess_smallest(tmp_path):
  """Runs in this process and launches 2 processes x 4 devices itself."""
  out = tmp_path / "RESULTS.md"
  argv = ["--quick", "--steps", "1", "--microbatches", "2", "--batch", "8", "--width", "16",
          "--output", str(out)]
  assert _load("multiprocess").main(argv) == 0
  section = _section(out.read_text(), "(f) Several processes: step time and transfers")
  assert "Command: `python benchmarks/multiprocess.py --quick " in section
  rows = [[c.strip() for c in line.strip("|").split("|")] for line in section.splitlines()
          if line.startswith("| mpmd") or line.startswith("| jax.jit") or "KiB" in line]
  assert len(rows) == 5 + 2  # 5 step-time rows, 2 transfer sizes
  assert all(float(row[2]) > 0 for row in rows[:5])
  assert "Written by benchmarks/runtime.py" in _section(out.read_text(),
                                                        "(e) Bubble fraction: measured vs simulated")


@pytest.mark.multiprocess
@pytest.mark.slow
def test_pinned_pipeline_smallest(tmp_path):
  """Pinned jax.jit runs and two 2-process pipelines (pulls, collectives), tiny."""
  if len(os.sched_getaffinity(0)) < 2:
    pytest.skip("needs 2 CPUs")
  out = tmp_path / "RESULTS.md"
  assert _load("pinned_pipeline").main(["--quick", "--output", str(out)]) == 0
  section = _section(out.read_text(),
                     "(h) Pipeline speed-up: two processes pinned to their own cores")
  assert "Command: `python benchmarks/pinned_pipeline.py --quick " in section
  runs = [line for line in section.splitlines()
          if line.startswith("| mpmd 1F1B") or line.startswith("| jax.jit")]
  assert len(runs) == 4, section
  assert "transfers: pulls (default)" in section and "transfers: collectives" in section
  assert all(float(r.strip("|").split("|")[1]) > 0 for r in runs)


@pytest.mark.slow
def test_gpu_smoke_with_all_meshes_on_one_device(capsys):
  """gpu_smoke's single-GPU path (meshes sharing one device), on the CPU."""
  assert _load("gpu_smoke").main(["--size", "quick", "--one-device", "--steps", "1",
                                  "--warmup", "1"]) == 0
  out = capsys.readouterr().out
  assert "MLP, 2 meshes x 1 (one device, shared)" in out
  assert "transformer, 4 meshes x 1" in out and "all results match jax.jit" in out


def test_gpt2_equal_setting_gives_jax_jit_one_device():
  """Equal arithmetic: `gpt2.py`'s `jax.jit` steps (the whole batch, and the
  same microbatches in a `lax.scan`) hold the state on ONE device. (Until
  2026-12-02 they ran on a mesh of the four meshes' devices with the state
  replicated: the step four times over, which made section (j)'s ratios look
  2-4x better than they were.) Both forms take the same first step."""
  import argparse

  import jax
  import numpy as np
  gpt2 = _load("gpt2")
  run = argparse.Namespace(model="small", layers=4, width=8, heads=2, vocab=16, seq=4,
                           batch=8, microbatches=8, schedule="1F1B", steps=1)
  losses = {}
  for compiler in ("jax", "jax-same"):
    side = gpt2.Side(run, "equal", compiler)
    devices = {d for leaf in jax.tree.leaves(side.state) for d in leaf.devices()}
    assert len(devices) == 1, (compiler, devices)
    losses[compiler] = float(side.loss)
  np.testing.assert_allclose(losses["jax-same"], losses["jax"], rtol=1e-5)


def test_gpt2_user_setting_sends_its_tied_embeddings_partial_gradient_and_equals_jax_jit():
  """The user setting (4 meshes x 2 devices, each microbatch split over a
  mesh) of a GPT-2-shaped model whose head is its embedding: the last mesh
  accumulates the embedding's gradient as unreduced partial sums and sends
  it to the first mesh. One step equals `jax.jit`'s. (Until the partition
  stage decided the layouts, XLA gave that result as an unreduced
  `GSPMDSharding`, the transfer was planned to a replicated layout, and the
  first call failed in `jax.device_put`.)"""
  import argparse

  import jax
  import numpy as np
  gpt2 = _load("gpt2")
  run = argparse.Namespace(model="gpt2", layers=4, width=8, heads=2, vocab=16, seq=4,
                           batch=16, microbatches=8, schedule="1F1B", steps=1)
  sides = {c: gpt2.Side(run, "user", c) for c in ("mpmd", "jax")}
  np.testing.assert_allclose(float(sides["mpmd"].loss), float(sides["jax"].loss), rtol=1e-5)
  got, want = ([np.asarray(x, np.float64) for x in jax.tree.leaves(sides[c].state)
                if jax.numpy.issubdtype(x.dtype, jax.numpy.floating)] for c in ("mpmd", "jax"))
  diff = np.sqrt(sum(np.sum((a - b) ** 2) for a, b in zip(got, want)))
  assert diff <= 1e-5 * np.sqrt(sum(np.sum(b ** 2) for b in want)), diff


@pytest.mark.multiprocess
@pytest.mark.slow
def test_gpu_check_quick_on_cpu(capsys):
  """gpu_check.py's whole path on the CPU at its tiniest: case (a) with the 4
  meshes sharing one CPU device against jax.jit, then the 2-process run through
  `python -m mpmd.launch`, compared with (a)'s jax.jit; the table is printed.
  `--option` reaches every mpmd step of both cases (here the weight gradients
  batched over the microbatches, which must still match jax.jit)."""
  argv = ["--quick", "--cases", "small,mp", "--jit-sides", "same", "--steps", "1",
          "--loop-steps", "1", "--check-step", "2", "--mp-steps", "3",
          "--option", "mpmd_batch_weight_gradients=true"]
  assert _load("gpu_check").main(argv) == 0
  out = capsys.readouterr().out
  assert "all results match jax.jit" in out
  assert "- mpmd partitioning options: mpmd_batch_weight_gradients=true" in out
  rows = [[c.strip() for c in line.strip("|").split("|")] for line in out.splitlines()
          if line.startswith("| small, ")]
  assert [row[0] for row in rows] == ["small, 4 meshes sharing the device",
                                      "small, 2 processes sharing the device"], out
  assert all(row[-1] == "yes" for row in rows), rows
  assert all(float(row[2]) > 0 and int(row[12]) > 0 for row in rows), rows


@pytest.mark.slow
def test_issue_threads_smallest(tmp_path):
  """benchmarks/issue_threads.py at its tiniest: the program's steps from the
  calling thread, one worker thread and one thread per mesh give
  `Program.run`'s results bit for bit (it checks), and section (m) has a row
  per side."""
  out = tmp_path / "RESULTS.md"
  assert _load("issue_threads").main(["--quick", "--output", str(out)]) == 0
  section = _section(out.read_text(), "(m) One issuing thread per mesh")
  assert "Command: `python benchmarks/issue_threads.py --quick " in section
  rows = [line for line in section.splitlines() if line.startswith("| ")][1:]  # (no header)
  assert [r.split("|")[1].strip() for r in rows] == [
      "Program.run (one thread, program order)", "the steps alone, calling thread",
      "the steps alone, one worker thread", "one worker thread per mesh",
      "jax.jit, whole step on one device"], section
  assert all(float(r.split("|")[2]) >= float(r.split("|")[3]) > 0 for r in rows), section


def test_dispatch_cost_prints_a_row_the_knob_reads(capsys):
  """dispatch_cost.py measures this platform's row and prints it as the
  value `MPMD_DISPATCH_COST` takes (its --compare run is not part of the
  suite: three small-model compiles)."""
  from mpmd.partition import dispatch_cost  # noqa: PLC0415
  assert _load("dispatch_cost").main(["--repeat", "1"]) == 0
  out = capsys.readouterr().out
  value = out.split("MPMD_DISPATCH_COST=")[1].split(")")[0]
  assert dispatch_cost.parse(value).call_us > 0
  assert "listed row: " + str(dispatch_cost.MEASURED["cpu"]) in out
