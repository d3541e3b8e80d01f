#!/usr/bin/env bash
# tools/configure.sh BUILD_DIR [MESON_SETUP_OPTION...]
# Configures BUILD_DIR (relative to the repository root) for lockstep: a fresh
# `meson setup`, or `meson setup --reconfigure` when it is a build directory
# already (then `--wipe` if that fails, e.g. after a meson upgrade). Compiles
# through ccache when it is installed. Used by test.sh, main.sh, sanitize.sh.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="$1"
shift
cd "$repo"

if [[ -z "${CXX:-}" ]]; then
  if command -v ccache >/dev/null; then
    export CXX="ccache g++"
  else
    export CXX="g++"
  fi
fi

if [[ -f "$build_dir/meson-private/coredata.dat" ]]; then
  if ! meson setup --reconfigure "$build_dir" "$@"; then
    echo "configure: reconfiguring $build_dir failed; wiping it and configuring afresh" >&2
    meson setup --wipe "$build_dir" "$@"
  fi
else
  meson setup "$build_dir" "$@"
fi
