#!/usr/bin/env bash
# tools/ab_compare.sh BEFORE AFTER [--rounds N] [--benches LIST] [--out DIR] [--quick]
#
# Is commit AFTER slower than commit BEFORE? Builds both commits side by side
# and runs the benchmarks bench/dispatch, bench/allreduce, bench/variables,
# bench/training and bench/tcp_ring for each, interleaved, then compares
# the medians.
#
#   BEFORE, AFTER   any commit-ish (sha, branch, tag, HEAD~3); they may be equal
#                   (an A/A run that shows the noise of the machine).
#   --rounds N      rounds (default 5; at least 5 unless --quick, whose
#                   default is 2).
#   --benches LIST  comma-separated subset of dispatch,allreduce,variables,training,
#                   tcp_ring (default all five).
#   --out DIR       results (default build/ab/results-<timestamp>).
#   --quick         short benchmark arguments: a smoke test of the mechanics,
#                   a few seconds per run; its figures mean little.
#
# Builds. Each commit is checked out with `git worktree add --detach` in
# build/ab/<12-char sha>/src (under /work, so ccache's base_dir=/work and
# hash_dir=false give cache hits for identical sources) and built in its
# own build/ folder inside that worktree: `meson setup -Dtests=false` at the
# project's default buildtype, debugoptimized (what tools/build.sh builds),
# compiling only the selected bench targets. Worktrees are reused by the next
# run for the same commit and re-created when they point elsewhere; delete
# build/ab/ and run `git worktree prune` to drop them all. The repository's
# own working tree and build/ are never touched. Builds and runs are nice'd.
#
# Runs. In every round, for each bench, three runs one after another: BEFORE,
# AFTER and BEFORE again (an A/A control: BEFORE's same binary a second
# time); the order rotates by one each round (b a b' / a b' b / b' b a ...)
# so neither side always goes first. Each run writes --json; its JSON and
# output land in OUT/raw/<side>/<bench>/round-<r>.json and OUT/logs/. Nothing
# is pinned to CPUs. A run that fails or times out (20 minutes; 5 with
# --quick) is recorded and left out of the medians.
# The arguments per bench (BENCH_ARGS below, or AB_ARGS_<bench> in the
# environment to override one) keep to the rows that matter:
#   dispatch   run and merge_call for 1, 2, 4 and 8 replicas (the defaults),
#              500 calls x 7 repetitions per arm
#   allreduce  tables 1 and 2 on 2 replicas: in-place all-reduce of 4 KiB,
#              64 KiB and 4 MiB; 1000 fused 4 KiB tensors, one by one, and
#              the single 4 MiB; 3 reps of 50 ms per arm, buffers rotated over
#              64 MiB
#   variables  64 KiB variables, K = 10, 100, 1000 on N = 1, 2, 4, 5 reps;
#              cells above 64 MiB (K = 1000 on 2 and 4) are skipped by the
#              bench and left out of the table
#   training   1 and 2 replicas, 1 and 10 steps per call, 20 steps, 2 reps
#              (plus the plain loop the bench measures as its baseline)
#   tcp_ring   the all-reduce between 2 and 4 worker processes over the
#              loopback TCP ring, 4 B, 64 KiB and 4 MiB, 3 reps of 200 ms.
#              It writes no JSON (at older commits neither): its table,
#              which every commit prints alike, is read from its output
#              (ab_compare.py --table-json)
#
# Comparison (tools/ab_compare.py). One row per row of a bench's JSON, with
# one headline figure: dispatch lockstep_us, allreduce time_us, variables
# lockstep_us, tcp_ring time_us (lower is better), training examples_per_s
# (higher is better).
# Per row: the median over rounds of each side; ratio = after / before for
# times and before / after for rates, so a ratio above 1 always means AFTER
# is slower; A/A ratio = before-again vs before, the same way. A row present
# on one side only (or a bench missing from one commit, or a skipped cell) is
# listed as "missing" and left out of the verdict.
#
# Verdict. PASS when geomean(ratio) over all compared rows <= 1.05 and no row
# has ratio > 1.10 + S, where S is the A/A spread of the row's own bench:
# max |A/A ratio - 1| over that bench's rows. Per bench, not overall, so a
# noisy bench (dispatch's microsecond hops under load) widens only its own
# allowance and a quiet one (training) stays strict. The A/A figures are
# printed next to each row: a geomean(A/A) far from 1 says the machine was
# too noisy for the verdict to mean much. A bench whose runs fail for AFTER
# while they never fail for BEFORE is a FAIL too (a crash is no "missing").
#
# Output: a markdown table (bench, row, before, after, ratio, A/A ratio,
# limit) and summary lines on stdout, also in OUT/table.md; OUT/summary.json
# holds the same figures per row plus the arguments used.
# Exit status: 0 PASS, 1 FAIL, 2 usage or build error (or nothing compared).
#
# Cost, measured on this 2-core VM shared with other developers' builds
# (load average 10-16): building a commit from scratch ~12 minutes (with
# ccache hits for most files ~6; a worktree built before: ~10 s to check);
# a default round of all four benches 50 s at load 10, up to ~3 minutes under
# heavier load (3 x 17 s of runs, or 3 x ~60 s), so the default 5 rounds take
# 4-15 minutes after the builds; --quick ~15 s per round (2 rounds: ~45 s
# with the build check).
set -euo pipefail
shopt -s inherit_errexit

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
all_benches=(dispatch allreduce variables training tcp_ring)

