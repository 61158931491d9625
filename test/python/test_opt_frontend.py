"""`python -m mpmd.opt`: mpmd-opt on the text JAX prints (issue #17).

JAX prints StableHLO in readable form, which the C++ `mpmd-opt` cannot parse
(it carries the dialect as unregistered ops, generic form only). The front end
converts such text with jaxlib (mpmd/_jax/mlir_text.py), runs the real binary
with every other argument and passes on its output, messages and exit status;
`--print-readable` prints the result back in readable form. Each test runs the
command as a user would, in a fresh process, on text JAX printed.
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import pytest
from jax.extend.mlir import ir

import mpmd
from mpmd import opt
from mpmd._jax import lowering as jl
from mpmd._jax import mlir_text
from models import init_mlp, make_batch, make_topology, sgd_step

ROOT = pathlib.Path(__file__).resolve().parents[2]
TOPOLOGY = "topology=m0:x=2;m1:x=2"
ASSIGNMENT = "assignment=stage0@m0,stage1@m1"
IMPORT = f"-mpmd-import-pipeline={TOPOLOGY} {ASSIGNMENT}"
# mpmd.jit's optimize pipeline with no schedule: merges the last stage's
# forward with its backward, as mpmd.jit does.
OPTIMIZE = "-mpmd-optimize-pipeline"
CALLS = re.compile(r"mpmd\.fragment_call<mesh=\"(\w+)\", origin=\[([^\]]*)\]>")


def _binary() -> str:
  try:
    return opt.find_mpmd_opt()
  except opt.OptError:
    pytest.skip("no mpmd-opt binary")


def run_opt(*args: str, cwd: pathlib.Path, stdin: str | None = None,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
  """`python -m mpmd.opt ARGS` in `cwd`, as a user runs it."""
  return subprocess.run([sys.executable, "-m", "mpmd.opt", *args], cwd=cwd, input=stdin,
                        capture_output=True, text=True, timeout=300, check=False,
                        env=env)


def jaxlib_generic(text: str) -> str:
  """`text` parsed by jaxlib and printed in generic form (no locations)."""
  ctx = jl.make_ir_context()
  ctx.allow_unregistered_dialects = True
  with ctx:
    return ir.Module.parse(text).operation.get_asm(print_generic_op_form=True)


@pytest.fixture(scope="module")
def step():
  """A real two-stage training step: (as_text("stablehlo"), as_text("mpmd"))."""
  config = mpmd.make_config(make_topology(2, 2), {"stage0": "m0", "stage1": "m1"})
  lowered = mpmd.jit(sgd_step, config).lower(init_mlp(2), *make_batch())
  return lowered.as_text("stablehlo"), lowered.as_text("mpmd")


@pytest.fixture
def step_file(step, tmp_path) -> pathlib.Path:
  path = tmp_path / "lowered.mlir"
  path.write_text(step[0])
  return path


def test_a_real_step_runs_from_the_text_jax_prints(step, step_file, tmp_path):
  """`as_text("stablehlo")` is readable StableHLO that MLIR's parser in the
  binary rejects; the front end (`python -m mpmd.opt`, or the binary, which
  hands such input to it) runs the import and export pipelines on it and gets
  the driver's program."""
  binary = _binary()
  text, program = step
  assert "stablehlo.add %" in text and mlir_text.needs_jaxlib(text)
  alone = subprocess.run([binary, str(step_file), IMPORT], capture_output=True, text=True,
                         check=False, env={**os.environ, "MPMD_OPT_NO_FRONT": "1"})
  assert alone.returncode != 0 and "not found for custom op" in alone.stderr

  out = run_opt(step_file.name, IMPORT, OPTIMIZE, "-mpmd-export-pipeline", cwd=tmp_path)
  assert out.returncode == 0, out.stderr
  assert CALLS.findall(out.stdout) == CALLS.findall(program)
  assert len(CALLS.findall(out.stdout)) == 3  # m0: F, B; m1: F+B

  direct = subprocess.run([binary, str(step_file), IMPORT, OPTIMIZE, "-mpmd-export-pipeline"],
                          capture_output=True, text=True, check=False, cwd=tmp_path)
  assert direct.returncode == 0, direct.stderr
  assert "stablehlo.add %" in direct.stdout  # readable in, readable out
  assert CALLS.findall(direct.stdout) == CALLS.findall(program)


