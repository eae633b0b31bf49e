#!/usr/bin/env bash
# The main job: installs dependencies, builds ember and runs it (device: cpu, or cuda where present).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh -DEMBER_BUILD_TESTS=OFF -DEMBER_BUILD_BENCH=OFF
./build/tools/ember info
device=cpu
./build/tools/ember info | grep -q "CUDA available: yes" && device=cuda
./build/tools/ember demo --device "$device"
