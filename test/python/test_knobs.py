"""The one table of `MPMD_*` environment variables (`mpmd.knobs`): the page
generated from it is up to date, no module of `mpmd/` reads such a variable
but through it or spells its name again, each variable reads as it did
before the table, and a malformed value is an error that names it."""

from __future__ import annotations

import ast
import pathlib
import re

import pytest

from mpmd import knobs

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "mpmd"
PAGE = ROOT / "docs" / "environment.md"


def _sources():
  for path in sorted(PACKAGE.rglob("*.py")):
    if path.name != "knobs.py":
      yield path


def test_docs_environment_md_is_generated_from_the_table():
  assert PAGE.read_text() == knobs.markdown(), (
      "docs/environment.md is out of date: run `python -m mpmd.knobs_doc`")
  assert PAGE.read_text().startswith("<!-- generated")


def test_rows_are_well_formed():
  assert len(knobs.KNOBS) >= 25
  for name, row in knobs.KNOBS.items():
    assert name == row.name and name.startswith("MPMD_")
    assert getattr(knobs, name) == name, f"knobs.{name} is the constant code names it by"
    assert row.kind in knobs.KINDS
    assert row.meaning.strip() and row.set_by.strip() and row.read_by.strip()
    if row.kind == "flag":
      assert row.default in (True, False, None)
      assert set(row.true_values).isdisjoint(row.false_values)
    elif row.kind == "int":
      assert row.default is None or isinstance(row.default, int)
    elif row.kind == "float":
      assert isinstance(row.default, float)
    else:
      assert row.default is None or isinstance(row.default, str)
    assert not row.choices or row.default in row.choices
  # Every constant of the module spelled MPMD_* is a row.
  constants = {k for k, v in vars(knobs).items() if k.startswith("MPMD_") and isinstance(v, str)}
  assert constants == set(knobs.KNOBS)


def test_knobs_imports_only_the_errors_of_mpmd():
  """Any module may import knobs: it imports only mpmd.errors, which imports
  nothing of mpmd."""
  tree = ast.parse((PACKAGE / "knobs.py").read_text())
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      assert not any(a.name.split(".")[0] == "mpmd" for a in node.names)
    elif isinstance(node, ast.ImportFrom):
      module = node.module or ""
      assert node.level == 0 and (module.split(".")[0] != "mpmd" or module == "mpmd.errors")


def _is_os_environ(node: ast.AST) -> bool:
  return (isinstance(node, ast.Attribute) and node.attr == "environ"
          and isinstance(node.value, ast.Name) and node.value.id == "os")


def _environment_reads(tree: ast.AST):
  """(line, key node) of each os.environ.get / os.getenv / os.environ[...] read."""
  for node in ast.walk(tree):
    if isinstance(node, ast.Call) and node.args:
      f = node.func
      if ((isinstance(f, ast.Attribute) and f.attr in ("get", "pop", "setdefault")
           and _is_os_environ(f.value)) or
          (isinstance(f, ast.Attribute) and f.attr == "getenv" and
           isinstance(f.value, ast.Name) and f.value.id == "os")):
        yield node.lineno, node.args[0]
    elif (isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load)
          and _is_os_environ(node.value)):
      yield node.lineno, node.slice


# Code kept in strings (a stub run in another process) that reads the
# environment with a literal MPMD_ name.
_TEXT_READ = re.compile(r"""(environ\s*(\.get\s*\(|\[)|getenv\s*\()\s*['"]MPMD_""")


def test_no_module_reads_an_mpmd_variable_but_through_knobs():
  found = []
  for path in _sources():
    text = path.read_text()
    tree = ast.parse(text)
    rel = path.relative_to(ROOT)
    for line, key in _environment_reads(tree):
      # A key that is not a literal may be an MPMD_ name in disguise.
      if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
        found.append(f"{rel}:{line}: os.environ read of a computed name")
      elif key.value.startswith("MPMD_"):
        found.append(f"{rel}:{line}: os.environ read of {key.value}")
    for m in _TEXT_READ.finditer(text):
      found.append(f"{rel}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)!r}")
  assert not found, "read these through mpmd.knobs:\n" + "\n".join(found)


