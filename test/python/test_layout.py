"""The package layout: only `mpmd/_jax/` touches JAX internals, and names
say what a module holds.

Every module of `mpmd` outside `mpmd/_jax/` uses public JAX APIs (`jax`,
`jax.numpy`, `jax.sharding`, `jax.extend`, `jax.experimental`, ...) plus the
helpers of `mpmd._jax`, so that a JAX upgrade breaks (at most) that package.
The modules are read with `ast` (nothing is imported). Forbidden outside
`mpmd/_jax/`:

* importing `jax._src`, `jax.interpreters`, `jax.lib`, `jax.core` or `jaxlib`
  (or any module under them), also as `from jax import _src` and the like;
* reaching them as attributes (`jax._src.core`, `jax.interpreters.mlir`,
  `jax.lib.xla_client`). The few public names JAX keeps in `jax.core` may be
  used as attributes (`jax.core.ShapedArray`, `jax.core.Tracer`).
"""

from __future__ import annotations

import ast
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "mpmd"
ALLOWED = PACKAGE / "_jax"

#: Modules (and everything under them) only `mpmd/_jax/` may import.
INTERNAL_MODULES = ("jax._src", "jax.interpreters", "jax.lib", "jax.core", "jaxlib")
#: Attribute chains only `mpmd/_jax/` may use (`jax.core` has public names).
INTERNAL_ATTRIBUTES = ("jax._src", "jax.interpreters", "jax.lib")


def _is_under(name: str, prefixes: tuple[str, ...]) -> bool:
  return any(name == p or name.startswith(p + ".") for p in prefixes)


def _dotted(node: ast.AST) -> str | None:
  """`a.b.c` for an attribute chain on a name, else None."""
  parts = []
  while isinstance(node, ast.Attribute):
    parts.append(node.attr)
    node = node.value
  if not isinstance(node, ast.Name):
    return None
  return ".".join([node.id, *reversed(parts)])


def internal_uses(source: str, filename: str = "<string>") -> list[tuple[int, str]]:
  """(line, what) for every use of JAX internals in `source`."""
  tree = ast.parse(source, filename)
  # Only the outermost attribute of a chain counts (`jax._src.core.X`, not
  # also `jax._src.core` and `jax._src`).
  inner = {id(n.value) for n in ast.walk(tree)
           if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Attribute)}
  found = []
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      for alias in node.names:
        if _is_under(alias.name, INTERNAL_MODULES):
          found.append((node.lineno, f"import {alias.name}"))
    elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
      if _is_under(node.module, INTERNAL_MODULES):
        names = ", ".join(alias.name for alias in node.names)
        found.append((node.lineno, f"from {node.module} import {names}"))
      else:
        for alias in node.names:
          full = f"{node.module}.{alias.name}"
          if _is_under(full, INTERNAL_MODULES):
            found.append((node.lineno, f"from {node.module} import {alias.name}"))
    elif isinstance(node, ast.Attribute) and id(node) not in inner:
      name = _dotted(node)
      if name is not None and _is_under(name, INTERNAL_ATTRIBUTES):
        found.append((node.lineno, name))
  return sorted(found)


def _package_files() -> list[pathlib.Path]:
  files = sorted(PACKAGE.rglob("*.py"))
  assert files, f"no Python files under {PACKAGE}"
  return files


def test_only_the_jax_package_imports_private_jax():
  bad = []
  for path in _package_files():
    if ALLOWED in path.parents:
      continue
    for line, what in internal_uses(path.read_text(), str(path)):
      bad.append(f"{path.relative_to(ROOT)}:{line}: {what}")
  assert not bad, ("only mpmd/_jax/ may use JAX internals; move these uses into a helper "
                   "there:\n" + "\n".join(bad))


