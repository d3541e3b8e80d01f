#!/usr/bin/env python3
"""Statistics and tables for tools/ab_compare.sh (standard library only).

    tools/ab_compare.py RESULTS_DIR

RESULTS_DIR is what ab_compare.sh wrote: meta.json, and raw/<side>/<bench>/
with one round-<r>.json per successful run of that bench for that side
(sides: before, after, before_again), round-<r>.failed for a run that exited
non-zero or wrote no JSON, and missing (a file) when the side's commit has no
such benchmark. Writes RESULTS_DIR/table.md and RESULTS_DIR/summary.json,
prints the table and the summary, and exits 0 on PASS, 1 on FAIL, 2 when
there is nothing to compare.

Every row of a bench's JSON "rows" array is one comparison row, named by its
key fields and measured by one headline metric. A time (lower is better) is
compared as after / before; a rate (higher is better) as before / after, so a
ratio above 1 always means AFTER is slower. The per-side figure is the median
of the round medians the bench itself reports. The verdict rules are in
ab_compare.sh's header.
"""

import json
import math
import os
import statistics
import sys

SIDES = ("before", "after", "before_again")

# Per bench: the fields that name a row, its headline metric, and whether
# higher is better. Fields absent from a row are left out of its name, so a
# commit whose JSON lacks one still lines up.
SPECS = {
    "dispatch": (("what", "replicas"), "lockstep_us", False),
    "allreduce": (("table", "arm", "replicas", "tensors", "tensor_bytes"), "time_us", False),
    "variables": (("variables", "bytes", "replicas"), "lockstep_us", False),
    "training": (("replicas", "steps_per_call"), "examples_per_s", True),
    "tcp_ring": (("workers", "size"), "time_us", False),
}

# For a bench without a spec (or rows that lack the spec's metric): the first
# of these present in a row is its metric.
TIME_METRICS = ("time_us", "lockstep_us", "us", "time_ms", "time_s")
RATE_METRICS = ("examples_per_s", "algbw_gbs", "gbs", "per_s")

GATE_GEOMEAN = 1.05
GATE_ROW = 1.10


def size_text(n):
    if n >= 1 << 20 and n % (1 << 20) == 0:
        return f"{n >> 20} MiB"
    if n >= 1 << 10 and n % (1 << 10) == 0:
        return f"{n >> 10} KiB"
    return f"{n} B"


def row_label(bench, row):
    """A short readable name for a row; also its identity."""
    if bench == "dispatch" and "what" in row:
        return f"{row['what']} N={row.get('replicas', '?')}"
    if bench == "allreduce" and "arm" in row:
        t, b = row.get("tensors", 1), row.get("tensor_bytes", 0)
        what = size_text(b) if t == 1 else f"{t}x{size_text(b)}"
        return f"{row.get('table', '?')} {row['arm']} {what} N={row.get('replicas', '?')}"
    if bench == "variables" and "bytes" in row:
        return f"K={row.get('variables', '?')} S={size_text(row['bytes'])} N={row.get('replicas', '?')}"
    if bench == "training" and "replicas" in row:
        if row.get("replicas") == "plain loop":
            return "plain loop"
        return f"N={row['replicas']} steps/call={row.get('steps_per_call', '?')}"
    if bench == "tcp_ring" and "workers" in row:
        return f"W={row['workers']} {row.get('size', '?')}"
    keys = SPECS.get(bench, ((), None, False))[0] or generic_keys(row)
    return " ".join(f"{k}={row[k]}" for k in keys if k in row)


def generic_keys(row):
    """Fields that look like a row's identity: strings and whole numbers
    whose names are not measurements."""
    skip = ("_us", "_ms", "_s", "_gbs", "ratio", "_min", "_max", "share", "pass", "load")
    return [k for k, v in row.items()
            if isinstance(v, (str, int)) and not isinstance(v, bool)
            and not any(k.endswith(s) or s in k for s in skip)]


def headline(bench, row):
    """(value, higher_is_better, metric name) or None when the row has none
    (a skipped cell, a null)."""
    _, metric, higher = SPECS.get(bench, ((), None, False))
    candidates = ([(metric, higher)] if metric else []) + \
        [(m, False) for m in TIME_METRICS] + [(m, True) for m in RATE_METRICS]
    for name, better_high in candidates:
        if name not in row:
            continue
        value = row[name]
        # The first metric present decides, even when it is null (a bench
        # writes null for a figure it could not measure).
        if isinstance(value, (int, float)) and not isinstance(value, bool) \
                and math.isfinite(value) and value > 0:
            return float(value), better_high, name
        return None
    return None


