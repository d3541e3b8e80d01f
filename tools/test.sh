#!/usr/bin/env bash
# Installs missing packages, configures and builds build/, and runs the whole
# test suite. Exits non-zero if any step or test fails; safe to run again.
# Extra arguments go to `meson test` (e.g. --suite unit, or a test's name).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"

tools/build.sh
# The includes must follow docs/design.md's layers.
python3 tools/check_layers.py
# The CUDA backend is built wherever the toolkit is (its failure to build
# fails the build above); its 'gpu' suite skips (exit 77) without a device.
if [[ -x build/tests/gpu_smoke_test ]]; then
  echo "test.sh: CUDA backend built (toolkit under /usr/local/cuda); the 'gpu' suite skips without a device"
else
  echo "test.sh: CUDA backend skipped (no CUDA toolkit under /usr/local/cuda)"
fi
meson test -C build --print-errorlogs "$@"
