#!/usr/bin/env bash
# The main job: installs dependencies, builds ember and runs the engine on the bundled model
# (models/kjv-moe, a small Qwen3-MoE trained on the King James Bible): on the GPU where there is
# one, else on the CPU. Extra arguments go to `ember generate` (e.g. --prompt "And Jesus said").
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh -DEMBER_BUILD_TESTS=OFF -DEMBER_BUILD_BENCH=OFF
./build/tools/ember info
device=cpu
./build/tools/ember info | grep -q "CUDA available: yes" && device=cuda
./build/tools/ember generate --model models/kjv-moe --device "$device" --prompt "In the beginning God" \
  --max-new-tokens 96 --seed 7 "$@"
echo
./build/tools/ember eval --model models/kjv-moe --device "$device" --file models/kjv-moe/heldout.txt