def test_a_plain_jax_function_round_trips(tmp_path):
  """`jax.jit(f).lower(x).as_text()` through the front end with no passes is
  the same module; printed readable, it is the same text."""
  _binary()
  text = jax.jit(lambda x: jnp.tanh(x) @ x.T + 1.0).lower(jnp.ones((4, 4))).as_text()
  (tmp_path / "f.mlir").write_text(text)
  out = run_opt("f.mlir", cwd=tmp_path)
  assert out.returncode == 0, out.stderr
  assert '"stablehlo.tanh"' in out.stdout  # what mpmd-opt prints: generic StableHLO
  assert jaxlib_generic(out.stdout) == jaxlib_generic(text)

  readable = run_opt("f.mlir", "--print-readable", cwd=tmp_path)
  assert readable.returncode == 0, readable.stderr
  assert readable.stdout.strip() == text.strip()


def test_print_readable(step, step_file, tmp_path):
  """--print-readable: StableHLO in readable form, parseable by jaxlib, the same
  program; `-o` writes it to a file."""
  _binary()
  out = run_opt(step_file.name, IMPORT, OPTIMIZE, "-mpmd-export-pipeline", "--print-readable",
                cwd=tmp_path)
  assert out.returncode == 0, out.stderr
  assert "stablehlo.add %" in out.stdout
  assert '"stablehlo.' not in out.stdout and '"mpmd.' not in out.stdout
  assert "mpmd.fragment_call<" in out.stdout
  jaxlib_generic(out.stdout)  # parses and verifies in jaxlib
  assert CALLS.findall(out.stdout) == CALLS.findall(step[1])

  to_file = run_opt(step_file.name, IMPORT, OPTIMIZE, "-mpmd-export-pipeline", "--print-readable",
                    "-o", "program.mlir", cwd=tmp_path)
  assert to_file.returncode == 0 and to_file.stdout == "", to_file.stderr
  assert (tmp_path / "program.mlir").read_text() == out.stdout


def test_stdin(step, tmp_path):
  """`-` or no input file reads stdin, as mpmd-opt does."""
  _binary()
  for args in (("-",), ()):
    out = run_opt(*args, IMPORT, OPTIMIZE, "-mpmd-export-pipeline", cwd=tmp_path, stdin=step[0])
    assert out.returncode == 0, out.stderr
    assert CALLS.findall(out.stdout) == CALLS.findall(step[1])
  # Input mpmd-opt reads as it is (its own output here) goes through untouched.
  again = run_opt(OPTIMIZE, "-mpmd-export-pipeline", cwd=tmp_path,
                  stdin=run_opt(IMPORT, cwd=tmp_path, stdin=step[0]).stdout)
  assert again.returncode == 0, again.stderr
  assert CALLS.findall(again.stdout) == CALLS.findall(step[1])


