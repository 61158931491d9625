#!/usr/bin/env bash
# `make test-wheel`: proves the wheels install and work where no LLVM exists.
#
#   1. builds the wheels (scripts/build_wheels.sh; MPMD_CHECK_WHEEL_NO_BUILD=1 reuses dist/);
#   2. for each Python in $MPMD_CHECK_PYTHONS (default: the running one, 3.12, 3.13; found
#      as pythonX.Y on PATH or in pyenv's versions; a missing one is skipped with a
#      message): a fresh venv in build/wheel/check/, jax==0.10.2 jaxlib==0.10.2 from
#      PyPI, then `pip install --no-index --find-links dist mpmd` (pip picks the wheel
#      for that Python: cpXY below 3.12, the cp312-abi3 one from 3.12);
#   3. in that venv, with every LLVM/MLIR shared library on the machine hidden (a private
#      mount namespace: an empty tmpfs over /usr/lib/llvm-*, /dev/null over
#      libLLVM*/libMLIR*.so*; needs root, else the checks run with LLVM present and say so)
#      and no LLVM directory in LD_LIBRARY_PATH:
#        - readelf -d: neither _mpmd nor mpmd-opt NEEDs libLLVM/libMLIR or has an RPATH;
#          the extension exports only PyInit__mpmd; ldd: everything resolves, nothing
#          to an LLVM directory;
#        - `mpmd-opt --version`; `python -m mpmd.opt --version` (finds the venv's
#          mpmd-opt without PATH);
#        - a lit-style round trip: mpmd-opt on test/Transforms/Import/
#          infer_mesh_assignment.mlir with its RUN line's pass, the positive CHECK lines
#          matched in order (a small FileCheck: FileCheck is part of LLVM), and, when the
#          developer build's mpmd-opt exists, its output compared (a difference is a note:
#          build/py may be out of date);
#        - scripts/wheel_smoke.py (8 virtual CPU devices, run outside the source tree):
#          2-mesh training steps under mpmd.jit equal to jax.jit;
#   4. where lit and FileCheck exist (a developer machine), the whole lit suite against the
#      static mpmd-opt of each wheel build (build/wheel/<tag>/).
# Prints a summary (one line per Python) and exits 1 if any check failed.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIST="${DIST:-$ROOT/dist}"
WORK="$ROOT/build/wheel/check"
LIT_TEST="test/Transforms/Import/infer_mesh_assignment.mlir"
JAX_PINS=("jax==0.10.2" "jaxlib==0.10.2")
PIP_INSTALL=(install -q --disable-pip-version-check --root-user-action=ignore)

log() { echo "[check-wheel] $*"; }
fail() { echo "[check-wheel] FAIL: $*" >&2; exit 1; }

