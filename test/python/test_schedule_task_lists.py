"""JaxPP-style schedule objects: task names, the tutorial's task lists, and
conversion to `Schedule`."""

import pytest

from mpmd import schedule as sch
from mpmd.schedule import task_lists
from mpmd.schedule.task_lists import FusedTask, Task, TaskType


def names(row):
  return [str(e) for e in row]


def grid(row):
  return " ".join("." if e is None else str(e) for e in row)


def test_task_names():
  assert str(Task(TaskType.FWD, 2, 0)) == "fwd_2__0"
  assert str(Task("bwd", 3, 1)) == "bwd_3__1"
  assert str(Task("bwdA", 0, 5)) == "bwdA_0__5"
  assert str(Task(TaskType.BWD_W, 7, 12)) == "bwdW_7__12"
  assert Task.parse("bwdA_3__1") == Task(TaskType.BWD_I, 3, 1)
  assert str(FusedTask(Task("fwd", 3, 0), Task("bwd", 3, 0))) == \
      "FusedTask(fwd_3__0, bwd_3__0)"
  f = FusedTask(Task("fwd", 0, 3), FusedTask(Task("bwdA", 3, 1),
                                             Task("bwdW", 3, 1)))
  assert str(f) == "FusedTask(fwd_0__3, bwdA_3__1, bwdW_3__1)"
  assert f.latency == 3 and len(f) == 3
  assert Task("bwd", 0, 0).latency == 2
  with pytest.raises(sch.ScheduleError, match="unknown task kind"):
    Task("sideways", 0, 0)
  with pytest.raises(sch.ScheduleError, match="bad task name"):
    Task.parse("fwd_1_2")


def test_tutorial_interleaved_4_stages_4_ranks():
  # jaxpp_tutorial.txt, In [36] and In [37].
  tasks = task_lists.Interleaved1F1B(num_stages=4, mpmd_dim=4).tasks(4)
  assert names(tasks[2]) == [
      "fwd_2__0", "fwd_2__1", "fwd_2__2", "bwd_2__0", "fwd_2__3", "bwd_2__1",
      "bwd_2__2", "bwd_2__3"]
  assert names(tasks[3]) == [
      "FusedTask(fwd_3__0, bwd_3__0)", "FusedTask(fwd_3__1, bwd_3__1)",
      "FusedTask(fwd_3__2, bwd_3__2)", "FusedTask(fwd_3__3, bwd_3__3)"]


def test_tutorial_interleaved_8_stages_4_ranks():
  # jaxpp_tutorial.txt, In [40] and In [41].
  tasks = task_lists.Interleaved1F1B(num_stages=8, mpmd_dim=4).tasks(4)
  assert names(tasks[0]) == [
      "fwd_0__0", "fwd_0__1", "fwd_0__2", "fwd_0__3", "fwd_4__0", "fwd_4__1",
      "fwd_4__2", "fwd_4__3", "bwd_4__0", "bwd_4__1", "bwd_4__2", "bwd_4__3",
      "bwd_0__0", "bwd_0__1", "bwd_0__2", "bwd_0__3"]
  assert names(tasks[3]) == [
      "fwd_3__0", "fwd_3__1", "fwd_3__2", "fwd_3__3",
      "FusedTask(fwd_7__0, bwd_7__0)", "FusedTask(fwd_7__1, bwd_7__1)",
      "FusedTask(fwd_7__2, bwd_7__2)", "FusedTask(fwd_7__3, bwd_7__3)",
      "bwd_3__0", "bwd_3__1", "bwd_3__2", "bwd_3__3"]


