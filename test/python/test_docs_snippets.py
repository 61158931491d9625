"""The Python blocks of README.md and docs/*.md that are marked runnable run as
written (issue #17: docs that fail as written).

A fenced ```python block preceded by the line `<!-- runnable -->` is run in a
fresh process, in an empty temporary working directory, with 8 CPU devices
(`XLA_FLAGS=--xla_force_host_platform_device_count=8`) and the repository
root on `PYTHONPATH`; a block that sets `XLA_FLAGS` itself keeps the suite's
other XLA flags (conftest's optimisation level) unless it gives them. A block preceded by `<!-- runnable: continues -->` runs
after the previous runnable block of the same file, in the same process and
namespace (a page that builds an example up over several blocks). A block
whose first line starts with `>>> ` is a doctest: its printed output must
match. Unmarked blocks (fragments, several processes, GPUs, long runs) are not
run. Each test case is named `file:line` of the block's opening fence, and a
traceback points at that file and line.
"""

from __future__ import annotations

import dataclasses
import doctest
import json
import os
import pathlib
import re
import subprocess
import sys
import textwrap

import pytest

from mpmd.launch import _with_device_count

ROOT = pathlib.Path(__file__).resolve().parents[2]
# dialect.md and passes.md are generated MLIR references without Python.
DOCS = [ROOT / "README.md"] + sorted(
    p for p in (ROOT / "docs").glob("*.md") if p.name not in ("dialect.md", "passes.md"))

RUNNABLE = "<!-- runnable -->"
CONTINUES = "<!-- runnable: continues -->"
_MARKER = re.compile(r"^\s*<!--\s*runnable\b.*-->\s*$")
_FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)")

# Blocks that must stay marked, by file and the heading they sit under (every
# Python block under that heading), so that marking cannot silently disappear.
REQUIRED = {
    "README.md": ["A worked example", "Sharding inside meshes, donation, memory and traces"],
    "docs/api.md": ["Python API reference"],
}
# Runnable blocks per file today (unmarked: docs/jaxpp.md's `import jaxpp.api`
# before/after, docs/compiler.md's fragments, docs/multiprocess.md's script for
# several processes).
MIN_MARKED = {"README.md": 4, "docs/api.md": 14, "docs/concepts.md": 5, "docs/jaxpp.md": 1,
              "docs/schedules.md": 5}


@dataclasses.dataclass(frozen=True)
class Block:
  file: str           # relative to the repository root
  line: int           # 1-based line of the opening fence
  code: str
  heading: str        # the last heading above the block
  marker: str | None  # the marker line above the fence, if any
  chain: str = ""     # id of the first block of its process (runnable blocks)

  @property
  def id(self) -> str:
    return f"{self.file}:{self.line}"

  @property
  def runnable(self) -> bool:
    return self.marker in (RUNNABLE, CONTINUES)


def _blocks(path: pathlib.Path) -> tuple[list[Block], list[str]]:
  """Every ```python block of `path`, and the problems with its markers."""
  rel = path.relative_to(ROOT).as_posix()
  lines = path.read_text().splitlines()
  blocks, problems, heading, i = [], [], "", 0
  while i < len(lines):
    fence = _FENCE.match(lines[i])
    if lines[i].startswith("#") and not fence:
      heading = lines[i].lstrip("#").strip()
    if not fence:
      if _MARKER.match(lines[i]) and not (
          i + 1 < len(lines) and (m := _FENCE.match(lines[i + 1])) and m[3] == "python"):
        problems.append(f"{rel}:{i + 1}: a runnable marker must be the line right before "
                        "a ```python fence")
      i += 1
      continue
    indent, ticks, lang = fence.groups()
    end = i + 1
    while end < len(lines) and not lines[end].strip().startswith(ticks):
      end += 1
    if lang == "python":
      marker = lines[i - 1].strip() if i and _MARKER.match(lines[i - 1]) else None
      if marker not in (None, RUNNABLE, CONTINUES):
        problems.append(f"{rel}:{i}: unknown marker {marker!r} (use {RUNNABLE} or {CONTINUES})")
      code = textwrap.dedent("\n".join(l[len(indent):] if l.startswith(indent) else l
                                       for l in lines[i + 1:end]))
      blocks.append(Block(rel, i + 1, code + "\n", heading, marker))
    i = end + 1
  # Chains: a `continues` block joins the process of the runnable block before it.
  chained, chain = [], None
  for block in blocks:
    if block.marker == RUNNABLE:
      chain = block.id
    elif block.marker == CONTINUES and chain is None:
      problems.append(f"{block.id}: {CONTINUES} but no runnable block before it")
    chained.append(dataclasses.replace(block, chain=chain if block.runnable else ""))
  return chained, problems


ALL = [(b, p) for path in DOCS for b, p in [_blocks(path)]]
BLOCKS = [block for blocks, _ in ALL for block in blocks]
PROBLEMS = [problem for _, problems in ALL for problem in problems]
MARKED = [b for b in BLOCKS if b.runnable]


def _padded(block: Block) -> str:
  """The block's code with its lines at their line numbers in the file."""
  return "\n" * block.line + block.code


def _is_doctest(code: str) -> bool:
  return code.lstrip().startswith(">>>")


