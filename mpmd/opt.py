"""``python -m mpmd.opt``: ``mpmd-opt`` on the text JAX prints.

    python -m mpmd.opt [--print-readable] [mpmd-opt options] [input.mlir | -]

``jax.jit(f).lower(...).as_text()`` and ``Lowered.as_text("stablehlo")`` print
StableHLO (and CHLO, Shardy) ops in their readable syntax, which the C++
``mpmd-opt`` cannot parse: it carries those dialects as unregistered ops, in
MLIR's generic form only. This command reads the input (a file, or stdin when
it is ``-`` or missing); when it has such readable ops, jaxlib's MLIR bindings
convert it to generic form, keeping every op's location in the input, so that
``mpmd-opt``'s diagnostics name lines of the file you gave. Then the real
``mpmd-opt`` runs with every other argument unchanged; its output, messages and
exit status are passed on. Input ``mpmd-opt`` reads as it is (generic text,
``Lowered.as_text("mpmd")``, the lit tests) is handed over untouched.

The ``mpmd-opt`` binary runs this command itself when its input has readable
ops of those dialects (or ``--print-readable`` is given), asking for readable
output unless ``--mlir-print-op-generic`` is given; it sets ``MPMD_OPT`` to
itself and ``MPMD_OPT_NO_FRONT=1``, and this command sets the latter for every
binary it runs, so the text is never handed back.

``-verify-diagnostics`` checks the input's ``expected-*`` comments on their
lines: the conversion drops comments, so the converted text carries copies of
them aimed at the input's lines, and messages name the input's lines.

``--print-readable`` prints the result with StableHLO, CHLO, Shardy, func and
mpmd ops in readable form: ``mpmd-opt`` prints generic text
(``--mlir-print-op-generic``), which jaxlib parses and prints back.

The ``mpmd-opt`` binary is ``$MPMD_OPT`` if set, else the one on ``PATH``, else
the one installed next to this Python (a wheel's, in a venv not on PATH), else
the build tree's ``build/py/tools/mpmd-opt/mpmd-opt``. Errors of this command
(unreadable input, no binary) are one message on stderr and exit status 1.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from mpmd import knobs
from mpmd.errors import ConversionError, OptError

if TYPE_CHECKING:
  from mpmd._jax.mlir_text import Diagnostic

PROG = "python -m mpmd.opt"
#: The option that asks for readable output (also accepted with one dash).
READABLE_FLAG = "--print-readable"
#: Readable output where jaxlib can print it, else generic with a note (what the
#: ``mpmd-opt`` binary asks for when it hands readable input to this command).
READABLE_IF_POSSIBLE = READABLE_FLAG + "=auto"
#: The build tree's binary, used when neither $MPMD_OPT nor PATH gives one.
BUILD_TREE_MPMD_OPT = (Path(__file__).resolve().parents[1] / "build" / "py" / "tools" /
                       "mpmd-opt" / "mpmd-opt")
#: mpmd-opt options whose value may be the next argument.
_VALUE_OPTIONS = ("-o", "--o")
_HELP_OPTIONS = ("-h", "-help", "--help", "-help-hidden", "--help-hidden", "-help-list",
                 "--help-list", "-version", "--version")
_SPLIT_OPTIONS = ("-split-input-file", "--split-input-file")
_DEFAULT_SPLIT_MARKER = "// -----"

USAGE = f"""\
usage: {PROG} [{READABLE_FLAG}] [mpmd-opt options] [input.mlir | -]

Runs mpmd-opt on MLIR text as JAX prints it (jax.jit(f).lower(x).as_text(),
Lowered.as_text("stablehlo")): readable StableHLO/CHLO/Shardy ops are converted
to MLIR's generic form with jaxlib first, keeping their locations in the input.
Every other argument goes to mpmd-opt unchanged.

  {READABLE_FLAG}   print the result with stablehlo/chlo/sdy/func/mpmd ops in
                     readable form (parsed and printed back by jaxlib)
  {READABLE_IF_POSSIBLE}
                     the same where jaxlib can parse the result, else generic
                     form with a note (the mpmd-opt binary's default for
                     readable input)

