#!/usr/bin/env bash
# tools/compare_tcp.sh [--rounds N] [--workers LIST] [--json FILE] [--quick] [--setup-only]
#
# Issue 15's comparison with the peers over TCP loopback: the all-reduce
# between worker processes of `bench/allreduce --workers` (one replica per
# worker) against Open MPI's MPI_Allreduce forced onto TCP and Gloo's two
# TCP all-reduces, run alternately, with the medians, the ratios and the
# targets; and the strategy over MPI's collectives (LOCKSTEP_COMMUNICATOR=mpi)
# against the raw MPI_Allreduce on the same transport, with an A/A control.
# tools/compare_mpi.sh keeps the shared-memory comparison.
#
#   --rounds N      rounds (default 5; at least 5 unless --quick, whose
#                   default is 1).
#   --workers LIST  process counts (default 2,4); the targets are for 2.
#   --json FILE     also write {"rows": [...], "targets": [...], "aa_spread": ...}.
#   --quick         short batches: a smoke test of the mechanics; its
#                   figures mean little.
#   --setup-only    install and build what the comparison needs, then exit
#                   without running it.
#
# What runs, each a fresh set of processes on this host, in place, float32
# SUM, sizes 4 B, 1, 4, 16 and 64 MiB per process:
#   mpi_tcp     bench/peers/mpi_allreduce.cpp under mpirun --mca pml ob1
#               --mca btl tcp,self --mca btl_tcp_if_include lo (ob1 forced so
#               that the btl choice applies); --oversubscribe only where the
#               ranks outnumber the cores.
#   mpi_tcp_again  the same again, later in the round: the A/A control.
#   gloo_ring   bench/peers/gloo_allreduce.cpp --algorithm ring:
#               gloo::allreduce with Algorithm::RING, options built per call
#               (PyTorch's path).
#   gloo_halving_doubling   the same program with
#               gloo::AllreduceHalvingDoubling<float>, constructed once per size.
#               Both over gloo::transport::tcp on 127.0.0.1, FileStore rendezvous.
#   lockstep    lockstep over TCP: build/bench/allreduce --workers LIST: multi_worker_mirrored_strategy,
#               one CPU replica per worker, over TCP (LOCKSTEP_TRANSPORT=tcp: the
#               workers share this host's memory, which they would use else),
#               each call's algorithm lockstep's choice (LOCKSTEP_ALGORITHM=auto:
#               the ring, recursive doubling or halving-doubling, docs/algorithms.md),
#               K back-to-back in-place
#               ctx.all_reduce calls inside one strategy.run; it first measures
#               the loopback bound (two opposite TCP streams of 64 MiB messages,
#               total payload rate P; algbw <= P / 2(W-1)).
#   lockstep_mpi  lockstep over MPI: build/bench/allreduce --workers launcher
#               (each rank of the mpirun job is one worker, the cluster from
#               Open MPI's variables, rank 0 prints the table; no bound) under
#               the same mpirun settings as mpi_tcp, with
#               LOCKSTEP_COMMUNICATOR=mpi and LOCKSTEP_COORDINATOR on a free
#               loopback port: the same strategy, replicas and timing as
#               lockstep, its collectives between the workers through MPI's
#               MPI_Iallgather (the agreement) and MPI_Allreduce on the same
#               TCP transport as the raw MPI_Allreduce.
#   lockstep_ring  lockstep with its ring alone (LOCKSTEP_ALGORITHM=ring), the
#               baseline of the choice: the choice's targets ask that it be
#               no slower than the ring beyond the A/A spread at 1-64 MiB with
#               2 and 4 workers, and that 4 B with 4 workers be no slower than
#               Open MPI over TCP.
#   socket_floor  bench/peers/socket_floor.cpp, with 2 workers at 4 B only:
#               the floor under any 4-byte all-reduce of 2 processes, one
#               exchange of 4 bytes each way on plain non-blocking sockets
#               (spinning on poll(2)), no framing, no reduction.
# The eight take turns in every round, the order rotated by one each round
# (mpi_tcp and mpi_tcp_again apart, lockstep_mpi between them).
# The peers get the same batch count and length as lockstep (5 batches of
# ~300 ms; --quick 2 of ~50 ms). The lockstep binary and its library are
# copied at the start, so a rebuild of build/ during the run changes nothing.
#
# Figures. Per round: a peer's time is the median of its batches, lockstep's
# the median of its repetitions; the tables show the median over rounds.
# algbw = bytes / time (GB = 1e9 B). "vs X" = X's time / lockstep's time,
# so above 1 lockstep is faster (for algbw the same as lockstep's algbw over
# X's). Best Gloo = the faster of Gloo's two at that size and W.
# "of bound" = the median over rounds of lockstep's algbw over the bound
# measured in the same round.
#
# Targets, for W = 2 only (W above the core count is reported without):
#   1, 4, 16, 64 MiB: algbw >= 1.1x Open MPI TCP's; >= 1.3x best Gloo's;
#                     >= 80% of the loopback bound.
#   4 B:              latency (us per all-reduce) <= Open MPI TCP's.
#   1, 4, 16, 64 MiB: lockstep over MPI's time <= Open MPI TCP's x (1.05 + A/A),
#                     A/A = the spread of Open MPI against itself at that
#                     size: the median over rounds (W = 2) of the slower of
#                     mpi_tcp and mpi_tcp_again over the faster, minus 1, in
#                     the same round (0.03: the two runs differ by 3%).
#                     (4 B over MPI is reported, without a target.)
# Each is printed as PASS or MISS; --json lists them as the other benchmarks
# do (target, measured, limit, at_least, unit, pass).
#
# Set-up, like tools/build.sh and safe to run again: it installs what is
# missing, Open MPI and Gloo included (tools/install-deps.sh --comparisons:
# libopenmpi-dev and libgloo-dev besides lockstep's own packages), configures
# build/ (tools/configure.sh) and builds build/bench/allreduce, then builds
# the peers into build/compare_tcp/, where the raw output of every launch
# stays (round-R-NAME.out / .log, round-R-lockstep.json, round-R-lockstep_mpi-W.json).
# Exit status: 0 with a report (or after --setup-only), whether or not the
# targets are met; 1 when a launch failed (crashed, timed out or found a
# wrong sum; the report leaves it out); 2 for bad arguments or a failed
# set-up.
set -euo pipefail
shopt -s inherit_errexit

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
sizes=4,1048576,4194304,16777216,67108864
work="$repo/build/compare_tcp"

