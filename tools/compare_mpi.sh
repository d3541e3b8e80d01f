#!/usr/bin/env bash
# tools/compare_mpi.sh [ROUNDS]
# Issue 4's side-by-side comparison with Open MPI's shared-memory
# MPI_Allreduce, made robust against this VM's noise: ROUNDS times (default
# 5) it runs, one after another, our Open MPI benchmark
# (bench/peers/mpi_allreduce.cpp: in place, shared memory, one buffer
# reused, so cache-resident, as in the peers' figures) for 2 and 4 ranks, then
# bench/allreduce for 2 and 4 replicas twice: with buffers reused like
# Open MPI's (hot, --working-set 1) and rotated past the cache (cold, the
# default). It prints the median of each over the rounds and the ratios.
#
# Set-up, like tools/build.sh and safe to run again: it installs what is
# missing, Open MPI included (tools/install-deps.sh --comparisons), configures
# build/ and builds build/bench/allreduce. Everything it builds and runs is
# in this repository.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
rounds="${1:-5}"
sizes=4,1048576,16777216,67108864
work="$repo/build/compare_mpi"

"$repo/tools/install-deps.sh" --comparisons >&2
for tool in mpicxx mpirun python3; do
  command -v "$tool" >/dev/null || {
    echo "compare_mpi: $tool not found after tools/install-deps.sh --comparisons" >&2
    exit 1
  }
done
"$repo/tools/configure.sh" build >&2
meson compile -C "$repo/build" bench/allreduce >&2

mkdir -p "$work"
rm -f "$work"/round-*
mpicxx -O3 -march=native -std=c++20 "$repo/bench/peers/mpi_allreduce.cpp" \
  -o "$work/mpi_allreduce"

for ((round = 1; round <= rounds; ++round)); do
  echo "compare_mpi: round $round of $rounds" >&2
  for ranks in 2 4; do
    mpirun --allow-run-as-root --oversubscribe --mca btl_base_warn_component_unused 0 \
      -np "$ranks" "$work/mpi_allreduce" --variant sm --sizes "$sizes" \
      | grep '^CSV,' >>"$work/round-$round-mpi.csv"
  done
  "$repo/build/bench/allreduce" --tables 1 --sizes "$sizes" --replicas 2,4 --reduce-to 0 \
    --working-set 1 --json "$work/round-$round-hot.json" >/dev/null 2>&1
  "$repo/build/bench/allreduce" --tables 1 --sizes "$sizes" --replicas 2,4 --reduce-to 0 \
    --json "$work/round-$round-cold.json" >/dev/null 2>&1
done

python3 - "$work" "$rounds" <<'EOF'
import csv, glob, json, statistics, sys

work, rounds = sys.argv[1], int(sys.argv[2])
mpi, hot, cold = {}, {}, {}
for path in glob.glob(f"{work}/round-*-mpi.csv"):
    per_round = {}
    for row in csv.reader(open(path)):
        # CSV,mpi,VARIANT,RANKS,BYTES,K,BATCH,US_PER_OP: median of the batches
        per_round.setdefault((int(row[3]), int(row[4])), []).append(float(row[7]))
    for key, us in per_round.items():
        mpi.setdefault(key, []).append(statistics.median(us))
for kind, table in (("hot", hot), ("cold", cold)):
    for path in glob.glob(f"{work}/round-*-{kind}.json"):
        for row in json.load(open(path))["rows"]:
            if row["arm"] != "in_place" or row["table"] != "sizes":
                continue
            table.setdefault((row["replicas"], row["bytes"]), []).append(row["time_us"])

def size(b):
    return f"{b} B" if b < 1024 else f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB"

print(f"Medians of {rounds} rounds. 4 B: latency in us, and lockstep's over Open MPI's "
      "(below 1: lockstep is faster); else algbw in GB/s, and lockstep's over Open MPI's.\n")
print("| S | N | Open MPI | lockstep hot | hot / Open MPI | lockstep cold | cold / Open MPI |")
print("|---:|---:|---:|---:|---:|---:|---:|")
for key in sorted(mpi):
    n, b = key
    if key not in hot or key not in cold:
        continue
    t_mpi, t_hot, t_cold = (statistics.median(x[key]) for x in (mpi, hot, cold))
    if b <= 4:
        print(f"| {size(b)} | {n} | {t_mpi:.2f} us | {t_hot:.2f} us | {t_hot / t_mpi:.2f}x "
              f"| {t_cold:.2f} us | {t_cold / t_mpi:.2f}x |")
    else:
        g = lambda t: b / t / 1e3
        print(f"| {size(b)} | {n} | {g(t_mpi):.2f} | {g(t_hot):.2f} | {t_mpi / t_hot:.2f}x "
              f"| {g(t_cold):.2f} | {t_mpi / t_cold:.2f}x |")
EOF