mpmd-opt: $MPMD_OPT, else `mpmd-opt` on PATH, else this Python's scripts
directory, else {BUILD_TREE_MPMD_OPT}.
mpmd-opt's own options follow.
"""


@dataclasses.dataclass
class Invocation:
  """The command line, split into what this command handles and the rest."""
  mpmd_opt_args: list[str]
  input_index: int | None  # index of the input in mpmd_opt_args (None: stdin)
  readable: bool | str  # True, False, or "auto" (READABLE_IF_POSSIBLE)
  output: str | None  # -o's value, taken out of mpmd_opt_args when readable
  split_marker: str | None  # -split-input-file's marker, or None
  #: Indices in mpmd_opt_args of -o and its value (when they stay there).
  output_at: tuple[int, ...] = ()


def find_mpmd_opt() -> str:
  """The ``mpmd-opt`` binary to run: ``$MPMD_OPT``, ``PATH``, this Python's scripts
  directory, the build tree."""
  override = knobs.path(knobs.MPMD_OPT)
  if override:
    if not (os.path.isfile(override) and os.access(override, os.X_OK)):
      raise OptError(f"MPMD_OPT={override} is not an executable file")
    return override
  found = shutil.which("mpmd-opt")
  if found:
    return found
  # Installed from a wheel into an environment that is not on PATH (a venv's python
  # run by its path): mpmd-opt is in that environment's scripts directory.
  scripts = Path(sysconfig.get_path("scripts")) / "mpmd-opt"
  if scripts.is_file() and os.access(scripts, os.X_OK):
    return str(scripts)
  if BUILD_TREE_MPMD_OPT.is_file():
    return str(BUILD_TREE_MPMD_OPT)
  raise OptError("mpmd-opt not found: build the project (make), put mpmd-opt on PATH, "
                 "or set MPMD_OPT to the binary")


def _as_positional(arg: str) -> str:
  """``arg``, a positional argument, spelt so that it does not start with ``-``
  (``-`` itself, stdin, stays)."""
  return "./" + arg if arg.startswith("-") and arg != "-" else arg


def parse_args(argv: Sequence[str]) -> Invocation:
  """Splits ``argv`` into this command's option and mpmd-opt's arguments, and
  finds the input (the one argument that is ``-`` or not an option)."""
  readable: bool | str = False
  args: list[str] = []
  for arg in argv:
    if arg in (READABLE_FLAG, READABLE_FLAG[1:]):
      readable = True
    elif arg in (READABLE_IF_POSSIBLE, READABLE_IF_POSSIBLE[1:]):
      readable = readable or "auto"
    else:
      args.append(arg)
  # Arguments after `--` are positional (the input): the separator is taken
  # out (this command adds options of its own after the user's), and an input
  # that looks like an option is given as a path that does not.
  if "--" in args:
    at = args.index("--")
    args = args[:at] + [_as_positional(a) for a in args[at + 1:]]
  inputs, output, output_at, split_marker = [], None, [], None
  i = 0
  while i < len(args):
    arg = args[i]
    if arg in _VALUE_OPTIONS and i + 1 < len(args):
      output, output_at = args[i + 1], [i, i + 1]
      i += 2
      continue
    name, eq, value = arg.partition("=")
    if name in _VALUE_OPTIONS and eq:
      output, output_at = value, [i]
    elif name in _SPLIT_OPTIONS:
      split_marker = value if eq and value else _DEFAULT_SPLIT_MARKER
    elif arg == "-" or not arg.startswith("-"):
      inputs.append(i)
    i += 1
  if len(inputs) > 1:
    raise OptError("more than one input file: " + ", ".join(args[j] for j in inputs) +
                   " (mpmd-opt reads one; give option values with '=', e.g. -o=out.mlir)")
  input_index = inputs[0] if inputs else None
  if readable and output_at:
    # The readable text is written here, not by mpmd-opt.
    for j in reversed(output_at):
      del args[j]
      if input_index is not None and j < input_index:
        input_index -= 1
    output_at = []
  else:
    output = None
  return Invocation(args, input_index, readable, output, split_marker, tuple(output_at))


def _read_input(inv: Invocation) -> tuple[str, str]:
  """(name for messages and locations, text) of the input."""
  path = None if inv.input_index is None else inv.mpmd_opt_args[inv.input_index]
  if path is None or path == "-":
    return "<stdin>", sys.stdin.buffer.read().decode("utf-8", errors="replace")
  try:
    return path, Path(path).read_text(encoding="utf-8", errors="replace")
  except OSError as e:
    raise OptError(f"cannot read {path}: {e.strerror or e}") from None


@dataclasses.dataclass
class Rejected:
  """A piece of the input that jaxlib rejected while converting it: the
  program is invalid (or jaxlib cannot parse it), and its diagnostics, all
  located in the input, stand for mpmd-opt's, which does not run on it."""
  index: int  # the piece's index (0 without -split-input-file)
  first_line: int
  text: str  # the piece
  error: ConversionError
  first_op: str  # "'stablehlo.add' on line 3": its first op in readable form

  def note(self, name: str) -> str:
    last = self.first_line + max(0, len(self.text.splitlines()) - 1)
    return (f"{PROG}: note: mpmd-opt did not run on lines {self.first_line}-{last} of {name}: "
            f"jaxlib reported the above while converting their ops in readable form (first: "
            f"{self.first_op}) to the generic form mpmd-opt reads\n")