# ---------------------------------------------------------------------------------------
# The checks inside one venv (run as `check_wheel.sh --inner VENV`, LLVM hidden).
inner() {
  local venv="$1" py="$1/bin/python"
  local site ext opt
  site="$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')"
  ext="$(ls "$site"/mpmd/_mpmd*.so)"
  opt="$venv/bin/mpmd-opt"
  [ -x "$opt" ] || fail "mpmd-opt is not in $venv/bin"
  echo "ok    installed: ${ext#$venv/}, ${opt#$venv/}"

  if [ -e /usr/lib/llvm-22/lib/libMLIR.so.22.1 ] || [ -e /usr/lib/llvm-22/lib/libLLVM.so.22.1 ]; then
    echo "      (LLVM 22 is visible: the checks below do not prove its absence at run time)"
  else
    echo "ok    no LLVM/MLIR shared library visible (/usr/lib/llvm-22/lib/libMLIR.so.22.1 absent)"
  fi
  local f needed
  for f in "$ext" "$opt"; do
    needed="$(readelf -d "$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')"
    if grep -qiE 'llvm|mlir' <<<"$needed"; then fail "$(basename "$f") NEEDs $needed"; fi
    if readelf -d "$f" | grep -qE '\((RPATH|RUNPATH)\)'; then
      fail "$(basename "$f") has an RPATH/RUNPATH: $(readelf -d "$f" | grep -E 'R(UN)?PATH')"
    fi
    if ldd "$f" | grep -qE 'not found|llvm|LLVM|MLIR'; then fail "ldd $(basename "$f"): $(ldd "$f")"; fi
    echo "ok    $(basename "$f"): NEEDED $needed(ldd resolves all, none from LLVM)"
  done
  local exports
  exports="$(readelf --dyn-syms -W "$ext" | awk 'NR > 3 && $7 != "UND" && $5 != "LOCAL" {print $8}' | sort -u | tr '\n' ' ')"
  [ "$exports" = "PyInit__mpmd " ] || fail "_mpmd exports more than PyInit__mpmd: ${exports:0:300}"
  echo "ok    _mpmd exports only PyInit__mpmd"

  local version
  version="$("$opt" --version 2>&1)" || fail "mpmd-opt --version: $version"
  grep -q 'LLVM version 22' <<<"$version" || fail "mpmd-opt --version: $version"
  echo "ok    mpmd-opt --version: $(grep -o 'LLVM version [0-9.]*' <<<"$version")"
  version="$(cd / && env PATH=/usr/bin:/bin "$py" -m mpmd.opt --version 2>&1)" \
    || fail "python -m mpmd.opt --version: $version"
  echo "ok    python -m mpmd.opt --version (finds $(basename "$opt") without PATH)"

  # The lit-style round trip: the RUN line's mpmd-opt arguments on the test file.
  local args out
  args="$(sed -n 's#^// RUN: mpmd-opt %s \(.*\) | FileCheck %s$#\1#p' "$ROOT/$LIT_TEST" | head -1)"
  [ -n "$args" ] || fail "no 'RUN: mpmd-opt %s ... | FileCheck %s' line in $LIT_TEST"
  out="$WORK/$(basename "$venv").mlir"
  # shellcheck disable=SC2086  # the RUN line's arguments, split as lit's shell would
  (cd "$ROOT" && "$opt" "$LIT_TEST" $args > "$out") || fail "mpmd-opt $LIT_TEST $args"
  "$py" - "$ROOT/$LIT_TEST" "$out" <<'EOF' || fail "CHECK lines of $LIT_TEST not matched"
import re, sys
checks = [m.groups() for m in re.finditer(r"//\s*CHECK(-NEXT|-SAME|-LABEL|-NOT|-DAG)?:(.*)",
                                          open(sys.argv[1]).read())]
out = open(sys.argv[2]).read().splitlines()
def pattern(text):  # FileCheck syntax: [[V:re]] defines, [[V]] uses, {{re}} regex
  parts = re.split(r"(\[\[[^\]]*\]\]|\{\{.*?\}\})", text.strip())
  rx = ""
  for p in parts:
    if p.startswith("[["):
      rx += "(?:" + (p[2:-2].split(":", 1)[1] if ":" in p else r"[\w.#$-]+") + ")"
    elif p.startswith("{{"):
      rx += "(?:" + p[2:-2] + ")"
    else:
      rx += "".join(r"\s+" if t.isspace() else re.escape(t) for t in re.split(r"(\s+)", p) if t)
  return re.compile(rx)
line, col, matched = -1, 0, 0
for kind, text in checks:
  if kind in ("-NOT", "-DAG"):  # not checked here
    continue
  rx = pattern(text)
  if kind == "-SAME":
    m = rx.search(out[line], col)
    found = m and (line, m.end())
  elif kind == "-NEXT":
    m = line + 1 < len(out) and rx.search(out[line + 1])
    found = m and (line + 1, m.end())
  else:
    found = next(((i, m.end()) for i in range(line + 1, len(out)) for m in [rx.search(out[i])] if m), None)
  if not found:
    print(f"CHECK{kind or ''}: {text.strip()!r} not found after output line {line + 1}")
    sys.exit(1)
  (line, col), matched = found, matched + 1
print(f"ok    lit-style round trip: {matched} CHECK lines matched in order")
EOF
  if [ -f "$WORK/reference.mlir" ]; then
    if cmp -s "$out" "$WORK/reference.mlir"; then
      echo "ok    output identical to the developer build's mpmd-opt (build/py)"
    else  # build/py may be older or newer than the sources the wheel was built from
      echo "note  output differs from the developer build's mpmd-opt (build/py out of date?):" \
           "diff $out $WORK/reference.mlir"
    fi
  fi

  local run_dir
  run_dir="$(mktemp -d)"  # outside the source tree: `import mpmd` must find the wheel's
  (cd "$run_dir" && env -u PYTHONPATH XLA_FLAGS=--xla_force_host_platform_device_count=8 \
     "$py" "$ROOT/scripts/wheel_smoke.py") || fail "scripts/wheel_smoke.py"
  rm -rf "$run_dir"
}

