#!/usr/bin/env bash
# Installs what ember needs to build and test on Debian (run as root or with sudo available).
# The CUDA toolkit is optional: with nvcc on the machine the CUDA backend is compiled too.
set -euo pipefail
packages=(cmake ninja-build g++ pkg-config ccache libopenblas-dev liblapacke-dev nlohmann-json3-dev
          libcli11-dev libfmt-dev libgtest-dev libgmock-dev libbenchmark-dev libpcre2-dev libutf8proc-dev)
missing=()
for p in "${packages[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if ((${#missing[@]})); then
  sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"
fi