@pytest.mark.parametrize("text, expected", [
    # Neither jaxlib's dialects nor mpmd-opt's: mpmd-opt says so.
    ("this is not mlir\n", "garbage.mlir:1:1: error: custom op 'this' is unknown"),
    # Readable StableHLO that jaxlib cannot parse: jaxlib's message, at the op,
    # then a note saying who said it.
    ("module {\n  %0 = stablehlo.bogus %x : tensor<2xf32>\n}\n",
     "garbage.mlir:2:8: error: custom op 'stablehlo.bogus' is unknown"),
    ("module {\n  %0 = stablehlo.bogus %x : tensor<2xf32>\n}\n",
     "python -m mpmd.opt: note: mpmd-opt did not run on lines 1-3 of garbage.mlir: jaxlib "
     "reported the above while converting their ops in readable form (first: "
     "'stablehlo.bogus' on line 2) to the generic form mpmd-opt reads"),
    ("func.func @f(%a: tensor<2xf32>) -> tensor<2xf32> {\n"
     "  %0 = stablehlo.add %a, %a : tensor<3xf32>\n  return %0 : tensor<2xf32>\n}\n",
     "garbage.mlir:2:"),
    # Calls jaxlib's verifier would crash on (the process used to die with
    # SIGSEGV): a callee the input does not define, and functions held by an
    # op of an unknown dialect instead of a module.
    ("func.func @f(%a: tensor<2xf32>) -> tensor<2xf32> {\n"
     "  %0 = stablehlo.abs %a : tensor<2xf32>\n"
     "  %1 = mpmd.call @missing(%0) : (tensor<2xf32>) -> tensor<2xf32>\n"
     "  return %1 : tensor<2xf32>\n}\n",
     "garbage.mlir:3:8: error: 'mpmd.call' calls @missing, which no func.func of the input "
     "defines: define it, or fix the name"),
    ('"x.container"() ({\n'
     "  func.func @f(%a: tensor<2xf32>) -> tensor<2xf32> {\n"
     "    %0 = stablehlo.abs %a : tensor<2xf32>\n"
     "    %1 = mpmd.call @g(%0) : (tensor<2xf32>) -> tensor<2xf32>\n"
     "    return %1 : tensor<2xf32>\n  }\n"
     "  func.func private @g(%a: tensor<2xf32>) -> tensor<2xf32> {\n"
     "    return %a : tensor<2xf32>\n  }\n}) : () -> ()\n",
     "garbage.mlir:1:1: error: 'x.container' holds the functions at the top level"),
])
def test_unreadable_input_is_a_message_naming_it(tmp_path, text, expected):
  _binary()
  (tmp_path / "garbage.mlir").write_text(text)
  out = run_opt("garbage.mlir", IMPORT, cwd=tmp_path)
  assert out.returncode == 1
  assert expected in out.stderr
  assert "Traceback" not in out.stderr and out.stdout == ""


def test_missing_input_and_binary(tmp_path, step_file):
  _binary()
  out = run_opt("nowhere.mlir", cwd=tmp_path)
  assert out.returncode == 1 and "cannot read nowhere.mlir: No such file" in out.stderr
  env = dict(os.environ, MPMD_OPT=str(tmp_path / "no-binary"))
  out = run_opt(step_file.name, cwd=tmp_path, env=env)
  assert out.returncode == 1 and "MPMD_OPT=" in out.stderr and "Traceback" not in out.stderr


def test_mpmd_opt_errors_come_through_pointing_into_the_users_file(step, step_file, tmp_path):
  """mpmd-opt's diagnostic and exit status are passed on; its location is a
  line of the file the user gave (not of the converted text)."""
  binary = _binary()
  bad = IMPORT.replace("stage0@m0", "stage0@m9")
  out = run_opt(step_file.name, bad, cwd=tmp_path)
  generic = tmp_path / "generic.mlir"
  generic.write_text(mlir_text.to_generic(step[0], "lowered.mlir"))
  direct = subprocess.run([binary, str(generic), bad], capture_output=True, text=True,
                          check=False)
  assert direct.returncode != 0 and out.returncode == direct.returncode
  m = re.search(r"^lowered\.mlir:(\d+):(\d+): error: name \"stage0\" is assigned to mesh "
                r"\"m9\" which is not in the topology", out.stderr, re.MULTILINE)
  assert m, out.stderr
  assert "@main(" in step[0].splitlines()[int(m.group(1)) - 1]
  assert "Traceback" not in out.stderr


