#!/usr/bin/env bash
# The main job: installs missing packages (Fashion-MNIST among them),
# configures and builds build/, then trains the MLP on Fashion-MNIST with a
# mirrored strategy over one virtual CPU device per core. The per-epoch CSV
# and the plot of the curves go to build/fashion_mnist/. Arguments are passed
# on to the program (see build/examples/train_fashion_mnist --help), after
# these defaults, so they override them. Set-up output goes to stderr.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"

tools/build.sh >&2

mkdir -p build/fashion_mnist
exec build/examples/train_fashion_mnist \
  --metrics build/fashion_mnist/metrics.csv \
  --plot build/fashion_mnist/curves.svg \
  "$@"
