#!/usr/bin/env bash
# Installs everything a fresh machine lacks to build and test mpmd, then builds
# it (`pip install -e .[test]`, C++ in build/py). Idempotent: on a prepared,
# unchanged tree it only checks and returns in about a second.
# With --deps-only (make wheel, make test-wheel): only the system packages.
set -euo pipefail
DEPS_ONLY=0
[ "${1:-}" = "--deps-only" ] && DEPS_ONLY=1

LLVM_PREFIX=/usr/lib/llvm-22
APT_PACKAGES=(libmlir-22-dev mlir-22-tools llvm-22-dev llvm-22-tools cmake ninja-build)
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python3}"

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

# Rebuild only when a build input changed since the last successful install.
inputs_hash="$(cd "$ROOT" && find CMakeLists.txt pyproject.toml include lib tools python test/CMakeLists.txt \
                 test/Unit test/lit.site.cfg.py.in -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1)"
stamp="$ROOT/build/.bootstrap-stamp"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$inputs_hash" ] && \
   ROOT="$ROOT" "$PY" -c "
import os, sys
import jax, flax, optax, equinox, orbax.checkpoint, lit, pytest, hypothesis
import mpmd, mpmd._mpmd
# The editable install must be this tree's (another clone may have re-pointed it).
here = os.path.realpath(os.environ['ROOT'])
sys.exit(0 if os.path.realpath(mpmd.__file__).startswith(here + os.sep) else 1)
" >/dev/null 2>&1; then
  log "up to date"
  exit 0
fi
log "installing Python build tools"
"$PY" -m pip install -q --disable-pip-version-check --root-user-action=ignore "scikit-build-core>=0.10" "nanobind>=2.0"
log "building mpmd and installing it with its test dependencies (pip install -e .[test]; C++ in build/py, -j2)"
CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-2}" \
  "$PY" -m pip install -q --disable-pip-version-check --root-user-action=ignore --no-build-isolation \
  -Ccmake.define.LLVM_EXTERNAL_LIT="$(command -v lit || echo lit)" -e "$ROOT[test]"
mkdir -p "$ROOT/build"
echo "$inputs_hash" > "$stamp"
log "done"