def test_split_input_file_keeps_line_numbers(tmp_path):
  _binary()
  text = "\n".join([
      'func.func @a(%x: tensor<4xf32>) -> tensor<4xf32> attributes {topology = '
      '#mpmd.topology<<"m0" : <["x"=2]>>>} {',
      '  %0 = mpmd.named_computation<"h"> (%x) (%a: tensor<4xf32>) {',
      "    mpmd.return %a : tensor<4xf32>",
      "  } : (tensor<4xf32>) -> tensor<4xf32>",
      "  return %0 : tensor<4xf32>",
      "}",
      "",
      "// -----",
      "",
      'func.func @b(%x: tensor<4xf32>) -> tensor<4xf32> attributes {topology = '
      '#mpmd.topology<<"m0" : <["x"=2]>>>} {',
      '  %0 = mpmd.named_computation<"g"> (%x) (%a: tensor<4xf32>) {',
      "    %1 = stablehlo.negate %a : tensor<4xf32>",
      "    mpmd.return %1 : tensor<4xf32>",
      "  } : (tensor<4xf32>) -> tensor<4xf32>",
      "  return %0 : tensor<4xf32>",
      "}",
      ""])
  (tmp_path / "split.mlir").write_text(text)
  out = run_opt("split.mlir", "-split-input-file", "-mpmd-import-pipeline=assignment=f@m0",
                "-mlir-print-op-on-diagnostic=false", cwd=tmp_path)
  assert out.returncode == 1
  assert "split.mlir:2:8: error: named computation \"h\" is not assigned" in out.stderr
  assert "split.mlir:11:8: error: named computation \"g\" is not assigned" in out.stderr

  ok = run_opt("split.mlir", "-split-input-file", "-mpmd-import-pipeline=assignment=g@m0,h@m0",
               "--print-readable", cwd=tmp_path)
  assert ok.stdout.count("// -----") == 1 and "stablehlo.negate %" in ok.stdout
  assert 'mpmd.fragment<mesh="m0", origin=["g"]>' in ok.stdout


ALIASED_FUNCTIONS = """\
!t = tensor<4xf32>
func.func @f(%a: !t) -> !t {
  %0 = stablehlo.add %a, %a : !t
  return %0 : !t
}
#unused = 3 : i32
func.func @g(%a: !t) -> !t {
  %0 = stablehlo.negate %a : !t
  return %0 : !t
}
"""


def test_aliases_ahead_of_several_top_level_ops(tmp_path):
  """Alias definitions stay outside the module that several top-level ops
  are wrapped in, wherever they are; the ops keep their lines."""
  _binary()
  (tmp_path / "aliases.mlir").write_text(ALIASED_FUNCTIONS)
  out = run_opt("aliases.mlir", "--print-readable", cwd=tmp_path)
  assert out.returncode == 0, out.stderr
  assert "stablehlo.add %arg0, %arg0 : tensor<4xf32>" in out.stdout
  assert "stablehlo.negate %arg0 : tensor<4xf32>" in out.stdout
  with jl.make_ir_context():
    generic = mlir_text.to_generic(ALIASED_FUNCTIONS, "aliases.mlir")
  assert 'loc("aliases.mlir":3:8)' in generic and 'loc("aliases.mlir":8:8)' in generic


VERIFIED = """\
func.func @main(%arg0: tensor<4xf32>) -> tensor<4xf32>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  %0 = stablehlo.add %arg0, %arg0 : tensor<4xf32>
  // expected-note@+1 {{called here, from @main}}
  %1 = mpmd.call @f(%0) : (tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}
// expected-error@+1 {{@f is called by 'mpmd.call' but has no topology}}
func.func private @f(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.abs %arg0 : tensor<4xf32> // EXPECTATION
  return %0 : tensor<4xf32>
}
"""


@pytest.mark.parametrize("split", [False, True])
def test_verify_diagnostics_on_readable_input(tmp_path, split):
  """`-verify-diagnostics` checks the `expected-*` comments of a readable
  input on their lines: met, passes; one never emitted, or one on the wrong
  line, fails and names the input's line."""
  _binary()
  args = ["-mpmd-infer-mesh-assignment", "-verify-diagnostics"]
  prefix = ""
  if split:
    args.append("-split-input-file")
    prefix = "func.func @other() {\n  return\n}\n// -----\n"
  cases = {
      "met": VERIFIED.replace(" // EXPECTATION", ""),
      "never emitted": VERIFIED.replace("// EXPECTATION", "// expected-error {{not emitted}}"),
      "wrong line": VERIFIED.replace("@+1 {{@f is called", "@+2 {{@f is called").replace(
          " // EXPECTATION", ""),
  }
  results = {}
  for case, text in cases.items():
    path = tmp_path / f"{case.replace(' ', '_')}.mlir"
    path.write_text(prefix + text)
    results[case] = run_opt(path.name, *args, cwd=tmp_path)
  shift = prefix.count("\n")
  assert results["met"].returncode == 0, results["met"].stderr
  never = results["never emitted"]
  assert never.returncode == 1
  assert (f"never_emitted.mlir:{10 + shift}:47: error: expected error \"not emitted\" was not "
          "produced") in never.stderr, never.stderr
  wrong = results["wrong line"]
  assert wrong.returncode == 1
  assert f"wrong_line.mlir:{9 + shift}:1: error: unexpected error: @f is called" in wrong.stderr
  assert f"wrong_line.mlir:{8 + shift}:" in wrong.stderr
  assert ".generic.mlir" not in wrong.stderr + never.stderr


