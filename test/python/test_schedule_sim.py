"""Schedule simulator figures, pictures, traces and the command line."""

import json
import subprocess
import sys

import pytest

from mpmd import schedule as sch
from mpmd.schedule import CostModel, Schedule, Unit

UNIT_FB = CostModel(forward=1, backward=1)


@pytest.mark.parametrize("P", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("M", [1, 2, 3, 4, 8])
def test_gpipe_and_1f1b_bubble(P, M):
  for build in (sch.gpipe, sch.one_f_one_b):
    for cost in (UNIT_FB, CostModel()):
      r = sch.simulate(build(P, M), cost)
      assert r.bubble_fraction == pytest.approx((P - 1) / (M + P - 1))
      assert r.bubble_fractions == pytest.approx([(P - 1) / (M + P - 1)] * P)
  assert sch.simulate(sch.gpipe(P, M), UNIT_FB).makespan == 2 * (M + P - 1)


def test_peak_activations():
  assert sch.simulate(sch.gpipe(4, 8)).peak_activations == (8, 8, 8, 8)
  assert sch.simulate(sch.one_f_one_b(4, 8)).peak_activations == (4, 3, 2, 1)
  assert sch.simulate(sch.one_f_one_b(4, 2)).peak_activations[0] == 2
  assert sch.simulate(sch.eager_1f1b(4, 8)).peak_activations == (7, 5, 3, 1)
  zb = sch.zero_bubble_h1(4, 8)
  assert sch.simulate(zb).peak_activations == (4, 3, 2, 1)
  # the weight gradient still needs the stash: ZB-H1 keeps P per mesh
  r = sch.simulate(zb, activation_release="W")
  assert r.peak_activations == (4, 4, 4, 4) and r.activation_release == "W"
  wrap = sch.simulate(sch.parallel_pipelines_with_wrap_around(4, 8))
  assert wrap.peak_activations == (0, 0, 0, 0)


def test_zero_bubble_h1_has_a_third_of_1f1b_bubble():
  # F = B = W = 1: 1F1B (full backward B+W = 2) idles 3(P-1) per mesh, ZB-H1
  # idles P-1: a third of the bubble time.
  for P, M in ((2, 4), (4, 8), (4, 16), (6, 12)):
    one = sch.simulate(sch.one_f_one_b(P, M))
    zb = sch.simulate(sch.zero_bubble_h1(P, M))
    assert one.idle == pytest.approx([3 * (P - 1)] * P)
    assert zb.idle == pytest.approx([P - 1] * P)
    assert zb.makespan == 3 * M + P - 1
    assert zb.bubble_fraction == pytest.approx((P - 1) / (3 * M + P - 1))
    assert 1 / 3 <= zb.bubble_fraction / one.bubble_fraction < 0.45


def test_interleaved_bubble_by_hand():
  # P=2, V=2, M=2, F=B=1. Mesh 0 (stages 0, 2) warms up with all 4 forwards;
  # mesh 1 (stages 1, 3) with 2, then (F0.s3 B0.s3) (F1.s3 B1.s3), then
  # B0.s1 B1.s1. Hand simulation (start times):
  s = sch.interleaved_1f1b(2, 2, 2)
  r = sch.simulate(s, UNIT_FB)
  expected = {
      "F0.s0": 0, "F1.s0": 1, "F0.s2": 2, "F1.s2": 3, "B0.s2": 5, "B1.s2": 7,
      "B0.s0": 8, "B1.s0": 9,
      "F0.s1": 1, "F1.s1": 2, "F0.s3": 3, "B0.s3": 4, "F1.s3": 5, "B1.s3": 6,
      "B0.s1": 7, "B1.s1": 8}
  assert {str(u): t for u, t in r.start.items()} == expected
  assert r.makespan == 10 and r.idle == (2, 2)
  # = (P-1) / (V*M + P-1): each fill and drain costs (P-1) chunk-times.
  assert r.bubble_fraction == pytest.approx(1 / 5)


@pytest.mark.parametrize("P, M, V", [(4, 8, 2), (2, 4, 3), (3, 6, 2),
                                     (4, 4, 1), (4, 12, 3)])
def test_interleaved_bubble_formula(P, M, V):
  for cost in (UNIT_FB, CostModel()):
    r = sch.simulate(sch.interleaved_1f1b(P, M, V), cost)
    assert r.bubble_fraction == pytest.approx((P - 1) / (V * M + P - 1))


def test_latency():
  # GPipe, F=B=1: the first forward and the last backward each cross P-1
  # links: makespan 2(M+P-1) + 2(P-1)L.
  for L in (0.5, 2.0):
    r = sch.simulate(sch.gpipe(4, 6), CostModel(1, 1, latency=L))
    assert r.makespan == pytest.approx(2 * (6 + 3) + 2 * 3 * L)
  # latency only between meshes: at the turn of a V (stages 1 and 2 both on
  # mesh 1) the activation stays local.
  s = Schedule.from_text("m0: F0.s0 F0.s3\nm1: F0.s1 F0.s2")
  assert s.forward_only and s.placement == "v"
  r = sch.simulate(s, CostModel(latency=1.0))
  assert {str(u): (r.start[u], r.end[u]) for u in s.units()} == {
      "F0.s0": (0, 1), "F0.s3": (5, 6), "F0.s1": (2, 3), "F0.s2": (3, 4)}


def test_wrap_around_has_no_bubble():
  r = sch.simulate(sch.parallel_pipelines_with_wrap_around(4, 8))
  assert r.makespan == 8 and r.bubble_fraction == 0


def test_results_api():
  r = sch.simulate(sch.one_f_one_b(2, 2))
  assert r.timeline(1) == [(Unit("F", 0, 1), 1.0, 2.0),
                           (Unit("B", 0, 1), 2.0, 4.0),
                           (Unit("F", 1, 1), 4.0, 5.0),
                           (Unit("B", 1, 1), 5.0, 7.0)]
  assert r.busy == (6.0, 6.0) and r.makespan == 9.0
  text = r.summary()
  assert "bubble fraction: 33.3%" in text and "makespan: 9" in text
  assert "peak live activations per mesh: 2 1" in text
  with pytest.raises(sch.ScheduleError, match="latency must be >= 0"):
    CostModel(latency=-1)
  with pytest.raises(sch.ScheduleError, match="activation_release"):
    sch.simulate(sch.gpipe(2, 2), activation_release="X")


def test_cost_model_durations():
  split, full = sch.zero_bubble_h1(2, 2), sch.gpipe(2, 2)
  c = CostModel()
  assert c.duration(Unit("B", 0, 0), full) == 2.0
  assert c.duration(Unit("B", 0, 0), split) == 1.0
  assert c.duration(Unit("W", 0, 0), split) == 1.0
  assert CostModel(backward=3).duration(Unit("B", 0, 0), split) == 3.0


def test_render_png(tmp_path):
  s = sch.interleaved_1f1b(4, 8, 2)
  path = sch.render_png(s, sch.simulate(s), tmp_path / "il.png")
  data = open(path, "rb").read()
  assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
  sch.render_png(sch.zero_bubble_h1(2, 4), None, tmp_path / "zb.png")
  assert (tmp_path / "zb.png").stat().st_size > 5_000


def test_chrome_trace(tmp_path):
  s = sch.zero_bubble_h1(2, 2)
  r = sch.simulate(s)
  trace = sch.chrome_trace(s, r)
  xs = [e for e in trace["traceEvents"] if e["ph"] == "X"]
  assert len(xs) == len(list(s.units())) == 12
  threads = {e["tid"]: e["args"]["name"] for e in trace["traceEvents"]
             if e["name"] == "thread_name"}
  assert threads == {0: "mesh 0", 1: "mesh 1"}
  first = next(e for e in xs if e["name"] == "F0.s1")
  assert (first["tid"], first["ts"], first["dur"]) == (1, 1000.0, 1000.0)
  assert first["args"] == {"kind": "F", "microbatch": 0, "stage": 1,
                           "mesh": 1}
  path = sch.write_chrome_trace(s, r, tmp_path / "t.json")
  assert json.load(open(path))["otherData"]["bubble_fraction"] == \
      pytest.approx(r.bubble_fraction)


def test_cli(capsys, tmp_path):
  from mpmd.schedule.cli import main
  png, trace = tmp_path / "s.png", tmp_path / "s.json"
  assert main(["zerobubbleh1", "--meshes", "4", "--microbatches", "8",
               "-o", str(png), "--trace", str(trace)]) == 0
  out = capsys.readouterr().out
  assert "m3: F0 B0 F1 B1 F2 B2 F3 B3 W0 F4" in out
  assert "bubble fraction: 11.1%" in out
  assert "peak live activations per mesh: 4 3 2 1" in out
  assert png.stat().st_size > 0 and json.load(open(trace))["traceEvents"]
  assert main(["Interleaved1F1B", "-p", "2", "-m", "4", "-v", "2",
               "--text"]) == 0
  assert capsys.readouterr().out.startswith(
      "@name Interleaved1F1B\nm0: F0 F1 F0.s2 F1.s2")
  assert main(["NoSuchSchedule", "-p", "2", "-m", "2"]) == 2
  err = capsys.readouterr().err
  assert "unknown schedule 'NoSuchSchedule'" in err and "DualPipeV" in err
  f = tmp_path / "mine.txt"
  f.write_text("m0: F0 B0 F1 B1\nm1: B0 F0 F1 B1\n")
  assert main([str(f)]) == 2
  assert "deadlocks" in capsys.readouterr().err
  f.write_text("m0: F0 F1 B0 B1\nm1: F0 B0 F1 B1\n")
  assert main([str(f), "--latency", "0.5"]) == 0
  assert "latency=0.5" in capsys.readouterr().out
  assert main(["--list"]) == 0
  assert "ParallelPipelinesWithWrapAround" in capsys.readouterr().out


def test_cli_subprocess():
  out = subprocess.run(
      [sys.executable, "-m", "mpmd.schedule", "1F1B", "--meshes", "2",
       "--microbatches", "3"], capture_output=True, text=True, check=True)
  assert "m1: F0 B0 F1 B1 F2 B2" in out.stdout
  assert "bubble fraction: 25.0%" in out.stdout
