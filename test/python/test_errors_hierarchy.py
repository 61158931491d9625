"""Every exception class of the package is an `mpmd.errors.MpmdError` and is
reachable from `mpmd.errors`, so `except mpmd.MpmdError` catches whatever mpmd
raises on purpose and one module lists them all."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import mpmd
import mpmd.errors


def _modules() -> list[str]:
  """Every module of the package, `__main__` modules (command lines, which
  run when imported) left out."""
  names = ["mpmd"]
  for info in pkgutil.walk_packages(mpmd.__path__, prefix="mpmd."):
    if info.name.rsplit(".", 1)[-1] != "__main__":
      names.append(info.name)
  return names


def _exception_classes() -> dict[str, type]:
  """`module:qualname` -> class, for every Exception subclass that a module of
  the package defines (found in any module's namespace, so one imported from
  elsewhere in the package is counted under the module that defines it).

  Private classes (a leading `_`) are left out: they are signals a module
  raises and catches itself (`runtime.program._Failed`, `stages._NotSteady`),
  never seen by a caller.
  """
  found: dict[str, type] = {}
  for name in _modules():
    module = importlib.import_module(name)
    for _, obj in inspect.getmembers(module, inspect.isclass):
      if (issubclass(obj, Exception) and obj.__module__.split(".")[0] == "mpmd"
          and not obj.__name__.startswith("_")):
        found[f"{obj.__module__}:{obj.__qualname__}"] = obj
  return found


def test_the_walk_finds_the_known_errors():
  """The walk sees the classes that live (or lived) outside `mpmd/errors.py`,
  so the checks below are not vacuous."""
  names = {cls.__name__ for cls in _exception_classes().values()}
  assert {"MpmdError", "ConfigError", "PartitionError", "ScheduleError", "ScheduleParseError",
          "DeadlockError", "PlanError", "OptError", "LaunchError", "StageError",
          "DistributedError", "FragmentRuntimeError"} <= names


@pytest.mark.parametrize("key", sorted(_exception_classes()))
def test_exception_is_an_mpmd_error_reachable_from_mpmd_errors(key):
  cls = _exception_classes()[key]
  assert issubclass(cls, mpmd.errors.MpmdError), (
      f"{key} does not derive from mpmd.errors.MpmdError: add it to its bases")
  assert getattr(mpmd.errors, cls.__name__, None) is cls, (
      f"{key} is not reachable as mpmd.errors.{cls.__name__}: define it in mpmd/errors.py "
      "and import it from there where it is raised")


def test_errors_keep_their_builtin_bases():
  """Code written as `except ValueError` keeps catching them."""
  for cls in (mpmd.errors.ScheduleError, mpmd.errors.ScheduleParseError,
              mpmd.errors.DeadlockError, mpmd.errors.PlanError, mpmd.errors.LaunchError,
              mpmd.errors.StageError, mpmd.errors.ConfigError, mpmd.errors.PartitionError):
    assert issubclass(cls, ValueError), cls
  assert issubclass(mpmd.errors.DistributedError, RuntimeError)


def test_old_import_paths_still_work():
  assert mpmd.schedule.ScheduleError is mpmd.errors.ScheduleError
  assert mpmd.schedule.DeadlockError is mpmd.errors.DeadlockError
  assert importlib.import_module("mpmd.schedule.core").ScheduleParseError is \
      mpmd.errors.ScheduleParseError
  assert importlib.import_module("mpmd.plan.errors").PlanError is mpmd.PlanError
  assert importlib.import_module("mpmd.opt").OptError is mpmd.errors.OptError
  assert importlib.import_module("mpmd.launch").LaunchError is \
      mpmd.errors.LaunchError