REJECTED_PIECES = """\
func.func @main(%arg0: tensor<i32>) -> tensor<i32> {
  %0 = stablehlo.constant dense<0.0> : tensor<f32>
  // expected-error@+1 {{Expected call operand to have type 'tensor<i32>' but got 'tensor<f32>'}}
  %1 = mpmd.call @fn(%0, %arg0) : (tensor<f32>, tensor<i32>) -> tensor<i32>
  return %1 : tensor<i32>
}
func.func private @fn(%arg0: tensor<i32>, %arg1: tensor<i32>) -> tensor<i32> {
  %0 = stablehlo.add %arg0, %arg1 : tensor<i32>
  return %0 : tensor<i32>
}

// -----

func.func @ok(%arg0: tensor<i32>) -> tensor<i32> {
  %0 = stablehlo.negate %arg0 : tensor<i32>
  return %0 : tensor<i32>
}

// -----

func.func @main(%arg0: tensor<i32>) -> tensor<f32> {
  %0 = stablehlo.constant dense<0> : tensor<i32>
  // expected-error-re@+1 {{Expected call result to have type '{{.*}}' but got 'tensor<f32>'}}
  %1 = mpmd.call @fn(%0, %arg0) : (tensor<i32>, tensor<i32>) -> tensor<f32>
  return %1 : tensor<f32>
}
func.func private @fn(%arg0: tensor<i32>, %arg1: tensor<i32>) -> tensor<i32> {
  return %arg0 : tensor<i32>
}
"""


@pytest.mark.slow
def test_pieces_jaxlib_rejects_are_diagnosed_as_mpmd_opt_would(tmp_path):
  """An invalid piece that jaxlib's dialects reject while converting it (here
  Shardy's own call verifier) gets jaxlib's diagnostics, located in the
  input, as mpmd-opt prints its own; the other pieces still run, and
  `-verify-diagnostics` checks those diagnostics against the piece's
  `expected-*` annotations (before: one "cannot read" error for the file)."""
  _binary()
  (tmp_path / "calls.mlir").write_text(REJECTED_PIECES)
  out = run_opt("calls.mlir", "-split-input-file", "--mlir-print-op-on-diagnostic=false",
                cwd=tmp_path)
  assert out.returncode == 1
  assert ("calls.mlir:4:8: error: Type mismatch. Expected call operand to have type "
          "'tensor<i32>' but got 'tensor<f32>'") in out.stderr
  assert "calls.mlir:24:8: error: Type mismatch. Expected call result" in out.stderr
  assert "see current operation" not in out.stderr and "cannot read" not in out.stderr
  assert "did not run on lines 1-11 of calls.mlir" in out.stderr
  assert "did not run on lines 20-29 of calls.mlir" in out.stderr
  # Only the valid piece's output, once.
  assert out.stdout.count("func.func @ok") == 1 and "// -----" not in out.stdout
  assert "@main" not in out.stdout

  # As mpmd-opt after a failure: no output file.
  to_file = run_opt("calls.mlir", "-split-input-file", "-o", "out.mlir", cwd=tmp_path)
  assert to_file.returncode == 1 and to_file.stdout == ""
  assert not (tmp_path / "out.mlir").exists()

  verified = run_opt("calls.mlir", "-split-input-file", "-verify-diagnostics", cwd=tmp_path)
  assert verified.returncode == 0, verified.stderr
  assert verified.stderr == ""

  (tmp_path / "wrong.mlir").write_text(
      REJECTED_PIECES.replace("but got 'tensor<f32>'}}", "but got 'tensor<f16>'}}", 1))
  wrong = run_opt("wrong.mlir", "-split-input-file", "-verify-diagnostics", cwd=tmp_path)
  assert wrong.returncode == 1
  assert ("wrong.mlir:4:8: error: unexpected error: Type mismatch. Expected call operand"
          in wrong.stderr), wrong.stderr
  assert ("wrong.mlir:3:6: error: expected error \"Expected call operand to have type "
          "'tensor<i32>' but got 'tensor<f16>'\" was not produced") in wrong.stderr
  assert "wrong.mlir:24" not in wrong.stderr  # the regex of the third piece matched