# Runs "$@" in a private mount namespace where no LLVM/MLIR shared library exists.
run_without_llvm() {
  local hide='
    set -e
    for d in /usr/lib/llvm-*; do if [ -d "$d" ]; then mount -t tmpfs -o ro,size=1m none "$d"; fi; done
    find /usr/lib /usr/local/lib -maxdepth 2 \( -name "libLLVM*.so*" -o -name "libMLIR*.so*" \) \
         -type f 2>/dev/null | while read -r f; do mount --bind /dev/null "$f"; done
    exec "$@"'
  if [ "$(id -u)" = 0 ] && unshare --mount --propagation private true 2>/dev/null; then
    unshare --mount --propagation private bash -c "$hide" hide "$@"
  else
    echo "      (cannot hide LLVM: unshare --mount needs root; running with LLVM present)"
    "$@"
  fi
}

if [ "${1:-}" = "--inner" ]; then
  # No LLVM directory in the loader's path.
  LD_LIBRARY_PATH="$(tr ':' '\n' <<<"${LD_LIBRARY_PATH:-}" | grep -viE 'llvm|mlir' | paste -sd: || true)"
  export LD_LIBRARY_PATH
  [ -n "$LD_LIBRARY_PATH" ] || unset LD_LIBRARY_PATH
  inner "$2"
  exit 0
fi

# ---------------------------------------------------------------------------------------
PY="${PYTHON:-python3}"
start_all=$SECONDS
if [ "${MPMD_CHECK_WHEEL_NO_BUILD:-0}" != 1 ]; then
  PYTHON="$PY" bash "$ROOT/scripts/build_wheels.sh"
fi
build_s=$((SECONDS - start_all))
ls "$DIST"/mpmd-*.whl >/dev/null 2>&1 || fail "no wheel in $DIST (make wheel)"
mkdir -p "$WORK"
status=0
cd "$WORK"  # not the source tree: `import mpmd` must find the installed wheel

# The developer build's output on the lit test, to compare with (when that build exists).
rm -f "$WORK/reference.mlir"
dev_opt="$ROOT/build/py/tools/mpmd-opt/mpmd-opt"
if [ -x "$dev_opt" ]; then
  args="$(sed -n 's#^// RUN: mpmd-opt %s \(.*\) | FileCheck %s$#\1#p' "$ROOT/$LIT_TEST" | head -1)"
  # shellcheck disable=SC2086
  (cd "$ROOT" && "$dev_opt" "$LIT_TEST" $args > "$WORK/reference.mlir") 2>/dev/null \
    || rm -f "$WORK/reference.mlir"
fi

quiet() {  # runs "$@", shows its output only when it fails
  local out
  if ! out="$("$@" 2>&1)"; then printf '%s\n' "$out" | grep -v '^WARNING: Location' >&2; return 1; fi
}

