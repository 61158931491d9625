"""Fuzzing `mpmd-opt` with mutated mpmd modules (hypothesis, deterministic).

Valid seed modules (mpmd ops in our pretty syntax, StableHLO in generic form)
are mutated: wrong types, unknown meshes, bad `call_counter`s, wrong operand
counts, deleted/duplicated tokens and lines, swapped attribute values, odd
characters, truncation. Each mutant goes through the `mpmd-opt` binary, plain
and with `-canonicalize`. The tool must never crash: exit status 0 or 1, no
signal, no LLVM crash report; a failure must be reported as an `error:` at a
`file:line:col` of the input. What it accepts must print in a form it reads
back, and what it accepts must survive canonicalization.

Three generated families (#18) check limits against a small model of them:
deep nesting (generic regions, named computations, loops, attribute
dictionaries around the 4096 limit of mpmd/Support/Limits.h: past it, the
documented message), unroll bombs (`mpmd.for` nests up to 2^32-1 iterations
through -mpmd-unroll-for-loops and the import pipeline: over
max-unrolled-ops, the error naming the loop, within seconds; under it, every
iteration unrolled) and topologies (`#mpmd.topology` attributes and the
`topology=` pass option, valid or invalid: accepted exactly when valid, else
the verifier's first error). Known C++ defects are strict xfails.

Bounded for CI (about 35 s on 2 cores): a fixed number of examples per test,
fixed seed (`derandomize=True`), no example database, mpmd-opt runs under an
8 GiB address-space limit. Point `MPMD_OPT` at a binary to fuzz another build.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_TREE_MPMD_OPT = REPO_ROOT / "build" / "py" / "tools" / "mpmd-opt" / "mpmd-opt"

TIMEOUT_S = 10  # per mpmd-opt run: these modules take milliseconds; more is a hang
CRASH_MARKERS = ("PLEASE submit a bug report", "Stack dump", "LLVM ERROR",
                 "Assertion", "Segmentation fault", "UNREACHABLE")


MEMORY_LIMIT_BYTES = 8 << 30  # a bomb that gets past a limit fails here, not the machine


def _limited(cmd: list[str]) -> list[str]:
  """`cmd` under the address-space limit, set by util-linux's `prlimit` (no
  `preexec_fn`: that forks this multithreaded process, which can deadlock)."""
  if _PRLIMIT is None:
    return cmd
  return [_PRLIMIT, f"--as={MEMORY_LIMIT_BYTES}", "--", *cmd]


_PRLIMIT = shutil.which("prlimit")


def _env() -> dict[str, str]:
  env = dict(os.environ)
  env.pop("LD_LIBRARY_PATH", None)
  return env


def _find_mpmd_opt() -> str | None:
  candidates = [os.environ.get("MPMD_OPT"), str(BUILD_TREE_MPMD_OPT),
                shutil.which("mpmd-opt")]
  for candidate in candidates:
    if not candidate or not Path(candidate).exists():
      continue
    try:
      proc = subprocess.run([candidate], input="module {\n}\n", capture_output=True,
                            text=True, timeout=60, env=_env())
    except OSError:
      continue
    if proc.returncode == 0:
      return candidate
  return None


MPMD_OPT = _find_mpmd_opt()
pytestmark = pytest.mark.skipif(MPMD_OPT is None, reason="no runnable mpmd-opt")

# ---------------------------------------------------------------------------
# seed modules (all valid)
# ---------------------------------------------------------------------------

T48 = "tensor<4x8xf32>"
M1 = '!mpmd.mesh_tensor<"m1", tensor<4x8xf32>>'
M1X = '!mpmd.mesh_tensor<"m1", tensor<4x8xf32>, sharding=<@mesh, [{"x"}, {?}]>>'
M2 = '!mpmd.mesh_tensor<"m2", tensor<4x8xf32>>'
TOPO = 'topology = #mpmd.topology<<"m1" : <["x"=2, "y"=2]>>, <"m2" : <["x"=2]>>>'

SEEDS = {
    "named_computations": f"""
func.func @main(%arg0: {T48}, %arg1: {T48}) -> ({T48}, {T48}) {{
  %0:2 = mpmd.named_computation<"stage0"(1)> (%arg0, %arg1) {{call_counter = 0 : ui32}} (%a: {T48}, %b: {T48}) {{
    %1 = "stablehlo.add"(%a, %b) : ({T48}, {T48}) -> {T48}
    mpmd.return %1, %b : {T48}, {T48}
  }} : ({T48}, {T48}) -> ({T48}, {T48})
  %2 = mpmd.named_tensor %0#0 name="activations" : {T48}
  %3 = mpmd.named_computation<"stage1"> (%2) (%c: {T48}) {{
    %4 = "stablehlo.tanh"(%c) : ({T48}) -> {T48}
    mpmd.return %4 : {T48}
  }} : ({T48}) -> {T48}
  return %3, %0#1 : {T48}, {T48}
}}
""",
    "fragments_and_transfers": f"""
!m1 = {M1}
!m1x = {M1X}
!m2 = {M2}
func.func @main(%arg0: !m1, %arg1: !m1x) -> (!m2, !m1) attributes {{{TOPO}}} {{
  %0:2 = mpmd.fragment<mesh="m1", origin=["f", "g"(1)], stage=0, in_shardings=[<@mesh, [{{"x"}}, {{?}}]>, <@mesh, [{{"x"}}, {{?}}]>]> (%arg0, %arg1) {{call_counter = 1 : ui32}} (%a: {T48}, %b: {T48}) {{
    %1 = "stablehlo.multiply"(%a, %b) : ({T48}, {T48}) -> {T48}
    mpmd.return %1, %a : {T48}, {T48}
  }} : (!m1, !m1x) -> (!m1, !m1)
  %2 = mpmd.transfer %0#0 : (!m1) -> !m1x
  %3 = mpmd.transfer %2 : (!m1x) -> !m1
  %4 = mpmd.transfer %3 : (!m1) -> !m2
  %5 = mpmd.fragment<mesh="m2", origin=[]> (%4) (%c: {T48}) {{
    mpmd.return %c : {T48}
  }} : (!m2) -> !m2
  return %5, %0#1 : !m2, !m1
}}
""",
    "fragment_calls": f"""
func.func @main(%arg0: {M1}) -> {M2} attributes {{{TOPO}}} {{
  %0 = mpmd.fragment_call<mesh="m1", origin=["f"(1), "g"]> @frag1(%arg0) {{call_counter = 0 : ui32}} : ({M1}) -> {M1}
  %1 = mpmd.transfer %0 : ({M1}) -> {M2}
  %2 = mpmd.fragment_call<mesh="m2", origin=[]> @frag2(%1) : ({M2}) -> {M2}
  return %2 : {M2}
}}
func.func @frag1(%arg0: {T48}) -> {T48} attributes {{mesh_shape = #sdy.mesh<["x"=2, "y"=2]>}} {{
  %0 = "stablehlo.negate"(%arg0) : ({T48}) -> {T48}
  return %0 : {T48}
}}
func.func @frag2(%arg0: {T48}) -> {T48} attributes {{mesh_shape = #sdy.mesh<["x"=2]>}} {{
  return %arg0 : {T48}
}}
""",
    "loops_and_calls": f"""
