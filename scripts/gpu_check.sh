#!/usr/bin/env bash
# One call on the GPU machine: build with CUDA (sm_90a there; CI compiles sm_80 too), run every
# test, run the CUDA tests under compute-sanitizer (memcheck, racecheck), run the decode
# benchmarks next to PyTorch. Logs go to $OUT (or ./out). Steps: all (default) or a list of
# build tests sanitize bench.
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
  cmake -S . -B build-gpu -G Ninja -DEMBER_CUDA=ON -DEMBER_CUDA_ARCHITECTURES=90a -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc \
    > "$out/build.log" 2>&1 && cmake --build build-gpu -j 16 >> "$out/build.log" 2>&1
  rc=$?; tail -5 "$out/build.log"; [ $rc -eq 0 ] || { grep -E "error|FAILED" "$out/build.log" | head -40; exit 1; }
fi
if has tests; then
  stamp tests
  ./build-gpu/tests/ember_tests --gtest_brief=1 > "$out/tests.log" 2>&1
  echo "tests rc=$?"; grep -E "^\[  (FAILED|PASSED|SKIPPED) |tests ran|FAILED TEST" "$out/tests.log" | tail -40
  ./build-gpu/tools/ember info
fi
if has sanitize; then
  stamp sanitize
  filter='Parity*:Cuda*:*Runtime*'
  for tool in memcheck racecheck; do
    compute-sanitizer --tool $tool --error-exitcode 9 ./build-gpu/tests/ember_tests --gtest_brief=1 --gtest_filter="$filter" \
      > "$out/sanitize-$tool.log" 2>&1
    echo "$tool rc=$?"; grep -E "ERROR SUMMARY|tests ran|FAILED" "$out/sanitize-$tool.log" | tail -5
  done
fi
if has bench; then
  stamp bench
  python3 bench/shapes.py | ./build-gpu/bench/decode_bench > "$out/bench-ember.jsonl" 2> "$out/bench-ember.err"
  (cd bench && python3 torch_decode.py) > "$out/bench-torch.jsonl" 2> "$out/bench-torch.err"
  ./build-gpu/bench/core_bench >> "$out/bench-ember.jsonl" 2>> "$out/bench-ember.err"
  python3 bench/torch_core.py >> "$out/bench-torch.jsonl" 2>> "$out/bench-torch.err"
  ./build-gpu/bench/moe_bench >> "$out/bench-ember.jsonl" 2>> "$out/bench-ember.err"; (cd bench && python3 torch_moe.py) >> "$out/bench-torch.jsonl" 2>> "$out/bench-torch.err"
  python3 bench/compare.py "$out/bench-ember.jsonl" "$out/bench-torch.jsonl" | tee "$out/perf.txt" | tail -45
fi
stamp done