def test_facts_samples():
  # JaxPP's documented "Sample tasks() output" (f/b abbreviate fwd_s__/bwd_s__).
  std = task_lists.Std1F1B(3).tasks(4)
  assert grid(std[0]) == ("fwd_0__0 fwd_0__1 fwd_0__2 . . bwd_0__0 fwd_0__3 "
                          "bwd_0__1 . bwd_0__2 . bwd_0__3")
  assert grid(std[2]).startswith(". . fwd_2__0 bwd_2__0 fwd_2__1 bwd_2__1 "
                                 "fwd_2__2 bwd_2__2 fwd_2__3 bwd_2__3")
  assert all(len(r) == 2 * (4 + 3 - 1) for r in std)
  eager = task_lists.Eager1F1B(3).tasks(4)
  assert grid(eager[0]) == ("fwd_0__0 fwd_0__1 fwd_0__2 fwd_0__3 . bwd_0__0 . "
                            "bwd_0__1 . bwd_0__2 . bwd_0__3")
  zb = task_lists.ZeroBubble(3).tasks(4)
  assert grid(zb[1]) == (". fwd_1__0 fwd_1__1 . bwdA_1__0 fwd_1__2 bwdA_1__1 "
                         "bwdW_1__0 fwd_1__3 bwdA_1__2 bwdW_1__1 bwdA_1__3 "
                         "bwdW_1__2 bwdW_1__3")
  il = task_lists.Interleaved1F1B(4, 2).tasks(4)
  assert names(il[1]) == [
      "fwd_1__0", "fwd_1__1", "FusedTask(fwd_3__0, bwd_3__0)",
      "FusedTask(fwd_3__1, bwd_3__1)", "fwd_1__2", "bwd_1__0", "fwd_1__3",
      "bwd_1__1", "FusedTask(fwd_3__2, bwd_3__2)",
      "FusedTask(fwd_3__3, bwd_3__3)", "bwd_1__2", "bwd_1__3"]
  dpv = task_lists.DualPipeV(4, 2).tasks(4)
  assert names(dpv[0])[:9] == [
      "fwd_0__0", "fwd_0__1", "fwd_0__2", "fwd_3__0", "bwdA_3__0", "bwdW_3__0",
      "fwd_3__1", "FusedTask(fwd_0__3, bwdA_3__1, bwdW_3__1)",
      "FusedTask(fwd_3__2, bwdA_0__0, bwdW_0__0)"]


def test_gpipe_grid():
  g = task_lists.GPipe(2).tasks(2)
  assert grid(g[0]) == "fwd_0__0 fwd_0__1 . . bwd_0__0 bwd_0__1"
  assert grid(g[1]) == ". fwd_1__0 fwd_1__1 bwd_1__0 bwd_1__1 ."


def test_dual_pipe_v_jaxpp_variant():
  # Derived by hand from JaxPP's phases (P=2, M=4, rank 1 = stages 1 and 2):
  # 1: -; 2: 2 x (fwd 1, fwd 2); 3: -; 4: M-2P+r+1 = 2 iterations of
  # (FusedTask(fwd 1, B 2), FusedTask(fwd 2, B 1)), the first pair unfused
  # on the last rank; 5: -; 6: 2 iterations of (B 2, B 1), chunk 1 (stage 2)
  # split from i = (r+1)//2 = 1 on (odd rank); 7: -; 8: the missing bwdW.
  t = task_lists.DualPipeV(4, 2).tasks(4)[1]
  assert names(t) == [
      "fwd_1__0", "fwd_2__0", "fwd_1__1", "fwd_2__1", "fwd_1__2",
      "FusedTask(bwdA_2__0, bwdW_2__0)",
      "FusedTask(fwd_2__2, bwdA_1__0, bwdW_1__0)",
      "FusedTask(fwd_1__3, bwdA_2__1, bwdW_2__1)",
      "FusedTask(fwd_2__3, bwdA_1__1, bwdW_1__1)",
      "FusedTask(bwdA_2__2, bwdW_2__2)", "FusedTask(bwdA_1__2, bwdW_1__2)",
      "bwdA_2__3", "FusedTask(bwdA_1__3, bwdW_1__3)", "bwdW_2__3"]
  s = task_lists.DualPipeV(8, 4).to_schedule(8)
  assert s.stage_to_mesh == (0, 1, 2, 3, 3, 2, 1, 0) and s.split_backward
  s.validate()


