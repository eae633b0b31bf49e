#!/usr/bin/env bash
# TRIAL (branch grouped-mm-decode-v2, prepared in session 14, not yet run): grouped_mm's decode
# kernel v2 (rows staged in shared memory, whole raw batches of weight loads) against v1
# (EMBER_GMM_DECODE_V1=1). One device call: build, the MoE tests and the grouped_mm parity cases
# under memcheck with v2, then moe_bench (grouped_mm lines) for T 1 4 16 alternating v1 / v2.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-out}; mkdir -p "$out"
prefix=()
if [ ! -f /usr/include/pcre2.h ] || [ ! -f /usr/include/utf8proc.h ]; then
  for deb in .debs/*.deb; do dpkg -x "$deb" /tmp/ember-deps; done
  prefix=(-DCMAKE_PREFIX_PATH=/tmp/ember-deps/usr)
fi
echo "== $(date +%T) build"
cmake -S . -B build-gpu -G Ninja "${prefix[@]}" -DEMBER_CUDA=ON -DEMBER_CUDA_ARCHITECTURES=90a -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc > "$out/build.log" 2>&1 &&
  cmake --build build-gpu -j 16 --target ember_tests moe_bench >> "$out/build.log" 2>&1 || { grep -E "error|FAILED" "$out/build.log" | head -30; exit 1; }
echo "== $(date +%T) tests (v2)"
timeout 120 ./build-gpu/tests/ember_tests --gtest_brief=1 --gtest_filter='*moe*:*Moe*:*grouped*:*Grouped*' > "$out/tests.log" 2>&1
echo "tests rc=$?"; grep -E "^\[  (FAILED|PASSED|SKIPPED) |FAILED TEST" "$out/tests.log" | tail -20
timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 ./build-gpu/tests/ember_tests --gtest_filter='*gmm*' > "$out/memcheck.log" 2>&1
echo "memcheck rc=$?"; grep -E "ERROR SUMMARY" "$out/memcheck.log" | head -3
for round in 1 2; do
  for v1 in 1 0; do
    echo "== $(date +%T) grouped_mm, v1=$v1"
    for t in 1 4 16; do
      EMBER_GMM_DECODE_V1=$v1 timeout 60 ./build-gpu/bench/moe_bench $t 2>&1 | python3 -c '
import json, sys
for line in sys.stdin:
    try: d = json.loads(line)
    except ValueError: continue
    if d.get("op") == "grouped_mm": print("  %-28s %8.2f us" % (d["case"], d.get("us", 0)))'
    done
  done
done
echo "== $(date +%T) done"
