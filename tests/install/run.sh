#!/usr/bin/env bash
# The 'install' test: stages `meson install` in a temporary DESTDIR, then
# builds a program against the staged lockstep the two ways an application
# would, outside the source tree:
#   1. c++ -std=c++20 app.cpp $(pkg-config --cflags --libs lockstep)
#   2. a CMake project with find_package(lockstep REQUIRED) and
#      target_link_libraries(app lockstep::lockstep)
# and runs each program, checking its output against a regular expression.
# It also checks that every include/lockstep/*.hpp was installed.
# Exits 77 (skipped) when pkg-config or cmake is missing.
#
# tests/meson.build passes every option:
#   run.sh --meson M --source-root S --build-root B --prefix P --libdir L
#          --includedir I --sanitize none|address,...
#          --program FILE.cpp --cmake-project CMakeLists.txt --expect REGEX
set -euo pipefail

while [[ $# -gt 0 ]]; do
  case "$1" in
    --meson) meson="$2" ;;
    --source-root) source_root="$2" ;;
    --build-root) build_root="$2" ;;
    --prefix) prefix="$2" ;;
    --libdir) libdir="$2" ;;
    --includedir) includedir="$2" ;;
    --sanitize) sanitize="$2" ;;
    --program) program="$2" ;;
    --cmake-project) cmake_project="$2" ;;
    --expect) expect="$2" ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift 2
done

for tool in pkg-config cmake; do
  if ! command -v "$tool" >/dev/null; then
    echo "SKIP: $tool is not installed (tools/install-deps.sh installs it)"
    exit 77
  fi
done

work="$(mktemp -d "${TMPDIR:-/tmp}/lockstep-install-test.XXXXXX")"
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# -- stage the installation ----------------------------------------------------

"$meson" install -C "$build_root" --no-rebuild --quiet --destdir "$work/stage"
stage_prefix="$work/stage$prefix"
# meson keeps libdir and includedir relative to the prefix when they lie in it.
if [[ "$libdir" = /* ]]; then stage_libdir="$work/stage$libdir"; else stage_libdir="$stage_prefix/$libdir"; fi
if [[ "$includedir" = /* ]]; then stage_includedir="$work/stage$includedir"; else stage_includedir="$stage_prefix/$includedir"; fi

for header in "$source_root"/include/lockstep/*.hpp config.hpp version.hpp; do
  name="$(basename "$header")"
  [[ -f "$stage_includedir/lockstep/$name" ]] ||
    fail "lockstep/$name was not installed: list it in public_headers in include/lockstep/meson.build, or reconfigure if it was created after meson setup"
done
[[ -f "$stage_libdir/pkgconfig/lockstep.pc" ]] || fail "lockstep.pc was not installed"
[[ -f "$stage_libdir/cmake/lockstep/lockstepConfig.cmake" ]] || fail "lockstepConfig.cmake was not installed"

# The staged library was built with the build's sanitizers; so must the programs be.
extra_flags=()
if [[ "$sanitize" != none ]]; then
  extra_flags=("-fsanitize=$sanitize")
fi

check_output() { # check_output WHAT OUTPUT
  echo "$1 printed: $2"
  [[ "$2" =~ $expect ]] || fail "$1: output does not match /$expect/"
}

# -- pkg-config ----------------------------------------------------------------
# lockstep.pc says prefix=$prefix; --define-variable moves it to the staged
# copy. (pkg-config --define-prefix would guess the prefix from the .pc file's
# path, but Debian's pkgconf strips only "lib/pkgconfig" and so gets
# .../lib as the prefix under a multiarch libdir such as lib/x86_64-linux-gnu.)

mkdir "$work/pkg-config"
cp "$program" "$work/pkg-config/app.cpp"
cd "$work/pkg-config"
pkg_config_args=(--define-variable=prefix="$stage_prefix" --cflags --libs)
if [[ ! -e "$stage_libdir/liblockstep.so" ]]; then
  pkg_config_args+=(--static)   # -Ddefault_library=static: link lockstep's dependencies too
fi
flags="$(PKG_CONFIG_PATH="$stage_libdir/pkgconfig" pkg-config "${pkg_config_args[@]}" lockstep)"
echo "pkg-config --cflags --libs lockstep: $flags"
[[ "$flags" == *"-I$stage_includedir"* ]] || fail "pkg-config flags do not point at the staged headers"
# shellcheck disable=SC2086  # $flags is a list of words
c++ -std=c++20 "${extra_flags[@]}" app.cpp $flags -o app
check_output "pkg-config build" "$(LD_LIBRARY_PATH="$stage_libdir" ./app)"

# -- CMake ---------------------------------------------------------------------

mkdir "$work/cmake-project"
cp "$program" "$work/cmake-project/app.cpp"
cp "$cmake_project" "$work/cmake-project/CMakeLists.txt"
cmake -S "$work/cmake-project" -B "$work/cmake-build" \
  -DCMAKE_PREFIX_PATH="$stage_prefix" \
  -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_FLAGS="${extra_flags[*]}" >"$work/cmake-configure.log" ||
  { cat "$work/cmake-configure.log"; fail "cmake could not configure the project"; }
found_dir="$(sed -n 's/^lockstep_DIR:PATH=//p' "$work/cmake-build/CMakeCache.txt")"
echo "find_package(lockstep) found $found_dir"
[[ "$found_dir" == "$stage_libdir/cmake/lockstep" ]] ||
  fail "find_package(lockstep) found $found_dir, not the staged $stage_libdir/cmake/lockstep"
cmake --build "$work/cmake-build" >"$work/cmake-build.log" ||
  { cat "$work/cmake-build.log"; fail "cmake could not build the project"; }
check_output "CMake build" "$(LD_LIBRARY_PATH="$stage_libdir" "$work/cmake-build/app")"

echo "OK: lockstep installs, and applications build against it with pkg-config and CMake"
