"""docs/dialect.md and docs/passes.md are the dialect and pass references that
mlir-tblgen generates from the ODS (include/mpmd/Dialect/*.td,
include/mpmd/Transforms/Passes.td), under a one-line header: `make docs` writes
them. These tests regenerate them and fail when a committed file is stale.
"""

from __future__ import annotations

import difflib
import shutil
import subprocess
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
DIALECT_DOC = REPO_ROOT / "docs" / "dialect.md"
LLVM_PREFIX = Path("/usr/lib/llvm-22")

# The flags add_mlir_doc passes (include/mpmd/Dialect/CMakeLists.txt).
TBLGEN_FLAGS = ["-gen-dialect-doc", "-dialect=mpmd", "-allow-hugo-specific-features"]
STALE = "docs/dialect.md is out of date with the ODS in include/mpmd/Dialect: run `make docs`"


def _mlir_tblgen() -> str:
  for candidate in (LLVM_PREFIX / "bin" / "mlir-tblgen", shutil.which("mlir-tblgen-22"),
                    shutil.which("mlir-tblgen")):
    if candidate and Path(candidate).exists():
      return str(candidate)
  pytest.fail("mlir-tblgen (LLVM 22) not found: run scripts/bootstrap.sh")


def _build_include() -> Path:
  """The build tree's include directory that holds FlagOptions.td (the flag
  table as pass options, which the build writes; any build's: they agree)."""
  found = sorted(REPO_ROOT.glob("build/*/include/mpmd/Transforms/FlagOptions.td"),
                 key=lambda p: p.stat().st_mtime)
  if not found:
    pytest.fail("build/*/include/mpmd/Transforms/FlagOptions.td not found: run `make build`")
  return found[-1].parents[2]


def _generated(flags=TBLGEN_FLAGS, td=("Dialect", "MpmdOps.td")) -> str:
  proc = subprocess.run(
      [_mlir_tblgen(), *flags, "-I", str(REPO_ROOT / "include"), "-I", str(_build_include()),
       "-I", str(LLVM_PREFIX / "include"),
       str(REPO_ROOT / "include" / "mpmd" / td[0] / td[1])],
      capture_output=True, text=True, timeout=120, check=False)
  assert proc.returncode == 0, f"mlir-tblgen failed on the ODS:\n{proc.stderr}"
  return proc.stdout


def test_dialect_doc_is_up_to_date():
  assert DIALECT_DOC.exists(), f"{DIALECT_DOC} is missing: run `make docs`"
  header, _, body = DIALECT_DOC.read_text().partition("\n")
  assert "make docs" in header and header.startswith("<!--"), (
      f"docs/dialect.md must start with a one-line header saying it is generated "
      f"(by `make docs`), got: {header!r}")
  generated = _generated()
  if body != generated:
    diff = "".join(difflib.unified_diff(
        body.splitlines(keepends=True), generated.splitlines(keepends=True),
        "docs/dialect.md", "mlir-tblgen output", n=1))
    pytest.fail(f"{STALE}\n{diff[:4000]}")


def test_dialect_doc_covers_everything():
  """Every op, attribute and type is documented with a description and an
  MLIR example (the ODS descriptions are the reference)."""
  text = _generated()
  sections = text.split("\n### ")[1:]
  assert sections, "no op/attribute/type sections in the generated doc"
  undocumented = []
  for section in sections:
    title = section.splitlines()[0]
    if title == "ReductionType":  # the enum: its cases are listed
      continue
    body = section.split("\n#### ")[0]
    if "```mlir" not in body:
      undocumented.append(title)
  assert not undocumented, f"no MLIR example in the description of: {undocumented}"


PASSES_DOC = REPO_ROOT / "docs" / "passes.md"


def test_passes_doc_is_up_to_date():
  assert PASSES_DOC.exists(), f"{PASSES_DOC} is missing: run `make docs`"
  header, _, body = PASSES_DOC.read_text().partition("\n")
  assert "make docs" in header and header.startswith("<!--"), header
  # The driver's passes, then the compatibility wing's (Makefile's docs target).
  generated = (_generated(["-gen-pass-doc"], ("Transforms", "Passes.td")) + "\n"
               + "## Compatibility wing: passes only `mpmd-opt` runs\n\n"
               + "For files written for Shardy:MPMD; the pipeline of mpmd.jit never runs them "
               + "(include/mpmd/Compat/Passes.td, lib/Compat, test/Compat).\n\n"
               + _generated(["-gen-pass-doc"], ("Compat", "Passes.td")))
  if body != generated:
    diff = "".join(difflib.unified_diff(
        body.splitlines(keepends=True), generated.splitlines(keepends=True),
        "docs/passes.md", "mlir-tblgen output", n=1))
    pytest.fail("docs/passes.md is out of date with include/mpmd/{Transforms,Compat}/Passes.td: run "
                f"`make docs`\n{diff[:4000]}")


def test_pass_options_that_are_partition_flags_come_from_the_flag_table():
  """A pass option that is a partitioning flag is the flag table's record
  (MpmdFlag_<name>, written by tools/mpmd-flag-options from
  MPMD_PARTITION_FLAGS), never a second definition written by hand."""
  import re  # noqa: PLC0415
  from mpmd import _mpmd  # noqa: PLC0415
  flags = {row[3]: row for row in _mpmd.PARTITION_FLAGS}
  for td in ("Transforms", "Compat"):
    text = (REPO_ROOT / "include" / "mpmd" / td / "Passes.td").read_text()
    by_hand = set(re.findall(r'Option<"\w+",\s*"([\w-]+)"', text))
    assert not by_hand & set(flags), (td, sorted(by_hand & set(flags)))
  generated = (_build_include() / "mpmd" / "Transforms" / "FlagOptions.td").read_text()
  for name, default, _, text, _, doc in flags.values():
    assert f'def MpmdFlag_{name} : Option<' in generated, name
    assert f'"{text}", "bool", "{str(default).lower()}",' in generated, name
  # The records are what the passes' options are: their spelling and description.
  docs = PASSES_DOC.read_text()
  for text in ("infer-transfers", "merge-remat-fragments", "fail-on-backward-deps"):
    assert f"-{text}" in docs and flags[text][5].split(" (")[0].split(":")[0] in docs, text
