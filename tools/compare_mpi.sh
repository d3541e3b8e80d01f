#!/usr/bin/env bash
# tools/compare_mpi.sh [--rounds N] [--json FILE] [--quick]
#
# lockstep against Open MPI's shared-memory MPI_Allreduce on this host,
# made robust against this VM's noise: every round runs, one after
# another in an order rotated by one each round,
#   mpi          bench/peers/mpi_allreduce.cpp (in place, one buffer reused,
#                so cache-resident, as in the peers' figures; Open MPI picks
#                vader shared memory) for 2 and 4 ranks;
#   mpi_again    the same again: the A/A control, whose spread says how far
#                two runs of one program differ here;
#   replicas     bench/allreduce, 2 and 4 replicas (threads) of one process
#                reducing in place, buffers reused like Open MPI's (hot,
#                --working-set 1), and rotated past the cache (cold);
#   workers      bench/allreduce --workers 2,4: worker processes of
#                multi_worker_mirrored_strategy, one CPU replica each,
#                reducing through shared memory (LOCKSTEP_TRANSPORT=auto:
#                they probe that they share this host's memory), K in-place
#                ctx.all_reduce calls inside one strategy.run.
# It prints the medians over the rounds and the ratios, and the targets for
# 2 processes (no more than this machine's cores): the workers' algbw at
# least Open MPI's at 1, 4, 16 and 64 MiB, and their 4-byte latency within
# 2x Open MPI's. With 4 processes the same figures, without targets.
#
#   --rounds N   rounds (default 5; --quick: 1)
#   --json FILE  also write {"rows": [...], "targets": [...], "aa_spread": ...}
#   --quick      short runs: a smoke test of the mechanics, not a result
#
# Set-up, like tools/build.sh and safe to run again: it installs what is
# missing, Open MPI included (tools/install-deps.sh --comparisons),
# configures build/ and builds build/bench/allreduce. Raw output stays in
# build/compare_mpi/. Exit 0 with a report, met or not; 1 when a launch
# failed; 2 for bad arguments.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
sizes=4,1048576,4194304,16777216,67108864
work="$repo/build/compare_mpi"

die() {
  echo "compare_mpi: $*" >&2
  exit 2
}

rounds="" json="" quick=0
while (($#)); do
  case "$1" in
    --rounds) (($# >= 2)) || die "--rounds needs a value"; rounds="$2"; shift 2 ;;
    --json) (($# >= 2)) || die "--json needs a file"; json="$2"; shift 2 ;;
    --quick) quick=1; shift ;;
    -h|--help) sed -n '2,33p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    [0-9]*) rounds="$1"; shift ;; # the former positional ROUNDS
    *) die "unknown argument $1 (see --help)" ;;
  esac
done
[[ -n "$rounds" ]] || rounds=$((quick ? 1 : 5))
[[ "$rounds" =~ ^[0-9]+$ ]] && ((rounds >= 1)) || die "--rounds: a whole number >= 1, got '$rounds'"
if [[ -n "$json" ]]; then
  [[ -d "$(dirname "$json")" ]] || die "--json: no folder $(dirname "$json")"
  json="$(cd "$(dirname "$json")" && pwd)/$(basename "$json")"
fi
if ((quick)); then reps=2 budget_ms=50; else reps=5 budget_ms=300; fi

"$repo/tools/install-deps.sh" --comparisons >&2
for tool in mpicxx mpirun python3; do
  command -v "$tool" >/dev/null || die "$tool not found after tools/install-deps.sh --comparisons"
done
"$repo/tools/configure.sh" build >&2
meson compile -C "$repo/build" bench/allreduce >&2

mkdir -p "$work"
rm -f "$work"/round-*
mpicxx -O3 -march=native -std=c++20 "$repo/bench/peers/mpi_allreduce.cpp" \
  -o "$work/mpi_allreduce"
mpi_flags=(--oversubscribe --mca btl_base_warn_component_unused 0)
((EUID != 0)) || mpi_flags+=(--allow-run-as-root)
allreduce="$repo/build/bench/allreduce"

run_arm() {
  local out="$work/round-$round-$1"
  case "$1" in
    mpi|mpi_again)
      for ranks in 2 4; do
        mpirun "${mpi_flags[@]}" -np "$ranks" "$work/mpi_allreduce" --variant sm \
          --sizes "$sizes" --reps "$reps" --target-ms "$budget_ms" | grep '^CSV,' >>"$out.csv"
      done ;;
    replicas)
      "$allreduce" --tables 1 --sizes "$sizes" --replicas 2,4 --reduce-to 0 --working-set 1 \
        --json "$out-hot.json" >/dev/null 2>&1
      "$allreduce" --tables 1 --sizes "$sizes" --replicas 2,4 --reduce-to 0 \
        --json "$out-cold.json" >/dev/null 2>&1 ;;
    workers)
      LOCKSTEP_TRANSPORT=auto "$allreduce" --workers 2,4 --sizes "$sizes" --reps "$reps" \
        --budget-ms "$budget_ms" --json "$out.json" >"$out.out" 2>&1 \
        || { echo "compare_mpi: the workers' run failed: $out.out" >&2; exit 1; } ;;
  esac
}