# Runs blocks one after another in one namespace; writes each one's outcome to
# the results file as soon as it is known.
_DRIVER = r"""
import doctest, io, json, os, sys, traceback
blocks, results = json.load(open(sys.argv[1])), sys.argv[2]
# A block that sets XLA_FLAGS (as the examples do, for their 8 CPU devices) keeps the
# suite's other flags (conftest's --xla_backend_optimization_level=0) unless it gives them.
_SUITE_FLAGS = [f for f in os.environ.get("XLA_FLAGS", "").split()
                if not f.startswith("--xla_force_host_platform_device_count")]
class _Environ(type(os.environ)):
  def __setitem__(self, key, value):
    if key == "XLA_FLAGS":
      given = {f.split("=")[0] for f in value.split()}
      value = " ".join([value] + [f for f in _SUITE_FLAGS if f.split("=")[0] not in given])
    super().__setitem__(key, value)
os.environ.__class__ = _Environ
namespace = {"__name__": "__main__"}
for block in blocks:
  print(f"=== {block['id']}", flush=True)
  try:
    if block["doctest"]:
      test = doctest.DocTestParser().get_doctest(
          block["code"], namespace, block["id"], block["file"], block["line"])
      report = io.StringIO()
      runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
      if runner.run(test, out=report.write, clear_globs=False).failed:
        raise AssertionError("doctest output differs:\n" + report.getvalue())
    else:
      exec(compile(block["code"], block["file"], "exec"), namespace)
  except BaseException:
    kind, error, tb = sys.exc_info()  # the traceback without this driver's frame
    text = "".join(traceback.format_exception(kind, error, tb.tb_next))
    with open(results, "a") as f:
      f.write(json.dumps({"id": block["id"], "error": text}) + "\n")
    sys.exit(1)
  with open(results, "a") as f:
    f.write(json.dumps({"id": block["id"], "error": None}) + "\n")
"""

_RESULTS: dict[str, dict[str, str | None]] = {}
_OUTPUT: dict[str, str] = {}


def _run_chain(chain: str, tmp_path_factory) -> None:
  blocks = [b for b in MARKED if b.chain == chain]
  work = tmp_path_factory.mktemp("doc")
  spec, results = work.parent / f"{work.name}.json", work.parent / f"{work.name}.results"
  spec.write_text(json.dumps([
      {"id": b.id, "file": str(ROOT / b.file), "line": b.line, "doctest": _is_doctest(b.code),
       "code": b.code if _is_doctest(b.code) else _padded(b)} for b in blocks]))
  env = dict(os.environ)
  env["XLA_FLAGS"] = _with_device_count(env.get("XLA_FLAGS", ""), 8)
  env["PYTHONPATH"] = os.pathsep.join(
      p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
  env.setdefault("JAX_PLATFORMS", "cpu")
  env.setdefault("MPLBACKEND", "Agg")
  try:
    proc = subprocess.run([sys.executable, "-c", _DRIVER, str(spec), str(results)],
                          cwd=work, env=env, capture_output=True, text=True, timeout=300)
    output = proc.stdout + proc.stderr
  except subprocess.TimeoutExpired as e:
    output = f"timed out after {e.timeout} s\n{e.stdout or ''}{e.stderr or ''}"
  outcomes = {}
  if results.exists():
    for line in results.read_text().splitlines():
      record = json.loads(line)
      outcomes[record["id"]] = record["error"]
  _RESULTS[chain], _OUTPUT[chain] = outcomes, output


@pytest.mark.parametrize("block", MARKED, ids=[b.id for b in MARKED])
def test_runnable_block(block: Block, tmp_path_factory):
  if block.chain not in _RESULTS:
    _run_chain(block.chain, tmp_path_factory)
  outcomes, output = _RESULTS[block.chain], _OUTPUT[block.chain]
  if block.id not in outcomes:
    failed = [i for i, error in outcomes.items() if error]
    reason = (f"not run: {failed[0]}, which it continues, failed" if failed else
              "the process ended before it ran")
    pytest.fail(f"{block.id}: {reason}\n{output[-4000:]}", pytrace=False)
  if outcomes[block.id] is not None:
    pytest.fail(f"{block.id} failed:\n{outcomes[block.id]}\n--- output ---\n{output[-4000:]}",
                pytrace=False)


def test_markers_are_well_formed():
  assert not PROBLEMS, "\n".join(PROBLEMS)


def test_marked_blocks_are_python():
  """A marked block that is not valid Python (or a `>>>` block without
  examples) fails here, without running anything."""
  errors = []
  for block in MARKED:
    try:
      if _is_doctest(block.code):
        examples = doctest.DocTestParser().get_examples(block.code, block.id)
        if not examples:
          errors.append(f"{block.id}: a >>> block without examples")
        for example in examples:
          compile(example.source, block.id, "single")
      else:
        compile(_padded(block), block.file, "exec")
    except SyntaxError as e:
      errors.append(f"{block.id}: {e.msg} at {e.filename}:{e.lineno}")
  assert not errors, "\n".join(errors)


def test_marked_blocks_per_file(capsys):
  """How many blocks are marked per file; the required ones are marked, and no
  file has fewer marked blocks than MIN_MARKED says (lower it on purpose)."""
  counts: dict[str, tuple[int, int]] = {}
  for block in BLOCKS:
    marked, total = counts.get(block.file, (0, 0))
    counts[block.file] = (marked + block.runnable, total + 1)
  with capsys.disabled():
    print("\nrunnable python blocks: " + ", ".join(
        f"{file} {marked}/{total}" for file, (marked, total) in counts.items()))
  for file, headings in REQUIRED.items():
    for heading in headings:
      under = [b for b in BLOCKS if b.file == file and b.heading == heading]
      assert under, f"{file}: no python block under the heading {heading!r}"
      unmarked = [b.id for b in under if not b.runnable]
      assert not unmarked, f"must be marked {RUNNABLE} or {CONTINUES}: {unmarked}"
  fewer = {file: (counts.get(file, (0, 0))[0], floor) for file, floor in MIN_MARKED.items()
           if counts.get(file, (0, 0))[0] < floor}
  assert not fewer, f"fewer runnable blocks than before (marked, expected): {fewer}"
