#!/usr/bin/env bash
# tools/gpu_bundle.sh
# Packs into .gpu-bundle/ what building lockstep needs from Debian and a CUDA
# machine without Debian's packages lacks, so that tools/gpu_check.sh can
# build and test there with nothing fetched (docs/gpu.md):
#   include/          CAF 0.17, spdlog, fmt, nlohmann-json, doctest, zlib and
#                     OpenSSL's headers whole; of Boost only the headers that
#                     lockstep's sources reach (g++ -M over every source), and
#                     boost/config/ whole, since it picks headers per compiler
#   lib/              the shared libraries, each under its soname: caf_core,
#                     caf_io, spdlog, fmt, z, crypto
#   lib/pkgconfig/    their .pc files (plus nlohmann_json.pc and doctest.pc),
#                     relocatable: the bundle's pkg-config sets each prefix
#                     from where the bundle lies
#   pkgconf/          Debian's pkgconf and pkg-config, a wrapper that reads
#                     only lib/pkgconfig/
#   MANIFEST.txt      what was packed, from which commit, and the glibc and
#                     libstdc++ versions the libraries need
# Run it from anywhere in a Debian 12 (x86-64) checkout whose packages are
# installed (tools/install-deps.sh). It rebuilds the bundle from scratch, fails
# if any library needs a shared library it does not pack (beyond glibc and
# libstdc++) or if the bundle is over 64 MiB (what may travel to the device
# machine), and adds /.gpu-bundle/ to .git/info/exclude. Run it again when the
# sources start including a Boost header they did not include before.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"

bundle_name=.gpu-bundle
bundle="$repo/$bundle_name"
limit_mib=64

fail() { echo "gpu_bundle: $*" >&2; exit 1; }

# -- the machine ----------------------------------------------------------------

[[ "$(dpkg --print-architecture 2>/dev/null)" == amd64 ]] ||
  fail "needs a Debian amd64 machine (the GPU machine is x86-64); this one is $(uname -m)"
multiarch="$(gcc -print-multiarch)"
libdir="/usr/lib/$multiarch"

needed_packages=(libcaf-dev libboost-dev libspdlog-dev libfmt-dev nlohmann-json3-dev
                 doctest-dev zlib1g-dev libssl-dev pkgconf g++)
missing=()
for package in "${needed_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q 'install ok installed' ||
    missing+=("$package")