@dataclasses.dataclass
class Converted:
  """The input as handed to mpmd-opt, after conversion to generic form."""
  text: str
  #: Lines of ``text`` that stand for other lines of the input (copied
  #: ``expected-*`` annotations, pieces kept as they were), for messages.
  line_map: dict[int, int] = dataclasses.field(default_factory=dict)
  #: Lines up to this one are the input's own (the locations of converted ops).
  input_lines: int = 0
  #: Pieces handed to mpmd-opt empty, because jaxlib rejected them.
  rejected: list[Rejected] = dataclasses.field(default_factory=list)
  #: How many pieces the input has.
  pieces: int = 1


def _convert_piece(index: int, piece: str, name: str, first_line: int) -> str | Rejected | None:
  """One piece in generic form; None to hand it over as it is (mpmd-opt reads
  it, and jaxlib cannot); a :class:`Rejected` when jaxlib's diagnostics on it
  are all located in the input."""
  from mpmd._jax import mlir_text  # noqa: PLC0415 (imports JAX)
  if not piece.strip():
    return None
  try:
    return mlir_text.to_generic(piece, name, first_line)
  except ConversionError as e:
    found = mlir_text.first_readable_op(piece)
    if found is None:
      return None
    line, op = found
    first_op = f"'{op}' on line {first_line + line - 1}"
    if e.diagnostics and not e.other and all(d.file == name for d in e.diagnostics):
      return Rejected(index, first_line, piece, e, first_op)
    raise OptError(
        f"cannot read {name}: it has ops in readable form (first: {first_op}) that mpmd-opt "
        f"reads only in generic form, and jaxlib could not parse it to convert it:\n{e}"
    ) from None