arms=(mpi replicas workers mpi_again)
for ((round = 1; round <= rounds; ++round)); do
  shift_by=$(((round - 1) % ${#arms[@]}))
  order=("${arms[@]:shift_by}" "${arms[@]:0:shift_by}")
  read -r load1 _ </proc/loadavg
  echo "compare_mpi: round $round of $rounds (order: ${order[*]}; load $load1)" >&2
  for arm in "${order[@]}"; do
    run_arm "$arm"
  done
done

python3 - "$work" "$rounds" "$json" "$(nproc)" <<'EOF'
import csv, glob, json, os, statistics, sys

work, rounds, json_path, cores = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
median = statistics.median

def mpi_times(name):
    # CSV,mpi,VARIANT,RANKS,BYTES,K,BATCH,US_PER_OP: per round, the median batch.
    out = {}
    for path in sorted(glob.glob(f"{work}/round-*-{name}.csv")):
        per_round = {}
        for row in csv.reader(open(path)):
            per_round.setdefault((int(row[3]), int(row[4])), []).append(float(row[7]))
        for key, us in per_round.items():
            out.setdefault(key, []).append(median(us))
    return out

def replica_times(kind):
    out = {}
    for path in sorted(glob.glob(f"{work}/round-*-replicas-{kind}.json")):
        for row in json.load(open(path))["rows"]:
            if row["arm"] == "in_place" and row["table"] == "sizes":
                out.setdefault((row["replicas"], row["bytes"]), []).append(row["time_us"])
    return out

def worker_times():
    out = {}
    for path in sorted(glob.glob(f"{work}/round-*-workers.json")):
        for row in json.load(open(path))["rows"]:
            out.setdefault((row["workers"], row["bytes"]), []).append(1e6 * row["seconds"])
    return out

mpi, again = mpi_times("mpi"), mpi_times("mpi_again")
hot, cold, workers = replica_times("hot"), replica_times("cold"), worker_times()

def size(b):
    return f"{b} B" if b < 1024 else f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB"

def figure(b, us):  # latency for 4 B, else algbw in GB/s
    return us if b <= 4 else b / us / 1e3

rows = []
for key in sorted(mpi):
    n, b = key
    t = {name: median(table[key]) if key in table else None
         for name, table in (("mpi", mpi), ("mpi_again", again), ("workers", workers),
                             ("replicas_hot", hot), ("replicas_cold", cold))}
    rows.append({"processes": n, "bytes": b, "time_us": t,
                 "algbw_gbs": {k: (None if v is None or b <= 4 else b / v / 1e3)
                               for k, v in t.items()},
                 "workers_vs_mpi_by_round": [m / w for m, w in zip(mpi[key], workers.get(key, []))]})

# The A/A control: how far Open MPI's two runs in one round differ.
spreads = [abs(a / b - 1) for key in mpi if key in again
           for a, b in zip(mpi[key], again[key])]
aa = median(spreads) if spreads else None

print(f"Medians of {rounds} rounds. 4 B: latency in us; else algbw in GB/s (GB = 1e9 B). "
      "x MPI: Open MPI's time / lockstep's (above 1: lockstep is faster).\n")
print("| S | N | Open MPI | Open MPI again | workers (shm) | x MPI | replicas hot | x MPI "
      "| replicas cold | x MPI |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
num = lambda v: "-" if v is None else f"{v:.3g}"
for r in rows:
    b, t = r["bytes"], r["time_us"]
    cell = lambda k: num(None if t[k] is None else figure(b, t[k]))
    ratio = lambda k: "-" if t[k] is None else f"{t['mpi'] / t[k]:.2f}x"
    print(f"| {size(b)} | {r['processes']} | {cell('mpi')} | {cell('mpi_again')} "
          f"| {cell('workers')} | {ratio('workers')} | {cell('replicas_hot')} "
          f"| {ratio('replicas_hot')} | {cell('replicas_cold')} | {ratio('replicas_cold')} |")
print(f"\nA/A: Open MPI against itself in the same round differs by {num(None if aa is None else 100 * aa)}% "
      "(median over sizes, process counts and rounds).")

targets = []
def target(what, measured, limit, at_least, unit):
    ok = measured is not None and limit is not None and (
        measured >= limit if at_least else measured <= limit)
    targets.append({"target": what, "measured": measured, "limit": limit,
                    "at_least": at_least, "unit": unit, "pass": ok})

if cores >= 2:
    for r in (r for r in rows if r["processes"] == 2):
        b, t, g = r["bytes"], r["time_us"], r["algbw_gbs"]
        if b == 4:
            target("4 B, 2 worker processes: latency <= 2x Open MPI's", t["workers"],
                   None if t["mpi"] is None else 2 * t["mpi"], False, "us")
        elif b in (1 << 20, 4 << 20, 16 << 20, 64 << 20):
            target(f"{size(b)}, 2 worker processes: algbw >= Open MPI's", g["workers"],
                   g["mpi"], True, "GB/s")
if targets:
    print("\n| target | measured | limit | |\n|---|---:|---:|---|")
    for t in targets:
        print(f"| {t['target']} | {num(t['measured'])} {t['unit']} "
              f"| {'>=' if t['at_least'] else '<='} {num(t['limit'])} {t['unit']} "
              f"| {'PASS' if t['pass'] else 'MISS'} |")
    print(f"\n{sum(t['pass'] for t in targets)} of {len(targets)} targets met; "
          "4 processes have none (more than the cores).")

if json_path:
    out = {"benchmark": "compare_mpi", "rounds": rounds, "cores": cores, "rows": rows,
           "targets": targets, "aa_spread": aa,
           "method": {"time_us": "per arm, the median over rounds of its time per all-reduce: "
                                 "Open MPI's median batch, lockstep's median repetition",
                      "aa_spread": "median |t(mpi) / t(mpi_again) - 1| over rounds and sizes"}}
    with open(json_path + ".tmp", "w") as f:
        json.dump(out, f, indent=2)
    os.replace(json_path + ".tmp", json_path)
    print(f"\nwrote {json_path}")
EOF