def load_rows(bench, path):
    """{label: (value, higher_is_better, metric)} of one run's JSON."""
    with open(path) as f:
        doc = json.load(f)
    rows = list(doc.get("rows", []))
    # training: the plain loop (no strategy) is a figure of every row; it is
    # the same model code, so it is compared too, as a row of its own.
    if bench == "training":
        base = [r.get("baseline_examples_per_s") for r in rows if "baseline_examples_per_s" in r]
        if base:
            rows.append({"replicas": "plain loop", "examples_per_s": base[0]})
    out = {}
    for row in rows:
        if not isinstance(row, dict):
            continue
        if row.get("skipped"):
            continue  # a cell the bench's arguments leave out (variables --limit)
        label = row_label(bench, row)
        h = headline(bench, row)
        # Two rows with one name would be compared as one: keep both apart.
        while label in out:
            label += "'"
        out[label] = h
    return out


def geomean(xs):
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def fmt_value(v, metric):
    if v is None:
        return "missing"
    unit = {"examples_per_s": " ex/s", "algbw_gbs": " GB/s"}.get(metric, " us" if metric.endswith("_us") else "")
    if v >= 1000:
        return f"{v:,.0f}{unit}"
    if v >= 10:
        return f"{v:.1f}{unit}"
    return f"{v:.3g}{unit}"


def fmt_ratio(r):
    return "-" if r is None else f"{r:.3f}"