# The whole lit suite against each wheel build's (static) mpmd-opt, where the developer
# tools exist (lit from PyPI, FileCheck from LLVM): the same binary as in the wheel.
lit_summary="lit suite: skipped (needs lit and /usr/lib/llvm-22/bin/FileCheck)"
if "$PY" -c 'import lit' 2>/dev/null && [ -x /usr/lib/llvm-22/bin/FileCheck ]; then
  lit_summary="lit suite:"
  for cfg in "$ROOT"/build/wheel/*/test/lit.site.cfg.py; do
    [ -f "$cfg" ] || continue
    tag="$(basename "$(dirname "$(dirname "$cfg")")")"
    if lit_out="$("$PY" -c 'from lit.main import main; main()' -s "$(dirname "$cfg")" 2>&1)"; then
      lit_summary+=" $tag $(grep -oE 'Passed *: *[0-9]+' <<<"$lit_out" | tr -s ' ')"
      log "lit suite with the static mpmd-opt of build/wheel/$tag: $(grep -oE 'Passed *: *[0-9]+.*' <<<"$lit_out")"
    else
      printf '%s\n' "$lit_out" | tail -20
      log "FAIL: lit suite with the static mpmd-opt of build/wheel/$tag"
      lit_summary+=" $tag FAILED"
      status=1
    fi
  done
fi

find_python() {  # $1 = X.Y: a CPython X.Y interpreter, or nothing
  local want="$1" c
  local candidates=()
  command -v "python$want" >/dev/null 2>&1 && candidates+=("$(command -v "python$want")")
  for c in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$want".*/bin/python3 \
           "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$want"/bin/python3; do
    [ -x "$c" ] && candidates+=("$c")
  done
  for c in "${candidates[@]}"; do
    if [ "$("$c" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)" = "$want" ]; then
      "$c" -c 'import sys; print(sys.executable)'
      return
    fi
  done
}

running="$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
read -r -a versions <<<"${MPMD_CHECK_PYTHONS:-$running 3.12 3.13}"
declare -A seen=()
summary=()
for v in "${versions[@]}"; do
  [ -n "${seen[$v]:-}" ] && continue
  seen[$v]=1
  py="$(find_python "$v")"
  if [ -z "$py" ]; then
    log "skip Python $v: not found (no python$v on PATH, none in ${PYENV_ROOT:-$HOME/.pyenv}/versions)"
    summary+=("Python $v  skipped (not found)")
    continue
  fi
  full="$("$py" -c 'import platform; print(platform.python_version())')"
  venv="$WORK/venv-$v"
  log "Python $full ($py): fresh venv ${venv#$ROOT/}, ${JAX_PINS[*]} from PyPI, mpmd from dist/"
  t0=$SECONDS
  rm -rf "$venv"
  if ! { "$py" -m venv "$venv" &&
         quiet "$venv/bin/python" -m pip "${PIP_INSTALL[@]}" "${JAX_PINS[@]}" &&
         quiet "$venv/bin/python" -m pip "${PIP_INSTALL[@]}" --no-index --find-links "$DIST" mpmd &&
         quiet "$venv/bin/python" -c 'import mpmd'; }; then
    log "FAIL: could not install into $venv"
    summary+=("Python $full  FAILED (install)")
    status=1
    continue
  fi
  wheel_tag="$(sed -n 's/^Tag: //p' "$venv"/lib/python*/site-packages/mpmd-*.dist-info/WHEEL | paste -sd,)"
  log "  installed the $wheel_tag wheel in $((SECONDS - t0)) s; checking with LLVM hidden"
  t1=$SECONDS
  if run_without_llvm bash "$ROOT/scripts/check_wheel.sh" --inner "$venv"; then
    summary+=("Python $full  $wheel_tag  passed (install $((t1 - t0)) s, checks $((SECONDS - t1)) s)")
  else
    summary+=("Python $full  $wheel_tag  FAILED")
    status=1
  fi
done

log "summary (wheels built in ${build_s} s, all in $((SECONDS - start_all)) s):"
log "  $lit_summary"
for line in "${summary[@]}"; do log "  $line"; done
exit $status
