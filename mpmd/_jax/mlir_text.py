"""MLIR text in the forms JAX prints and the forms ``mpmd-opt`` reads.

``jax.jit(f).lower(...).as_text()`` and ``Lowered.as_text("stablehlo")`` print
StableHLO, CHLO and Shardy ops in their readable (custom) syntax. The C++
``mpmd-opt`` registers only the ``mpmd``, ``func`` and ``builtin`` dialects and
carries every other op as an unregistered op, which MLIR can parse only in
generic form (``"stablehlo.add"(%a, %b) : (...) -> ...``). jaxlib's MLIR
bindings know all of JAX's dialects (``mpmd`` included: jaxlib ships a
textually compatible one), so they translate between the two forms:

* :func:`needs_jaxlib` -- whether a text has readable ops ``mpmd-opt`` cannot
  parse;
* :func:`to_generic` -- parse with jaxlib, print in generic form *with* debug
  locations, so that ``mpmd-opt``'s diagnostics point into the text the user
  gave (an op without a ``loc(...)`` in the input gets its line and column in
  that text; an op with one keeps it, e.g. JAX's Python source lines);
* :func:`to_readable` -- parse ``mpmd-opt``'s generic output with jaxlib and
  print it back in readable form;
* :func:`split_chunks` -- the pieces of a ``-split-input-file`` input, each
  with the line it starts on.

Errors are ``ValueError`` carrying jaxlib's diagnostics (file:line:col and
message). Written against jax/jaxlib 0.10.2; the MLIR context is JAX's own
(:func:`mpmd._jax.lowering.make_ir_context`), with unregistered dialects
allowed so that ops of dialects JAX does not know pass through unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from jax.extend.mlir import ir

from mpmd._jax import lowering as jl

__all__ = [
    "MPMD_OPT_DIALECTS",
    "first_readable_op",
    "needs_jaxlib",
    "split_chunks",
    "to_generic",
    "to_readable",
]

#: Dialects whose readable syntax ``mpmd-opt`` parses itself (see
#: tools/mpmd-opt/mpmd-opt.cpp); ``builtin.module`` prints as ``module``.
MPMD_OPT_DIALECTS = frozenset({"mpmd", "func", "builtin"})

# An op in custom syntax starts a line, after its results if it has any:
# `%0:2 = stablehlo.foo ...`, `stablehlo.return %x`, `sdy.mesh @m = ...`.
# Generic ops are quoted (`%0 = "stablehlo.foo"(...)`), attributes and types
# start with `#` / `!`, and comments with `//`, so none of them match.
_CUSTOM_OP = re.compile(
    r"^[ \t]*(?:%[^\n=\"]*=[ \t]*)?(?P<dialect>[A-Za-z_][\w$]*)\.(?P<op>[A-Za-z_][\w$.]*)",
    re.MULTILINE)

_SINGLE_TOP_LEVEL = "source must contain a single top-level operation"


def first_readable_op(text: str) -> tuple[int, str] | None:
  """(line, op name) of the first op in custom syntax of a dialect that
  ``mpmd-opt`` does not know (e.g. ``stablehlo.add``), or None."""
  for m in _CUSTOM_OP.finditer(text):
    if m.group("dialect") not in MPMD_OPT_DIALECTS:
      return text.count("\n", 0, m.start()) + 1, f"{m.group('dialect')}.{m.group('op')}"
  return None


def needs_jaxlib(text: str) -> bool:
  """Whether ``text`` has ops ``mpmd-opt`` can read only in generic form."""
  return first_readable_op(text) is not None


def split_chunks(text: str, marker: str = "// -----") -> Iterator[tuple[int, str]]:
  """(first line, text) of each piece of ``text`` between lines that are
  ``marker`` (as ``mpmd-opt -split-input-file`` cuts its input)."""
  start, lines = 1, []
  for number, line in enumerate(text.splitlines(keepends=True), start=1):
    if line.strip() == marker:
      yield start, "".join(lines)
      start, lines = number + 1, []
    else:
      lines.append(line)
  yield start, "".join(lines)


def _context() -> Any:
  ctx = jl.make_ir_context()
  ctx.allow_unregistered_dialects = True
  return ctx


def _parse(text: str, source_name: str, first_line: int) -> Any:
  """Parses ``text`` (which starts on line ``first_line`` of ``source_name``)
  into one operation; several top-level ops are wrapped in a module as MLIR's
  tools do. Must run inside a context."""
  # Leading newlines keep the line numbers of the whole file in a piece of it.
  padded = "\n" * (first_line - 1) + text
  try:
    return ir.Operation.parse(padded, source_name=source_name)
  except ir.MLIRError as e:
    if _SINGLE_TOP_LEVEL not in str(e):
      raise ValueError(_diagnostics(e, source_name, padded)) from None
  # `module {` on the first line keeps every line number (only columns of
  # line `first_line` move).
  wrapped = "\n" * (first_line - 1) + "module {" + text + "\n}"
  try:
    return ir.Operation.parse(wrapped, source_name=source_name)
  except ir.MLIRError as e:
    raise ValueError(_diagnostics(e, source_name, wrapped)) from None


_DIAGNOSTIC = re.compile(r'^(?P<indent>\s*)(?P<kind>error|warning|note|remark): '
                         r'"(?P<file>[^"]*)":(?P<line>\d+):(?P<col>\d+): (?P<message>.*)$')


def _diagnostics(error: Any, source_name: str, text: str) -> str:
  """jaxlib's diagnostics as MLIR's tools print them (``file:line:col: error:
  message``, the source line and a caret under the column), without the
  bindings' first line ("Unable to parse ...")."""
  lines = text.splitlines()
  out = []
  for raw in str(error).splitlines():
    m = _DIAGNOSTIC.match(raw)
    if m is None:
      if not raw.startswith("Unable to parse"):
        out.append(raw)
      continue
    line, col = int(m.group("line")), int(m.group("col"))
    out.append(f"{m.group('indent')}{m.group('file')}:{line}:{col}: {m.group('kind')}: "
               f"{m.group('message').rstrip()}")
    if m.group("file") == source_name and 1 <= line <= len(lines) and col >= 1:
      out.append(m.group("indent") + lines[line - 1])
      out.append(m.group("indent") + " " * (col - 1) + "^")
  return "\n".join(out)


