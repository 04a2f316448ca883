#!/usr/bin/env bash
# The main job: builds sage-tune and runs it on the default configuration (a tune where a
# GPU is present; otherwise it generates and compiles the default variant set).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
exec ./build/sage-tune "$@"
