#!/usr/bin/env bash
# tools/fuzz.sh [--seconds N] [--build-dir DIR] [--if-built] [TARGET...]
# Fuzzes lockstep's frame decoder, control messages and handshakes with
# libFuzzer (docs/reliability.md, "Fuzzed input: frames and handshakes").
#
# Builds the targets of tests/fuzz with clang in DIR (default build-fuzz/:
# meson option fuzz=true, AddressSanitizer and UndefinedBehaviorSanitizer,
# only the sources the targets reach), then runs each TARGET (default all:
# frame control_messages handshake_server handshake_client) for N seconds
# (default 60) from its committed corpus tests/fuzz/corpus/<TARGET>/. Inputs
# that reach new code go to DIR/corpus/<TARGET>/, never into the committed
# folder; an input that crashes, leaks, hangs (-timeout=30) or allocates
# more than 64 MiB at once (-malloc_limit_mb=64; a frame may hold 32 MiB)
# is written to DIR/crashes/ and fails the run.
#
# Prints, per target, the executions run, libFuzzer's coverage (cov: edges
# reached, ft: features) and executions per second.
# --if-built: exit 77 (skipped) unless DIR already holds a fuzz build; the
# meson test `libfuzzer_short` uses it, so that the suite never spends the
# first clang build's minutes (run this script once to enable it).
# Exits 77 when clang++-14 (or $FUZZ_CXX) cannot link -fsanitize=fuzzer
# (Debian: clang-14 and libclang-rt-14-dev), 1 when a target fails.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"

all_targets=(frame control_messages handshake_server handshake_client)
seconds=60
build_dir=build-fuzz
if_built=false
targets=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    --build-dir) build_dir="$2"; shift 2 ;;
    --if-built) if_built=true; shift ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
if [[ ${#targets[@]} -eq 0 ]]; then
  targets=("${all_targets[@]}")
fi
for t in "${targets[@]}"; do
  if [[ ! -d "tests/fuzz/corpus/$t" ]]; then
    echo "fuzz.sh: no target '$t' (targets: ${all_targets[*]})" >&2
    exit 2
  fi
done

cxx="${FUZZ_CXX:-clang++-14}"
if ! command -v "$cxx" >/dev/null; then
  echo "fuzz.sh: $cxx not found (install clang-14 and libclang-rt-14-dev); skipped"
  exit 77
fi
probe_dir="$(mktemp -d)"
trap 'rm -rf "$probe_dir"' EXIT
printf 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }\n' \
  > "$probe_dir/probe.cpp"
if ! "$cxx" -fsanitize=fuzzer "$probe_dir/probe.cpp" -o "$probe_dir/probe" 2>/dev/null; then
  echo "fuzz.sh: $cxx cannot link libFuzzer (-fsanitize=fuzzer; Debian: libclang-rt-14-dev); skipped"
  exit 77
fi

if [[ "$if_built" == true && ! -x "$build_dir/tests/fuzz/fuzz_frame" ]]; then
  echo "fuzz.sh: no fuzz build in $build_dir yet (run tools/fuzz.sh once); skipped"
  exit 77
fi

launcher=""
if command -v ccache >/dev/null; then
  launcher="ccache "
fi
# Configured once; `meson compile` regenerates it when a meson file changes.
if [[ ! -f "$build_dir/meson-private/coredata.dat" ]]; then
  CXX="$launcher$cxx" tools/configure.sh "$build_dir" -Dfuzz=true \
    -Db_sanitize=address,undefined -Db_lundef=false -Dbuildtype=debugoptimized \
    -Dbenchmarks=false -Dexamples=false -Dcuda=disabled -Dnccl=disabled >/dev/null
fi
binaries=()
for t in "${targets[@]}"; do
  binaries+=("tests/fuzz/fuzz_$t")
done
meson compile -C "$build_dir" -j 1 "${binaries[@]}" >/dev/null

export ASAN_OPTIONS="detect_leaks=1:allocator_may_return_null=0"
export UBSAN_OPTIONS="suppressions=$repo/tools/ubsan.supp:print_stacktrace=1:halt_on_error=1"
mkdir -p "$build_dir/crashes"
failed=()
printf '%-18s %12s %8s %8s %10s\n' target executions cov ft exec/s
for t in "${targets[@]}"; do
  work="$build_dir/corpus/$t"
  log="$build_dir/fuzz-$t.log"
  mkdir -p "$work"
  status=0
  "$build_dir/tests/fuzz/fuzz_$t" "$work" "tests/fuzz/corpus/$t" \
    -max_total_time="$seconds" -max_len=65536 -timeout=30 \
    -rss_limit_mb=2048 -malloc_limit_mb=64 -print_final_stats=1 \
    -artifact_prefix="$build_dir/crashes/$t-" >"$log" 2>&1 || status=$?
  runs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)"
  speed="$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)"
  last="$(grep -E '^#[0-9]+[[:space:]].*cov: [0-9]+' "$log" | tail -1 || true)"
  cov="$(sed -n 's/.*cov: \([0-9]*\).*/\1/p' <<<"$last")"
  ft="$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")"
  printf '%-18s %12s %8s %8s %10s\n' "$t" "${runs:-?}" "${cov:-?}" "${ft:-?}" "${speed:-?}"
  if [[ $status -ne 0 ]]; then
    failed+=("$t")
    echo "fuzz.sh: $t failed (exit $status); its log, $log, ends:" >&2
    tail -40 "$log" >&2
  fi
done
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "fuzz.sh: failed: ${failed[*]} (inputs in $build_dir/crashes/)" >&2
  exit 1
fi
echo "fuzz.sh: ${targets[*]}: ${seconds} s each, no crash, leak, hang or oversized allocation"