usage() {
  sed -n '2,19p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
  exit 2
}
die() {
  echo "compare_tcp: $*" >&2
  exit 2
}

# -- arguments ----------------------------------------------------------------

rounds=""
workers=2,4
json=""
quick=0
setup_only=0
while (($#)); do
  case "$1" in
    --rounds) (($# >= 2)) || usage; rounds="$2"; shift 2 ;;
    --rounds=*) rounds="${1#*=}"; shift ;;
    --workers) (($# >= 2)) || usage; workers="$2"; shift 2 ;;
    --workers=*) workers="${1#*=}"; shift ;;
    --json) (($# >= 2)) || usage; json="$2"; shift 2 ;;
    --json=*) json="${1#*=}"; shift ;;
    --quick) quick=1; shift ;;
    --setup-only) setup_only=1; shift ;;
    -h|--help) usage ;;
    *) echo "compare_tcp: unknown argument $1" >&2; usage ;;
  esac
done
if [[ -z "$rounds" ]]; then
  rounds=$((quick ? 1 : 5))
fi
if [[ ! "$rounds" =~ ^[0-9]+$ ]] || ((rounds < 1)); then
  die "--rounds: expected a whole number of at least 1, got '$rounds'"
fi
((quick || rounds >= 5)) || die "--rounds: at least 5 (or use --quick for a smoke run)"
[[ "$workers" =~ ^[0-9]+(,[0-9]+)*$ ]] || die "--workers: expected a list like 2,4, got '$workers'"
IFS=',' read -r -a worlds <<<"$workers"
for w in "${worlds[@]}"; do
  ((w >= 2)) || die "--workers: at least 2 processes each, got $w"
done
if [[ -n "$json" ]]; then
  json_dir="$(dirname "$json")"
  [[ -d "$json_dir" ]] || die "--json: no folder $json_dir"
  json="$(cd "$json_dir" && pwd)/$(basename "$json")"
