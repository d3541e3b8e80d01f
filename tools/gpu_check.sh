#!/usr/bin/env bash
# tools/gpu_check.sh [--out DIR] [--jobs N] [--bench-timeout SECONDS] [--build-only]
#                    [-- BENCH_ARG...]
# On a CUDA machine without Debian's packages (the device machine of
# docs/gpu.md), from the repository root: builds lockstep with the CUDA
# backend and NCCL in build-gpu/ against .gpu-bundle/ (made by
# tools/gpu_bundle.sh on a Debian machine and carried along), then runs the
# 'gpu' test suite and bench/gpu_allreduce (with BENCH_ARGs, e.g. --quick).
# Builds only the library, the suite's programs and the benchmark. Writes to
# DIR (default build-gpu-check/):
#   gpu_check.log        all that it printed
#   testlog.txt, testlog.json   meson's log of the suite
#   gpu_allreduce.json   the benchmark's results
#   meson-log.txt        meson's own log, when configuring failed
# Exits non-zero if any step fails, if a test of the suite is skipped (no
# device seen), or if bench/gpu_allreduce does not exist. Safe to run again:
# build-gpu/ is reused while the bundle stays where it was.
# --build-only stops after building (how the check is tried without a GPU).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"

build="build-gpu"
out="build-gpu-check"  # not inside build-gpu/, which a moved bundle wipes
jobs="$(nproc)"
bench_timeout=300
build_only=0
bench_args=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --out) out="$2"; shift 2 ;;
    --jobs) jobs="$2"; shift 2 ;;
    --bench-timeout) bench_timeout="$2"; shift 2 ;;
    --build-only) build_only=1; shift ;;
    --) shift; bench_args=("$@"); break ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "gpu_check: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

bundle="$repo/.gpu-bundle"
cuda_root=/usr/local/cuda
mkdir -p "$out"
out="$(cd "$out" && pwd)"
exec > >(tee "$out/gpu_check.log") 2>&1

fail() { echo "gpu_check: $*" >&2; exit 1; }
step() { echo; echo "== gpu_check: $*"; }

# -- what this machine is -------------------------------------------------------

step "machine"
echo "host: $(uname -srm), $(nproc) cores"
if command -v nvidia-smi >/dev/null; then nvidia-smi -L || true; else echo "nvidia-smi: not found"; fi
[[ -d "$cuda_root/bin" ]] && export PATH="$PATH:$cuda_root/bin"
nvcc="$(command -v nvcc || echo "$cuda_root/bin/nvcc")"
if [[ -x "$nvcc" ]]; then "$nvcc" --version | tail -2; else echo "nvcc: not found"; fi

export CXX="${CXX:-g++}"
command -v "${CXX%% *}" >/dev/null ||
  fail "no C++ compiler: $CXX is not on PATH (install g++, or set CXX)"
$CXX --version | head -1
# meson and ninja may be Python packages whose commands are not on the PATH.
if ! command -v meson >/dev/null; then
  python3 -c 'import mesonbuild' 2>/dev/null || fail "no meson: not on the PATH, nor a python3 package"
  meson() { python3 -m mesonbuild.mesonmain "$@"; }
fi
if ! command -v ninja >/dev/null && ! command -v samu >/dev/null; then
  ninja_bin="$(python3 -c 'import ninja; print(ninja.BIN_DIR)' 2>/dev/null)" ||
    fail "no ninja: not on the PATH, nor a python3 package"
  export PATH="$PATH:$ninja_bin"
fi
echo "meson $(meson --version), ninja $(ninja --version 2>/dev/null || samu --version)"

# -- the bundle -----------------------------------------------------------------

step "bundle"
[[ -f "$bundle/MANIFEST.txt" ]] ||
  fail "no .gpu-bundle/ here: run tools/gpu_bundle.sh on a Debian machine and carry .gpu-bundle (carry: [\".gpu-bundle\"])"