def test_the_check_sees_internal_imports():
  """The scanner is not vacuous: mpmd/_jax/ does use internals, and every
  form of use is recognised."""
  assert any(internal_uses(p.read_text()) for p in ALLOWED.glob("*.py"))
  source = "\n".join([
      "import jax",
      "import jax.numpy as jnp",
      "import jax.extend.core",
      "from jax.sharding import Mesh",
      "from jax._src import core",            # 5
      "import jax._src.interpreters.mlir",    # 6
      "from jax import _src",                 # 7
      "from jax.interpreters import mlir",    # 8
      "import jaxlib",                        # 9
      "from jaxlib.mlir import ir",           # 10
      "from jax import core",                 # 11
      "from jax.core import Primitive",       # 12
      "x = jax._src.core.Primitive",          # 13
      "y = jax.core.ShapedArray",
      "from jax.lib import xla_client",       # 15
  ])
  assert [line for line, _ in internal_uses(source)] == [5, 6, 7, 8, 9, 10, 11, 12, 13, 15]


def test_docs_point_only_inside_the_repository():
  """README.md and docs/ never send a reader outside the repository (the
  project workspace's design and notes are not shipped)."""
  root = pathlib.Path(__file__).resolve().parents[2]
  outside = re.compile(r"\.\./shared|_facts\.md|design\.md|the brief")
  for path in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
    for number, line in enumerate(path.read_text().splitlines(), start=1):
      assert not outside.search(line), f"{path.relative_to(root)}:{number}: {line.strip()}"


def test_no_module_shares_a_name_with_one_in_the_jax_room():
  """No module of `mpmd/` outside `mpmd/_jax/` has the name of one inside it
  (a front-end `lowering.py` beside `_jax/lowering.py` left readers guessing
  which one a change goes in)."""
  inside = {p.stem for p in ALLOWED.glob("*.py")} - {"__init__"}
  assert inside, f"no modules under {ALLOWED}"
  clashes = [str(p.relative_to(ROOT)) for p in _package_files()
             if ALLOWED not in p.parents and p.stem in inside]
  assert not clashes, f"these modules share a name with one in mpmd/_jax/: {clashes}"


def test_where_things_are_tables_name_existing_modules():
  """Every module the "Where things are" tables (README.md, docs/concepts.md)
  name exists: a full `mpmd/...py` path, or a name the README's tree lists
  after its folder (`mpmd/run/  program.py (...), calling.py ...`)."""
  for doc in (ROOT / "README.md", ROOT / "docs" / "concepts.md"):
    text = doc.read_text()
    section = text[text.index("## Where things are"):]
    end = section.find("\n## ", 1)
    section = section if end < 0 else section[:end]
    paths = re.findall(r"mpmd/[\w/]*\w\.py", section)
    # The README's tree lists a folder's modules by name after the folder.
    for folder, names in re.findall(r"^(mpmd/(?:[\w/]*/)?)[ ]+(.*(?:\n[ ]{20,}.*)*)", section, re.M):
      paths += [folder + name + ".py" for name in re.findall(r"\b(\w+)\.py\b", names)]
    assert paths, f"{doc.relative_to(ROOT)}: no module paths in its Where things are section"
    missing = sorted({p for p in paths if not (ROOT / p).is_file()})
    assert not missing, f"{doc.relative_to(ROOT)} names modules that do not exist: {missing}"


#: The rooms of a step's life, in order, and what else may sit in `mpmd/`.
ROOMS = ("trace", "partition", "compile", "run")
WINGS = ("schedule", "plan", "jaxpp", "distributed")
TOP_LEVEL = {
    "__init__", "jit", "stages",  # the entry point and JAX's stages model over the rooms
    "config", "errors", "knobs", "options",  # definitions every room reads
    "launch", "opt", "knobs_doc", "options_doc",  # tools (python -m mpmd.<tool>)
}