def to_generic(text: str, source_name: str, first_line: int = 1) -> str:
  """``text`` (any mix of readable and generic ops of JAX's dialects, plus
  unregistered ops in generic form) in MLIR's generic form, with locations.

  Args:
    text: The module text.
    source_name: The file name locations refer to (the user's file, or
      ``<stdin>``).
    first_line: The line of that file ``text`` starts on (for a piece of a
      ``-split-input-file`` input).

  Raises:
    ValueError: jaxlib cannot parse or verify ``text``; the message is its
      diagnostics (``"file":line:col: message``).
  """
  with _context():
    op = _parse(text, source_name, first_line)
    return op.operation.get_asm(print_generic_op_form=True, enable_debug_info=True,
                                large_elements_limit=None)


def to_readable(text: str, source_name: str, *, debug_info: bool = False) -> str:
  """``text`` (a module, e.g. ``mpmd-opt``'s generic output) printed by jaxlib
  in readable form: StableHLO, CHLO, Shardy, func and mpmd ops in their
  custom syntax, ops of unknown dialects generic. With ``debug_info`` the
  locations are printed too.

  Raises:
    ValueError: jaxlib cannot parse or verify ``text``.
  """
  with _context():
    op = _parse(text, source_name, 1)
    out = op.operation.get_asm(enable_debug_info=debug_info, large_elements_limit=None)
  return out if out.endswith("\n") else out + "\n"
