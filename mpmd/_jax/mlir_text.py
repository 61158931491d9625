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

Errors are :class:`ConversionError` (a ``ValueError``) carrying jaxlib's
diagnostics (file:line:col, kind and message). Written against jax/jaxlib 0.10.2 (also runs on 0.11.2); the MLIR
context is JAX's own (:func:`mpmd._jax.lowering.make_ir_context`), with
unregistered dialects allowed so that ops of dialects JAX does not know pass
through unchanged.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from typing import Any

from jax.extend.mlir import ir

from mpmd._jax import lowering as jl
from mpmd.errors import ConversionError

__all__ = [
    "MPMD_OPT_DIALECTS",
    "ConversionError",
    "Diagnostic",
    "Expectation",
    "expectations",
    "first_readable_op",
    "needs_jaxlib",
    "rename_locations",
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


# An `expected-*` annotation of `-verify-diagnostics`, as MLIR's verifier reads it.
_EXPECTED = re.compile(r"expected-(?P<kind>error|warning|note|remark)(?P<re>-re)?[ \t]*"
                       r"(?:@(?P<where>[+-]\d+|above|below|unknown))?[ \t]*(?P<body>\{\{.*)$")


@dataclasses.dataclass(frozen=True)
class Expectation:
  """One ``expected-*`` annotation of a ``-verify-diagnostics`` input."""
  line: int  # the line it is written on
  column: int  # the column `expected-` starts on
  target: int | None  # the line it expects a diagnostic on; None: unknown location
  kind: str  # error, warning, note, remark
  regex: bool  # expected-KIND-re
  body: str  # `{{message}}` to the end of the line

  def comment(self, at_line: int) -> str:
    """The annotation written on line ``at_line``, aimed at the same target and
    starting on the same column (so messages about it name that column)."""
    if self.target is None:
      where = "@unknown"
    elif self.target == at_line:
      where = ""
    else:
      where = f"@{self.target - at_line:+d}"
    indent = " " * max(0, self.column - 4)
    return f"{indent}// expected-{self.kind}{'-re' if self.regex else ''}{where} {self.body}"

  @property
  def message(self) -> str:
    """The expected text: what the outer ``{{`` and ``}}`` enclose."""
    end = self.body.rfind("}}")
    return self.body[2:end] if self.body.startswith("{{") and end >= 2 else self.body

  def matches(self, message: str) -> bool:
    """MLIR's rule: the expected text is in ``message``; with ``-re``, text
    between ``{{`` and ``}}`` is a regular expression and the rest literal."""
    if not self.regex:
      return self.message in message
    pattern, rest = "", self.message
    while rest:
      start = rest.find("{{")
      end = rest.find("}}", start + 2) if start >= 0 else -1
      if start < 0 or end < 0:
        pattern += re.escape(rest)
        break
      pattern += re.escape(rest[:start]) + "(?:" + rest[start + 2:end] + ")"
      rest = rest[end + 2:]
    try:
      return re.search(pattern, message) is not None
    except re.error:
      return False


def expectations(text: str, first_line: int = 1) -> list[Expectation]:
  """The ``expected-*`` annotations of ``text`` (which starts on line
  ``first_line``), each with the line it aims at: ``@+N``/``@-N`` relative to
  its own line, ``@above``/``@below`` the closest line without an annotation
  above/below, none its own line (MLIR's ``-verify-diagnostics`` rules)."""
  found: list[Expectation] = []
  below: list[tuple[int, re.Match[str]]] = []
  last_plain: int | None = None
  for number, line in enumerate(text.splitlines(), start=first_line):
    m = _EXPECTED.search(line)
    if m is None:
      for at, pending in below:
        found.append(_expectation(at, number, pending))
      below, last_plain = [], number
      continue
    where = m.group("where")
    if where == "below":
      below.append((number, m))
      continue
    if where is None:
      target: int | None = number
    elif where == "unknown":
      target = None
    elif where == "above":
      target = last_plain if last_plain is not None else number - 1
    else:
      target = number + int(where)
    found.append(_expectation(number, target, m))
  last = first_line + len(text.splitlines()) - 1
  found += [_expectation(at, last, pending) for at, pending in below]  # dangling: last line
  return found


def _expectation(line: int, target: int | None, m: re.Match[str]) -> Expectation:
  return Expectation(line, m.start() + 1, target, m.group("kind"), bool(m.group("re")), m.group("body").rstrip())


def _context() -> Any:
  ctx = jl.make_ir_context()
  ctx.allow_unregistered_dialects = True
  return ctx


# A top-level alias definition: `!t = tensor<4xf32>`, `#s = #sdy.sharding<...>`.
_ALIAS_DEFINITION = re.compile(r"^[ \t]*[!#][A-Za-z_][\w.$-]*[ \t]*=")


def _first_op_line(lines: list[str]) -> int | None:
  """The index of the line the first top-level op starts on (not blank, a
  comment or an alias definition), or None."""
  return next((i for i, line in enumerate(lines)
               if line.strip() and not line.lstrip().startswith("//")
               and not _ALIAS_DEFINITION.match(line)), None)


def _wrap_in_module(text: str) -> str:
  """``text`` (several top-level ops) inside one ``module { ... }``, every line
  kept where it is: alias definitions stay in front of the module (those that
  come after the first op move to that op's line), ``module {`` opens on the
  first op's line and ``}`` closes after the last line."""
  lines = text.split("\n")
  first_op = _first_op_line(lines)
  if first_op is None:
    return text
  moved = []
  for i in range(first_op + 1, len(lines)):
    if _ALIAS_DEFINITION.match(lines[i]):
      moved.append(lines[i].strip())
      lines[i] = ""
  lines[first_op] = " ".join([*moved, "module {"]) + lines[first_op]
  return "\n".join(lines) + "\n}"


def _parse(text: str, source_name: str, first_line: int) -> Any:
  """Parses ``text`` (which starts on line ``first_line`` of ``source_name``)
  into one operation; several top-level ops are wrapped in a module as MLIR's
  tools do (alias definitions stay outside it). Must run inside a context."""
  # Leading newlines keep the line numbers of the whole file in a piece of it.
  padded = "\n" * (first_line - 1) + text
  try:
    return ir.Operation.parse(padded, source_name=source_name)
  except ir.MLIRError as e:
    if _SINGLE_TOP_LEVEL not in str(e):
      raise _diagnostics(e, source_name, padded) from None
  # Only columns of the first op's line move (see _wrap_in_module).
  wrapped = "\n" * (first_line - 1) + _wrap_in_module(text)
  try:
    return ir.Operation.parse(wrapped, source_name=source_name)
  except ir.MLIRError as e:
    raise _diagnostics(e, source_name, wrapped) from None


_DIAGNOSTIC = re.compile(r'^\s*(?P<kind>error|warning|note|remark): '
                         r'"(?P<file>[^"]*)":(?P<line>\d+):(?P<col>\d+): (?P<message>.*)$')


@dataclasses.dataclass(frozen=True)
class Diagnostic:
  """One diagnostic on a text that could not be converted, located in it."""
  kind: str  # error, warning, note (after the diagnostic it belongs to), remark
  file: str
  line: int
  column: int
  message: str
  #: As MLIR's tools print it: ``file:line:col: kind: message``, the source
  #: line and a caret under the column.
  text: str


def _diagnostic(kind: str, file: str, line: int, col: int, message: str,
                lines: list[str]) -> Diagnostic:
  text = f"{file}:{line}:{col}: {kind}: {message}"
  if 1 <= line <= len(lines) and col >= 1:
    text += f"\n{lines[line - 1]}\n{' ' * (col - 1)}^"
  return Diagnostic(kind, file, line, col, message, text)


def _diagnostics(error: Any, source_name: str, text: str) -> ConversionError:
  """jaxlib's diagnostics as MLIR's tools print them, without the bindings'
  first line ("Unable to parse ...")."""
  lines = text.splitlines()
  out: list[str] = []
  found: list[Diagnostic] = []
  other = False
  raw_lines = str(error).splitlines()
  i = 0
  while i < len(raw_lines):
    raw = raw_lines[i]
    i += 1
    m = _DIAGNOSTIC.match(raw)
    if m is None:
      if not raw.startswith("Unable to parse"):
        out.append(raw)
        other = True
      continue
    message = m.group("message").rstrip()
    # A message of several lines (an op printed for a note) runs on up to the
    # next diagnostic.
    while i < len(raw_lines) and not _DIAGNOSTIC.match(raw_lines[i]):
      message += "\n" + raw_lines[i].rstrip()
      i += 1
    here = m.group("file") == source_name
    d = _diagnostic(m.group("kind"), m.group("file"), int(m.group("line")),
                    int(m.group("col")), message, lines if here else [])
    out.append(d.text)
    found.append(d)
  return ConversionError("\n".join(out), found, other)


def _mlir_string(value: str) -> str:
  """``value`` as MLIR prints a string literal (without the quotes)."""
  out = []
  for byte in value.encode("utf-8"):
    ch = chr(byte)
    out.append(ch if 0x20 <= byte < 0x7F and ch not in '"\\' else f"\\{byte:02X}")
  return "".join(out)


def rename_locations(generic: str, old: str, new: str) -> str:
  """``generic`` (printed with debug locations) with every file location in
  ``old`` moved to file ``new`` (same lines and columns)."""
  pattern = re.compile('"' + re.escape(_mlir_string(old)) + r'":(?=\d)')
  return pattern.sub(lambda _: '"' + _mlir_string(new) + '":', generic)


# Ops that call a function by symbol, readable or generic, and the callee.
_SYMBOL_CALL = re.compile(
    r'(?P<op>\bmpmd\.(?:call|fragment_call)\b)[^@\n]*@(?P<name>[\w$.-]+|"[^"\n]*")'
    r'|(?P<gop>"mpmd\.(?:call|fragment_call)")[^\n]*?\bcallee\s*=\s*@(?P<gname>[\w$.-]+|"[^"\n]*")')
# Function definitions, readable or generic.
_FUNC_DEF = re.compile(
    r'\bfunc\.func\s+(?:(?:public|private|nested)\s+)?@(?P<name>[\w$.-]+|"[^"\n]*")'
    r'|"func\.func"[^\n]*?\bsym_name\s*=\s*"(?P<gname>[^"\n]*)"')
# A top-level op in generic form (`"x.container"() ({ ... })`): an op of an
# unknown dialect holding the functions, where no module is their symbol table.
_GENERIC_TOP_LEVEL_OP = re.compile(r'[ \t]*"(?P<name>[\w$.-]+)"')
_SYMBOL_TABLES = ("builtin.module", "func.func")


def _without_comments(text: str) -> str:
  """`text` with each `//` comment blanked out (positions kept); string
  literals are not looked into (a `//` in one is rare in MLIR text)."""
  return re.sub(r"//[^\n]*", lambda m: " " * len(m.group(0)), text)


def _check_calls(text: str, source_name: str, first_line: int) -> None:
  """Raises ConversionError, as a diagnostic at the call, for an `mpmd.call` or
  `mpmd.fragment_call` whose callee no function of `text` defines, or that
  is not under a module or at the top level: jaxlib's verifier of those ops
  (the `mpmd` dialect it ships) crashes the process on them instead of
  reporting them."""
  code = _without_comments(text)
  calls = list(_SYMBOL_CALL.finditer(code))
  if not calls:
    return
  defined = {(m.group("name") or m.group("gname")).strip('"') for m in _FUNC_DEF.finditer(code)}
  lines = text.split("\n")

  def error(offset: int, message: str) -> ConversionError:
    line = code.count("\n", 0, offset)
    col = offset - (code.rfind("\n", 0, offset) + 1)
    d = _diagnostic("error", source_name, first_line + line, col + 1, message,
                    [""] * (first_line - 1) + lines)
    return ConversionError(d.text, [d])

  first = _first_op_line(lines)
  holder = _GENERIC_TOP_LEVEL_OP.match(lines[first]) if first is not None else None
  if holder is not None and holder.group("name") not in _SYMBOL_TABLES:
    offset = sum(len(line) + 1 for line in lines[:first]) + holder.start("name") - 1
    raise error(offset,
                f"'{holder.group('name')}' holds the functions at the top level, and jaxlib, "
                "which converts the readable ops, cannot check their calls outside a module: "
                "put the functions in a module or at the top level")
  for m in calls:
    name = (m.group("name") or m.group("gname")).strip('"')
    if name not in defined:
      op = (m.group("op") or m.group("gop")).strip('"')
      raise error(m.start(), f"'{op}' calls @{name}, which no func.func of the input defines: "
                  "define it, or fix the name")


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
    ConversionError: jaxlib cannot parse or verify ``text``; the message is
      its diagnostics (``file:line:col: kind: message``).
  """
  _check_calls(text, source_name, first_line)
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