def test_the_package_is_rooms_of_a_steps_life_wings_and_tools():
  """`mpmd/`'s folders follow a step (trace -> partition -> compile -> run),
  with the wings (schedules, planning, the JaxPP model, several processes)
  and JAX's internals (`_jax/`) apart; the top level holds only the entry
  point, the definitions every room reads and the tools. A new module goes
  in the room of the stage it serves."""
  packages = {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
  assert packages == set(ROOMS) | set(WINGS) | {"_jax"}, sorted(packages)
  top = {p.stem for p in PACKAGE.glob("*.py")}
  assert top == TOP_LEVEL, (f"modules at the top of mpmd/ that belong in a room: "
                            f"{sorted(top - TOP_LEVEL)}; gone: {sorted(TOP_LEVEL - top)}")
  for room in ROOMS:  # each room says what it holds, module by module
    doc = ast.get_docstring(ast.parse((PACKAGE / room / "__init__.py").read_text())) or ""
    modules = {p.stem for p in (PACKAGE / room).glob("*.py")} - {"__init__"}
    unnamed = sorted(m for m in modules if f"mpmd.{room}.{m}" not in doc)
    assert not unnamed, f"mpmd/{room}/__init__.py does not describe {unnamed}"


def test_no_module_is_named_like_a_package():
  """No module of `mpmd/` has the name of a package of `mpmd/` (a
  `schedule/jaxpp.py` of task lists beside the `jaxpp/` programming model
  left readers guessing which one a change goes in)."""
  packages = {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
  assert {"jaxpp", "schedule", "trace", "partition", "compile", "run"} <= packages, packages
  clashes = [str(p.relative_to(ROOT)) for p in _package_files() if p.stem in packages]
  assert not clashes, f"these modules share a name with a package of mpmd/: {clashes}"


def _snake(name: str) -> str:
  """`InlineMpmdCalls` -> `inline_mpmd_calls`."""
  return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


def test_each_pass_file_holds_the_pass_of_its_name_with_a_lit_test_of_that_name():
  """One pass per file under lib/Transforms/<folder>/ (the driver's pipeline)
  and lib/Compat/ (the compatibility wing, passes only `mpmd-opt` runs): the
  file `X.cpp` defines `XPass` (whatever its flag, which users and peers'
  tests spell), and `test/Transforms/<folder>/x.mlir` (`test/Compat/x.mlir`)
  tests it."""
  bad = []
  files = sorted((ROOT / "lib" / "Transforms").glob("*/*.cpp"))
  compat = sorted((ROOT / "lib" / "Compat").glob("*.cpp"))
  assert len(files) > 20 and len(compat) >= 10, (files, compat)
  for path in files + compat:
    defined = re.findall(r"GEN_PASS_DEF_(\w+)", path.read_text())
    where = path.relative_to(ROOT)
    if not defined:
      continue  # a helper (Common/InlineSingleBlockCallees.cpp, an analysis)
    if defined != [f"{path.stem.upper()}PASS"]:
      bad.append(f"{where}: defines {defined}, expected only {path.stem.upper()}PASS")
    folder = (ROOT / "test" / "Compat" if path in compat
              else ROOT / "test" / "Transforms" / path.parent.name)
    lit = folder / f"{_snake(path.stem)}.mlir"
    if not lit.is_file():
      bad.append(f"{where}: no lit test {lit.relative_to(ROOT)}")
  assert not bad, "\n".join(bad)


def test_the_driver_never_runs_a_pass_of_the_compatibility_wing():
  """lib/Compat's passes are declared in include/mpmd/Compat/Passes.td only,
  and nothing the driver links (lib/Transforms, lib/Driver, python/) creates
  one: the core library is the driver's pipeline."""
  compat_td = (ROOT / "include" / "mpmd" / "Compat" / "Passes.td").read_text()
  core_td = (ROOT / "include" / "mpmd" / "Transforms" / "Passes.td").read_text()
  names = re.findall(r"^def (\w+Pass)\b", compat_td, re.M)
  assert len(names) >= 10, names
  assert not set(names) & set(re.findall(r"^def (\w+Pass)\b", core_td, re.M))
  core = [p for d in ("lib/Transforms", "lib/Driver", "python")
          for p in (ROOT / d).rglob("*.cpp")]
  used = sorted({f"{p.relative_to(ROOT)}: {n}" for p in core for n in names
                 if re.search(rf"\bcreate{n}\b|\b{n}Base\b", p.read_text())})
  assert not used, used
