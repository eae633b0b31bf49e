#!/usr/bin/env bash
# One call on the GPU machine: build with CUDA (sm_90a there; CI compiles sm_80 too), run every
# test, run the CUDA tests under compute-sanitizer (memcheck, racecheck), run the decode
# benchmarks next to PyTorch. Logs go to $OUT (or ./out). Steps: all (default) or a list of
# build tests sanitize bench (or one of bench-decode bench-core bench-linalg bench-moe), bench-engine,
# profile-moe, profile-moe-memory, probe, profile-probe, train.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-out}; mkdir -p "$out"
steps=${*:-build tests sanitize bench}
export PYTHONUNBUFFERED=1
has() { [[ " $steps " == *" $1 "* ]]; }
stamp() { echo "== $(date +%T) $*"; }

# train: the bundled model (models/kjv-moe) trains in the background while the build runs (GPU
# vs CPU work); the corpus is carried in build-kjv/kjv.txt (scripts/train_bundled_model.py
# --prepare-corpus makes it). The result comes back as one archive, kjv-moe.tar.
if has train; then
  stamp "train (background)"
  PYTHONUNBUFFERED=1 python3 scripts/train_bundled_model.py --corpus build-kjv/kjv.txt --out /tmp/kjv-moe \
    --minutes "${TRAIN_MINUTES:-3.5}" > "$out/train.log" 2>&1 &
  train_pid=$!
fi
wait_training() {
  if [ -n "${train_pid:-}" ]; then
    wait "$train_pid"; echo "training rc=$?"; train_pid=""
    tail -15 "$out/train.log"
    [ -d /tmp/kjv-moe ] && tar -C /tmp -cf "$out/kjv-moe.tar" kjv-moe
  fi
}
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
  rc=$?; tail -5 "$out/build.log"; [ $rc -eq 0 ] || { grep -E "error|FAILED" "$out/build.log" | head -40; wait_training; exit 1; }
  # The slowest compile steps (the build is most of each call's time; nvcc files are the long poles).
  awk 'NR > 1 { printf "%6.1f s  %s\n", ($2 - $1) / 1000, $4 }' build-gpu/.ninja_log | sort -rn | head -6
fi
if has tests; then
  stamp tests
  ./build-gpu/tests/ember_tests --gtest_brief=1 --gtest_filter="${TEST_FILTER:-*}" > "$out/tests.log" 2>&1  # TEST_FILTER: a subset
  echo "tests rc=$?"; grep -E "^\[  (FAILED|PASSED|SKIPPED) |tests ran|FAILED TEST" "$out/tests.log" | tail -40
  ./build-gpu/tools/ember info
fi
if has sanitize || has memcheck || has racecheck; then
  stamp sanitize
  # The parity cases and the CUDA runtime tests; the out-of-memory test provokes an API error on purpose.
  # With EMBER_CUDA_ALLOC=direct (every buffer its own cudaMalloc) memcheck also sees a write past a
  # buffer, which the caching allocator's segments hide (session 10's SVD bug); graph captures and
  # the runtime's memory-statistics tests need the caching allocator, so filter to '*Parity*' then.
  filter=${SANITIZE_FILTER:-'*Parity*:CudaRuntime.*-CudaRuntime.OutOfMemory*'}
  # SANITIZE_SHARD=i/n runs the i-th of n gtest shards (racecheck over every case outlasts one call).
  if [ -n "${SANITIZE_SHARD:-}" ]; then export GTEST_SHARD_INDEX=${SANITIZE_SHARD%/*} GTEST_TOTAL_SHARDS=${SANITIZE_SHARD#*/}; fi
  tools=""; { has sanitize || has memcheck; } && tools="memcheck"; { has sanitize || has racecheck; } && tools="$tools racecheck"
  for tool in $tools; do
    # Not brief: a run cut by the timeout still shows how many cases finished.
    timeout ${SANITIZE_TIMEOUT:-240} compute-sanitizer --tool $tool --error-exitcode 9 ./build-gpu/tests/ember_tests --gtest_filter="$filter" \
      > "$out/sanitize-$tool.tmp" 2>&1
    echo "$tool rc=$? ($(grep -c '^\[       OK \]' "$out/sanitize-$tool.tmp") cases passed, last: $(grep '^\[ RUN' "$out/sanitize-$tool.tmp" | tail -1))"
    grep -E "ERROR SUMMARY|tests ran|FAILED|^=========" "$out/sanitize-$tool.tmp" | head -20
    { echo "==== $tool"; cat "$out/sanitize-$tool.tmp"; } >> "$out/sanitize.log"; rm -f "$out/sanitize-$tool.tmp"
  done
fi
wait_training  # benchmarks need the GPU to themselves
# Benchmarks: each writes JSON lines for ember and for PyTorch (same cases, same method, same
# run); compare.py joins them into one table of ratios.
bench_pair() {  # name, ember command, torch command
  stamp "bench $1"
  eval "$2" >> "$out/bench.jsonl" 2>> "$out/bench.err"
  eval "$3" >> "$out/bench.jsonl" 2>> "$out/bench.err"
}
if has probe; then  # the standalone probes (no ember build needed): bench/{stream,moe,gemv,fp8_gemv}_probe.cu (PROBES may name moe_cluster_probe, columns_claims_probe too)
  for probe in ${PROBES:-stream_probe moe_probe gemv_probe fp8_gemv_probe}; do
    stamp "probe $probe"
    nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a "bench/$probe.cu" -o "/tmp/$probe" && timeout 120 "/tmp/$probe" ${PROBE_ARGS:-} | tee "$out/$probe.txt"  # PROBE_ARGS: e.g. a gemv_probe section
  done