def _to_generic(name: str, text: str, split_marker: str | None,
                verify_as: str | None = None) -> Converted | None:
  """``text`` in generic form for mpmd-opt, or None when it reads it as is.

  Pieces of a ``-split-input-file`` input are converted one by one, each
  keeping its locations in the whole input; a piece mpmd-opt can read as it
  is stays as it is if jaxlib cannot parse it; a piece jaxlib rejects with
  diagnostics in the input is handed over empty (:class:`Rejected`).

  With ``verify_as`` (``-verify-diagnostics``; the path the converted text
  will have), the converted ops are located in that file, on the lines they
  have in the input, and each piece's ``expected-*`` annotations (comments,
  which the conversion drops) follow it, aimed at those lines; the text
  starts below the input's last line so that no line of its own is taken for
  one of the input's."""
  from mpmd._jax import mlir_text  # noqa: PLC0415 (imports JAX)
  pieces = (list(mlir_text.split_chunks(text, split_marker)) if split_marker
            else [(1, text)])
  if not any(mlir_text.needs_jaxlib(piece) for _, piece in pieces):
    return None
  rejected: list[Rejected] = []
  if verify_as is None:
    out = []
    for i, (first_line, piece) in enumerate(pieces):
      generic = _convert_piece(i, piece, name, first_line)
      if isinstance(generic, Rejected):
        rejected.append(generic)
        generic = ""
      out.append(piece if generic is None else generic)
    return Converted(f"\n{split_marker}\n".join(out) if split_marker else out[0],
                     rejected=rejected, pieces=len(pieces))

  input_lines = len(text.splitlines())
  lines = [""] * input_lines
  line_map: dict[int, int] = {}
  for i, (first_line, piece) in enumerate(pieces):
    if i:
      lines.append(split_marker)
    generic = _convert_piece(i, piece, name, first_line)
    if isinstance(generic, Rejected):  # verified here, against its annotations
      rejected.append(generic)
      continue
    if generic is None:  # as it is: its annotations are in it
      for k, line in enumerate(piece.splitlines()):
        lines.append(line)
        line_map[len(lines)] = first_line + k
      continue
    lines += mlir_text.rename_locations(generic, name, verify_as).splitlines()
    for expected in mlir_text.expectations(piece, first_line):
      lines.append(expected.comment(len(lines) + 1))
      line_map[len(lines)] = expected.line
  return Converted("\n".join(lines) + "\n", line_map, input_lines, rejected, len(pieces))


def _without_op_notes(diagnostics: list[Diagnostic]) -> list[Diagnostic]:
  """``diagnostics`` without the notes that print the op (MLIR's tools leave
  them out under ``-verify-diagnostics`` and ``--mlir-print-op-on-diagnostic=false``)."""
  return [d for d in diagnostics
          if not (d.kind == "note" and d.message.startswith("see current operation"))]


def _rejected_messages(rejected: Rejected, name: str, print_op: bool) -> str:
  """What mpmd-opt would print on a piece jaxlib rejected: its diagnostics."""
  shown = rejected.error.diagnostics if print_op else _without_op_notes(
      rejected.error.diagnostics)
  return "".join(d.text + "\n" for d in shown) + rejected.note(name)


def _verify_rejected(rejected: Rejected, name: str) -> str:
  """``-verify-diagnostics`` on a piece jaxlib rejected: its diagnostics
  against the piece's ``expected-*`` annotations, as mpmd-opt checks its own;
  the messages about those that do not match (empty: the piece passes)."""
  from mpmd._jax import mlir_text  # noqa: PLC0415 (imports JAX)
  expected = mlir_text.expectations(rejected.text, rejected.first_line)
  met: set[int] = set()
  out = []
  for d in _without_op_notes(rejected.error.diagnostics):
    hit = next((i for i, e in enumerate(expected)
                if e.kind == d.kind and e.target == d.line and e.matches(d.message)), None)
    if hit is None:
      out.append(d.text.replace(f": {d.kind}: ", f": error: unexpected {d.kind}: ", 1))
    else:
      met.add(hit)
  for i, e in enumerate(expected):
    if i not in met:
      out.append(f"{name}:{e.line}:{e.column}: error: expected {e.kind} "
                 f"\"{e.message}\" was not produced")
  return "".join(line + "\n" for line in out)


def _to_readable(generic: str, split_marker: str | None, debug_info: bool) -> str:
  """mpmd-opt's generic output printed in readable form by jaxlib."""
  from mpmd._jax import mlir_text  # noqa: PLC0415 (imports JAX)
  pieces = ([piece for _, piece in mlir_text.split_chunks(generic, split_marker)]
            if split_marker else [generic])
  out = ""
  for i, piece in enumerate(pieces):
    if i:  # mpmd-opt's separator: a blank line after a non-empty piece, the marker
      out += ("\n" if out else "") + f"{split_marker}\n"
    if piece.strip():
      out += mlir_text.to_readable(piece, "<mpmd-opt output>", debug_info=debug_info)
  return out