def test_no_module_spells_a_variable_name_again():
  """A variable's name is written once, in knobs.py: code names it by
  `knobs.MPMD_...` (docstrings and messages may mention it)."""
  found = []
  for path in _sources():
    for node in ast.walk(ast.parse(path.read_text())):
      if isinstance(node, ast.Constant) and node.value in knobs.KNOBS:
        found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value!r}")
  assert not found, "name these by knobs.<NAME>:\n" + "\n".join(found)


def test_an_unknown_name_fails_loudly(monkeypatch):
  monkeypatch.setenv("MPMD_ASYNC_CALL", "1")
  for read in (knobs.flag, knobs.tristate, knobs.integer, knobs.number, knobs.text,
               knobs.path, knobs.raw, knobs.name):
    with pytest.raises(KeyError, match="MPMD_ASYNC_CALL.*not an environment variable"):
      read("MPMD_ASYNC_CALL")


def test_a_reader_of_another_kind_is_an_error():
  with pytest.raises(TypeError, match="MPMD_OPT is a path variable.*path()"):
    knobs.integer(knobs.MPMD_OPT)
  with pytest.raises(TypeError, match="tristate"):
    knobs.flag(knobs.MPMD_ASYNC_CALLS)


@pytest.mark.parametrize("name, read", [("MPMD_ASYNC_CALLS", knobs.tristate),
                                        ("MPMD_PARTIAL_SUMS", knobs.flag),
                                        ("MPMD_GLOO_ADMISSION", knobs.flag)])
def test_a_misspelled_switch_is_an_error(monkeypatch, name, read):
  """A switch that changes results or what a call waits for: `off` or
  `maybe` must not pass as the default unnoticed."""
  monkeypatch.setenv(name, "off")
  with pytest.raises(knobs.KnobError, match=rf"{name}.*'off'.*1/true/yes: on; 0/false/no: off"):
    read(name)


@pytest.mark.parametrize("name, value, accepts", [
    ("MPMD_WARMUP_BYTES", "64MiB", "a whole number"),
    ("MPMD_MAX_INFLIGHT", "1.5", "a whole number"),
    ("MPMD_COMPILE_THREADS", "", "a whole number"),
    ("MPMD_DISTRIBUTED_TIMEOUT", "ten", "a number"),
    ("MPMD_GLOO_ADMISSION_TIMEOUT", "30s", "a number"),
    ("MPMD_CROSS_PROCESS_TRANSFERS", "push", "'pull' or 'collective'"),
    ("MPMD_CROSS_PROCESS_TRANSFERS", "", "'pull' or 'collective'"),
])
def test_a_malformed_value_names_the_variable_its_value_and_what_it_accepts(
    monkeypatch, name, value, accepts):
  monkeypatch.setenv(name, value)
  read = {"int": knobs.integer, "float": knobs.number, "str": knobs.text}[knobs.knob(name).kind]
  with pytest.raises(knobs.KnobError) as info:
    read(name)
  message = str(info.value)
  assert f"{name}={value!r}" in message and accepts in message, message
  assert isinstance(info.value, ValueError)


def test_malformed_values_at_the_call_sites(monkeypatch):
  import importlib

  from mpmd.errors import MpmdError
  from mpmd.run import program
  from mpmd.compile import warmup

  initialize = importlib.import_module("mpmd.distributed.initialize")
  monkeypatch.setenv("MPMD_WARMUP_BYTES", "lots")
  with pytest.raises(knobs.KnobError, match="MPMD_WARMUP_BYTES='lots' is not an integer"):
    warmup.warmup_bytes()
  monkeypatch.setenv("MPMD_MAX_INFLIGHT", "many")
  with pytest.raises(knobs.KnobError, match="MPMD_MAX_INFLIGHT='many'"):
    program.max_inflight("cpu")
  # As before the table: an MpmdError (docs/troubleshooting.md).
  monkeypatch.setenv("MPMD_PROCESS_ID", "one")
  with pytest.raises(MpmdError,
                     match="environment variable MPMD_PROCESS_ID='one' is not an integer"):
    initialize._env_int(knobs.MPMD_PROCESS_ID)