def test_schedule_validation_errors():
  with pytest.raises(sch.ScheduleError, match="not a multiple of mpmd_dim"):
    task_lists.Interleaved1F1B(6, 4)
  with pytest.raises(sch.ScheduleError, match="num_stages == 2 \\* mpmd_dim"):
    task_lists.DualPipeV(6, 2)
  with pytest.raises(sch.ScheduleError, match="at least as many microbatches"):
    task_lists.ZeroBubble(4).tasks(3)
  with pytest.raises(sch.ScheduleError, match="at least as many microbatches"):
    task_lists.DualPipeV(4, 2).tasks(3)
  with pytest.raises(sch.ScheduleError, match="num_stages"):
    task_lists.Std1F1B(0)


def test_three_forms_reduce_to_the_same_schedule():
  text = """
m0: F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7
m1: F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 B6 B7
m2: F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 B7
m3: F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7
"""
  by_name = sch.get_schedule("1F1B")(4, 8)
  by_tasks = sch.from_tasks(task_lists.Std1F1B(4).tasks(8))
  by_text = sch.Schedule.from_text(text)
  assert by_name == by_tasks == by_text


@pytest.mark.parametrize("P", [1, 2, 3, 4])
@pytest.mark.parametrize("M", [1, 2, 4, 5, 8])
def test_jaxpp_classes_match_builtins(P, M):
  assert task_lists.Std1F1B(P).to_schedule(M) == sch.one_f_one_b(P, M)
  assert task_lists.GPipe(P).to_schedule(M) == sch.gpipe(P, M)
  assert task_lists.Eager1F1B(P).to_schedule(M) == sch.eager_1f1b(P, M)
  if M >= P:
    assert task_lists.ZeroBubble(P).to_schedule(M) == sch.zero_bubble_h1(P, M)
  for V in (1, 2, 3):
    if M % max(1, M // P):
      continue
    assert task_lists.Interleaved1F1B(P * V, P).to_schedule(M) == \
        sch.interleaved_1f1b(P, M, V)
    assert task_lists.KimiK2(P * V, P).to_schedule(M) == sch.kimi_k2(P, M, V)


def test_from_tasks_details():
  # FusedTask = tasks back to back; None dropped; names accepted.
  s = sch.from_tasks([["fwd_0__0", None, FusedTask(Task("fwd", 0, 1),
                                                   Task("bwd", 0, 0)),
                       "bwd_0__1"]])
  assert [str(u) for u in s.order(0)] == ["F0.s0", "F1.s0", "B0.s0", "B1.s0"]
  # a full bwd in a split schedule = B then W
  z = sch.from_tasks([["fwd_0__0", "bwd_0__0", "fwd_0__1", "bwdA_0__1",
                       "bwdW_0__1"]])
  assert z.split_backward
  assert [str(u) for u in z.order(0)] == [
      "F0.s0", "B0.s0", "W0.s0", "F1.s0", "B1.s0", "W1.s0"]
  assert sch.from_tasks(sch.to_tasks(z)) == z
  with pytest.raises(sch.ScheduleError, match="stage 0 has tasks on rank 0 "
                     "and rank 1"):
    sch.from_tasks([["fwd_0__0"], ["bwd_0__0"]])
  with pytest.raises(sch.ScheduleError, match="rank 0 entry 1: expected a "
                     "Task, FusedTask or None"):
    sch.from_tasks([["fwd_0__0", 3]])
  with pytest.raises(sch.ScheduleError, match="missing 1 unit: B1.s1"):
    sch.from_tasks([["fwd_0__0", "fwd_0__1", "bwd_0__0", "bwd_0__1"],
                    ["fwd_1__0", "bwd_1__0", "fwd_1__1"]])


def test_fuse_steady_state():
  t = task_lists.Interleaved1F1B(4, 2, fuse_steady_state=True).tasks(4)
  assert names(t[1])[4:6] == ["FusedTask(fwd_1__2, bwd_1__0)",
                              "FusedTask(fwd_1__3, bwd_1__1)"]
  assert task_lists.Interleaved1F1B(4, 2, True).to_schedule(4) == \
      sch.interleaved_1f1b(2, 4, 2)
