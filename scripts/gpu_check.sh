#!/usr/bin/env bash
# One call on the GPU machine: build with CUDA (sm_90a there; CI compiles sm_80 too), run every
# test, run the CUDA tests under compute-sanitizer (memcheck, racecheck), run the decode
# benchmarks next to PyTorch. Logs go to $OUT (or ./out). Steps: all (default) or a list of
# build tests sanitize bench (or one of bench-decode bench-core bench-linalg bench-moe), profile-moe.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-out}; mkdir -p "$out"
steps=${*:-build tests sanitize bench}
export PYTHONUNBUFFERED=1
has() { [[ " $steps " == *" $1 "* ]]; }
stamp() { echo "== $(date +%T) $*"; }

if has build; then
  stamp build
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
  # The GPU image lacks the PCRE2 and utf8proc headers: unpack the Debian packages carried in
  # .debs/ (apt-get download libpcre2-dev libpcre2-8-0 libutf8proc-dev libutf8proc2) into a prefix.
  prefix=()
  if [ ! -f /usr/include/pcre2.h ] || [ ! -f /usr/include/utf8proc.h ]; then
    for deb in .debs/*.deb; do dpkg -x "$deb" /tmp/ember-deps; done
    prefix=(-DCMAKE_PREFIX_PATH=/tmp/ember-deps/usr)
  fi
  cmake -S . -B build-gpu -G Ninja "${prefix[@]}" -DEMBER_CUDA=ON -DEMBER_CUDA_ARCHITECTURES=90a -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc \
    > "$out/build.log" 2>&1 && cmake --build build-gpu -j 16 >> "$out/build.log" 2>&1
  rc=$?; tail -5 "$out/build.log"; [ $rc -eq 0 ] || { grep -E "error|FAILED" "$out/build.log" | head -40; exit 1; }
fi
if has tests; then
  stamp tests
  ./build-gpu/tests/ember_tests --gtest_brief=1 > "$out/tests.log" 2>&1
  echo "tests rc=$?"; grep -E "^\[  (FAILED|PASSED|SKIPPED) |tests ran|FAILED TEST" "$out/tests.log" | tail -40
  ./build-gpu/tools/ember info
fi
if has sanitize || has memcheck || has racecheck; then
  stamp sanitize
  # The parity cases and the CUDA runtime tests; the out-of-memory test provokes an API error on purpose.
  filter='*Parity*:CudaRuntime.*-CudaRuntime.OutOfMemory*'
  tools=""; { has sanitize || has memcheck; } && tools="memcheck"; { has sanitize || has racecheck; } && tools="$tools racecheck"
  for tool in $tools; do
    timeout ${SANITIZE_TIMEOUT:-240} compute-sanitizer --tool $tool --error-exitcode 9 ./build-gpu/tests/ember_tests --gtest_brief=1 --gtest_filter="$filter" \
      > "$out/sanitize-$tool.tmp" 2>&1
    echo "$tool rc=$?"; grep -E "ERROR SUMMARY|tests ran|FAILED" "$out/sanitize-$tool.tmp" | tail -5
    { echo "==== $tool"; cat "$out/sanitize-$tool.tmp"; } >> "$out/sanitize.log"; rm -f "$out/sanitize-$tool.tmp"
  done
fi
# Benchmarks: each writes JSON lines for ember and for PyTorch (same cases, same method, same
# run); compare.py joins them into one table of ratios.
bench_pair() {  # name, ember command, torch command
  stamp "bench $1"
  eval "$2" >> "$out/bench.jsonl" 2>> "$out/bench.err"
  eval "$3" >> "$out/bench.jsonl" 2>> "$out/bench.err"
}
if has bench || has bench-decode; then
  bench_pair decode "python3 bench/shapes.py | ./build-gpu/bench/decode_bench" "(cd bench && python3 torch_decode.py)"
fi
if has bench || has bench-linalg; then
  bench_pair linalg ./build-gpu/bench/linalg_bench "(cd bench && python3 torch_linalg.py)"
fi
if has bench || has bench-moe; then
  bench_pair moe ./build-gpu/bench/moe_bench "(cd bench && python3 torch_moe.py)"
fi
if has bench || has bench-core; then
  bench_pair core ./build-gpu/bench/core_bench "python3 bench/torch_core.py"
fi
if has profile-moe; then
  # Per-kernel durations of the decode MoE layer (Qwen3-30B-A3B shapes, T=1) at normal clocks.
  stamp "profile moe"
  ncu --clock-control none --kernel-name regex:"decode|route|permute|gemv|rows_kernel" --launch-skip 40 --launch-count 24 \
    ./build-gpu/bench/moe_bench 1 2>&1 | grep -E "^  [a-z_]+.*\(|Duration|DRAM Throughput" | head -120 > "$out/profile.txt"
  head -60 "$out/profile.txt"
fi
if [ -s "$out/bench.jsonl" ]; then
  python3 bench/compare.py "$out/bench.jsonl" > "$out/perf.txt"
  grep -E "geomean|missing|error" "$out/perf.txt"; tail -c 2500 "$out/bench.err"
fi
stamp done
