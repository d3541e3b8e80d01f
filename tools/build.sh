#!/usr/bin/env bash
# Installs missing packages, then configures and builds build/. Used by
# tools/test.sh and tools/main.sh; safe to run again.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"

tools/install-deps.sh
tools/configure.sh build
meson compile -C build