fi

if ((quick)); then
  reps=2 budget_ms=50 launch_limit_s=300
else
  reps=5 budget_ms=300 launch_limit_s=900
fi

# -- tools and builds -------------------------------------------------------------

"$repo/tools/install-deps.sh" --comparisons >&2 \
  || die "installing the packages it needs failed (tools/install-deps.sh --comparisons)"
# What install-deps just installed, checked once more in case a package
# changed its contents.
for tool in g++ mpicxx mpirun python3 timeout; do
  command -v "$tool" >/dev/null || die "$tool not found after tools/install-deps.sh --comparisons"
done
echo '#include <gloo/allreduce.h>' | g++ -std=c++20 -E -x c++ - >/dev/null 2>&1 \
  || die "Gloo's headers not found after tools/install-deps.sh --comparisons (libgloo-dev)"
"$repo/tools/configure.sh" build >&2 || die "configuring build/ failed"
meson compile -C "$repo/build" bench/allreduce >&2 || die "building build/bench/allreduce failed"
allreduce="$repo/build/bench/allreduce"

mkdir -p "$work"
rm -rf "$work"/round-* "$work/lockstep" "$work/tmp"
mkdir -p "$work/lockstep/bench" "$work/tmp"
# bench/allreduce finds liblockstep through its RUNPATH $ORIGIN/..
cp "$allreduce" "$work/lockstep/bench/allreduce"
if [[ -e "$repo/build/liblockstep.so.0" ]]; then
  cp -L "$repo/build/liblockstep.so.0" "$work/lockstep/"
fi
allreduce="$work/lockstep/bench/allreduce"

echo "compare_tcp: building the peers into $work" >&2
mpicxx -O3 -march=native -std=c++20 "$repo/bench/peers/mpi_allreduce.cpp" \
  -o "$work/mpi_allreduce"
g++ -O3 -march=native -std=c++20 -pthread "$repo/bench/peers/gloo_allreduce.cpp" \
  -o "$work/gloo_allreduce" -lgloo
g++ -O3 -march=native -std=c++20 "$repo/bench/peers/socket_floor.cpp" -o "$work/socket_floor"
if ((setup_only)); then
  echo "compare_tcp: set up (--setup-only): packages installed, build/bench/allreduce and the peers in $work built" >&2
  exit 0
fi

# -- runs -------------------------------------------------------------------------

cores="$(nproc)"
mpi_flags=(--mca pml ob1 --mca btl "tcp,self" --mca btl_tcp_if_include lo
  --mca btl_base_warn_component_unused 0)
((EUID != 0)) || mpi_flags+=(--allow-run-as-root)
peer_flags=(--sizes "$sizes" --reps "$reps" --target-ms "$budget_ms")
# Gloo's FileStore folders; one a killed launch leaves behind stays here.
export TMPDIR="$work/tmp"

failures=()

# launch NAME COMMAND...: runs one launch into round-$round-NAME.out / .log.
launch() {
  local name="$1" status=0
  shift
  local out="$work/round-$round-$name"
  timeout --kill-after=10 "$launch_limit_s" "$@" >"$out.out" 2>"$out.log" || status=$?
  if ((status != 0)); then
    echo "compare_tcp:   $name FAILED (exit $status; log: $out.log)" >&2
    failures+=("round $round: $name (exit $status)")
    # Kept for a look, out of the report's way.
    [[ ! -e "$out.out" ]] || mv "$out.out" "$out.out.failed"
    [[ ! -e "$out.json" ]] || mv "$out.json" "$out.json.failed"
  fi
}

# A loopback port that was free a moment ago (the coordinator's).
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