grep -E '^(made|commit|size_mib|requires_glibc|requires_glibcxx)=' "$bundle/MANIFEST.txt"
case "$bundle" in
  *[\'\\\"]*|*[[:space:]]*) fail "the repository's path $repo has a quote, backslash or space; move it" ;;
esac

# The bundle's libraries were built on Debian 12: this machine's C and C++
# runtimes must be as new.
manifest() { sed -n "s/^$1=//p" "$bundle/MANIFEST.txt"; }
glibc="$(getconf GNU_LIBC_VERSION | awk '{print $2}')"
if [[ "$(printf '%s\n' "$(manifest requires_glibc)" "$glibc" | sort -V | head -1)" != "$(manifest requires_glibc)" ]]; then
  fail "the bundle's libraries need glibc $(manifest requires_glibc); this machine has $glibc"
fi
libstdcxx="$(readlink -f "$($CXX -print-file-name=libstdc++.so.6)")"
if [[ ! -f "$libstdcxx" ]]; then
  echo "gpu_check: $CXX does not say where its libstdc++.so.6 is; not checking its version"
elif ! grep -aq "GLIBCXX_$(manifest requires_glibcxx)" "$libstdcxx"; then
  fail "the bundle's libraries need GLIBCXX_$(manifest requires_glibcxx), which $libstdcxx lacks (an older g++?)"
fi

# Every Boost header the sources include by name must be in the bundle;
# a missing one means the bundle is older than the sources.
missing=()
while read -r header; do
  [[ -f "$bundle/include/$header" ]] || missing+=("$header")
done < <(grep -rhoE '^[[:space:]]*#[[:space:]]*include[[:space:]]*<boost/[^>]+>' \
           --include='*.cpp' --include='*.hpp' --include='*.h' --include='*.cu' --include='*.cuh' \
           src actors include tests bench tools examples 2>/dev/null |
         sed -E 's/.*<(boost\/[^>]+)>.*/\1/' | sort -u)
[[ ${#missing[@]} -eq 0 ]] ||
  fail "the bundle lacks ${missing[*]}: run tools/gpu_bundle.sh again and carry the new bundle"

# The linker reads libNAME.so; the bundle holds each library under its soname.
for lib in "$bundle"/lib/lib*.so.*; do
  ln -sfn "$(basename "$lib")" "${lib%%.so.*}.so"
done

[[ -f "$cuda_root/lib64/libcudart.so" ]] || fail "no CUDA runtime under $cuda_root/lib64"
ls "$cuda_root"/lib64/libnccl.so* "$cuda_root"/lib/libnccl.so* >/dev/null 2>&1 ||
  fail "no NCCL under $cuda_root/lib64 or $cuda_root/lib"

# -- configure --------------------------------------------------------------------

# How meson finds the bundle: its pkg-config for spdlog, fmt, zlib, libcrypto,
# nlohmann_json and doctest; boost_root for Boost; and, for CAF (no .pc file),
# its include/ as a system directory (quiet, like /usr/include) and its lib/ on
# the link path and in every program's RPATH (DT_RPATH, not RUNPATH, so that
# it serves the bundle's own libraries' needs too: spdlog's fmt).
native="$bundle/meson-native.ini"
cat >"$native" <<EOF
# Written by tools/gpu_check.sh for this machine's path of the bundle.
[binaries]
# meson before 1.3 reads 'pkgconfig', later ones 'pkg-config'.
pkgconfig = '$bundle/pkgconf/pkg-config'
pkg-config = '$bundle/pkgconf/pkg-config'

[properties]
boost_root = '$bundle'

[built-in options]
cpp_args = ['-isystem', '$bundle/include']
cpp_link_args = ['-L$bundle/lib', '-Wl,-rpath,$bundle/lib', '-Wl,--disable-new-dtags']
EOF

options=(-Dcuda=enabled -Dnccl=enabled -Dtests=true -Dbenchmarks=true -Dexamples=false
         --wrap-mode=nodownload)
step "configure $build"
# Meson reads a native file's options only when it first configures a
# directory: one made with another (or no) native file is made afresh.
if [[ -f "$build/meson-private/coredata.dat" ]] && cmp -s "$native" "$build/gpu-check-native.ini"; then
  meson setup --reconfigure "$build" "${options[@]}" || {
    echo "gpu_check: reconfiguring $build failed; configuring it afresh"
    rm -rf "$build"
  }
else
  rm -rf "$build"
fi
if [[ ! -f "$build/meson-private/coredata.dat" ]]; then
  if ! meson setup "$build" --native-file "$native" "${options[@]}"; then
    cp "$build/meson-logs/meson-log.txt" "$out/" 2>/dev/null || true
    fail "configuring $build failed (meson-log.txt in $out)"
  fi
  cp "$native" "$build/gpu-check-native.ini"
fi

# -- build ------------------------------------------------------------------------

# Prints targets as meson compile names them (subdir/name), from meson's
# introspection: for 'gpu-suite' those that the suite's tests need (the
# library comes with them), for a path such as bench/gpu_allreduce the target
# that builds it, if there is one.
targets_of() {  # gpu-suite | SUBDIR/NAME
  python3 - "$build" "$1" <<'EOF'
import json, os, sys
build, which = sys.argv[1], sys.argv[2]
info = os.path.join(build, 'meson-info')
targets = json.load(open(os.path.join(info, 'intro-targets.json')))
tests = json.load(open(os.path.join(info, 'intro-tests.json')))
if which == 'gpu-suite':
    wanted = {d for t in tests if any(s.split(':')[-1] == 'gpu' for s in t['suite'])
              for d in t['depends']}
    chosen = [t for t in targets if t['id'] in wanted]
else:  # a target's subdir/name
    chosen = [t for t in targets
              if os.path.relpath(t['filename'][0], os.path.abspath(build)) == which]
for t in chosen:
    subdir = os.path.dirname(os.path.relpath(t['filename'][0], os.path.abspath(build)))
    print(f"{subdir}/{t['name']}" if subdir else t['name'])
EOF
}

step "build the 'gpu' suite"
mapfile -t suite_targets < <(targets_of gpu-suite)
[[ ${#suite_targets[@]} -gt 0 ]] ||
  fail "$build has no test in the 'gpu' suite (was the CUDA backend configured?)"
echo "targets: ${suite_targets[*]}"
meson compile -C "$build" -j "$jobs" "${suite_targets[@]}" || fail "building the 'gpu' suite failed"

failed=()
step "build bench/gpu_allreduce"
bench_target="$(targets_of bench/gpu_allreduce)"
if [[ -z "$bench_target" ]]; then
  echo "gpu_check: bench/gpu_allreduce does not exist in this tree (yet)"
  failed+=("bench/gpu_allreduce (missing)")
elif ! meson compile -C "$build" -j "$jobs" "$bench_target"; then
  failed+=("build bench/gpu_allreduce")
  bench_target=""
fi

if [[ $build_only -eq 1 ]]; then
  step "built (--build-only: no tests, no benchmark)"
  ldd "$build/${suite_targets[0]}" | grep -E 'caf|spdlog|fmt|libz|crypto|cuda|nccl|not found' || true
  [[ ${#failed[@]} -eq 0 ]] || fail "failed: ${failed[*]}"
  exit 0
fi

# -- run ---------------------------------------------------------------------------

step "test --suite gpu"
if ! meson test -C "$build" --suite gpu --no-rebuild --print-errorlogs; then
  failed+=("meson test --suite gpu")
fi
cp "$build"/meson-logs/testlog.txt "$build"/meson-logs/testlog.json "$out/" 2>/dev/null || true
skipped="$(python3 -c '
import json, sys
print(sum(1 for line in open(sys.argv[1]) if json.loads(line).get("result") == "SKIP"))
' "$build/meson-logs/testlog.json" 2>/dev/null || echo 0)"
if [[ "$skipped" != 0 ]]; then
  echo "gpu_check: $skipped test(s) of the 'gpu' suite skipped: they saw no CUDA device"
  failed+=("$skipped skipped gpu test(s)")
fi

if [[ -n "$bench_target" ]]; then
  step "bench/gpu_allreduce --json $out/gpu_allreduce.json ${bench_args[*]}"
  timeout "$bench_timeout" "$build/$bench_target" --json "$out/gpu_allreduce.json" "${bench_args[@]}" ||
    failed+=("bench/gpu_allreduce (exit $?; 124 is the ${bench_timeout} s timeout)")
fi

step "done"
ls -l "$out"
if [[ ${#failed[@]} -gt 0 ]]; then
  printf 'gpu_check: FAILED: %s\n' "${failed[@]}" >&2
  exit 1
fi
echo "gpu_check: the 'gpu' suite passed and bench/gpu_allreduce ran"
