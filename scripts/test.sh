#!/usr/bin/env bash
# Installs dependencies, builds ember and runs every test. On a machine without a GPU the CUDA
# objects are still compiled (when nvcc exists) and the CUDA test cases report SKIPPED with the
# reason. Then the CPU build is rebuilt and tested under AddressSanitizer + UBSan.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# Explicit ON: scripts/run.sh configures the same build/ with tests and benchmarks off.
bash scripts/build.sh -DEMBER_CUDA=AUTO -DEMBER_BUILD_TESTS=ON -DEMBER_BUILD_BENCH=ON
ctest --test-dir build --output-on-failure -j "$(nproc)"
# The installed package: find_package(ember) from a separate project, and pkg-config.
prefix=$(mktemp -d)
cmake --install build --prefix "$prefix" > /dev/null
cmake -S tests/install -B build-install-check -G Ninja -DCMAKE_PREFIX_PATH="$prefix" > /dev/null
cmake --build build-install-check
./build-install-check/install_check tests/fixtures
PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs ember > /dev/null
rm -rf "$prefix"
if [ "${EMBER_SKIP_SANITIZE:-0}" != 1 ]; then
  EMBER_BUILD_DIR=build-asan bash scripts/build.sh -DEMBER_CUDA=OFF -DEMBER_SANITIZE=ON -DEMBER_BUILD_BENCH=OFF \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --test-dir build-asan --output-on-failure -j "$(nproc)"
fi
