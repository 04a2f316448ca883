#!/usr/bin/env bash
# Installs the build dependencies that are missing (Debian/Ubuntu, apt), or says exactly
# what to install when it cannot. The CUDA toolkit (headers + NVRTC) must be present already.
set -euo pipefail
pkgs=(cmake ninja-build g++ pkg-config libyaml-cpp-dev libsqlite3-dev sqlite3 libgtest-dev libgmock-dev nlohmann-json3-dev
      libbenchmark-dev libcli11-dev clang)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "sage-tune: installing missing packages: ${missing[*]}" >&2
  if [ "$(id -u)" = 0 ]; then sudo=""; elif command -v sudo >/dev/null; then sudo="sudo"; else
    echo "sage-tune: not root and no sudo; run: apt-get install -y ${missing[*]}" >&2; exit 1; fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq >/dev/null || { echo "sage-tune: apt-get update failed; run: apt-get install -y ${missing[*]}" >&2; exit 1; }
  $sudo apt-get install -y -qq "${missing[@]}" >/dev/null || { echo "sage-tune: apt-get install failed; run: apt-get install -y ${missing[*]}" >&2; exit 1; }
fi
if ! { command -v nvcc >/dev/null || [ -f /usr/local/cuda/include/nvrtc.h ]; }; then
  echo "sage-tune: the CUDA toolkit (13.x, with NVRTC) is required: https://developer.nvidia.com/cuda-downloads" >&2
  exit 1
fi
