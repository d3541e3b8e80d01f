#!/usr/bin/env bash
# Installs missing packages, configures and builds build/, then runs the main
# job, passing this script's arguments on. Set-up output goes to stderr, so
# stdout carries only the job's output.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"

tools/build.sh >&2

exec build/examples/embed_basic "$@"