# (name, value or None for unset, what the accessor gives): each as the call
# site read it before the table.
_SEMANTICS = [
    # Only 1/true/yes and 0/false/no (any case, blanks around); empty: unset
    # (a misspelled value is an error: test_a_misspelled_switch_is_an_error).
    ("MPMD_ASYNC_CALLS", None, None), ("MPMD_ASYNC_CALLS", "", None),
    ("MPMD_ASYNC_CALLS", " Yes ", True), ("MPMD_ASYNC_CALLS", "TRUE", True),
    ("MPMD_ASYNC_CALLS", "1", True), ("MPMD_ASYNC_CALLS", "no", False),
    ("MPMD_ASYNC_CALLS", "0", False),
    ("MPMD_PARTIAL_SUMS", None, True), ("MPMD_PARTIAL_SUMS", "0", False),
    ("MPMD_PARTIAL_SUMS", "", True), ("MPMD_PARTIAL_SUMS", "false", False),
    ("MPMD_PARTIAL_SUMS", "1", True), ("MPMD_PARTIAL_SUMS", "No", False),
    ("MPMD_GLOO_ADMISSION", None, True), ("MPMD_GLOO_ADMISSION", "0", False),
    ("MPMD_GLOO_ADMISSION", "no", False), ("MPMD_GLOO_ADMISSION", "yes", True),
    # "1" always, "0" never, else the logger decides.
    ("MPMD_PROGRESS", None, None), ("MPMD_PROGRESS", "1", True), ("MPMD_PROGRESS", "0", False),
    ("MPMD_PROGRESS", "yes", None), ("MPMD_PROGRESS", "", None),
    # Empty: unset; clamped at 0.
    ("MPMD_WARMUP_BYTES", None, 64 << 20), ("MPMD_WARMUP_BYTES", "", 64 << 20),
    ("MPMD_WARMUP_BYTES", "  ", 64 << 20), ("MPMD_WARMUP_BYTES", "-5", 0),
    ("MPMD_WARMUP_BYTES", " 1024 ", 1024), ("MPMD_WARMUP_BYTES", "0", 0),
    ("MPMD_MAX_INFLIGHT", None, None), ("MPMD_MAX_INFLIGHT", "", None),
    ("MPMD_MAX_INFLIGHT", "-1", 0), ("MPMD_MAX_INFLIGHT", "4", 4),
    ("MPMD_COMPILE_THREADS", None, 8), ("MPMD_COMPILE_THREADS", "2", 2),
    ("MPMD_PROGRESS_AFTER", None, 2.0), ("MPMD_PROGRESS_AFTER", "0.5", 0.5),
    # Malformed: the default (read in watcher threads and signal handlers); clamped.
    ("MPMD_STEP_CHECK_INTERVAL", None, 1.0), ("MPMD_STEP_CHECK_INTERVAL", "x", 1.0),
    ("MPMD_STEP_CHECK_INTERVAL", "", 1.0), ("MPMD_STEP_CHECK_INTERVAL", "0.01", 0.05),
    ("MPMD_STEP_CHECK_INTERVAL", "0.2", 0.2),
    ("MPMD_STALL_WARNING", None, 30.0), ("MPMD_STALL_WARNING", "x", 30.0),
    ("MPMD_STALL_WARNING", "-1", 0.0), ("MPMD_STALL_WARNING", "2", 2.0),
    ("MPMD_TERMINATION_GRACE", None, 5.0), ("MPMD_TERMINATION_GRACE", "x", 5.0),
    ("MPMD_TERMINATION_GRACE", "-3", 0.0),
    ("MPMD_DISTRIBUTED_TIMEOUT", None, 600.0), ("MPMD_DISTRIBUTED_TIMEOUT", "5", 5.0),
    ("MPMD_GLOO_ADMISSION_TIMEOUT", None, 30.0), ("MPMD_GLOO_ADMISSION_TIMEOUT", "5", 5.0),
    ("MPMD_NUM_PROCESSES", None, None), ("MPMD_NUM_PROCESSES", "", None),
    ("MPMD_NUM_PROCESSES", "4", 4), ("MPMD_HEARTBEAT_TIMEOUT", "7", 7),
    # Text and paths.
    ("MPMD_CROSS_PROCESS_TRANSFERS", None, "pull"),
    ("MPMD_CROSS_PROCESS_TRANSFERS", "collective", "collective"),
    ("MPMD_TRANSFER_HOST", None, "127.0.0.1"), ("MPMD_TRANSFER_HOST", "10.0.0.2", "10.0.0.2"),
    ("MPMD_TRANSFER_HOST", "", ""),
    ("MPMD_COORDINATOR_ADDRESS", None, None), ("MPMD_COORDINATOR_ADDRESS", "", None),
    ("MPMD_COORDINATOR_ADDRESS", "h:1", "h:1"),
    ("MPMD_OPT", None, None), ("MPMD_OPT", "", None), ("MPMD_OPT", "/x/mpmd-opt", "/x/mpmd-opt"),
    ("MPMD_RUN_DIR", "", None), ("MPMD_RUN_DIR", "/tmp/r", "/tmp/r"),
]


