#!/usr/bin/env bash
# Builds and runs every test. GPU tests skip with a message where no GPU is present.
# Extra arguments go to ctest (e.g. -L host, -R Template).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
ctest --test-dir build --output-on-failure -j "$(nproc)" "$@"