run_arm() {
  local w
  case "$1" in
    mpi_tcp|mpi_tcp_again)
      for w in "${worlds[@]}"; do
        local over=()
        ((w <= cores)) || over=(--oversubscribe)
        launch "$1-$w" mpirun "${mpi_flags[@]}" "${over[@]}" -np "$w" \
          "$work/mpi_allreduce" --variant tcp "${peer_flags[@]}"
      done ;;
    lockstep_mpi)
      for w in "${worlds[@]}"; do
        local over=() port
        ((w <= cores)) || over=(--oversubscribe)
        port="$(free_port)"
        launch "lockstep_mpi-$w" mpirun "${mpi_flags[@]}" "${over[@]}" -np "$w" \
          -x LOCKSTEP_COMMUNICATOR=mpi -x "LOCKSTEP_COORDINATOR=127.0.0.1:$port" \
          -x LOCKSTEP_LISTEN=127.0.0.1:0 \
          "$allreduce" --workers launcher --sizes "$sizes" --reps "$reps" \
          --budget-ms "$budget_ms" --json "$work/round-$round-lockstep_mpi-$w.json"
      done ;;
    gloo_ring|gloo_halving_doubling)
      for w in "${worlds[@]}"; do
        launch "$1-$w" "$work/gloo_allreduce" --ranks "$w" --algorithm "${1#gloo_}" \
          "${peer_flags[@]}"
      done ;;
    socket_floor)
      [[ ",$workers," != *,2,* ]] \
        || launch socket_floor-2 "$work/socket_floor" --sizes 4 --reps "$reps" \
          --target-ms "$budget_ms" ;;
    lockstep|lockstep_ring)
      # TCP between the workers, even where they share memory (they all run
      # here): lockstep's choice of algorithm per call, and its ring alone.
      local algorithm=auto
      [[ "$1" == lockstep ]] || algorithm=ring
      launch "$1" env LOCKSTEP_TRANSPORT=tcp LOCKSTEP_ALGORITHM="$algorithm" "$allreduce" \
        --workers "$workers" --sizes "$sizes" --reps "$reps" \
        --budget-ms "$budget_ms" --json "$work/round-$round-$1.json" ;;
  esac
}

arms=(mpi_tcp gloo_ring lockstep_mpi socket_floor mpi_tcp_again gloo_halving_doubling lockstep
  lockstep_ring)