usage() {
  sed -n '2,16p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
  exit 2
}
die() {
  echo "ab_compare: $*" >&2
  exit 2
}

# -- arguments ----------------------------------------------------------------

positional=()
rounds=""
benches_arg=""
out=""
quick=0
while (($#)); do
  case "$1" in
    --rounds) (($# >= 2)) || usage; rounds="$2"; shift 2 ;;
    --rounds=*) rounds="${1#*=}"; shift ;;
    --benches) (($# >= 2)) || usage; benches_arg="$2"; shift 2 ;;
    --benches=*) benches_arg="${1#*=}"; shift ;;
    --out) (($# >= 2)) || usage; out="$2"; shift 2 ;;
    --out=*) out="${1#*=}"; shift ;;
    --quick) quick=1; shift ;;
    -h|--help) usage ;;
    -*) echo "ab_compare: unknown option $1" >&2; usage ;;
    *) positional+=("$1"); shift ;;
  esac
done
((${#positional[@]} == 2)) || usage
if [[ -z "$rounds" ]]; then
  rounds=$((quick ? 2 : 5))
fi
if [[ ! "$rounds" =~ ^[0-9]+$ ]] || ((rounds < 1)); then
  die "--rounds: expected a whole number of at least 1, got '$rounds'"
fi
((quick || rounds >= 5)) || die "--rounds: at least 5 (or use --quick for a smoke run)"

benches=()
IFS=',' read -r -a requested <<<"${benches_arg:-$(IFS=,; echo "${all_benches[*]}")}"
for b in "${requested[@]}"; do
  b="${b#bench/}"
  [[ " ${all_benches[*]} " == *" $b "* ]] || die "--benches: unknown bench '$b' (of: ${all_benches[*]})"
  [[ " ${benches[*]-} " == *" $b "* ]] || benches+=("$b")
done
((${#benches[@]})) || die "--benches: empty"

for tool in git meson ninja python3 timeout; do
  command -v "$tool" >/dev/null || die "$tool not found"
done

resolve() {
  git -C "$repo" rev-parse --verify --quiet "$1^{commit}" || die "not a commit: $1"
}
before_sha="$(resolve "${positional[0]}")"
after_sha="$(resolve "${positional[1]}")"

scratch="$repo/build/ab"
out="${out:-$scratch/results-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
[[ -z "$(ls -A "$out")" ]] || die "--out $out is not empty"

# -- benchmark arguments ----------------------------------------------------------

declare -A bench_args
if ((quick)); then
  bench_args[dispatch]="--iters 200 --reps 3 --replicas 1,8"
  bench_args[allreduce]="--tables 1,2 --sizes 4194304 --replicas 2 --reduce-to 0 --small-replicas 2 --reps 2 --budget-ms 10 --working-set 33554432"
  bench_args[variables]="--sizes 65536 --variables 10,100 --replicas 1,2 --reps 2"
  bench_args[training]="--replicas 1,2 --steps-per-call 1 --steps 10 --reps 1"
  bench_args[tcp_ring]="--workers 2 --sizes 4,65536 --reps 1 --budget-ms 20"
  run_limit_s=300
else
  bench_args[dispatch]="--iters 500 --reps 7"
  bench_args[allreduce]="--tables 1,2 --sizes 4096,65536,4194304 --replicas 2 --reduce-to 0 --small-replicas 2 --reps 3 --budget-ms 50 --working-set 67108864"
  bench_args[variables]="--sizes 65536 --variables 10,100,1000 --replicas 1,2,4 --reps 5 --limit 67108864"
  bench_args[training]="--replicas 1,2 --steps-per-call 1,10 --steps 20 --reps 2"
  bench_args[tcp_ring]="--workers 2,4 --sizes 4,65536,4194304 --reps 3 --budget-ms 200"
  run_limit_s=1200
fi
for b in "${all_benches[@]}"; do
  override="AB_ARGS_$b"
  [[ -z "${!override:-}" ]] || bench_args[$b]="${!override}"
done

# -- build ------------------------------------------------------------------------

# prepare SHA: a worktree of SHA in build/ab/<short>/src with the selected
# benches built in its build/; prints the worktree. Benches that the commit
# does not have are listed in its build/ab-missing.
prepare() {
  local sha="$1" short="${1:0:12}"
  local src="$scratch/$short/src"
  git -C "$repo" worktree prune
  if [[ -e "$src" ]] && [[ "$(git -C "$src" rev-parse HEAD 2>/dev/null)" != "$sha" ]]; then
    echo "ab_compare: $src is not a worktree of $short; re-creating it" >&2
    git -C "$repo" worktree remove --force "$src" 2>/dev/null || rm -rf "$src"
    git -C "$repo" worktree prune
  fi
  if [[ ! -e "$src" ]]; then
    mkdir -p "$scratch/$short"
    git -C "$repo" worktree add --detach --quiet "$src" "$sha" >&2 || die "git worktree add $short failed"
  elif [[ -n "$(git -C "$src" status --porcelain --untracked-files=no)" ]]; then
    # Our scratch worktree, edited by hand since: back to the commit's files
    # (its build/ is kept, so only what changed recompiles).
    echo "ab_compare: $src has local changes; restoring $short's files" >&2
    git -C "$src" checkout --quiet --force --detach "$sha" || die "cannot restore $src"
  fi
  local log="$scratch/$short/build.log"
  : >"$log"
  local setup=(-Dtests=false -Dbuildtype=debugoptimized)
  if [[ -z "${CXX:-}" ]] && command -v ccache >/dev/null; then
    local cxx="ccache g++"
  else
    local cxx="${CXX:-g++}"
  fi
  echo "ab_compare: building ${short} (log: $log)" >&2
  if [[ -f "$src/build/meson-private/coredata.dat" ]]; then
    CXX="$cxx" nice -n 10 meson setup --reconfigure "$src/build" "$src" "${setup[@]}" >>"$log" 2>&1 \
      || CXX="$cxx" nice -n 10 meson setup --wipe "$src/build" "$src" "${setup[@]}" >>"$log" 2>&1 \
      || { tail -20 "$log" >&2; die "meson setup failed for $short"; }
  else
    CXX="$cxx" nice -n 10 meson setup "$src/build" "$src" "${setup[@]}" >>"$log" 2>&1 \
      || { tail -20 "$log" >&2; die "meson setup failed for $short"; }
  fi
  # The bench targets this commit defines (training needs the examples).
  local defined
  defined="$(meson introspect --targets "$src/build" | python3 -c '
import json, sys
for t in json.load(sys.stdin):
    if t["type"] == "executable" and t["defined_in"].replace("\\", "/").endswith("bench/meson.build"):
        print(t["name"])')"
  local targets=() missing=()
  for b in "${benches[@]}"; do
    if grep -qx "$b" <<<"$defined"; then
      targets+=("bench/$b")
    else
      missing+=("$b")
    fi
  done
  printf '%s\n' "${missing[@]}" >"$src/build/ab-missing"
  if ((${#targets[@]})); then
    nice -n 10 meson compile -j "$(nproc)" -C "$src/build" "${targets[@]}" >>"$log" 2>&1 \
      || { tail -30 "$log" >&2; die "building ${targets[*]} failed for $short (log: $log)"; }
  fi
  echo "$src"
}

start_s=$SECONDS
before_src="$(prepare "$before_sha")"
if [[ "$after_sha" == "$before_sha" ]]; then
  after_src="$before_src"
else
  after_src="$(prepare "$after_sha")"
fi
build_s=$((SECONDS - start_s))
echo "ab_compare: builds done in ${build_s} s" >&2

# -- runs -------------------------------------------------------------------------

declare -A side_src=([before]="$before_src" [after]="$after_src" [before_again]="$before_src")
sides=(before after before_again)
mkdir -p "$out/raw" "$out/logs"
for side in "${sides[@]}"; do
  for b in "${benches[@]}"; do
    mkdir -p "$out/raw/$side/$b"
    if grep -qx "$b" "${side_src[$side]}/build/ab-missing"; then
      touch "$out/raw/$side/$b/missing"
    fi
  done
done

meta_args=()
for b in "${benches[@]}"; do
  meta_args+=("$b" "${bench_args[$b]}")
done
python3 - "$out/meta.json" "$before_sha" "$after_sha" "${positional[0]}" "${positional[1]}" \
  "$rounds" "$quick" "${meta_args[@]}" <<'EOF'
import json, sys
path, bs, as_, bl, al, rounds, quick, *pairs = sys.argv[1:]
args = dict(zip(pairs[0::2], pairs[1::2]))
json.dump({"before": {"sha": bs, "label": bl}, "after": {"sha": as_, "label": al},
           "rounds": int(rounds), "quick": quick == "1", "benches": list(args),
           "bench_args": args}, open(path, "w"), indent=2)
EOF

runs_start_s=$SECONDS
for ((round = 1; round <= rounds; ++round)); do
  shift_by=$(((round - 1) % 3))
  order=("${sides[@]:shift_by}" "${sides[@]:0:shift_by}")
  echo "ab_compare: round $round of $rounds (order: ${order[*]})" >&2
  for b in "${benches[@]}"; do
    for side in "${order[@]}"; do
      dir="$out/raw/$side/$b"
      [[ ! -e "$dir/missing" ]] || continue
      exe="${side_src[$side]}/build/bench/$b"
      log="$out/logs/$side-$b-round-$round.log"
      json="$dir/round-$round.json"
      t0=$SECONDS
      # A bench that writes no JSON: its printed table becomes the JSON.
      if [[ "$b" == tcp_ring ]]; then
        json_args=()
      else
        json_args=(--json "$json")
      fi
      # shellcheck disable=SC2086 # the arguments are words on purpose
      if nice -n 10 timeout "$run_limit_s" "$exe" ${bench_args[$b]} "${json_args[@]}" >"$log" 2>&1 \
          && { [[ "$b" != tcp_ring ]] || python3 "$repo/tools/ab_compare.py" --table-json "$log" "$json"; } \
          && [[ -s "$json" ]]; then
        echo "ab_compare:   $b $side: $((SECONDS - t0)) s" >&2
      else
        rc=$?
        echo "ab_compare:   $b $side: FAILED (exit $rc; log: $log)" >&2
        rm -f "$json"
        echo "$rc" >"$dir/round-$round.failed"
      fi
    done
  done
done
runs_s=$((SECONDS - runs_start_s))
echo "ab_compare: runs done in ${runs_s} s ($rounds rounds); results in $out" >&2
echo

set +e
python3 "$repo/tools/ab_compare.py" "$out"
status=$?
set -e
echo "- wall time: build ${build_s} s, runs ${runs_s} s" | tee -a "$out/table.md"
exit "$status"