def _report_rejected(converted: Converted, name: str, verify: bool,
                     args: Sequence[str]) -> int:
  """Prints what mpmd-opt would on the pieces jaxlib rejected (their
  diagnostics; under ``-verify-diagnostics``, those that do not match the
  pieces' annotations); returns the exit status they call for."""
  status = 0
  for rejected in converted.rejected:
    if verify:
      messages = _verify_rejected(rejected, name)
    else:
      messages = _rejected_messages(rejected, name,
                                    print_op=_flag_set(args, "mlir-print-op-on-diagnostic", True))
    if messages:
      sys.stderr.write(messages)
      status = 1
  sys.stderr.flush()
  return status


def _without_pieces(output: str, split_marker: str, drop: set[int]) -> str:
  """mpmd-opt's ``-split-input-file`` output without the pieces at the
  indices ``drop`` (those it was handed empty: an empty module each)."""
  from mpmd._jax import mlir_text  # noqa: PLC0415 (imports JAX)
  pieces = [piece for _, piece in mlir_text.split_chunks(output, split_marker)]
  kept = [piece.strip("\n") for i, piece in enumerate(pieces) if i not in drop]
  return f"\n{split_marker}\n".join(kept) + "\n" if any(kept) else ""


def _flag_set(args: Sequence[str], flag: str, default: bool = False) -> bool:
  """Whether the boolean mpmd-opt option ``flag`` is on in ``args``."""
  on = default
  for arg in args:
    name, eq, value = arg.lstrip("-").partition("=")
    if name == flag:
      on = not eq or value.lower() in ("true", "1")
  return on


def _keep(text: str, name: str, suffix: str) -> str:
  """Writes ``text`` to a new file named after ``name``; returns its path."""
  stem = "stdin" if name == "<stdin>" else Path(name).stem
  fd, path = tempfile.mkstemp(prefix=f"{stem}.", suffix=suffix)
  with os.fdopen(fd, "w", encoding="utf-8") as f:
    f.write(text)
  return path


def _messages_about_the_input(stderr: str, converted: Converted, generic_path: str,
                              name: str) -> str:
  """mpmd-opt's messages on a converted ``-verify-diagnostics`` input, with
  the lines that stand for lines of the input named as those."""
  pattern = re.compile(re.escape(generic_path) + r":(\d+):")

  def place(m: re.Match[str]) -> str:
    line = int(m.group(1))
    if line <= converted.input_lines:
      return f"{name}:{line}:"
    if line in converted.line_map:
      return f"{name}:{converted.line_map[line]}:"
    return m.group(0)

  return pattern.sub(place, stderr)


def _run_mpmd_opt(binary: str, args: list[str], stdin: bytes | None,
                  generic_path: str | None, name: str,
                  converted: Converted | None = None) -> subprocess.CompletedProcess:
  """Runs mpmd-opt, passes its messages on, and removes the converted input
  unless the messages cite it (then a note says what that file is)."""
  keep = False
  try:
    # The text is converted here: the binary must not hand it back to this command.
    env = {**os.environ, knobs.MPMD_OPT_NO_FRONT: "1"}
    proc = subprocess.run([binary, *args], input=stdin, capture_output=True, check=False,
                          env=env)
    stderr = proc.stderr.decode("utf-8", errors="replace")
    if generic_path is not None and converted is not None and converted.input_lines:
      stderr = _messages_about_the_input(stderr, converted, generic_path, name)
    if generic_path is not None and generic_path in stderr:
      keep = True
      stderr += (f"{PROG}: note: {generic_path} is {name} converted to generic form by "
                 "jaxlib, the text mpmd-opt read (kept for the locations above)\n")
    sys.stderr.write(stderr)
    sys.stderr.flush()
    return proc
  except OSError as e:
    raise OptError(f"cannot run {binary}: {e.strerror or e}") from None
  finally:
    if generic_path is not None and not keep:
      os.unlink(generic_path)