fi
if has profile-probe; then
  # ncu's view of the probe's kernels (same flags as profile-moe), to set its per-kernel durations
  # of ember's decode kernels against what the probe's CUDA-graph timing gives for the same bytes.
  stamp "profile probe"
  [ -x /tmp/moe_probe ] || nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a bench/moe_probe.cu -o /tmp/moe_probe
  for kernel in router_kernel rows_kernel down_kernel; do
    ncu --clock-control none --kernel-name regex:$kernel --launch-skip 10 --launch-count 3 /tmp/moe_probe 2>&1 |
      grep -E "^  [a-z_]+.*\(|Duration|DRAM Throughput" | tee -a "$out/profile-probe.txt"
  done
fi
if has bench || has bench-linalg; then
  bench_pair linalg ./build-gpu/bench/linalg_bench "(cd bench && python3 torch_linalg.py)"
fi
if has bench || has bench-moe; then  # MOE_TOKENS: a subset of "1 2 4 8 16 64 512"
  tokens=${MOE_TOKENS:-1 2 4 8 16 64 512}
  bench_pair moe "for t in $tokens; do ./build-gpu/bench/moe_bench \$t; done" "(cd bench && python3 torch_moe.py $tokens)"
fi
if has bench || has bench-decode; then  # DECODE_OPS: a subset of "gemv softmax scaled_mm weight_fp8 linear"
  ops=${DECODE_OPS:-gemv softmax scaled_mm weight_fp8 linear}
  bench_pair decode "python3 bench/shapes.py | grep -E '^(${ops// /|}) ' | ./build-gpu/bench/decode_bench" "(cd bench && python3 torch_decode.py $ops)"
fi
if has bench || has bench-core; then
  bench_pair core ./build-gpu/bench/core_bench "python3 bench/torch_core.py"
fi
if has bench-engine; then
  # The engine on Qwen3-30B-A3B's shapes with random weights (no download): prefill and decode
  # tokens/s and peak memory, bf16 and FP8 experts/projections.
  stamp "bench engine"
  for dtype in bf16 fp8; do
    timeout 120 ./build-gpu/tools/ember bench --random-weights bench/configs/qwen3-30b-a3b.json --device cuda --dtype $dtype \
      --prompt-len 512 --gen-len 64 --json 2>> "$out/bench.err" | tee -a "$out/engine.jsonl"
  done
  # transformers on the same config, GPU and run (after ember has exited: both hold 61 GB);
  # ENGINE_TORCH=0 skips it (its figures are in docs/PERF.md, ~5 minutes of device time).
  [ "${ENGINE_TORCH:-1}" = 0 ] || timeout 300 python3 bench/torch_engine.py --config bench/configs/qwen3-30b-a3b.json --prompt-len 512 --gen-len 64 \
    --ember "$out/engine.jsonl" 2>> "$out/bench.err" | tee -a "$out/engine.txt"
fi
if has profile-moe; then
  # Per-kernel durations of the decode MoE layer (Qwen3-30B-A3B shapes, T=1) at normal clocks.
  stamp "profile moe"
  # PROFILE_KERNELS / PROFILE_SKIP pick other kernels (e.g. "E4m3" and 10: the FP8 decode kernels);
  # PROFILE_ARGS, moe_bench's arguments, may list several runs separated by ';' (e.g.
  # "512 qwen3-30b-a3b bf16;512 qwen3-30b-a3b fp8": the prefill path's kernels).
  IFS=';' read -ra profile_runs <<< "${PROFILE_ARGS:-1}"
  for args in "${profile_runs[@]}"; do
    echo "---- moe_bench $args" >> "$out/profile.txt"
    # shellcheck disable=SC2086
    ncu --clock-control none --kernel-name-base demangled --kernel-name regex:"${PROFILE_KERNELS:-decode|route|permute|gemv|rows_kernel}" --launch-skip ${PROFILE_SKIP:-40} --launch-count ${PROFILE_COUNT:-24} \
      ./build-gpu/bench/moe_bench $args 2>&1 | grep -E "^  [a-z_]+.*\(|Duration|DRAM Throughput" | head -120 >> "$out/profile.txt"
  done
  head -60 "$out/profile.txt"
fi
if has profile-moe-memory; then
  # Why the decode kernels stay below HBM speed: memory workload and speed-of-light sections for
  # one launch each of gate_up and down (Qwen3-30B-A3B T=1 bf16).
  stamp "profile moe memory"
  ncu --clock-control none --kernel-name regex:"gate_up_decode|down_decode" --launch-skip 20 --launch-count 2 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables --section Occupancy \
    ./build-gpu/bench/moe_bench 1 > "$out/profile-memory.txt" 2>&1
  grep -E "decode_kernel|Throughput|Hit Rate|Achieved Occupancy|Theoretical Occupancy|Busy|Bank|Sectors/Req|Excessive" "$out/profile-memory.txt" | head -60
fi
if [ -s "$out/bench.jsonl" ]; then
  python3 bench/compare.py "$out/bench.jsonl" > "$out/perf.txt"
  grep -E "geomean|no ratio|error" "$out/perf.txt"; tail -c 2500 "$out/bench.err"
fi
# At most 8 files come back from a device call: everything but the ratio table goes into one archive.
(cd "$out" && tar czf logs.tgz --remove-files $(ls | grep -v -E '^(perf.txt|logs.tgz|kjv-moe.tar)$') 2>/dev/null)
stamp done