def test_expectations_are_read_as_mlir_reads_them():
  text = "\n".join([
      "a",  # 1
      "// expected-error@+1 {{one}}",  # 2 -> 3
      "b",  # 3
      "c // expected-warning {{two}}",  # 4 -> 4
      "// expected-note@below {{three}}",  # 5 -> 7
      "// expected-error@above {{four}}",  # 6 -> 3 (the last line without an annotation)
      "d",  # 7
      "// expected-remark-re @unknown {{r{{.*}}}}",  # 8
  ])
  found = {e.body: e for e in mlir_text.expectations(text, first_line=10)}
  assert found["{{one}}"].target == 12
  assert found["{{two}}"].target == 13
  assert found["{{three}}"].target == 16
  assert found["{{four}}"].target == 12
  assert found["{{r{{.*}}}}"].target is None and found["{{r{{.*}}}}"].regex
  assert found["{{one}}"].comment(20) == "// expected-error@-8 {{one}}"
  assert found["{{two}}"].comment(13) == "  // expected-warning {{two}}"  # column kept
  assert found["{{r{{.*}}}}"].comment(30) == "// expected-remark-re@unknown {{r{{.*}}}}"


def test_the_converted_text_is_kept_only_when_a_message_cites_it(tmp_path, step_file):
  """A location mpmd-opt reports in the converted text (a parse error there)
  is usable: that file stays, and a note says what it is. Otherwise nothing
  is left behind."""
  _binary()
  temp = tmp_path / "tmp"
  temp.mkdir()
  env = dict(os.environ, TMPDIR=str(temp))
  assert run_opt(step_file.name, IMPORT, cwd=tmp_path, env=env).returncode == 0
  assert list(temp.iterdir()) == []

  # jaxlib accepts a mesh tensor type without a mesh name where no op uses it
  # (a declaration's signature); mpmd-opt's parser rejects it where it is
  # written, a place the converted text has and the input does not.
  (tmp_path / "kind.mlir").write_text(
      'func.func private @decl(!mpmd.mesh_tensor<"", tensor<4xf32>>)\n'
      "func.func @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {\n"
      "  %1 = stablehlo.negate %arg0 : tensor<4xf32>\n"
      "  return %1 : tensor<4xf32>\n}\n")
  out = run_opt("kind.mlir", cwd=tmp_path, env=env)
  assert out.returncode == 1
  [kept] = list(temp.iterdir())
  assert kept.name.startswith("kind.") and kept.name.endswith(".generic.mlir")
  assert f"{kept}:" in out.stderr and "mesh tensor must name a mesh" in out.stderr
  assert f"note: {kept} is kind.mlir converted to generic form" in out.stderr