def run(argv: Sequence[str]) -> int:
  """Runs the command; returns the exit status (mpmd-opt's, or 1)."""
  if any(arg in _HELP_OPTIONS for arg in argv):
    if not any("version" in arg for arg in argv):
      sys.stdout.write(USAGE + "\n")
      sys.stdout.flush()
    return subprocess.run([find_mpmd_opt(), *argv], check=False).returncode
  inv = parse_args(argv)
  binary = find_mpmd_opt()
  name, text = _read_input(inv)
  verify = _flag_set(inv.mpmd_opt_args, "verify-diagnostics")
  generic_path = _keep("", name, ".generic.mlir")
  try:
    converted = _to_generic(name, text, inv.split_marker,
                            verify_as=generic_path if verify else None)
  except BaseException:
    os.unlink(generic_path)
    raise

  args = list(inv.mpmd_opt_args)
  stdin: bytes | None = None
  rejected_status = 0
  if converted is not None and converted.rejected:
    rejected_status = _report_rejected(converted, name, verify, args)
    if len(converted.rejected) == converted.pieces:  # nothing left for mpmd-opt
      os.unlink(generic_path)
      return rejected_status
  if converted is not None:
    Path(generic_path).write_text(converted.text, encoding="utf-8")
    if inv.input_index is None:
      args.append(generic_path)
    else:
      args[inv.input_index] = generic_path
  else:
    os.unlink(generic_path)
    generic_path = None
    if name == "<stdin>":
      stdin = text.encode("utf-8")
  if rejected_status and inv.output_at:
    # As mpmd-opt after a failure: no output file (the other pieces'
    # output is not written either).
    args = [a for j, a in enumerate(args) if j not in inv.output_at]
  if inv.readable:
    args.append("--mlir-print-op-generic")
  proc = _run_mpmd_opt(binary, args, stdin, generic_path, name, converted)
  returncode = max(proc.returncode, rejected_status)
  stdout = proc.stdout
  if converted is not None and converted.rejected and inv.split_marker:
    stdout = _without_pieces(stdout.decode("utf-8", errors="replace"), inv.split_marker,
                             {r.index for r in converted.rejected}).encode("utf-8")
  if not inv.readable:
    if not (rejected_status and inv.output_at):
      sys.stdout.buffer.write(stdout)
      sys.stdout.flush()
    return returncode

  out = stdout.decode("utf-8", errors="replace")
  try:
    readable = _to_readable(out, inv.split_marker,
                            debug_info=_flag_set(args, "mlir-print-debuginfo"))
  except ValueError as e:
    if returncode != 0:  # mpmd-opt's messages say what went wrong
      readable = out
    elif inv.readable == "auto":
      readable = out
      first = next((line for line in str(e).splitlines() if line.strip()), "")
      print(f"{PROG}: note: the output is in generic form: jaxlib cannot parse it to print it "
            f"in readable form ({first.strip()})", file=sys.stderr)
    else:
      kept = _keep(out, name, ".out.generic.mlir")
      raise OptError(f"{READABLE_FLAG}: jaxlib cannot parse mpmd-opt's output, so it cannot "
                     f"be printed in readable form:\n{e}\nmpmd-opt's output (generic form) is "
                     f"in {kept}") from None
  if inv.output is None or inv.output == "-":
    sys.stdout.write(readable)
    sys.stdout.flush()
  elif returncode == 0:  # as mpmd-opt, no output file after a failure
    Path(inv.output).write_text(readable, encoding="utf-8")
  return returncode


def main(argv: Sequence[str] | None = None) -> int:
  """Entry point of ``python -m mpmd.opt``: :func:`run` with this command's
  errors printed as one message (exit status 1) instead of a traceback."""
  try:
    return run(sys.argv[1:] if argv is None else argv)
  except OptError as e:
    print(f"{PROG}: error: {e}", file=sys.stderr)
    return 1
  except KeyboardInterrupt:
    return 130
  except BrokenPipeError:  # the reader went away (`| head`): as a C tool, stop quietly
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 1


if __name__ == "__main__":
  sys.exit(main())