@pytest.mark.parametrize("name, value, expected", _SEMANTICS)
def test_each_variable_reads_as_before(monkeypatch, name, value, expected):
  if value is None:
    monkeypatch.delenv(name, raising=False)
  else:
    monkeypatch.setenv(name, value)
  row = knobs.knob(name)
  read = {"int": knobs.integer, "float": knobs.number, "str": knobs.text, "path": knobs.path,
          "flag": knobs.tristate if row.default is None else knobs.flag}[row.kind]
  got = read(name)
  assert got == expected and type(got) is type(expected), (name, value, got)
  # The same read from a mapping given instead of os.environ.
  assert read(name, {} if value is None else {name: value}) == expected


def test_call_sites_read_at_call_time(monkeypatch):
  from mpmd.distributed import coordination, steps, termination
  from mpmd.partition import partitioner
  from mpmd.run import program

  monkeypatch.setenv("MPMD_ASYNC_CALLS", "1")
  assert program.wait_for_calls() is False
  monkeypatch.setenv("MPMD_ASYNC_CALLS", "0")
  assert program.wait_for_calls() is True
  monkeypatch.delenv("MPMD_ASYNC_CALLS")
  assert program.wait_for_calls() is False  # one process
  monkeypatch.setenv("MPMD_PARTIAL_SUMS", "0")
  assert partitioner.partial_sums_enabled() is False
  monkeypatch.setenv("MPMD_STEP_CHECK_INTERVAL", "0.3")
  assert steps._interval() == 0.3
  monkeypatch.setenv("MPMD_TERMINATION_GRACE", "bad")
  assert termination.grace_seconds() == 5.0
  monkeypatch.setenv("MPMD_DISTRIBUTED_TIMEOUT", "12")
  assert coordination.timeout_seconds() == 12.0


def test_launcher_sets_its_variables_by_the_tables_names():
  from mpmd import launch

  env = launch.child_environment(1, processes=2, devices_per_process=1,
                                 coordinator_address="127.0.0.1:1", heartbeat_timeout=3,
                                 platform="cpu", base_env={})
  for name in env:
    if name.startswith("MPMD_"):
      knobs.knob(name)
      assert knobs.knob(name).set_by != knobs.USER
  assert f"os.environ.get({knobs.MPMD_CPU_AFFINITY!r})" in launch._DIE_WITH_PARENT


def test_the_page_is_linked_from_the_pages_that_name_variables():
  for page in sorted((ROOT / "docs").glob("*.md")):
    if page == PAGE:
      continue
    text = page.read_text()
    names = set(re.findall(r"\bMPMD_[A-Z0-9_]+\b", text)) & set(knobs.KNOBS)
    if names:
      assert "environment.md" in text, f"{page.name} names {sorted(names)}: link environment.md"
