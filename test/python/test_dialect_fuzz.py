"""Fuzzing `mpmd-opt` with mutated mpmd modules (hypothesis, deterministic).

Valid seed modules (mpmd ops in our pretty syntax, StableHLO in generic form)
are mutated: wrong types, unknown meshes, bad `call_counter`s, wrong operand
counts, deleted/duplicated tokens and lines, swapped attribute values, odd
characters, truncation. Each mutant goes through the `mpmd-opt` binary, plain
and with `-canonicalize`. The tool must never crash: exit status 0 or 1, no
signal, no LLVM crash report; a failure must be reported as an `error:` at a
`file:line:col` of the input. What it accepts must print in a form it reads
back, and what it accepts must survive canonicalization.

Bounded for CI: 150 mutants, fixed seed (`derandomize=True`), no
example database. Point `MPMD_OPT` at a binary to fuzz another build.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_TREE_MPMD_OPT = REPO_ROOT / "build" / "py" / "tools" / "mpmd-opt" / "mpmd-opt"

TIMEOUT_S = 10  # per mpmd-opt run: these modules take milliseconds; more is a hang
CRASH_MARKERS = ("PLEASE submit a bug report", "Stack dump", "LLVM ERROR",
                 "Assertion", "Segmentation fault", "UNREACHABLE")


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
  return subprocess.run(cmd, input=stdin, capture_output=True, text=True,
                        errors="replace", timeout=TIMEOUT_S, env=_env())


def _check_no_crash(proc: subprocess.CompletedProcess, what: str, source: str,
                    text: str) -> None:
  report = f"{what}\n--- stderr ---\n{proc.stderr[-4000:]}\n--- input ---\n{text}"
  assert proc.returncode in (0, 1), f"mpmd-opt exited with {proc.returncode}: {report}"
  for marker in CRASH_MARKERS:
    assert marker not in proc.stderr, f"mpmd-opt crashed ({marker!r}): {report}"
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