def test_the_documented_commands_run_as_written(tmp_path, monkeypatch):
  """The ```sh blocks of docs/compiler.md and docs/troubleshooting.md that run
  `python -m mpmd.opt` work on the file compiler.md's Python block writes."""
  _binary()
  blocks = {}
  for doc in ("docs/compiler.md", "docs/troubleshooting.md"):
    text = (ROOT / doc).read_text()
    blocks[doc] = re.findall(r"^```(\w*)\n(.*?)^```", text, re.MULTILINE | re.DOTALL)
  [writer] = [code for lang, code in blocks["docs/compiler.md"]
              if lang == "python" and "lowered.mlir" in code]
  commands = [(doc, code) for doc, found in blocks.items() for lang, code in found
              if lang == "sh" and "python -m mpmd.opt" in code]
  assert {doc for doc, _ in commands} == set(blocks), "a page lost its mpmd.opt recipe"

  config = mpmd.make_config(make_topology(2, 2), {"stage0": "m0", "stage1": "m1"})
  params, (xs, ys) = init_mlp(2), make_batch()
  monkeypatch.chdir(tmp_path)
  exec(writer, {"mpmd": mpmd, "step": sgd_step, "config": config,  # noqa: S102
                "params": params, "xs": xs, "ys": ys})
  program = mpmd.jit(sgd_step, config).lower(params, xs, ys).as_text("mpmd")
  # `python` in the commands is this interpreter.
  bin_dir = tmp_path / "bin"
  bin_dir.mkdir()
  # (A script, not a symlink: a venv's Python found through a link elsewhere
  # does not see the venv's packages.)
  wrapper = bin_dir / "python"
  wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
  wrapper.chmod(0o755)
  env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
  for doc, code in commands:
    out = subprocess.run(["bash", "-e", "-c", code], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=600, check=False)
    assert out.returncode == 0, f"{doc}:\n{code}\n{out.stderr}"
    assert "stablehlo." in out.stdout, f"{doc}:\n{code}"
    command = "\n".join(line for line in code.splitlines() if not line.lstrip().startswith("#"))
    if "-mpmd-export-pipeline" in command:
      assert CALLS.findall(out.stdout) == CALLS.findall(program), f"{doc}:\n{code}"
    if "annotate-only" in command:
      assert "mpmd.placement" in out.stdout, f"{doc}:\n{code}"


def test_readable_ops_are_found_by_line():
  assert mlir_text.first_readable_op(
      'module {\n  %0 = "stablehlo.add"(%a, %a) : (t, t) -> t\n'
      '  %1:2 = stablehlo.foo %0\n}') == (3, "stablehlo.foo")
  assert mlir_text.first_readable_op("  sdy.mesh @mesh = <[\"x\"=2]>") == (1, "sdy.mesh")
  generic_only = ('#loc = loc("a.py":1:2)\nfunc.func @f() {\n'
                  '  %0 = mpmd.named_computation<"s"> () () {\n'
                  '    %1 = "chlo.erf"(%x) : (t) -> t loc(#loc)\n'
                  '  // stablehlo.add in a comment\n  } : () -> ()\n  return\n}')
  assert not mlir_text.needs_jaxlib(generic_only)


def test_the_command_line_is_split_as_mpmd_opt_reads_it():
  inv = opt.parse_args(["-o", "out.mlir", "in.mlir", "-split-input-file", "--print-readable"])
  assert inv.readable and inv.output == "out.mlir" and inv.split_marker == "// -----"
  assert inv.mpmd_opt_args == ["in.mlir", "-split-input-file"] and inv.input_index == 0
  inv = opt.parse_args(["-mpmd-export-pipeline", "-o=x.mlir"])
  assert not inv.readable and inv.input_index is None and inv.output is None
  assert inv.mpmd_opt_args == ["-mpmd-export-pipeline", "-o=x.mlir"]
  with pytest.raises(opt.OptError, match="more than one input file: a.mlir, b.mlir"):
    opt.parse_args(["a.mlir", "b.mlir"])


def test_arguments_after_double_dash_are_the_input(tmp_path):
  # `mpmd-opt file --` (as some lit RUN lines write it): the separator does
  # not end up before the options this command adds.
  inv = opt.parse_args(["in.mlir", "--", "--print-readable"])
  assert inv.readable and inv.mpmd_opt_args == ["in.mlir"] and inv.input_index == 0
  inv = opt.parse_args(["-canonicalize", "--", "-odd.mlir"])
  assert inv.mpmd_opt_args == ["-canonicalize", "./-odd.mlir"] and inv.input_index == 1
  _binary()
  (tmp_path / "f.mlir").write_text(
      "func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {\n"
      "  %0 = stablehlo.negate %x : tensor<4xf32>\n"
      "  return %0 : tensor<4xf32>\n}\n")
  out = run_opt("f.mlir", "--", cwd=tmp_path)
  assert out.returncode == 0, out.stderr
  assert "stablehlo.negate" in out.stdout and "func.func" in out.stdout