start_s=$SECONDS
for ((round = 1; round <= rounds; ++round)); do
  shift_by=$(((round - 1) % ${#arms[@]}))
  order=("${arms[@]:shift_by}" "${arms[@]:0:shift_by}")
  read -r load1 load5 load15 _ </proc/loadavg
  echo "$round $load1 $load5 $load15" >>"$work/round-loadavg"
  echo "compare_tcp: round $round of $rounds (order: ${order[*]}; load $load1 $load5 $load15)" >&2
  for arm in "${order[@]}"; do
    t0=$SECONDS
    run_arm "$arm"
    echo "compare_tcp:   $arm: $((SECONDS - t0)) s" >&2
  done
done
read -r load1 load5 load15 _ </proc/loadavg
echo "end $load1 $load5 $load15" >>"$work/round-loadavg"
echo "compare_tcp: $rounds rounds in $((SECONDS - start_s)) s; raw output in $work" >&2
echo

# -- report -----------------------------------------------------------------------

python3 - "$work" "$rounds" "$workers" "$sizes" "$cores" "$quick" "${json:-}" \
  "${failures[@]}" <<'EOF'
import csv, glob, json, os, re, statistics, sys

work, rounds, workers, sizes, cores, quick, json_path, *failures = sys.argv[1:]
rounds, cores, quick = int(rounds), int(cores), quick == "1"
worlds = [int(w) for w in workers.split(",")]
sizes = [int(s) for s in sizes.split(",")]
peers = ("mpi_tcp", "gloo_ring", "gloo_halving_doubling")
names = {"mpi_tcp": "Open MPI TCP", "gloo_ring": "Gloo ring",
         "gloo_halving_doubling": "Gloo halving-doubling", "lockstep": "lockstep",
         "lockstep_ring": "lockstep's ring alone",
         "mpi_tcp_again": "Open MPI TCP again", "lockstep_mpi": "lockstep over MPI"}
measured = (*peers, "socket_floor", "mpi_tcp_again")
median = statistics.median
target_sizes = (1 << 20, 4 << 20, 16 << 20, 64 << 20)

# per_round[impl][(world, bytes)] = [seconds in each round that has it]
per_round = {impl: {} for impl in (*measured, "lockstep", "lockstep_mpi", "lockstep_ring")}
for path in sorted(glob.glob(f"{work}/round-*-*.out")):
    impl = re.match(r".*/round-\d+-(.*?)(-\d+)?\.out$", path).group(1)
    if impl not in measured:
        continue
    batches = {}
    for row in csv.reader(open(path)):
        # CSV,IMPL,VARIANT,RANKS,BYTES,K,BATCH,US_PER_OP
        if row and row[0] == "CSV":
            batches.setdefault((int(row[3]), int(row[4])), []).append(float(row[7]) / 1e6)
    for key, seconds in batches.items():
        per_round[impl].setdefault(key, []).append(median(seconds))
bound_total = []                 # P in GB/s, one per round
of_bound = {}                    # (world, bytes) -> [algbw / bound per round]
for path in sorted(glob.glob(f"{work}/round-*-lockstep.json")):
    result = json.load(open(path))
    bound_total.append(result["bound_gbs_total"])
    for row in result["rows"]:
        key = (row["workers"], row["bytes"])
        per_round["lockstep"].setdefault(key, []).append(row["seconds"])
        of_bound.setdefault(key, []).append(row["algbw_gbs"] / row["bound_gbs"])
for path in sorted(glob.glob(f"{work}/round-*-lockstep_ring.json")):
    for row in json.load(open(path))["rows"]:
        per_round["lockstep_ring"].setdefault((row["workers"], row["bytes"]), []).append(
            row["seconds"])
for path in sorted(glob.glob(f"{work}/round-*-lockstep_mpi-*.json")):
    for row in json.load(open(path))["rows"]:
        per_round["lockstep_mpi"].setdefault((row["workers"], row["bytes"]), []).append(
            row["seconds"])
loads = [line.split() for line in open(f"{work}/round-loadavg")]

def by_round(impl, key):
    return per_round[impl].get(key, [])

# The A/A control: how far Open MPI's two runs in one round differ (the
# slower's time over the faster's, minus 1), one value per round and size.
def aa_spreads_at(w, sizes_):
    return [max(a, b) / min(a, b) - 1 for b_ in sizes_
            for a, b in zip(by_round("mpi_tcp", (w, b_)), by_round("mpi_tcp_again", (w, b_)))]
# Their median over rounds at one size: what the lockstep-over-MPI target
# allows at that size (Open MPI's own spread differs by size: its 64 MiB
# TCP all-reduce is the erratic one).
def aa_size(w, b_):
    spreads = aa_spreads_at(w, [b_])
    return median(spreads) if spreads else None
# Their median over rounds and the target sizes with W processes (the
# choice's targets at 2 and 4; with 2, the pooled figure also reported).
def aa_at(w):
    spreads = aa_spreads_at(w, target_sizes)
    return median(spreads) if spreads else None
aa_spreads = aa_spreads_at(2, target_sizes)
aa = aa_at(2)

def size(b):
    return f"{b} B" if b < 1024 else f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB"

def med(impl, key):
    values = per_round[impl].get(key)
    return median(values) if values else None

def number(x):
    return "n/a" if x is None else f"{x:.0f}" if abs(x) >= 1000 else f"{x:.3g}"

rows = []
for w in worlds:
    for b in sizes:
        key = (w, b)
        t = {impl: med(impl, key) for impl in per_round}
        gloo = [impl for impl in ("gloo_ring", "gloo_halving_doubling") if t[impl]]
        best_gloo = min(gloo, key=lambda impl: t[impl]) if gloo else None
        vs = lambda peer: t[peer] / t["lockstep"] if t[peer] and t["lockstep"] else None
        row = {"workers": w, "bytes": b,
               "time_us": {impl: None if s is None else s * 1e6 for impl, s in t.items()},
               "algbw_gbs": {impl: None if s is None else b / s / 1e9 for impl, s in t.items()},
               "rounds": {impl: len(per_round[impl].get(key, [])) for impl in per_round},
               "best_gloo": best_gloo,
               "vs_mpi_tcp": vs("mpi_tcp"),
               "vs_mpi_tcp_by_round": [m / l for m, l in zip(per_round["mpi_tcp"].get(key, []),
                                                             per_round["lockstep"].get(key, []))],
               "vs_best_gloo": vs(best_gloo) if best_gloo else None,
               "mpi_tcp_again_vs_mpi_tcp_by_round": [
                   a / m for m, a in zip(by_round("mpi_tcp", key), by_round("mpi_tcp_again", key))],
               "lockstep_mpi_vs_mpi_tcp": t["lockstep_mpi"] / t["mpi_tcp"]
                   if t["lockstep_mpi"] and t["mpi_tcp"] else None,
               "lockstep_mpi_vs_mpi_tcp_by_round": [
                   l / m for m, l in zip(by_round("mpi_tcp", key), by_round("lockstep_mpi", key))],
               "bound_gbs": median(bound_total) / (2 * (w - 1)) if bound_total else None,
               "fraction_of_bound": median(of_bound[key]) if key in of_bound else None}
        rows.append(row)

print(f"compare_tcp: medians of {rounds} round(s){' (--quick: not a result)' if quick else ''}; "
      f"{cores} cores; in place, float32 SUM, one process per rank/worker, loopback TCP.")
print("Load average (1/5/15 min) at each round's start and at the end: "
      + "; ".join(f"{r[0]}: {' '.join(r[1:])}" for r in loads))
if bound_total:
    print(f"Bound: two opposite loopback streams move P = {median(bound_total):.2f} GB/s in all "
          f"(rounds: {min(bound_total):.2f}-{max(bound_total):.2f}); algbw <= P / 2(W-1).")
print("4 B: latency in us; else algbw in GB/s (GB = 1e9 B). vs X = X's time / lockstep's "
      "(above 1: lockstep is faster). of bound: lockstep's algbw / the same round's bound.\n")
print("| S | W | Open MPI TCP | Gloo ring | Gloo halving-doubling | lockstep "
      "| vs Open MPI | vs best Gloo | of bound |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for row in rows:
    b = row["bytes"]
    figure = row["time_us"] if b <= 4 else row["algbw_gbs"]
    cells = [number(figure[impl]) for impl in (*peers, "lockstep")]
    fraction = row["fraction_of_bound"]
    bound = "" if b <= 4 or fraction is None else f"{100 * fraction:.0f}%"
    ratio = lambda x: "n/a" if x is None else f"{x:.2f}x"
    print(f"| {size(b)} | {row['workers']} | {' | '.join(cells)} | {ratio(row['vs_mpi_tcp'])} "
          f"| {ratio(row['vs_best_gloo'])} | {bound} |")

floor_row = next((r for r in rows if r["workers"] == 2 and r["bytes"] == 4), None)
if floor_row and floor_row["time_us"]["socket_floor"]:
    t = floor_row["time_us"]
    times = lambda impl: ", ".join(f"{s * 1e6:.2f}" for s in per_round[impl].get((2, 4), []))
    floor_of = lambda impl: "n/a" if t[impl] is None else f"{t[impl] / t['socket_floor']:.2f}x"
    print(f"\n4 B, 2 workers: the socket floor (one 4-byte exchange each way on plain sockets) "
          f"is {number(t['socket_floor'])} us; lockstep takes {floor_of('lockstep')} of it, "
          f"Open MPI TCP {floor_of('mpi_tcp')}. By round (us): lockstep {times('lockstep')}; "
          f"Open MPI TCP {times('mpi_tcp')}; floor {times('socket_floor')}.")

print("\nlockstep over MPI (LOCKSTEP_COMMUNICATOR=mpi, the strategy under the same mpirun "
      "settings) against the raw MPI_Allreduce, both over Open MPI's TCP on loopback; "
      "4 B: latency in us, else algbw in GB/s. over MPI / raw = lockstep over MPI's time / "
      "Open MPI's (below 1: lockstep over MPI is faster); A/A = Open MPI again's time / "
      "Open MPI's, the same round.\n")
print("| S | W | Open MPI TCP | Open MPI TCP again | lockstep over MPI | over MPI / raw | A/A "
      "| A/A spread |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|")
for row in rows:
    b = row["bytes"]
    figure = row["time_us"] if b <= 4 else row["algbw_gbs"]
    cells = [number(figure[impl]) for impl in ("mpi_tcp", "mpi_tcp_again", "lockstep_mpi")]
    t = row["time_us"]
    ratio = lambda x: "n/a" if x is None else f"{x:.3f}"
    again = t["mpi_tcp_again"] / t["mpi_tcp"] if t["mpi_tcp_again"] and t["mpi_tcp"] else None
    spread = aa_size(row["workers"], b)
    print(f"| {size(b)} | {row['workers']} | {' | '.join(cells)} "
          f"| {ratio(row['lockstep_mpi_vs_mpi_tcp'])} | {ratio(again)} "
          f"| {'n/a' if spread is None else f'{100 * spread:.1f}%'} |")
print("\nA/A spread: the median over rounds of the slower of Open MPI's two runs over the "
      "faster, minus 1, at that size (the lockstep-over-MPI target's); over 1-64 MiB with 2 "
      f"processes: {'n/a' if aa is None else f'{100 * aa:.1f}%'} from {len(aa_spreads)} "
      "pair(s).")

print("\nlockstep's choice of algorithm per call (LOCKSTEP_ALGORITHM=auto) against its ring "
      "alone (LOCKSTEP_ALGORITHM=ring), both over TCP; 4 B: latency in us, else algbw in GB/s; "
      "chosen / ring = the choice's time / the ring's (below 1: the choice is faster); A/A = "
      "Open MPI's spread with as many processes.\n")
print("| S | W | ring | chosen | chosen / ring | A/A |")
print("|---:|---:|---:|---:|---:|---:|")
for row in rows:
    b, w = row["bytes"], row["workers"]
    figure = row["time_us"] if b <= 4 else row["algbw_gbs"]
    t = row["time_us"]
    chosen = t["lockstep"] / t["lockstep_ring"] if t["lockstep"] and t["lockstep_ring"] else None
    row["lockstep_vs_lockstep_ring"] = chosen
    spread = aa_at(w)
    print(f"| {size(b)} | {w} | {number(figure['lockstep_ring'])} | {number(figure['lockstep'])} "
          f"| {'n/a' if chosen is None else f'{chosen:.3f}'} "
          f"| {'n/a' if spread is None else f'{100 * spread:.1f}%'} |")

targets = []
def target(what, measured, limit, at_least, unit):
    ok = measured is not None and limit is not None and (
        measured >= limit if at_least else measured <= limit)
    targets.append({"target": what, "measured": measured, "limit": limit,
                    "at_least": at_least, "unit": unit, "pass": ok})

if 2 in worlds:
    for row in (r for r in rows if r["workers"] == 2):
        b, t, g = row["bytes"], row["time_us"], row["algbw_gbs"]
        if b == 4:
            target(f"4 B, 2 workers: latency <= Open MPI TCP's {number(t['mpi_tcp'])} us",
                   t["lockstep"], t["mpi_tcp"], False, "us")
            continue
        if b not in (1 << 20, 4 << 20, 16 << 20, 64 << 20):
            continue
        mpi, best = g["mpi_tcp"], g[row["best_gloo"]] if row["best_gloo"] else None
        target(f"{size(b)}, 2 workers: algbw >= 1.1x Open MPI TCP's {number(mpi)} GB/s",
               g["lockstep"], None if mpi is None else 1.1 * mpi, True, "GB/s")
        target(f"{size(b)}, 2 workers: algbw >= 1.3x best Gloo's ({row['best_gloo']}) "
               f"{number(best)} GB/s", g["lockstep"], None if best is None else 1.3 * best,
               True, "GB/s")
        fraction = row["fraction_of_bound"]
        target(f"{size(b)}, 2 workers: algbw >= 80% of the loopback bound",
               None if fraction is None else 100 * fraction, 80.0, True, "%")
        raw, spread = t["mpi_tcp"], aa_size(2, b)
        target(f"{size(b)}, 2 workers: lockstep over MPI's time <= Open MPI TCP's "
               f"{number(raw)} us x (1.05 + A/A at {size(b)} "
               f"{'n/a' if spread is None else f'{spread:.3f}'})",
               t["lockstep_mpi"], None if raw is None or spread is None else raw * (1.05 + spread),
               False, "us")

# The choice's targets (issue 31): 4 B with 4 processes no slower than Open
# MPI over TCP; 1-64 MiB with 2 and 4 within the A/A spread of the ring.
for row in rows:
    b, w, t = row["bytes"], row["workers"], row["time_us"]
    if b == 4 and w == 4:
        target(f"4 B, 4 workers: latency <= Open MPI TCP's {number(t['mpi_tcp'])} us",
               t["lockstep"], t["mpi_tcp"], False, "us")
    if b in target_sizes and w in (2, 4):
        spread = aa_at(w)
        ring = t["lockstep_ring"]
        target(f"{size(b)}, {w} workers: the choice's time <= the ring's {number(ring)} us x "
               f"(1 + A/A {'n/a' if spread is None else f'{spread:.3f}'})", t["lockstep"],
               None if ring is None or spread is None else ring * (1 + spread), False, "us")

if targets:
    print("\n| target | measured | limit | |\n|---|---:|---:|---|")
    for t in targets:
        print(f"| {t['target']} | {number(t['measured'])} {t['unit']} "
              f"| {'>=' if t['at_least'] else '<='} {number(t['limit'])} {t['unit']} "
              f"| {'PASS' if t['pass'] else 'MISS'} |")
    print(f"\n{sum(t['pass'] for t in targets)} of {len(targets)} targets met"
          + ("; W above the core count has no targets." if any(w > cores for w in worlds) else "."))
if failures:
    print("\nFailed launches (left out): " + "; ".join(failures))

if json_path:
    out = {"benchmark": "compare_tcp", "rounds": rounds, "quick": quick, "cores": cores,
           "workers": worlds, "sizes": sizes,
           "bound_gbs_total": median(bound_total) if bound_total else None,
           "bound_gbs_total_by_round": bound_total,
           "aa_spread": aa, "aa_spreads": aa_spreads,
           "aa_spread_by_size": {str(b): aa_size(2, b) for b in target_sizes},
           "loadavg": [{"when": r[0], "load": [float(x) for x in r[1:]]} for r in loads],
           "rows": rows, "targets": targets, "failed_launches": failures,
           "method": {
               "time_us": "per implementation, the median over rounds of its time per "
                          "all-reduce in that round: a peer's median batch (K back-to-back "
                          "operations timed on rank 0), lockstep's median repetition (K "
                          "in-place ctx.all_reduce calls inside one strategy.run)",
               "algbw_gbs": "bytes / time, GB = 1e9 B",
               "vs": "the peer's time / lockstep's time: above 1, lockstep is faster",
               "best_gloo": "the faster of gloo_ring and gloo_halving_doubling at that size",
               "vs_mpi_tcp_by_round": "Open MPI's time / lockstep's in each round, in round order",
               "mpi_tcp_again": "the A/A control: mpi_tcp run a second time in the same round",
               "lockstep_mpi": "lockstep over MPI: bench/allreduce --workers launcher, each "
                               "rank of an mpirun job (mpi_tcp's settings) one worker, "
                               "LOCKSTEP_COMMUNICATOR=mpi; its time measured as lockstep's",
               "lockstep_mpi_vs_mpi_tcp": "lockstep over MPI's time / Open MPI's: below 1, "
                                          "lockstep over MPI is faster",
               "aa_spread": "the median over rounds and 1, 4, 16, 64 MiB with 2 processes of "
                            "max(mpi_tcp, mpi_tcp_again) / min(mpi_tcp, mpi_tcp_again) - 1, "
                            "their times in the same round",
               "aa_spread_by_size": "the same at each size alone (bytes): the "
                                    "lockstep-over-MPI target's spread",
               "socket_floor": "4 B with 2 workers only: bench/peers/socket_floor.cpp, one "
                               "4-byte exchange each way between 2 processes on plain sockets",
               "bound_gbs": "P / 2(W-1), P = the median over rounds of bench/allreduce's two "
                            "opposite loopback streams' total payload rate",
               "fraction_of_bound": "the median over rounds of lockstep's algbw / the bound "
                                    "measured in the same round"}}
    with open(json_path + ".tmp", "w") as f:
        json.dump(out, f, indent=2)
    os.replace(json_path + ".tmp", json_path)
    print(f"\nwrote {json_path}")
EOF
((${#failures[@]} == 0)) || exit 1
