#!/usr/bin/env bash
# Installs everything a fresh machine lacks to build and test mpmd, then builds
# it into a virtual environment of its own. Idempotent: on a prepared,
# unchanged tree it only checks and returns in about a second.
#
#   scripts/bootstrap.sh [--profile newest|oldest] [--deps-only]
#
# A profile is a Python and a JAX release the suite is tested with (the
# supported range is their span; README "Supported versions"):
#
#   profile  Python  jax/jaxlib  venv                build dir (C++)
#   newest   3.12    0.12.0.1    build/venv          build/py         make test (CI), make demo
#   oldest   3.11    0.10.2      build/venv-oldest   build/py-oldest  make test-oldest
#
# The Python of the profile is looked for as pythonX.Y on PATH, then under
# pyenv ($PYENV_ROOT/versions/X.Y*); set MPMD_BASE_PYTHON to choose it.
# With --deps-only (make wheel, make test-wheel): only the system packages.
set -euo pipefail
DEPS_ONLY=0
PROFILE="${MPMD_PROFILE:-newest}"
while [ $# -gt 0 ]; do
  case "$1" in
    --deps-only) DEPS_ONLY=1 ;;
    --profile) PROFILE="$2"; shift ;;
    --profile=*) PROFILE="${1#--profile=}" ;;
    *) echo "[bootstrap] unknown argument $1 (use --profile newest|oldest, --deps-only)" >&2; exit 2 ;;
  esac
  shift
done
case "$PROFILE" in
  newest) PY_VERSION=3.12; JAX_VERSION=0.12.0.1; VENV=build/venv; BUILD_DIR=build/py ;;
  oldest) PY_VERSION=3.11; JAX_VERSION=0.10.2; VENV=build/venv-oldest; BUILD_DIR=build/py-oldest ;;
  *) echo "[bootstrap] unknown profile '$PROFILE' (newest or oldest)" >&2; exit 2 ;;
esac

LLVM_PREFIX=/usr/lib/llvm-22
APT_PACKAGES=(libmlir-22-dev mlir-22-tools llvm-22-dev llvm-22-tools cmake ninja-build)
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

log() { echo "[bootstrap] $*"; }

need_apt=0
for f in "$LLVM_PREFIX/bin/mlir-tblgen" "$LLVM_PREFIX/bin/FileCheck" "$LLVM_PREFIX/bin/not" \
         "$LLVM_PREFIX/lib/cmake/mlir/MLIRConfig.cmake" "$LLVM_PREFIX/lib/libMLIR.so" \
         "$LLVM_PREFIX/lib/libMLIRIR.a"; do
  [ -e "$f" ] || need_apt=1
done
command -v cmake >/dev/null 2>&1 || need_apt=1
command -v ninja >/dev/null 2>&1 || need_apt=1
if [ "$need_apt" = 1 ]; then
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO="sudo"
  log "installing ${APT_PACKAGES[*]} (apt; MLIR/LLVM 22 come from bookworm-security)"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
    "${APT_PACKAGES[@]}" >/dev/null
fi

[ "$DEPS_ONLY" = 1 ] && exit 0

# The profile's CPython (with the GIL), found on PATH or under pyenv.
base_python() {
  local c candidates=()
  [ -n "${MPMD_BASE_PYTHON:-}" ] && candidates+=("$MPMD_BASE_PYTHON")
  command -v "python$PY_VERSION" >/dev/null 2>&1 && candidates+=("$(command -v "python$PY_VERSION")")
  local pyenv_root="${PYENV_ROOT:-$HOME/.pyenv}"
  for c in "$pyenv_root"/versions/"$PY_VERSION"*/bin/python3; do
    [ -x "$c" ] && candidates+=("$c")
  done
  for c in "${candidates[@]}"; do
    if [ "$("$c" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)" = "$PY_VERSION" ]; then
      echo "$c"; return
    fi
  done
}

