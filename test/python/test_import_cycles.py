"""No import circle in `mpmd/`: the modules of the package, linked by the
imports they run when they are imported (module level, `if TYPE_CHECKING:`
blocks included), form no cycle. A circle makes the import order matter and
hides which stage depends on which; a function that needs a later stage
imports it in its body."""

from __future__ import annotations

import ast
import pathlib

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "mpmd"


def _modules() -> dict[str, pathlib.Path]:
  modules = {}
  for path in PACKAGE.rglob("*.py"):
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
      parts.pop()
    modules[".".join(parts)] = path
  return modules


def _module_level_imports(tree: ast.Module):
  """Import nodes run at import time: the module's statements and those
  nested in its top-level `if`/`try` blocks (not in functions or classes)."""
  pending = list(tree.body)
  while pending:
    node = pending.pop()
    if isinstance(node, (ast.Import, ast.ImportFrom)):
      yield node
    elif isinstance(node, (ast.If, ast.Try)):
      pending.extend(ast.iter_child_nodes(node))
    elif isinstance(node, ast.ExceptHandler):
      pending.extend(node.body)


def import_graph() -> dict[str, set[str]]:
  """Module -> the modules of `mpmd` it imports at import time."""
  modules = _modules()

  def resolve(name: str) -> str | None:
    while name and name not in modules:
      name = name.rpartition(".")[0]
    return name or None

  graph: dict[str, set[str]] = {m: set() for m in modules}
  for name, path in modules.items():
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in _module_level_imports(ast.parse(path.read_text(), str(path))):
      if isinstance(node, ast.Import):
        targets = [resolve(a.name) for a in node.names]
      else:
        base = node.module or ""
        if node.level:
          anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
          base = ".".join(anchor + ([node.module] if node.module else []))
        # `from package import submodule` imports the submodule; a compiled
        # extension (mpmd._mpmd) is no module of this graph.
        targets = [(f"{base}.{a.name}" if f"{base}.{a.name}" in modules else resolve(base))
                   for a in node.names if f"{base}.{a.name}" != "mpmd._mpmd"]
      graph[name].update(t for t in targets if t is not None and t != name)
  return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
  """The strongly connected components of more than one module (Tarjan)."""
  index: dict[str, int] = {}
  low: dict[str, int] = {}
  stack: list[str] = []
  on_stack: set[str] = set()
  found: list[list[str]] = []

  def visit(v: str) -> None:
    index[v] = low[v] = len(index)
    stack.append(v)
    on_stack.add(v)
    for w in sorted(graph[v]):
      if w not in index:
        visit(w)
        low[v] = min(low[v], low[w])
      elif w in on_stack:
        low[v] = min(low[v], index[w])
    if low[v] == index[v]:
      component = []
      while True:
        w = stack.pop()
        on_stack.discard(w)
        component.append(w)
        if w == v:
          break
      if len(component) > 1:
        found.append(sorted(component))

  for v in sorted(graph):
    if v not in index:
      visit(v)
  return found


def test_the_graph_sees_the_package():
  graph = import_graph()
  assert "mpmd.run.program" in graph and "mpmd.jit" in graph
  assert "mpmd.compile.fragment" in graph["mpmd.run.program"]
  assert "mpmd.errors" in graph["mpmd.run.program"]


def test_a_planted_circle_is_found():
  graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
  assert cycles(graph) == [["a", "b", "c"]]


def test_no_import_circle_in_the_package():
  found = cycles(import_graph())
  assert not found, "import circles in mpmd/ (module-level imports): " + "; ".join(
      " <-> ".join(c) for c in found)
