#!/usr/bin/env bash
# Installs everything a fresh machine lacks to build and test mpmd. Idempotent: a second
# run on a prepared machine only checks and returns in a few seconds.
set -euo pipefail

LLVM_PREFIX=/usr/lib/llvm-22
APT_PACKAGES=(libmlir-22-dev mlir-22-tools llvm-22-dev llvm-22-tools)
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

log() { echo "[bootstrap] $*"; }

need_apt=0
for tool in "$LLVM_PREFIX/bin/mlir-tblgen" "$LLVM_PREFIX/bin/FileCheck" \
            "$LLVM_PREFIX/lib/cmake/mlir/MLIRConfig.cmake" "$LLVM_PREFIX/bin/not"; do
  [ -e "$tool" ] || need_apt=1
done
for tool in cmake ninja; do
  command -v "$tool" >/dev/null 2>&1 || need_apt=1
done
if [ "$need_apt" = 1 ]; then
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO="sudo"
  log "installing ${APT_PACKAGES[*]} (apt)"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
    "${APT_PACKAGES[@]}" cmake ninja-build >/dev/null
fi

PY="${PYTHON:-python3}"
# The editable install is redone only when the build inputs changed since the last one.
stamp="$ROOT/build/.bootstrap-stamp"
inputs_hash="$(cd "$ROOT" && cat pyproject.toml CMakeLists.txt | sha256sum | cut -d' ' -f1)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$inputs_hash" ] && \
   "$PY" -c "import mpmd._mpmd, jax, flax, optax, lit" >/dev/null 2>&1; then
  log "python environment ready"
  exit 0
fi
log "installing python dependencies and building mpmd (pip install -e .[test])"
"$PY" -m pip install -q --disable-pip-version-check scikit-build-core nanobind
"$PY" -m pip install -q --disable-pip-version-check --no-build-isolation -e "$ROOT[test]"
mkdir -p "$ROOT/build"
echo "$inputs_hash" > "$stamp"
log "done"
