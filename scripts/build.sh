#!/usr/bin/env bash
# Configures and builds ember into build/ (or $EMBER_BUILD_DIR). Extra arguments go to cmake.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${EMBER_BUILD_DIR:-build}
# Hash paths relative to the checkout, so a clone elsewhere (CI) reuses this machine's ccache.
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
# nvcc is usually outside PATH on Debian's CUDA installs; the CUDA backend builds when it is found.
if [ -z "${CUDACXX:-}" ] && ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export CUDACXX=/usr/local/cuda/bin/nvcc
fi
cmake -S . -B "$build_dir" -G Ninja "$@"
cmake --build "$build_dir" -j "$(nproc)"