func.func @main(%arg0: {M1}, %arg1: {T48}) -> ({M1}, {T48}) attributes {{{TOPO}}} {{
  %0 = mpmd.for (%arg0) {{iterations = 4 : ui32, unroll_factor = 2 : ui32}} (%x: {M1}, %i: tensor<ui32>) {{
    %1 = mpmd.call @body(%x, %i) {{call_counter = 1 : ui32}} : ({M1}, tensor<ui32>) -> {M1}
    mpmd.return %1 : {M1}
  }} : {M1}
  %2:2 = mpmd.for (%arg1, %arg1) {{iterations = 2 : ui32}} (%y: {T48}, %z: {T48}, %index: tensor<ui32>) {{
    mpmd.return %z, %y : {T48}, {T48}
  }} : {T48}, {T48}
  %3 = mpmd.call @local(%2#0) {{call_counter = 0 : ui32}} : ({T48}) -> {T48}
  return %0, %3 : {M1}, {T48}
}}
func.func private @body(%arg0: {M1}, %arg1: tensor<ui32>) -> {M1} attributes {{{TOPO}}} {{
  return %arg0 : {M1}
}}
func.func private @local(%arg0: {T48}) -> {T48} {{
  return %arg0 : {T48}
}}
""",
    "assign_broadcast_reduce": f"""
func.func @main(%arg0: {T48}, %arg1: tensor<4xi1>) -> ({T48}, {T48}, tensor<4xi1>) attributes {{{TOPO}, mpmd.use_set = #mpmd.meshes_with_origins<"m1", "m2"["abc"]>}} {{
  %0 = mpmd.assign {{origin = "f1", mpmd.src_set = #mpmd.meshes_with_origins<"*">}} %arg0 : ({T48}) -> !mpmd.mesh_tensor<"m2", tensor<4x8xf32>, memory_kind="pinned_host">
  %1 = mpmd.unassign {{origin = "f1"}} %0 : (!mpmd.mesh_tensor<"m2", tensor<4x8xf32>, memory_kind="pinned_host">) -> {T48}
  %2 = mpmd.broadcast %1 : {T48}
  %3 = mpmd.broadcast %2 : {T48}
  %4 = mpmd.reduce<add> %3, %arg0 : ({T48}, {T48}) -> {T48}
  %5 = mpmd.reduce<add> %4, %2 : ({T48}, {T48}) -> {T48}
  %6 = mpmd.reduce<none> %5 : ({T48}) -> {T48}
  %7 = mpmd.reduce<or> %arg1, %arg1 : (tensor<4xi1>, tensor<4xi1>) -> tensor<4xi1>
  return %6, %2, %7 : {T48}, {T48}, tensor<4xi1>
}}
""",
    "types_and_attrs": f"""
func.func @types(%arg0: !mpmd.mesh_tensor<"m1", tensor<4x8xf32>, sharding=<@mesh, [{{"x":(1)2, ?}}p1, {{"y"}}], replicated={{"z"}}, unreduced={{"w"}}>>,
                 %arg1: !mpmd.mesh_tensor<"m1", tensor<f32>, memory_kind="device">,
                 %arg2: !mpmd.mesh_tensor<"m2", tensor<?x4xi8>>) attributes {{
    a = #mpmd.topology<<"m1" : <["x"=2, "y"=2], device_ids=[3, 2, 1, 0]>>>,
    b = #mpmd.user_origin<"stage0"(3)>, c = #mpmd.origin<"lbl">, d = #mpmd.reduction<max>,
    e = #mpmd.mesh_with_origins<"m1"["a", "b"]>, f = #mpmd.meshes_with_origins<>,
    g = #mpmd.sharding<@mesh, [{{"x"}}, {{}}]>, h = #mpmd.named_mesh<"m" : <["x"=2]>>,
    i = #mpmd.mesh_axis<"x"=2>, j = #mpmd.axis_ref<"x":(1)2>, k = #mpmd.dim_sharding<{{?}}>}} {{
  return
}}
""",
    # Graph regions (the module body, regions of unregistered ops): values may
    # be used before their definition, so rewrites can meet cycles.
    "graph_regions": f"""
%b0 = "mpmd.broadcast"(%r1) : ({T48}) -> {T48}
%b1 = "mpmd.broadcast"(%b0) : ({T48}) -> {T48}
%r0 = "mpmd.reduce"(%b1, %b0) <{{reduction = #mpmd.reduction<add>}}> : ({T48}, {T48}) -> {T48}
%r1 = "mpmd.reduce"(%r0) <{{reduction = #mpmd.reduction<none>}}> : ({T48}) -> {T48}
%c = "foo.const"() : () -> {T48}
func.func @main(%arg0: {M1}) attributes {{{TOPO}}} {{
  "foo.graph"() ({{
    %t0 = mpmd.transfer %t2 : ({M1X}) -> {M1}
    %t1 = mpmd.transfer %t0 : ({M1}) -> {M1X}
    %t2 = mpmd.transfer %arg0 : ({M1}) -> {M1X}
    %f:2 = mpmd.fragment<mesh="m1", origin=["f"]> (%t0, %t1) (%a: {T48}, %b: {T48}) {{
      mpmd.return %a, %b : {T48}, {T48}
    }} : ({M1}, {M1X}) -> ({M1}, {M1X})
    "foo.use"(%f#0, %f#1) : ({M1}, {M1X}) -> ()
  }}) : () -> ()
  return
}}
""",
    "generic_form": f"""
"builtin.module"() ({{
  "func.func"() <{{function_type = ({M1}, !stablehlo.token) -> ({M1}, !stablehlo.token), sym_name = "main"}}> ({{
  ^bb0(%arg0: {M1}, %arg1: !stablehlo.token):
    %0:2 = "mpmd.fragment"(%arg0, %arg1) <{{mesh_name = "m1", origin = [#mpmd.user_origin<"f">], stage_id = 2 : i64}}> ({{
    ^bb0(%arg2: {T48}, %arg3: !stablehlo.token):
      %1 = "stablehlo.negate"(%arg2) : ({T48}) -> {T48}
      "mpmd.return"(%1, %arg3) : ({T48}, !stablehlo.token) -> ()
    }}) : ({M1}, !stablehlo.token) -> ({M1}, !stablehlo.token)
    %2 = "mpmd.transfer"(%0#0) : ({M1}) -> {M1X}
    %3 = "mpmd.transfer"(%2) : ({M1X}) -> {M1}
    "func.return"(%3, %0#1) : ({M1}, !stablehlo.token) -> ()
  }}) {{{TOPO}}} : () -> ()
}}) : () -> ()
""",
}

# ---------------------------------------------------------------------------
# mutations
# ---------------------------------------------------------------------------

TOKEN_RE = re.compile(
    r'"(?:[^"\\]|\\.)*"|%[\w#]+|![\w.]+|#[\w.]+|@\w+|\w+|->|[^\s\w]')

REPLACEMENTS = {
    # wrong or odd types
    "type": [T48, "tensor<8x4xf32>", "tensor<4xi32>", "tensor<*xf32>", "tensor<f32>",
             "!stablehlo.token", M1, M2, M1X, "tensor<ui32>", "i32", "none", "f32",
             '!mpmd.mesh_tensor<"m1", tensor<4x8xf32>, memory_kind="foo">',
             '!mpmd.mesh_tensor<"m1", tensor<4x8xf32>, sharding=<@mesh, [{"q"}, {}]>>',
             '!mpmd.mesh_tensor<"m1", tensor<4x8xf32>, sharding=<@mesh, [{"x"}]>>',
             '!mpmd.mesh_tensor<"m1", tensor<*xf32>>', '!mpmd.mesh_tensor<"", tensor<4xf32>>',
             "!mpmd.mesh_tensor<\"m1\", !stablehlo.token>", "tensor<0x8xf32>",
             "tensor<9223372036854775807x2xf32>"],
    # mesh names
    "mesh": ['"m1"', '"m2"', '"m9"', '""', '"*"', '"m1/cpu"', '"m1#pinned_host"', "m1", "@m1"],
    # attribute values
    "value": ["0 : ui32", "1 : ui32", "-1 : ui32", "4294967295 : ui32", "4294967296 : ui32",
              "0 : i32", "0 : ui64", "0 : si32", '"x"', "unit", "[]", "{}", "0", "-1",
              "3 : i64", "0.5 : f32", "#mpmd.reduction<none>", '#mpmd.user_origin<"f">',
              '[#mpmd.user_origin<"f">]', '#mpmd.origin<"a">', "dense<1.0> : tensor<4x8xf32>",
              '#sdy.sharding_per_value<[]>', '#mpmd.meshes_with_origins<"m1"[]>',
              "#mpmd.topology<>", '#mpmd.topology<<"m1" : <["x"=2]>>, <"m1" : <["x"=2]>>>',
              '#mpmd.topology<<"m1" : <["x"=2, "x"=2]>>>',
              '#mpmd.topology<<"m1" : <["x"=2], device_ids=[0]>>>'],
    # numbers
    "number": ["0", "-1", "1", "2", "3", "7", "99999999999999999999", "9223372036854775808",
               "-9223372036854775809", "4294967296", "0x10"],
    # keywords and op names
    "keyword": ["mpmd.fragment", "mpmd.transfer", "mpmd.return", "mpmd.for", "mpmd.call",
                "mpmd.reduce", "mpmd.broadcast", "mpmd.assign", "mpmd.unassign",
                "mpmd.named_tensor", "mpmd.named_computation", "mpmd.fragment_call",
                "func.return", "return", "origin", "mesh", "stage", "in_shardings",
                "out_shardings", "iterations", "unroll_factor", "call_counter", "name",
                "sharding", "memory_kind", "replicated", "unreduced", "device_ids", "none",
                "add", "max", "sum"],
}

ODD_SNIPPETS = ["<", ">", "{", "}", "(", ")", "[", "]", '"', "%", "#", "!", "@", ":", ",",
                "=", "?", "\\", "^bb1:", "\x00", "\u00e9", " loc(unknown)", "%0",
                " : ", "-> ", "mpmd.return", '"stablehlo.add"(%a, %a)', "{call_counter}",
                "^bb0(%z: tensor<f32>):", "// comment\n", "\n"]


def _replace_match(text: str, pattern: str, options: list[str], draw) -> str:
  matches = list(re.finditer(pattern, text))
  if not matches:
    return text
  m = matches[draw(st.integers(0, len(matches) - 1))]
  new = draw(st.sampled_from(options))
  return text[:m.start()] + new + text[m.end():]


def _mutate_type(text, draw):
  return _replace_match(
      text, r'!mpmd\.mesh_tensor<"[^"]*", tensor<[^>]*>(?:, [^>]*>?)*>|tensor<[^>]*>|'
      r'!stablehlo\.token|!m\w+', REPLACEMENTS["type"], draw)


def _mutate_mesh(text, draw):
  return _replace_match(text, r'"m[12]"', REPLACEMENTS["mesh"], draw)


def _mutate_value(text, draw):
  return _replace_match(
      text, r'(?<== )(?:\d+ : \w+|"[^"]*"|#mpmd\.\w+<[^>]*>+|\[[^\]]*\])',
      REPLACEMENTS["value"], draw)


def _mutate_call_counter(text, draw):
  return _replace_match(text, r"call_counter = [^,}]+|call_counter",
                        ["call_counter = " + v for v in REPLACEMENTS["value"]] +
                        ["call_counter"], draw)


def _mutate_number(text, draw):
  return _replace_match(text, r"(?<![\w%#])-?\d+", REPLACEMENTS["number"], draw)


def _mutate_keyword(text, draw):
  return _replace_match(text, r"\b(?:mpmd\.\w+|func\.return|return|origin|mesh|stage|"
                        r"iterations|unroll_factor|call_counter|name|none|add|max|or)\b",
                        REPLACEMENTS["keyword"], draw)


def _mutate_operands(text, draw):
  """Deletes, duplicates or swaps an SSA value in a list (wrong operand counts)."""
  matches = list(re.finditer(r"%[\w#]+", text))
  if not matches:
    return text
  m = matches[draw(st.integers(0, len(matches) - 1))]
  action = draw(st.sampled_from(["delete", "duplicate", "swap", "undefined"]))
  if action == "delete":
    start, end = m.start(), m.end()
    if text[end:end + 2] == ", ":
      end += 2
    elif text[start - 2:start] == ", ":
      start -= 2
    return text[:start] + text[end:]
  if action == "duplicate":
    return text[:m.end()] + ", " + m.group() + text[m.end():]
  if action == "swap":
    other = matches[draw(st.integers(0, len(matches) - 1))]
    return text[:m.start()] + other.group() + text[m.end():]
  return text[:m.start()] + "%undefined" + text[m.end():]


def _mutate_rewire(text, draw):
  """Makes an operand use another defined value (in graph regions: cycles)."""
  defs = sorted(set(re.findall(r"(%[\w]+)(?::\d+)? = ", text)))
  uses = [m for m in re.finditer(r"%[\w#]+", text)
          if not re.match(r"(?::\d+)? = |: ", text[m.end():m.end() + 4])]
  if not defs or not uses:
    return text
  m = uses[draw(st.integers(0, len(uses) - 1))]
  return text[:m.start()] + draw(st.sampled_from(defs)) + text[m.end():]


def _mutate_tokens(text, draw):
  """Deletes, duplicates or swaps lexical tokens."""
  tokens = list(TOKEN_RE.finditer(text))
  if not tokens:
    return text
  i = draw(st.integers(0, len(tokens) - 1))
  t = tokens[i]
  action = draw(st.sampled_from(["delete", "duplicate", "swap"]))
  if action == "delete":
    return text[:t.start()] + text[t.end():]
  if action == "duplicate":
    return text[:t.end()] + " " + t.group() + text[t.end():]
  j = draw(st.integers(0, len(tokens) - 1))
  u = tokens[j]
  if u.start() < t.start():
    t, u = u, t
  if t.end() > u.start():
    return text
  return text[:t.start()] + u.group() + text[t.end():u.start()] + t.group() + text[u.end():]


def _mutate_lines(text, draw):
  lines = text.split("\n")
  i = draw(st.integers(0, len(lines) - 1))
  action = draw(st.sampled_from(["delete", "duplicate", "swap", "move"]))
  if action == "delete":
    del lines[i]
  elif action == "duplicate":
    lines.insert(i, lines[i])
  else:
    j = draw(st.integers(0, len(lines) - 1))
    if action == "swap":
      lines[i], lines[j] = lines[j], lines[i]
    else:
      lines.insert(j, lines.pop(i))
  return "\n".join(lines)


def _mutate_swap_attributes(text, draw):
  """Swaps the values of two attributes (`key = value` or `#mpmd...`)."""
  matches = list(re.finditer(r'#mpmd\.\w+<(?:[^<>]|<[^<>]*(?:<[^<>]*>[^<>]*)*>)*>|'
                             r'\d+ : \w+|"[^"]*"', text))
  if len(matches) < 2:
    return text
  i, j = sorted(draw(st.lists(st.integers(0, len(matches) - 1), min_size=2, max_size=2,
                              unique=True)))
  a, b = matches[i], matches[j]
  return text[:a.start()] + b.group() + text[a.end():b.start()] + a.group() + text[b.end():]


def _mutate_insert(text, draw):
  pos = draw(st.integers(0, len(text)))
  return text[:pos] + draw(st.sampled_from(ODD_SNIPPETS)) + text[pos:]


def _mutate_truncate(text, draw):
  return text[:draw(st.integers(0, len(text)))]


MUTATIONS = {
    "type": _mutate_type,
    "mesh": _mutate_mesh,
    "value": _mutate_value,
    "call_counter": _mutate_call_counter,
    "number": _mutate_number,
    "keyword": _mutate_keyword,
    "operands": _mutate_operands,
    "rewire": _mutate_rewire,
    "tokens": _mutate_tokens,
    "lines": _mutate_lines,
    "swap_attributes": _mutate_swap_attributes,
    "insert": _mutate_insert,
    "truncate": _mutate_truncate,
}

# ---------------------------------------------------------------------------
# running mpmd-opt
# ---------------------------------------------------------------------------


def _run(path: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
  cmd = [MPMD_OPT, *args] + ([] if stdin is not None else [str(path)])
  return subprocess.run(_limited(cmd), input=stdin, capture_output=True, text=True,
                        errors="replace", timeout=TIMEOUT_S, env=_env())


def _check_not_crashed(proc: subprocess.CompletedProcess, what: str, text: str) -> str:
  """Exit status 0 or 1, no signal, no LLVM crash report; returns a report."""
  report = f"{what}\n--- stderr ---\n{proc.stderr[-4000:]}\n--- input ---\n{text}"
  assert proc.returncode in (0, 1), f"mpmd-opt exited with {proc.returncode}: {report}"
  for marker in CRASH_MARKERS:
    assert marker not in proc.stderr, f"mpmd-opt crashed ({marker!r}): {report}"
  return report


def _check_no_crash(proc: subprocess.CompletedProcess, what: str, source: str,
                    text: str) -> None:
  report = _check_not_crashed(proc, what, text)
  if proc.returncode == 1:
    assert re.search(re.escape(source) + r":\d+:\d+: error: ", proc.stderr), (
        f"a failure must be reported as `error:` at {source}:line:col: {report}")


def _check(text: str) -> None:
  with tempfile.TemporaryDirectory() as tmp:
    path = Path(tmp) / "input.mlir"
    path.write_bytes(text.encode("utf-8", errors="replace"))
    plain = _run(path)
    _check_no_crash(plain, "mpmd-opt input.mlir", str(path), text)
    canonical = _run(path, "-canonicalize")
    _check_no_crash(canonical, "mpmd-opt -canonicalize input.mlir", str(path), text)
    if plain.returncode != 0:
      assert canonical.returncode != 0, (
          f"-canonicalize accepts a module the verifier rejects:\n{plain.stderr}\n{text}")
      return
    assert canonical.returncode == 0, (
        f"-canonicalize breaks a valid module:\n{canonical.stderr}\n--- input ---\n{text}")
    # What we print, we read back (and it stays valid), both outputs.
    for name, out in (("printed", plain.stdout), ("canonicalized", canonical.stdout)):
      again = _run(path, stdin=out)
      _check_no_crash(again, f"re-parsing the {name} module", "<stdin>", out)
      assert again.returncode == 0, (
          f"mpmd-opt cannot read back the module it {name}:\n{again.stderr}\n"
          f"--- {name} ---\n{out}\n--- input ---\n{text}")


@pytest.mark.parametrize("name", sorted(SEEDS))
def test_seed_is_valid(name: str):
  """The fuzzer starts from modules mpmd-opt accepts (plain and canonicalized)."""
  text = SEEDS[name]
  with tempfile.TemporaryDirectory() as tmp:
    path = Path(tmp) / "input.mlir"
    path.write_text(text)
    for args in ([], ["-canonicalize"]):
      proc = _run(path, *args)
      assert proc.returncode == 0, f"seed {name} rejected ({args}):\n{proc.stderr}"
  _check(text)


FUZZ_SETTINGS = dict(deadline=None, derandomize=True, database=None,
                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@settings(max_examples=110, **FUZZ_SETTINGS)
@given(seed=st.sampled_from(sorted(SEEDS)),
       mutations=st.lists(st.sampled_from(sorted(MUTATIONS)), min_size=1, max_size=3),
       data=st.data())
@pytest.mark.slow
def test_mutants_never_crash(seed: str, mutations: list[str], data):
  text = SEEDS[seed]
  for mutation in mutations:
    text = MUTATIONS[mutation](text, data.draw)
  _check(text)


@settings(max_examples=40, **FUZZ_SETTINGS)
@given(rewires=st.integers(1, 3), data=st.data())
def test_graph_region_cycles_never_hang(rewires: int, data):
  """Rewired operands in graph regions make cycles (`%0 = broadcast(%0)`):
  canonicalization must neither loop forever nor replace an op by itself."""
  text = SEEDS["graph_regions"]
  for _ in range(rewires):
    text = _mutate_rewire(text, data.draw)
  _check(text)


# ---------------------------------------------------------------------------
# generated families: deep nesting, unroll bombs, invalid topologies (#18)
# ---------------------------------------------------------------------------
# Each family generates modules (or pass options) whose outcome a small model
# predicts: mpmd-opt must not crash or hang, and must give the documented
# diagnostic where the model says the input is over a limit or invalid.

T4 = "tensor<4xf32>"
GENERATED_SETTINGS = dict(FUZZ_SETTINGS, suppress_health_check=list(HealthCheck))


def _run_text(text: str, *args: str, timeout: float = TIMEOUT_S
              ) -> tuple[subprocess.CompletedProcess, str, float]:
  """Runs mpmd-opt on `text` (as input.mlir): the result, the path it had, seconds."""
  with tempfile.TemporaryDirectory() as tmp:
    path = Path(tmp) / "input.mlir"
    path.write_text(text)
    start = time.monotonic()
    try:
      proc = subprocess.run(_limited([MPMD_OPT, *args, str(path)]), capture_output=True,
                            text=True, errors="replace", timeout=timeout, env=_env())
    except subprocess.TimeoutExpired:
      pytest.fail(f"mpmd-opt {' '.join(args)} hangs (over {timeout} s) on:\n{_excerpt(text)}")
    return proc, str(path), time.monotonic() - start


def _excerpt(text: str, limit: int = 3000) -> str:
  return text if len(text) <= limit else (
      f"{text[:limit // 2]}\n... ({len(text)} characters) ...\n{text[-limit // 2:]}")


def _check_outcome(proc: subprocess.CompletedProcess, what: str, source: str, text: str,
                   error: str | None = None) -> None:
  """No crash; a failure is an `error:` at a location of the input (or, for
  errors not tied to the input, e.g. a malformed pass option, `<unknown>:0`
  or MLIR's pass-option parser's message).
  With `error`, the run must fail with that message."""
  report = _check_not_crashed(proc, what, _excerpt(text))
  if proc.returncode == 1:
    # (A malformed pass pipeline option is MLIR's `<Pass-Options-Parser>:`.)
    assert re.search(re.escape(source) + r":\d+:\d+: error: |^<unknown>:0: error: |"
                     r"^<Pass-Options-Parser>: ",
                     proc.stderr, re.M), (
        f"a failure must be reported as `error:` at {source}:line:col: {report}")
  if error is not None:
    assert proc.returncode == 1 and error in proc.stderr, (
        f"{what}: expected the error {error!r}\n--- stderr ---\n{proc.stderr[-3000:]}\n"
        f"--- input ---\n{_excerpt(text)}")


# -- (a) deep nesting --------------------------------------------------------


def _nesting_limit() -> int:
  header = REPO_ROOT / "include" / "mpmd" / "Support" / "Limits.h"
  m = re.search(r"kMaxNestingDepth = (\d+);", header.read_text()) if header.exists() else None
  return int(m.group(1)) if m else 4096


NESTING_LIMIT = _nesting_limit()
NESTING_MESSAGE = (
    f"error: the module nests regions, attributes or types more than {NESTING_LIMIT} deep, "
    "the most mpmd accepts: flatten the program (e.g. fewer nested calls or loops)")
NESTING_DEPTHS = [100, NESTING_LIMIT - 1, NESTING_LIMIT + 1, 10_000]  # (the limit: below)


def _first_place_over_limit(text: str, limit: int = NESTING_LIMIT) -> tuple[int, int] | None:
  """(line, column) where one kind of bracket first nests over `limit`, as
  the documented check (lib/Support/Limits.cpp) counts it: `{`, `[`, `(` and
  `<` each on its own, strings and `//` comments skipped, the `>` of `->`
  closing nothing, stray closers not going below zero; None if never."""
  opens, closes = "{[(<", "}])>"
  depth = [0, 0, 0, 0]
  line, column, in_string, i = 1, 0, False, 0
  while i < len(text):
    c = text[i]
    column += 1
    if c == "\n":
      line, column = line + 1, 0
    elif in_string:
      if c == "\\":
        i += 1
        column += 1
      elif c == '"':
        in_string = False
    elif c == '"':
      in_string = True
    elif text.startswith("//", i):
      end = text.find("\n", i)
      i = (len(text) if end < 0 else end) - 1
    elif c in opens:
      k = opens.index(c)
      depth[k] += 1
      if depth[k] > limit:
        return line, column
    elif c in closes and not (c == ">" and i > 0 and text[i - 1] == "-"):
      k = closes.index(c)
      depth[k] = max(0, depth[k] - 1)
    i += 1
  return None


def _first_line_over_limit(text: str, limit: int = NESTING_LIMIT) -> int | None:
  place = _first_place_over_limit(text, limit)
  return None if place is None else place[0]


def _nest(kinds: list[str]) -> str:
  """@main whose body nests one layer per kind, outermost first: `generic` (an
  unregistered op's region), `named_computation`, `for` (one iteration). The
  brace depth is len(kinds) + 1 (the function body)."""
  opening, closing = [], []
  value = "%arg0"
  for k, kind in enumerate(kinds):
    if kind == "generic":
      opening.append('"t.op"() ({')
      closing.append("}) : () -> ()")
    elif kind == "named_computation":
      opening.append(f'%r{k} = mpmd.named_computation<"s"> ({value}) (%a{k}: {T4}) {{')
      closing.append(f"  mpmd.return %a{k} : {T4}\n}} : ({T4}) -> {T4}")
      value = f"%a{k}"
    else:
      opening.append(f"%r{k} = mpmd.for ({value}) {{iterations = 1 : ui32}} "
                     f"(%x{k}: {T4}, %i{k}: tensor<ui32>) {{")
      closing.append(f"  mpmd.return %x{k} : {T4}\n}} : {T4}")
      value = f"%x{k}"
  return "\n".join([f"func.func @main(%arg0: {T4}) -> {T4} {{", *opening,
                    f'"t.leaf"({value}) : ({T4}) -> ()', *reversed(closing),
                    f"return %arg0 : {T4}", "}", ""])


def _check_nesting(text: str, *args: str) -> subprocess.CompletedProcess:
  proc, path, _ = _run_text(text, *args)
  place = _first_place_over_limit(text)
  what = f"mpmd-opt {' '.join(args)} on a deep nest"
  if place is None:
    _check_outcome(proc, what, path, text)
    return proc
  # Over the limit: the documented diagnostic, before anything is parsed.
  assert proc.returncode == 1, f"{what}: accepted, over the limit:\n{proc.stderr[-2000:]}"
  _check_not_crashed(proc, what, _excerpt(text))
  assert proc.stderr == f"{path}:{place[0]}:{place[1]}: {NESTING_MESSAGE}\n", (
      f"{what}: not the documented diagnostic:\n{proc.stderr[-2000:]}")
  return proc


def test_nesting_limit_matches_the_header():
  assert f"more than {NESTING_LIMIT} deep" in NESTING_MESSAGE
  assert _first_line_over_limit(_nest(["generic"] * (NESTING_LIMIT - 1))) is None
  assert _first_line_over_limit(_nest(["generic"] * NESTING_LIMIT)) is not None


@pytest.mark.parametrize("depth", NESTING_DEPTHS)
@pytest.mark.parametrize("kind", ["generic", "named_computation"])
def test_deep_nesting(kind: str, depth: int):
  """Nests `depth` braces deep (function body included): up to the limit
  mpmd-opt parses, verifies and prints them; past it, the documented error."""
  text = _nest([kind] * (depth - 1))
  proc = _check_nesting(text)
  assert (proc.returncode == 0) == (depth <= NESTING_LIMIT), proc.stderr[-2000:]


@pytest.mark.parametrize("depth", [NESTING_LIMIT, NESTING_LIMIT + 1])
def test_deep_nesting_through_the_import_pipeline(depth: int):
  """The import pipeline (its walks recurse per region) at and past the limit."""
  text = _nest(["generic"] * (depth - 1))
  proc = _check_nesting(text, "-mpmd-import-pipeline=topology=m0:x=1")
  assert (proc.returncode == 0) == (depth <= NESTING_LIMIT), proc.stderr[-2000:]


@pytest.mark.parametrize("depth", [NESTING_LIMIT, NESTING_LIMIT + 1])
def test_deep_attribute_dictionaries(depth: int):
  """Attribute dictionaries count as nesting too (`{a = {a = ...}}`)."""
  text = ("func.func @f() attributes " + "{a = " * (depth - 1) + "{}" + "}" * (depth - 1) +
          " {\n  return\n}\n")
  proc = _check_nesting(text)
  assert (proc.returncode == 0) == (depth <= NESTING_LIMIT), proc.stderr[-2000:]


@settings(max_examples=6, **GENERATED_SETTINGS)
@given(pattern=st.lists(st.sampled_from(["generic", "named_computation", "for"]),
                        min_size=1, max_size=4),
       depth=st.sampled_from([2, 3, 17, 64, NESTING_LIMIT - 1, NESTING_LIMIT,
                              NESTING_LIMIT + 1, NESTING_LIMIT + 64]))
def test_mixed_deep_nesting(pattern: list[str], depth: int):
  """Regions of different ops nested (a repeated pattern), around the limit;
  shallow ones also go through -canonicalize and the import pipeline (which
  rejects nested named computations with an error)."""
  text = _nest([pattern[i % len(pattern)] for i in range(depth - 1)])
  proc = _check_nesting(text)
  assert (proc.returncode == 0) == (depth <= NESTING_LIMIT), proc.stderr[-2000:]
  if depth <= 64:
    _check_nesting(text, "-canonicalize")
    _check_nesting(text, "-mpmd-import-pipeline=topology=m0:x=1 assignment=s@m0")


def test_nesting_check_ignores_comments():
  deep = _nest(["generic"] * (NESTING_LIMIT + 10))
  proc, _, _ = _run_text("// " + "}" * (NESTING_LIMIT + 20) + "\n" + deep)
  assert proc.returncode == 1 and NESTING_MESSAGE in proc.stderr, "a deep nest gets through"
  proc, _, _ = _run_text("// " + "{" * (NESTING_LIMIT + 20) + "\n" + _nest(["generic"]))
  assert proc.returncode == 0, proc.stderr


def test_deep_array_attribute_is_rejected():
  n = 1_000_000
  proc, path, _ = _run_text(f"func.func @f() attributes {{a = {'[' * n}{']' * n}}} {{ return }}")
  _check_outcome(proc, "mpmd-opt on deeply nested arrays", path, "([ * 1e6)")


# -- (b) unroll bombs --------------------------------------------------------

U64_MAX = 2**64 - 1
U32_MAX = 2**32 - 1
DEFAULT_MAX_UNROLLED_OPS = 1_000_000
UNROLL_BOMB_TIMEOUT_S = 5  # the size check comes before any unrolling: milliseconds


@dataclass
class Loop:
  """An `mpmd.for` in the model; a body item is a Loop or "op" (one negate)."""
  iterations: int
  unroll_factor: int | None
  body: list  # of Loop | str


def _sat(x: int) -> int:
  return min(x, U64_MAX)


def _size(item) -> int:
  """Ops `item` stands for once unrolled, as UnrollForLoops.cpp counts them
  (terminators included, saturating at 2^64-1)."""
  if not isinstance(item, Loop):
    return 1
  inner = _sat(1 + sum(_size(x) for x in item.body))  # + mpmd.return
  return _sat(1 + inner * item.iterations)


def _negates(items) -> int:
  return sum(1 if not isinstance(x, Loop) else x.iterations * _negates(x.body) for x in items)


def _loops(items):
  for x in items:
    if isinstance(x, Loop):
      yield x
      yield from _loops(x.body)


def _render_loops(items) -> tuple[str, dict[int, int]]:
  """@main running `items` in sequence on one value; also the line of each
  top-level loop (by id)."""
  lines = [f"func.func @main(%arg0: {T4}) -> {T4} {{"]
  where: dict[int, int] = {}
  counter = iter(range(10**9))

  def emit(item, value, top):
    k = next(counter)
    if not isinstance(item, Loop):
      lines.append(f'%v{k} = "stablehlo.negate"({value}) : ({T4}) -> {T4}')
      return f"%v{k}"
    if top:
      where[id(item)] = len(lines) + 1
    factor = "" if item.unroll_factor is None else f", unroll_factor = {item.unroll_factor} : ui32"
    lines.append(f"%r{k} = mpmd.for ({value}) {{iterations = {item.iterations} : ui32{factor}}} "
                 f"(%x{k}: {T4}, %i{k}: tensor<ui32>) {{")
    inner = f"%x{k}"
    for x in item.body:
      inner = emit(x, inner, False)
    lines.append(f"mpmd.return {inner} : {T4}")
    lines.append(f"}} : {T4}")
    return f"%r{k}"

  value = "%arg0"
  for item in items:
    value = emit(item, value, True)
  lines += [f"return {value} : {T4}", "}", ""]
  return "\n".join(lines), where


def _verifier_errors(items) -> list[str]:
  errors = []
  for loop in _loops(items):
    if loop.iterations == 0:
      errors.append("'mpmd.for' op must have at least one iteration")
    elif loop.unroll_factor is not None and (loop.unroll_factor == 0 or
                                             loop.iterations % loop.unroll_factor):
      errors.append(f"'mpmd.for' op unroll_factor {loop.unroll_factor} must divide "
                    f"iterations {loop.iterations}")
  return errors


def _unroll_bomb_error(items, cap: int) -> tuple[str, Loop] | None:
  """The size error (and the loop it names) when unrolling is over `cap`."""
  total = _sat(1 + 1 + sum(_size(x) for x in items))  # func.func, return
  if cap == 0 or total <= cap:
    return None
  top = [x for x in items if isinstance(x, Loop)]
  if not top:  # nothing to unroll: a function's own size is not capped
    return None
  largest = max(top, key=_size)  # the first of the largest, as the pass picks it
  size = _size(largest)
  nested = ", with nested loops" if any(isinstance(x, Loop) for x in _loops(largest.body)) or any(
      isinstance(x, Loop) for x in largest.body) else ""
  made = "more than 2^64" if size == U64_MAX else str(size)
  whole = "more than 2^64" if total == U64_MAX else str(total)
  return (f"error: unrolling this mpmd.for ({largest.iterations} iterations{nested}) would make "
          f"@main {whole} ops ({made} of them this loop's), over the limit of {cap} ops a "
          f"function (option max-unrolled-ops of -mpmd-unroll-for-loops): use fewer iterations "
          f"(microbatches), or raise the limit",
          largest)


def _check_unroll(items, *args: str, cap: int, timeout: float = TIMEOUT_S
                  ) -> subprocess.CompletedProcess:
  text, where = _render_loops(items)
  proc, path, seconds = _run_text(text, *args, timeout=timeout)
  what = f"mpmd-opt {' '.join(args)}"
  _check_outcome(proc, what, path, text)
  verifier = _verifier_errors(items)
  if verifier:
    assert proc.returncode == 1 and any(e in proc.stderr for e in verifier), (
        f"{what}: expected one of {verifier}:\n{proc.stderr[-3000:]}\n{_excerpt(text)}")
    return proc
  bomb = _unroll_bomb_error(items, cap)
  if bomb is not None:
    message, loop = bomb
    assert proc.returncode == 1 and f"{path}:{where[id(loop)]}:" in proc.stderr and (
        message in proc.stderr), (
            f"{what}: expected at line {where[id(loop)]}: {message}\n--- stderr ---\n"
            f"{proc.stderr[-3000:]}\n--- input ---\n{_excerpt(text)}")
    assert seconds < UNROLL_BOMB_TIMEOUT_S, f"{what}: {seconds:.1f} s to reject an unroll bomb"
    return proc
  partial = [loop for loop in _loops(items)
             if loop.unroll_factor is not None and loop.unroll_factor != loop.iterations]
  if partial:
    assert proc.returncode == 1 and any(
        f"only full unrolling is supported: unroll_factor {loop.unroll_factor} must equal "
        f"iterations {loop.iterations}" in proc.stderr for loop in partial), proc.stderr[-3000:]
    return proc
  assert proc.returncode == 0, f"{what} rejects:\n{proc.stderr[-3000:]}\n{_excerpt(text)}"
  if "-mpmd-unroll-for-loops" in " ".join(args):
    assert "mpmd.for" not in proc.stdout
    assert proc.stdout.count('"stablehlo.negate"') == _negates(items), proc.stdout[-3000:]
  return proc


def _chain(iterations: list[int], factor=None, ops: int = 1) -> Loop:
  """Loops nested in each other, outermost first, `ops` negates innermost."""
  loop = Loop(iterations[-1], factor, ["op"] * ops)
  for n in reversed(iterations[:-1]):
    loop = Loop(n, factor, [loop])
  return loop


def _unroll_pass(cap: int) -> str:
  return f"-mpmd-unroll-for-loops=max-unrolled-ops={cap}"


IMPORT_PIPELINE = "-mpmd-import-pipeline=topology=m0:x=1"
UNROLL_BOMBS = {
    "max_iterations": [Loop(U32_MAX, U32_MAX, ["op"])],
    "max_iterations_no_factor": [Loop(U32_MAX, None, ["op", "op"])],
    "max_iterations_empty_body": [Loop(U32_MAX, None, [])],
    "2^31_iterations": [Loop(2**31, 2**31, ["op"])],
    "nest_2^24": [_chain([2] * 24)],
    "nest_over_cap_by_one_level": [_chain([10] * 6)],  # 10^6 negates + loop overhead
    "nest_saturating": [_chain([U32_MAX] * 64)],
    "nest_of_1000s": [_chain([1000, 1000, 1000])],
    "many_siblings": [Loop(1000, None, ["op"]) for _ in range(600)],
    "siblings_in_a_loop": [Loop(1000, None, [Loop(2, None, ["op"]) for _ in range(200)])],
    "small_then_bomb": [Loop(2, None, ["op"]), "op", _chain([65536, 65536])],
}


@pytest.mark.parametrize("via", ["pass", "import"])
@pytest.mark.parametrize("name", sorted(UNROLL_BOMBS))
def test_unroll_bombs(name: str, via: str):
  """Loops whose unrolling would be over the default max-unrolled-ops fail
  quickly with the error naming the (largest outermost) loop."""
  items = UNROLL_BOMBS[name]
  assert _unroll_bomb_error(items, DEFAULT_MAX_UNROLLED_OPS) is not None
  _check_unroll(items, "-mpmd-unroll-for-loops" if via == "pass" else IMPORT_PIPELINE,
                cap=DEFAULT_MAX_UNROLLED_OPS)


def test_unroll_cap_boundary():
  """A function exactly at max-unrolled-ops unrolls; one op more does not."""
  items = [_chain([3, 4, 5])]
  total = 2 + _size(items[0])
  _check_unroll(items, _unroll_pass(total), cap=total)
  _check_unroll(items, _unroll_pass(total - 1), cap=total - 1)


ITERATIONS = st.one_of(st.just(1), st.integers(1, 2), st.integers(1, 4), st.sampled_from(
    [7, 1000, 1001, 65536, 2**31, U32_MAX - 1, U32_MAX]))
FACTORS = {  # the unroll_factors of a mode: valid, partial unrolling, rejected by the verifier
    "valid": ["none", "none", "same"],
    "partial": ["none", "same", "divisor"],
    "invalid": ["other", "zero", "zero_iterations"],
}


@st.composite
def _loop_items(draw, mode: str | None = None, depth: int = 0):
  """Loops (trees, and chains of up to 40) and negates."""
  if mode is None:
    mode = draw(st.sampled_from(["valid", "valid", "valid", "partial", "invalid"]))

  def set_factor(loop):
    kind = draw(st.sampled_from(FACTORS[mode]))
    n = loop.iterations
    if kind == "same":
      loop.unroll_factor = n
    elif kind == "divisor":
      loop.unroll_factor = next((d for d in range(2, min(n, 1000)) if n % d == 0), n)
    elif kind == "other":
      loop.unroll_factor = n + 1 if n < U32_MAX else 2
    elif kind == "zero":
      loop.unroll_factor = 0
    elif kind == "zero_iterations":
      loop.iterations = 0

  items = []
  for _ in range(draw(st.integers(0 if depth else 1, 3))):
    kind = draw(st.sampled_from(["op", "loop", "chain"] if depth < 3 else ["op"]))
    if kind == "op":
      items.append("op")
    elif kind == "loop":
      loop = Loop(draw(ITERATIONS), None, draw(_loop_items(mode, depth + 1)))
      set_factor(loop)
      items.append(loop)
    else:
      length = draw(st.sampled_from([2, 3, 5, 8, 13, 40]))
      iterations = draw(st.lists(ITERATIONS, min_size=length, max_size=length))
      chain = _chain(iterations, None, draw(st.integers(0, 2)))
      set_factor(draw(st.sampled_from(list(_loops([chain])))))
      items.append(chain)
  return items


@settings(max_examples=30, **GENERATED_SETTINGS)
@given(items=_loop_items(), cap=st.sampled_from([1, 100, 1000, 5000, 20000]))
def test_generated_unroll_bombs(items, cap: int):
  """Generated loop nests against a small max-unrolled-ops: rejected by the
  verifier, rejected as too large (naming the loop), rejected as partial
  unrolling, or fully unrolled with every iteration's ops; through the import
  pipeline too, when that is not a large unroll."""
  if not any(isinstance(x, Loop) for x in items):
    items = [Loop(2, None, items)]  # (no loop at all: see test_unroll_cap_without_loops)
  _check_unroll(items, _unroll_pass(cap), cap=cap)
  total = 2 + sum(_size(x) for x in items)
  if total > DEFAULT_MAX_UNROLLED_OPS or total <= 20000:
    _check_unroll(items, IMPORT_PIPELINE, cap=DEFAULT_MAX_UNROLLED_OPS)


MAX_LOOP_DEPTH = 256  # kMaxLoopDepth of lib/Transforms/Import/UnrollForLoops.cpp


def test_deep_loop_nest_is_refused_quickly():
  """Unrolling copies each level's inner levels (time grows with the square
  of the depth): nests deeper than 256 loops are an error, at once."""
  text, _ = _render_loops([_chain([1] * (MAX_LOOP_DEPTH + 44))])
  proc, path, seconds = _run_text(text, "-mpmd-unroll-for-loops", timeout=5)
  assert proc.returncode == 1, proc.stderr[-2000:]
  _check_not_crashed(proc, "a 300-deep loop nest", _excerpt(text))
  assert (f"error: this mpmd.for is nested in {MAX_LOOP_DEPTH} other mpmd.for loops, the most "
          "mpmd unrolls: flatten the loop nest") in proc.stderr, proc.stderr[-2000:]
  assert seconds < UNROLL_BOMB_TIMEOUT_S
  _check_unroll([_chain([1] * MAX_LOOP_DEPTH)], "-mpmd-unroll-for-loops",
                cap=DEFAULT_MAX_UNROLLED_OPS, timeout=5)


def test_unroll_cap_without_loops():
  text = _render_loops(["op", "op"])[0]
  proc, path, _ = _run_text(text, _unroll_pass(1))
  _check_outcome(proc, "mpmd-opt -mpmd-unroll-for-loops=max-unrolled-ops=1", path, text)


# -- (c) invalid topologies --------------------------------------------------

I64_MIN, I64_MAX = -2**63, 2**63 - 1
MAX_MESH_DEVICES = 2**31  # kMaxMeshDevices


@dataclass
class MeshSpec:
  name: str
  axes: list  # of (name, size)
  device_ids: list | None = None


def _quote(s: str) -> str:
  return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _render_topology(meshes: list[MeshSpec]) -> str:
  parts = []
  for mesh in meshes:
    axes = ", ".join(f"{_quote(a)}={n}" for a, n in mesh.axes)
    ids = ("" if mesh.device_ids is None else
           f", device_ids=[{', '.join(map(str, mesh.device_ids))}]")
    parts.append(f"<{_quote(mesh.name)} : <[{axes}]{ids}>>")
  return f"#mpmd.topology<{', '.join(parts)}>"


def _mesh_error(mesh: MeshSpec) -> str | None:
  """The first error of one mesh, as the parser and MeshAxisAttr/MeshAttr's
  verifiers (lib/Dialect/MpmdAttrs.cpp) give it."""
  for axis, size in mesh.axes:
    if not I64_MIN <= size <= I64_MAX:
      return "integer value too large"
    if not axis:
      return "mesh axis name must not be empty"
    if size <= 0:
      return f'mesh axis "{axis}" must have a positive size, got {size}'
  if mesh.device_ids is not None and any(not I64_MIN <= i <= I64_MAX for i in mesh.device_ids):
    return "integer value too large"
  seen, devices = set(), 1
  for axis, size in mesh.axes:
    if axis in seen:
      return f'mesh has duplicate axis "{axis}"'
    seen.add(axis)
    if size > MAX_MESH_DEVICES // devices:
      return (f"mesh axes hold more than {MAX_MESH_DEVICES} devices (axis \"{axis}\" of size "
              f"{size} after {devices} devices)")
    devices *= size
  ids = mesh.device_ids or []
  if ids and len(ids) != devices:
    return f"mesh has {len(ids)} device ids but its axes hold {devices} devices"
  seen_ids = set()
  for i in ids:
    if i < 0:
      return f"mesh device id {i} is negative"
    if i in seen_ids:
      return f"mesh lists device id {i} twice"
    seen_ids.add(i)
  return None


def _topology_error(meshes: list[MeshSpec]) -> str | None:
  """The first error of a #mpmd.topology, or None when it is valid."""
  if not meshes:
    return "failed to parse Mpmd_TopologyAttr parameter 'meshes'"
  for mesh in meshes:
    if error := _mesh_error(mesh):
      return error
  names, owner = set(), {}
  for mesh in meshes:
    if not mesh.name:
      return "topology mesh names must not be empty"
    if mesh.name in names:
      return f'topology has duplicate mesh "{mesh.name}"'
    names.add(mesh.name)
    for i in mesh.device_ids or []:
      if i in owner:
        return (f'device id {i} is in both mesh "{owner[i]}" and mesh "{mesh.name}": meshes of a '
                "topology use disjoint devices")
      owner[i] = mesh.name
  return None


MESH_NAMES = st.sampled_from(["m0", "m1", "m2", "", "*", "stage 1", "\u00e9"])
AXIS_NAMES = st.sampled_from(["x", "y", "data", ""])
SIZES = st.one_of(st.integers(1, 4), st.sampled_from([
    0, -1, -2, 3, 8, 715827882, 715827883, 2**30, 2**31, 2**31 + 1, 2**32, 2**62, I64_MAX,
    I64_MAX + 1, I64_MIN, I64_MIN - 1, 10**20]))
# (I64_MAX as a device id is left out: see test_device_id_int64_max)
DEVICE_IDS = st.one_of(st.integers(0, 9), st.sampled_from([-1, I64_MIN, 2**31, I64_MAX - 1,
                                                            I64_MAX + 1]))


TOPOLOGY_FAULTS = ["none", "axis_size", "axis_name", "duplicate_axis",
                   "too_many_devices", "device_count", "negative_id", "duplicate_id",
                   "overlapping_ids", "duplicate_mesh", "empty_mesh_name", "no_meshes",
                   "integer_too_large", "random"]


@st.composite
def _meshes(draw, fault: str) -> list[MeshSpec]:
  """Valid meshes (distinct names and axes, disjoint device ids or none) with
  `fault` and maybe another one put in, or random ones."""
  faults = [fault] + draw(st.lists(st.sampled_from(TOPOLOGY_FAULTS), max_size=1))
  if "random" in faults:
    return draw(_random_meshes())
  names = draw(st.lists(st.sampled_from(["m0", "m1", "m2", "*", "stage 1", "\u00e9"]),
                        min_size=1, max_size=3, unique=True))
  meshes, next_device = [], 0
  for name in names:
    axes = draw(st.lists(st.tuples(st.sampled_from(["x", "y", "data"]), st.integers(1, 4)),
                         max_size=3, unique_by=lambda a: a[0]))
    ids = None
    if draw(st.booleans()):
      devices = 1
      for _, size in axes:
        devices *= size
      ids = list(range(next_device, next_device + devices))
      next_device += devices
      if draw(st.booleans()):
        ids = ids[::-1]
    meshes.append(MeshSpec(name, axes, ids))
  for fault in faults:
    mesh = draw(st.sampled_from(meshes)) if meshes else None
    if fault == "axis_size" and mesh:
      mesh.axes.append(("z", draw(st.sampled_from([0, -1, -2**31, I64_MIN]))))
    elif fault == "axis_name" and mesh:
      mesh.axes.insert(draw(st.integers(0, len(mesh.axes))), ("", 2))
    elif fault == "duplicate_axis" and mesh and mesh.axes:
      mesh.axes.append((mesh.axes[0][0], draw(st.integers(1, 4))))
    elif fault == "too_many_devices" and mesh:
      mesh.axes += [("big", draw(st.sampled_from([2**31 // 3, 2**31 // 3 + 1, 2**31, 2**31 + 1,
                                                 2**32, 2**62, I64_MAX])))]
    elif fault == "device_count" and mesh:
      mesh.device_ids = (mesh.device_ids or [0]) + [1000]
    elif fault == "negative_id" and mesh:
      mesh.axes, mesh.device_ids = [("x", 2)], [draw(st.integers(0, 9)), 0]
      mesh.device_ids[draw(st.integers(0, 1))] = draw(st.sampled_from([-1, I64_MIN]))
    elif fault == "duplicate_id" and mesh:
      mesh.axes, mesh.device_ids = [("x", 3)], [100, 101, 101]
    elif fault == "overlapping_ids" and mesh:
      if len(meshes) < 2:
        meshes.append(MeshSpec("m9", [("x", 1)]))
      first, last = meshes[0], meshes[-1]
      first.axes, first.device_ids = [("x", 2)], [200, 201]
      last.axes, last.device_ids = [("y", 2)], [draw(st.sampled_from([201, 202])), 200]
    elif fault == "duplicate_mesh" and mesh:
      meshes.append(MeshSpec(mesh.name, [("x", 1)]))
    elif fault == "empty_mesh_name" and mesh:
      mesh.name = ""
    elif fault == "no_meshes":
      meshes = []
    elif fault == "integer_too_large" and mesh:
      if mesh.device_ids and draw(st.booleans()):
        mesh.device_ids[0] = draw(st.sampled_from([I64_MAX + 1, I64_MIN - 1, 10**20]))
      else:
        mesh.axes.append(("w", draw(st.sampled_from([I64_MAX + 1, I64_MIN - 1, 10**20]))))
  return meshes


@st.composite
def _random_meshes(draw) -> list[MeshSpec]:
  meshes = []
  next_device = 0
  for _ in range(draw(st.integers(0, 4))):
    axes = draw(st.lists(st.tuples(AXIS_NAMES, SIZES), max_size=3))
    devices = 1
    for _, size in axes:
      devices *= size
    kind = draw(st.sampled_from(["none", "none", "fresh", "fresh", "overlap", "random"]))
    ids = None
    if kind in ("fresh", "overlap") and 0 < devices <= 16:
      start = next_device if kind == "fresh" else draw(st.integers(0, max(0, next_device - 1)))
      ids = list(range(start, start + devices))
      next_device = max(next_device, start + devices)
      if draw(st.booleans()):
        ids.reverse()
    elif kind == "random":
      ids = draw(st.lists(DEVICE_IDS, max_size=5))
    meshes.append(MeshSpec(draw(MESH_NAMES), axes, ids))
  if meshes and draw(st.booleans()):  # a duplicate mesh name
    meshes.append(MeshSpec(meshes[0].name, [("x", 1)]))
  return meshes


def _topology_module(topology: str) -> str:
  return (f"func.func @main(%arg0: {T4}) -> {T4} attributes {{topology = {topology}}} {{\n"
          f'  %0 = mpmd.named_computation<"f"> (%arg0) (%a: {T4}) {{\n'
          f'    %1 = "stablehlo.negate"(%a) : ({T4}) -> {T4}\n'
          f"    mpmd.return %1 : {T4}\n"
          f"  }} : ({T4}) -> {T4}\n"
          f"  return %0 : {T4}\n}}\n")


@pytest.mark.parametrize("fault", TOPOLOGY_FAULTS)
@settings(max_examples=3, **GENERATED_SETTINGS)
@given(data=st.data())
def test_generated_topologies(fault: str, data):
  """A generated #mpmd.topology is accepted exactly when the model says it is
  valid, else rejected at its location with the model's (first) error; a
  valid one goes through the import pipeline (errors, if any, at a location)."""
  meshes = data.draw(_meshes(fault))
  text = _topology_module(_render_topology(meshes))
  error = _topology_error(meshes)
  proc, path, _ = _run_text(text)
  _check_outcome(proc, "mpmd-opt on a topology", path, text,
                 error=None if error is None else f": error: {error}")
  if error is None:
    assert proc.returncode == 0, f"valid topology rejected:\n{proc.stderr}\n{text}"
    proc, path, _ = _run_text(text, f"-mpmd-import-pipeline=assignment=f@{meshes[0].name}")
    _check_outcome(proc, "mpmd-opt -mpmd-import-pipeline", path, text)


@pytest.mark.parametrize("attribute", [
    '"m0:x=4;m1:x=4"', '"m0:x=4"', '""', "5", "unit", "[]", '#mpmd.mesh<["x"=2]>',
    '[#mpmd.topology<<"m0" : <["x"=1]>>>]', '{m0 = #mpmd.mesh<["x"=2]>}'])
def test_topology_of_another_kind(attribute: str):
  """A `topology` that is not a #mpmd.topology (e.g. the option's string)."""
  text = _topology_module(attribute)
  proc, path, _ = _run_text(text, "-mpmd-import-pipeline=assignment=f@m0")
  _check_outcome(proc, "mpmd-opt -mpmd-import-pipeline", path, text,
                 error="attribute `topology` of @main must be a #mpmd.topology<...> listing the "
                 "meshes, got ")


def test_device_id_int64_max():
  text = _topology_module(_render_topology([MeshSpec("m0", [("x", 1)], [I64_MAX])]))
  proc, path, _ = _run_text(text)
  assert "twice" not in proc.stderr, proc.stderr


# The topology= option: `name:axis=size,...;...` (Common/TextOptions.cpp).


def _option_error(text: str) -> str | None:
  """The first error of the topology option `text` (no spaces, quotes or
  braces: the pass-option parser's own syntax), None when valid; "" for an
  empty option (nothing to set: no function has a topology)."""
  if not text:
    return "no function has a `topology` attribute"
  meshes = []
  for part in (p.strip() for p in text.split(";") if p):
    name, _, axes = part.partition(":")
    name = name.strip()
    if ":" not in part or not name:
      return (f"malformed topology entry '{part}': expected 'name:axis=size,...' "
              "(e.g. 'm0:data=4;m1:data=4')")
    parsed = []
    for item in (i for i in axes.split(",") if i):
      axis, _, size = item.strip().partition("=")
      size = size.strip()
      if not axis.strip() or not re.fullmatch(r"-?\d+", size) or not (
          I64_MIN <= int(size) <= I64_MAX):
        return (f"malformed axis '{item.strip()}' of mesh \"{name}\" in the topology: "
                "expected axis=size")
      parsed.append((axis.strip(), int(size)))
    meshes.append(MeshSpec(name, parsed))
  if not meshes:
    return "topology must have at least one mesh"
  return _topology_error(meshes)


def _option_topology(text: str) -> str:
  meshes = []
  for part in (p.strip() for p in text.split(";") if p):
    name, _, axes = part.partition(":")
    meshes.append(MeshSpec(name.strip(), [
        (i.strip().partition("=")[0].strip(), int(i.strip().partition("=")[2]))
        for i in axes.split(",") if i]))
  return _render_topology(meshes)


OPTION_FAULTS = ["none", "no_colon", "empty_name", "empty_axis", "bad_size",
                 "duplicate_mesh", "duplicate_axis", "too_many_devices", "empty_parts",
                 "nothing"]
BAD_SIZES = ["0", "-1", "-0", "", "x", "+4", "0x10", "4=4", "1.5", "9223372036854775808",
             "-9223372036854775808", "99999999999999999999"]


@st.composite
def _topology_options(draw, fault: str) -> str:
  """A valid option text (`m0:x=2,y=4;m1:data=8`) with `fault` and maybe
  another one put in."""
  names = draw(st.lists(st.sampled_from(["m0", "m1", "stage_1", "*"]), min_size=1, max_size=3,
                        unique=True))
  meshes = [[name, draw(st.lists(st.tuples(st.sampled_from(["x", "y", "data"]),
                                           st.sampled_from(["1", "2", "4", "007", "65536"])),
                                 max_size=3, unique_by=lambda a: a[0]))] for name in names]
  separator, tail = ";", ""
  for fault in [fault] + draw(st.lists(st.sampled_from(OPTION_FAULTS), max_size=1)):
    name, axes = draw(st.sampled_from(meshes))
    if fault == "no_colon":
      meshes[meshes.index([name, axes])][0] = name + draw(st.sampled_from(["", "="]))
      axes.insert(0, None)  # (rendered without the colon)
    elif fault == "empty_name":
      meshes[meshes.index([name, axes])][0] = ""
    elif fault == "empty_axis":
      axes.append(("", "2"))
    elif fault == "bad_size":
      axes.append(("z", draw(st.sampled_from(BAD_SIZES))))
    elif fault == "duplicate_mesh":
      meshes.append([name, [("x", "1")]])
    elif fault == "duplicate_axis" and axes and axes[0]:
      axes.append((axes[0][0], "2"))
    elif fault == "too_many_devices":
      axes += [("a", "65536"), ("b", draw(st.sampled_from(["32768", "32769"])))]
    elif fault == "empty_parts":
      separator, tail = draw(st.sampled_from([(";;", ";"), (";", ";;"), (",;", "")]))
    elif fault == "nothing":
      return draw(st.sampled_from(["", ";", ";;", ":", "m0"]))
  parts = []
  for name, axes in meshes:
    if axes and axes[0] is None:
      parts.append(name + ",".join(f"{a}={n}" for a, n in axes[1:]))
    else:
      parts.append(f"{name}:" + ",".join(f"{a}={n}" for a, n in axes))
  return separator.join(parts) + tail


OPTION_MODULE = _topology_module('#mpmd.topology<<"m0" : <["x"=1]>>>').replace(
    ' attributes {topology = #mpmd.topology<<"m0" : <["x"=1]>>>}', "")


@pytest.mark.parametrize("fault", OPTION_FAULTS)
@settings(max_examples=3, **GENERATED_SETTINGS)
@given(data=st.data(), via=st.sampled_from(["set", "import"]))
def test_generated_topology_options(fault: str, data, via: str):
  """The topology= option of -mpmd-set-topology and of the import pipeline:
  the model's error (at a location), or @main gets exactly that topology."""
  option = data.draw(_topology_options(fault))
  arg = (f"-mpmd-set-topology=topology={option}" if via == "set" else
         f"-mpmd-import-pipeline=topology={option} assignment=f@m0")
  proc, path, _ = _run_text(OPTION_MODULE, arg)
  error = _option_error(option)
  what = f"mpmd-opt {arg}"
  _check_outcome(proc, what, path, OPTION_MODULE,
                 error=None if error is None else f": error: {error}")
  if error is not None:
    assert re.search(re.escape(path) + r":\d+:\d+: error: ", proc.stderr), proc.stderr
  elif via == "set":
    assert proc.returncode == 0, f"{what}: rejected:\n{proc.stderr}"
    assert f"attributes {{topology = {_option_topology(option)}}}" in proc.stdout, proc.stdout


@settings(max_examples=20, **GENERATED_SETTINGS)
@given(option=st.text(alphabet="m01:;,=x \"'{}\\-9", max_size=24),
       via=st.sampled_from(["set", "import"]))
def test_malformed_topology_options_never_crash(option: str, via: str):
  """Any text as the option (spaces, quotes and braces are the pass-option
  parser's): an error (possibly `<unknown>:0:` for the option syntax) or success."""
  arg = (f"-mpmd-set-topology=topology={option}" if via == "set" else
         f"-mpmd-import-pipeline=topology={option} assignment=f@m0")
  proc, path, _ = _run_text(OPTION_MODULE, arg)
  _check_outcome(proc, f"mpmd-opt {arg}", path, OPTION_MODULE)
