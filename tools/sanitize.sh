#!/usr/bin/env bash
# tools/sanitize.sh [asan] [tsan]   (both when no mode is given)
# Builds lockstep with sanitizers in its own build directory and runs tests:
#   asan  build-asan/, AddressSanitizer + UndefinedBehaviorSanitizer (with
#         leak checks), the whole suite. tools/ubsan.supp silences UBSan's
#         reports from inside CAF's own headers.
#   tsan  build-tsan/, ThreadSanitizer, only the 'unit' suite: Debian's CAF
#         is not instrumented, so TSan reports hundreds of false races in any
#         test that starts an actor system.
# Exits non-zero if any test fails.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"

modes=("$@")
if [[ ${#modes[@]} -eq 0 ]]; then
  modes=(asan tsan)
fi
for mode in "${modes[@]}"; do
  if [[ "$mode" != asan && "$mode" != tsan ]]; then
    echo "usage: tools/sanitize.sh [asan] [tsan]" >&2
    exit 2
  fi
done

tools/install-deps.sh

# Runs every mode asked for, even after one fails; exits 1 if any failed.
failed=()
# Each step is chained with &&: set -e does not act inside a function
# called on the left of ||.
run_asan() {
  tools/configure.sh build-asan -Db_sanitize=address,undefined -Db_lundef=false \
    -Dbenchmarks=false &&
  meson compile -C build-asan &&
  UBSAN_OPTIONS="suppressions=$repo/tools/ubsan.supp:print_stacktrace=1:halt_on_error=1" \
    ASAN_OPTIONS="detect_leaks=1" \
    meson test -C build-asan --print-errorlogs
}
run_tsan() {
  tools/configure.sh build-tsan -Db_sanitize=thread -Dbenchmarks=false &&
  meson compile -C build-tsan &&
  TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1" \
    meson test -C build-tsan --suite unit --print-errorlogs
}
for mode in "${modes[@]}"; do
  echo "== sanitize: $mode"
  "run_$mode" || failed+=("$mode")
done

if [[ ${#failed[@]} -gt 0 ]]; then
  echo "sanitize: failed: ${failed[*]}" >&2
  exit 1
fi
echo "sanitize: passed: ${modes[*]}"