done
[[ ${#missing[@]} -eq 0 ]] ||
  fail "missing Debian packages: ${missing[*]}; run tools/install-deps.sh first"

stage="$(mktemp -d "${TMPDIR:-/tmp}/gpu-bundle.XXXXXX")"
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/include" "$stage/lib/pkgconfig" "$stage/pkgconf"

# -- headers --------------------------------------------------------------------

# Copies /usr/include/NAME (or its multiarch twin) into the bundle's include/.
copy_headers() {
  local name found=0
  for name in "$@"; do
    for base in /usr/include "/usr/include/$multiarch"; do
      if [[ -e "$base/$name" ]]; then
        (cd "$base" && cp -a --parents "$name" "$stage/include/")
        found=1
      fi
    done
    [[ $found -eq 1 ]] || fail "no /usr/include/$name"
    found=0
  done
}

copy_headers caf spdlog fmt nlohmann doctest openssl zlib.h zconf.h

# Boost: every header g++ opens for some source that travels (tracked or
# untracked-not-ignored), with the CUDA backend off and on. A header missing
# from the tree (the generated config.hpp, CUDA's) counts as generated (-MG),
# so this needs no build directory. -x c++ also reads .cu and .hpp files.
mapfile -t sources < <(git ls-files -co --exclude-standard -- \
  '*.cpp' '*.cc' '*.cu' | sort)
mapfile -t boost_headers_direct < <(git ls-files -co --exclude-standard -- \
  '*.hpp' '*.h' '*.cuh' | xargs -r grep -l '#[[:space:]]*include[[:space:]]*<boost/' || true)
[[ ${#sources[@]} -gt 0 ]] || fail "found no sources in $repo"
include_flags=(-Iinclude -I. -Isrc)
[[ -d /usr/local/cuda/include ]] && include_flags+=(-isystem /usr/local/cuda/include)
jobs="$(nproc)"
echo "gpu_bundle: finding the Boost headers that ${#sources[@]} sources include"
boost_deps="$stage/boost-deps.txt"
for defines in "" "-DLOCKSTEP_HAVE_CUDA=1 -DLOCKSTEP_HAVE_NCCL=1"; do
  # shellcheck disable=SC2086  # $defines is a list of words
  if ! printf '%s\0' "${sources[@]}" "${boost_headers_direct[@]}" |
      xargs -0 -n 8 -P "$jobs" g++ -std=c++20 -M -MG -x c++ "${include_flags[@]}" $defines \
      >>"$boost_deps"; then
    fail "preprocessing the sources failed (above); fix them, or bundle from a clean checkout"
  fi
done
# One path a line (\134: the backslash that continues -M's lines).
mapfile -t boost_files < <(tr -s ' \134' '\n' <"$boost_deps" |
  grep '^/usr/include/boost/' | xargs -r realpath -e | sed 's|^/usr/include/||' | sort -u)
rm "$boost_deps"
[[ ${#boost_files[@]} -gt 0 ]] || fail "no source includes Boost: is this lockstep's checkout?"
(cd /usr/include && cp --parents -t "$stage/include" "${boost_files[@]}" &&
   cp -a --parents boost/config boost/config.hpp boost/version.hpp "$stage/include/")

# -- libraries --------------------------------------------------------------------

soname_of() { readelf -d "$1" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p'; }

# lib/: the library behind each -lNAME, as its soname (the name the dynamic
# loader asks for); gpu_check.sh adds the libNAME.so links that the linker reads.
for name in caf_core caf_io spdlog fmt z crypto; do
  [[ -e "$libdir/lib$name.so" ]] || fail "no $libdir/lib$name.so"
  real="$(readlink -f "$libdir/lib$name.so")"
  soname="$(soname_of "$real")"
  [[ -n "$soname" ]] || fail "$real has no SONAME"
  cp "$real" "$stage/lib/$soname"
done

# pkgconf, to read the .pc files on a machine that may have no pkg-config.
cp /usr/bin/pkgconf "$stage/pkgconf/"
cp "$(readlink -f "$libdir/libpkgconf.so.3")" "$stage/pkgconf/libpkgconf.so.3"
cat >"$stage/pkgconf/pkg-config" <<'EOF'
#!/bin/sh
# pkg-config of tools/gpu_bundle.sh's bundle: Debian's pkgconf, reading only
# the bundle's lib/pkgconfig/, each .pc file's prefix set from where the
# bundle lies (--define-prefix), so the bundle may move.
bundle=$(cd "$(dirname "$0")/.." && pwd)
PKG_CONFIG_LIBDIR="$bundle/lib/pkgconfig" PKG_CONFIG_PATH= \
LD_LIBRARY_PATH="$bundle/pkgconf${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
  exec "$bundle/pkgconf/pkgconf" --define-prefix "$@"
EOF
chmod +x "$stage/pkgconf/pkg-config"

# Every library that the packed ones load must be packed too, or be glibc's
# or the compiler's runtime, which any machine with g++ has.
system_libs=' libc.so.6 libm.so.6 libpthread.so.0 libdl.so.2 librt.so.1 libstdc++.so.6 libgcc_s.so.1 ld-linux-x86-64.so.2 '
for lib in "$stage"/lib/*.so.* "$stage"/pkgconf/pkgconf "$stage"/pkgconf/libpkgconf.so.3; do
  for needed in $(readelf -d "$lib" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
    [[ "$system_libs" == *" $needed "* || -e "$stage/lib/$needed" ||
       -e "$stage/pkgconf/$needed" ]] ||
      fail "$(basename "$lib") needs $needed, which the bundle lacks"
  done
done

# -- .pc files ----------------------------------------------------------------------

# Debian's, with every directory under ${prefix}: include/ and lib/.
for pc in spdlog fmt zlib libcrypto; do
  source_pc=""
  for dir in "$libdir/pkgconfig" /usr/share/pkgconfig; do
    [[ -f "$dir/$pc.pc" ]] && source_pc="$dir/$pc.pc" && break
  done
  [[ -n "$source_pc" ]] || fail "no $pc.pc under $libdir/pkgconfig or /usr/share/pkgconfig"
  # shellcheck disable=SC2016  # ${prefix} is pkg-config's, not ours
  sed -e "s|^prefix=.*|prefix=$bundle|" \
      -e 's|^exec_prefix=.*|exec_prefix=${prefix}|' \
      -e 's|^libdir=.*|libdir=${prefix}/lib|' \
      -e 's|^sharedlibdir=.*|sharedlibdir=${libdir}|' \
      -e 's|^includedir=.*|includedir=${prefix}/include|' \
      "$source_pc" >"$stage/lib/pkgconfig/$pc.pc"
done
json_version="$(dpkg-query -W -f='${Version}' nlohmann-json3-dev | sed 's/-[^-]*$//')"
doctest_version="$(awk '/#define DOCTEST_VERSION_(MAJOR|MINOR|PATCH) /{v = v (v ? "." : "") $3} END {print v}' \
  /usr/include/doctest/doctest.h)"
# A .pc file for a header-only package that Debian ships without one.
write_header_pc() {  # NAME DESCRIPTION VERSION
  cat >"$stage/lib/pkgconfig/$1.pc" <<EOF
prefix=$bundle
includedir=\${prefix}/include

Name: $1
Description: $2 (headers only; written by tools/gpu_bundle.sh)
Version: $3
Cflags: -I\${includedir}
EOF
}
# nlohmann-json: found here, meson never reaches for its wrap (no network there).
write_header_pc nlohmann_json "JSON for Modern C++" "$json_version"
# doctest: Debian ships only a CMake package; a .pc file spares meson the search.
write_header_pc doctest "C++ testing framework" "$doctest_version"

# The bundle's pkg-config must find every module.
for module in spdlog fmt zlib libcrypto nlohmann_json doctest; do
  "$stage/pkgconf/pkg-config" --exists "$module" ||
    fail "the bundle's pkg-config does not find $module"
done

# -- manifest, size, ignore -------------------------------------------------------

max_version() { grep -ao "$1[0-9.]*[0-9]" "${@:2}" | sed "s/.*$1//" | sort -uV | tail -1; }
requires_glibc="$(max_version GLIBC_ "$stage"/lib/*.so.* "$stage"/pkgconf/*)"
requires_glibcxx="$(max_version GLIBCXX_ "$stage"/lib/*.so.*)"
commit="$(git rev-parse --short HEAD 2>/dev/null || echo none)"
[[ -z "$(git status --porcelain 2>/dev/null)" ]] || commit="$commit (with uncommitted changes)"
size_bytes="$(du -sb "$stage" | cut -f1)"
size_mib="$(awk -v b="$size_bytes" 'BEGIN {printf "%.1f", b / 1048576}')"
{
  echo "# .gpu-bundle: made by tools/gpu_bundle.sh; read by tools/gpu_check.sh (docs/gpu.md)"
  echo "made=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit=$commit"
  echo "size_mib=$size_mib"
  echo "boost_headers=${#boost_files[@]}"
  echo "requires_glibc=$requires_glibc"
  echo "requires_glibcxx=$requires_glibcxx"
  for package in "${needed_packages[@]}" libcaf-core0.17 libcaf-io0.17 libspdlog1.10 \
                 libfmt9 zlib1g libssl3 libboost1.74-dev; do
    echo "package $package $(dpkg-query -W -f='${Version}' "$package" 2>/dev/null || echo '?')"
  done
} >"$stage/MANIFEST.txt"

if (( size_bytes > limit_mib * 1048576 )); then
  fail "the bundle is $size_mib MiB, over the $limit_mib MiB that may travel"
fi

rm -rf "$bundle"
cp -a "$stage" "$bundle"
chmod 755 "$bundle"

exclude="$(git rev-parse --git-path info/exclude 2>/dev/null || true)"
if [[ -n "$exclude" ]]; then
  mkdir -p "$(dirname "$exclude")"
  grep -qxF "/$bundle_name/" "$exclude" 2>/dev/null || echo "/$bundle_name/" >>"$exclude"
  git check-ignore -q "$bundle_name/MANIFEST.txt" ||
    fail "$bundle_name/ is not ignored; add /$bundle_name/ to .gitignore"
fi

echo "gpu_bundle: $bundle_name/ holds $(find "$bundle" -type f | wc -l) files, $size_mib MiB:"
du -sh "$bundle"/include/{caf,boost,spdlog,fmt,nlohmann,doctest,openssl} "$bundle"/lib "$bundle"/pkgconf |
  sed "s|$bundle/||"
tree_bytes="$(git ls-files -co --exclude-standard -z | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)"
echo "gpu_bundle: with the working tree ($(awk -v b="$tree_bytes" 'BEGIN {printf "%.1f", b / 1048576}') MiB)" \
     "it travels as $(awk -v b="$((tree_bytes + size_bytes))" 'BEGIN {printf "%.1f", b / 1048576}') MiB" \
     "of $limit_mib; carry it with carry: [\"$bundle_name\"] and run tools/gpu_check.sh there"
