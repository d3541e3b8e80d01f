#!/usr/bin/env bash
# Installs missing packages, configures and builds build/, and runs the whole
# test suite. Exits non-zero if any step or test fails; safe to run again.
# Extra arguments go to `meson test` (e.g. --suite unit, or a test's name).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"

tools/build.sh
meson test -C build --print-errorlogs "$@"
