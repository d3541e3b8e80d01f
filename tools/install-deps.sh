#!/usr/bin/env bash
# tools/install-deps.sh [--comparisons]
# Installs the Debian (bookworm) packages that lockstep needs to build, test,
# benchmark and plot, skipping those already installed; with nothing missing
# it changes nothing and needs no network. Run it as root, or as a user who
# may sudo. --comparisons adds the peers that only the comparisons with
# other libraries build against (tools/compare_mpi.sh, tools/compare_tcp.sh),
# which run it themselves.
set -euo pipefail

# The one list of packages lockstep depends on.
packages=(
  build-essential g++ meson ninja-build pkg-config cmake ccache  # toolchain
  libcaf-dev            # C++ Actor Framework 0.17
  libboost-dev          # Boost.Asio (header-only)
  doctest-dev           # tests
  nlohmann-json3-dev    # cluster specs (TF_CONFIG), checkpoints
  libspdlog-dev         # logging (brings libfmt-dev)
  libeigen3-dev
  zlib1g-dev            # gzip: checkpoints, IDX datasets
  libssl-dev            # OpenSSL libcrypto: the cluster handshake's HMAC-SHA256
  libdlpack-dev         # DLPack 0.6 header: tensors to and from other libraries (docs/interop.md)
  dataset-fashion-mnist # Fashion-MNIST IDX files (/usr/share/datasets/fashion-mnist): examples, tests/idx_test
  gnuplot-nox           # plots of benchmark tables
  openmpi-bin           # mpirun: tests/launchers_test and the 'mpi' suite run real Open MPI jobs
  libopenmpi-dev        # mpi.h: the collectives over MPI (meson option 'mpi'); bench/peers/mpi_allreduce.cpp
  libsimgrid-dev        # SimGrid: the simulated cluster (meson option 'simgrid'; suite sim, bench/sim_allreduce)
)
# Only for tools/compare_mpi.sh and tools/compare_tcp.sh.
comparison_packages=(
  libgloo-dev           # Gloo's headers and library: bench/peers/gloo_allreduce.cpp
)

(($# <= 1)) || { echo "usage: tools/install-deps.sh [--comparisons]" >&2; exit 2; }
case "${1:-}" in
  "") ;;
  --comparisons) packages+=("${comparison_packages[@]}") ;;
  *) echo "usage: tools/install-deps.sh [--comparisons]" >&2; exit 2 ;;
esac

missing=()
for package in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$package")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps: all ${#packages[@]} packages are installed"
  exit 0
fi

if [[ $(id -u) -eq 0 ]]; then
  as_root=()
elif command -v sudo >/dev/null; then
  as_root=(sudo)
else
  echo "install-deps: missing ${missing[*]}; run this script as root to install them" >&2
  exit 1
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# Wait for another apt or dpkg run to finish instead of failing at once.
apt_options=(-o DPkg::Lock::Timeout=300)
"${as_root[@]}" apt-get "${apt_options[@]}" update
"${as_root[@]}" apt-get "${apt_options[@]}" install -y --no-install-recommends "${missing[@]}"