def table_to_json(log_path, json_path):
    """bench/tcp_ring's table (worker_processes.cpp: | W | bytes | time us
    | ...), which every commit prints, as a JSON of rows; False if the log
    holds no row."""
    rows = []
    with open(log_path) as f:
        for line in f:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) < 3 or not cells[0].isdigit():
                continue
            try:
                rows.append({"workers": int(cells[0]), "size": cells[1],
                             "time_us": float(cells[2])})
            except ValueError:
                continue
    if rows:
        with open(json_path, "w") as f:
            json.dump({"benchmark": "tcp_ring", "rows": rows}, f, indent=2)
    return bool(rows)


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--table-json":
        # ab_compare.sh: a bench that prints its figures but writes no JSON.
        return 0 if table_to_json(sys.argv[2], sys.argv[3]) else 1
    if len(sys.argv) != 2:
        sys.stderr.write(__doc__)
        return 2
    results = sys.argv[1]
    with open(os.path.join(results, "meta.json")) as f:
        meta = json.load(f)
    benches = meta["benches"]
    raw = os.path.join(results, "raw")

    table_rows = []   # dicts, in output order
    notes = []
    failed_runs = {}
    for bench in benches:
        # per side: {label: [values over rounds]}, plus metric info per label
        per_side = {}
        info = {}
        side_missing = {}
        for side in SIDES:
            d = os.path.join(raw, side, bench)
            side_missing[side] = os.path.exists(os.path.join(d, "missing"))
            values = {}
            if os.path.isdir(d):
                names = sorted(os.listdir(d))
                fails = [n for n in names if n.endswith(".failed")]
                if fails:
                    failed_runs[f"{bench}/{side}"] = len(fails)
                for name in names:
                    if not name.endswith(".json"):
                        continue
                    try:
                        rows = load_rows(bench, os.path.join(d, name))
                    except (OSError, ValueError) as e:
                        notes.append(f"{bench}/{side}/{name}: unreadable JSON ({e}); run ignored")
                        failed_runs[f"{bench}/{side}"] = failed_runs.get(f"{bench}/{side}", 0) + 1
                        continue
                    for label, h in rows.items():
                        values.setdefault(label, [])
                        if h is not None:
                            values[label].append(h[0])
                            info[label] = h
            per_side[side] = values
        for side in SIDES:
            if side_missing[side]:
                notes.append(f"{bench}: not in the {side.replace('_', ' ')} commit: missing")
        labels = list(per_side["before"])
        labels += [l for s in SIDES for l in per_side[s] if l not in labels]
        for label in labels:
            med = {}
            for side in SIDES:
                xs = per_side[side].get(label)
                med[side] = statistics.median(xs) if xs else None
            h = info.get(label)
            higher = h[1] if h else False
            metric = h[2] if h else ""

            def slower(after, before):
                if after is None or before is None:
                    return None
                return before / after if higher else after / before

            table_rows.append({
                "bench": bench, "row": label, "metric": metric,
                "higher_is_better": higher,
                "before": med["before"], "after": med["after"], "before_again": med["before_again"],
                "rounds": {s: len(per_side[s].get(label) or []) for s in SIDES},
                "ratio": slower(med["after"], med["before"]),
                "aa_ratio": slower(med["before_again"], med["before"]),
            })

    # A/A spread per bench: the largest |A/A - 1| over its rows.
    spread = {}
    for r in table_rows:
        if r["aa_ratio"] is not None:
            spread[r["bench"]] = max(spread.get(r["bench"], 0.0), abs(r["aa_ratio"] - 1))
    overall_spread = max(spread.values()) if spread else None

    failing = []
    for r in table_rows:
        r["limit"] = None
        if r["ratio"] is None:
            r["status"] = "missing"
            continue
        r["limit"] = GATE_ROW + spread.get(r["bench"], 0.0)
        r["status"] = "SLOWER" if r["ratio"] > r["limit"] else "ok"
        if r["status"] == "SLOWER":
            failing.append(r)

    ratios = [r["ratio"] for r in table_rows if r["ratio"] is not None]
    aa = [r["aa_ratio"] for r in table_rows if r["aa_ratio"] is not None]
    gm, gm_aa = geomean(ratios), geomean(aa)
    compared = len(ratios)
    # A bench that runs for BEFORE but fails (crash, error, time limit) for
    # AFTER is a regression too, not a missing row.
    broken = [b for b in benches
              if failed_runs.get(f"{b}/after")
              and not failed_runs.get(f"{b}/before") and not failed_runs.get(f"{b}/before_again")]
    if compared == 0 and not broken:
        verdict = "NO DATA"
    elif broken or gm > GATE_GEOMEAN or failing:
        verdict = "FAIL"
    else:
        verdict = "PASS"

    lines = []
    lines.append(f"# A/B: {meta['before']['label']} -> {meta['after']['label']}")
    lines.append("")
    lines.append(f"before {meta['before']['sha']}, after {meta['after']['sha']}; "
                 f"{meta['rounds']} round{'s' if meta['rounds'] != 1 else ''}{' (--quick)' if meta.get('quick') else ''}; "
                 "figures are medians over rounds; ratio = after / before for times, "
                 "before / after for rates (> 1: after is slower); "
                 "A/A = a second run of before's binary / before.")
    lines.append("")
    lines.append("| bench | row | before | after | ratio | A/A ratio | limit | |")
    lines.append("|---|---|---:|---:|---:|---:|---:|---|")
    for r in table_rows:
        lines.append(f"| {r['bench']} | {r['row']} | {fmt_value(r['before'], r['metric'])} "
                     f"| {fmt_value(r['after'], r['metric'])} | {fmt_ratio(r['ratio'])} "
                     f"| {fmt_ratio(r['aa_ratio'])} | {fmt_ratio(r['limit'])} | {r['status']} |")
    lines.append("")
    lines.append(f"- rows compared: {compared} of {len(table_rows)}"
                 + (f" ({len(table_rows) - compared} missing)" if compared < len(table_rows) else ""))
    lines.append(f"- geomean(after / before): {fmt_ratio(gm)} (limit {GATE_GEOMEAN:.2f})")
    lines.append(f"- geomean(A/A): {fmt_ratio(gm_aa)}")
    lines.append("- A/A spread (max |A/A - 1|): "
                 + (f"{overall_spread:.3f} overall; " if overall_spread is not None else "- ; ")
                 + ", ".join(f"{b} {s:.3f}" for b, s in spread.items())
                 + f" (a row fails above {GATE_ROW:.2f} + its bench's spread)")
    for key, n in failed_runs.items():
        lines.append(f"- failed runs: {key}: {n} (their rounds are left out)")
    for note in notes:
        lines.append(f"- {note}")
    for b in broken:
        lines.append(f"- {b}: failed for after only ({failed_runs[f'{b}/after']} runs; "
                     f"see logs/after-{b}-round-*.log): FAIL")
    if failing:
        lines.append("- rows above their limit: " + "; ".join(
            f"{r['bench']} {r['row']} {r['ratio']:.3f} > {r['limit']:.3f}" for r in failing))
    if meta.get("quick"):
        notes_quick = ("--quick: runs of a second or two over few rounds; the figures show "
                       "that the mechanics work, the verdict means little")
        lines.append(f"- {notes_quick}")
    lines.append(f"- verdict: **{verdict}**")
    text = "\n".join(lines) + "\n"

    with open(os.path.join(results, "table.md"), "w") as f:
        f.write(text)
    summary = {
        "before": meta["before"], "after": meta["after"], "rounds": meta["rounds"],
        "quick": meta.get("quick", False), "benches": benches,
        "bench_args": meta.get("bench_args", {}),
        "geomean_ratio": gm, "geomean_aa_ratio": gm_aa,
        "aa_spread": overall_spread, "aa_spread_by_bench": spread,
        "gate": {"geomean_max": GATE_GEOMEAN, "row_max": f"{GATE_ROW} + the bench's A/A spread"},
        "rows_compared": compared, "rows_total": len(table_rows),
        "failed_runs": failed_runs, "notes": notes,
        "broken_benches": broken, "verdict": verdict, "rows": table_rows,
    }
    with open(os.path.join(results, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
        f.write("\n")
    sys.stdout.write(text)
    return {"PASS": 0, "FAIL": 1}.get(verdict, 2)


if __name__ == "__main__":
    sys.exit(main())