PY="$ROOT/$VENV/bin/python"
if ! "$PY" -c "import sys; assert '%d.%d' % sys.version_info[:2] == '$PY_VERSION'" 2>/dev/null; then
  base="$(base_python)"
  if [ -z "$base" ]; then
    echo "[bootstrap] profile $PROFILE needs CPython $PY_VERSION: none found as python$PY_VERSION on" \
         "PATH or under pyenv; install it (e.g. 'pyenv install $PY_VERSION') or set MPMD_BASE_PYTHON" >&2
    exit 1
  fi
  log "creating $VENV with $base"
  rm -rf "$ROOT/$VENV"
  "$base" -m venv "$ROOT/$VENV"
fi

# Rebuild only when a build input or the profile changed since the last successful install.
inputs_hash="$(cd "$ROOT" && { echo "$PROFILE $JAX_VERSION"; find CMakeLists.txt pyproject.toml include lib tools python \
                 test/CMakeLists.txt test/Unit test/lit.site.cfg.py.in -type f -print0 | sort -z \
                 | xargs -0 sha256sum; } | sha256sum | cut -d' ' -f1)"
stamp="$ROOT/$BUILD_DIR/.bootstrap-stamp"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$inputs_hash" ] && \
   ROOT="$ROOT" "$PY" -c "
import os, sys
import jax, flax, optax, equinox, orbax.checkpoint, lit, pytest, xdist, hypothesis
import mpmd, mpmd._mpmd
# The editable install must be this tree's (another clone may have re-pointed it).
here = os.path.realpath(os.environ['ROOT'])
sys.exit(0 if os.path.realpath(mpmd.__file__).startswith(here + os.sep) else 1)
" >/dev/null 2>&1; then
  log "up to date ($PROFILE: Python $PY_VERSION, jax $JAX_VERSION)"
  exit 0
fi
PIP=("$PY" -m pip install -q --disable-pip-version-check --root-user-action=ignore)
log "installing Python build tools into $VENV"
"${PIP[@]}" "scikit-build-core>=0.10" "nanobind>=2.0" lit
# The dependencies (pyproject.toml's, with the test extra, jax/jaxlib pinned) download and
# unpack while the C++ compiles. Unpacking and byte-compiling share the cores with the
# compiler, so where packages come from a local mirror the gain is small (a fresh
# bootstrap on 2 cores: 3:43 one after the other, 3:28-3:40 overlapped); it is the
# download time that overlaps.
mapfile -t deps < <("$PY" -c "
import tomllib
project = tomllib.load(open('$ROOT/pyproject.toml', 'rb'))['project']
for d in project['dependencies'] + project['optional-dependencies']['test']:
    if not d.startswith(('jax>', 'jaxlib>')):
        print(d)")
deps_log="$(mktemp)"
log "installing the test dependencies and jax/jaxlib $JAX_VERSION (in the background)"
"${PIP[@]}" "${deps[@]}" "jax==$JAX_VERSION" "jaxlib==$JAX_VERSION" >"$deps_log" 2>&1 &
deps_pid=$!
log "building mpmd (pip install -e .; C++ in $BUILD_DIR, -j2)"
build_status=0
CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-2}" \
  "${PIP[@]}" --no-build-isolation --no-deps -Cbuild-dir="$BUILD_DIR" \
  -Ccmake.define.LLVM_EXTERNAL_LIT="$ROOT/$VENV/bin/lit" -e "$ROOT" || build_status=$?
deps_status=0
wait "$deps_pid" || deps_status=$?
if [ "$deps_status" -ne 0 ]; then
  cat "$deps_log" >&2
  log "installing the dependencies failed (exit $deps_status; pip's output above)" >&2
fi
rm -f "$deps_log"
[ "$build_status" -eq 0 ] || { log "building mpmd failed (exit $build_status)" >&2; exit "$build_status"; }
[ "$deps_status" -eq 0 ] || exit "$deps_status"
echo "$inputs_hash" > "$stamp"
log "done ($PROFILE: Python $PY_VERSION, jax $JAX_VERSION)"
