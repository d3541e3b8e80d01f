#!/usr/bin/env python3
"""sim_plot: the picture of bench/sim_allreduce's --json (docs/algorithms.md,
"A simulated cluster"): simulated time of the bare all-reduce against size,
one line per algorithm (points: the simulation; dashes: the alpha-beta
model's cost_of), one panel per host count, as SVG through gnuplot.

    tools/sim_plot.py OUT.svg RESULT.json... [--hosts 16,128,1024]

The rows of several results (runs of different host counts on the same
platform) are drawn together.

Exit status 0, or 2 naming the problem (unreadable JSON, no rows for a host
count, gnuplot missing or failing)."""

import json
import shutil
import subprocess
import sys

ALGORITHMS = ["ring", "recursive_doubling", "halving_doubling"]


def fail(what):
    print(f"sim_plot: {what}", file=sys.stderr)
    sys.exit(2)


def main():
    args = sys.argv[1:]
    hosts = [16, 128, 1024]
    if "--hosts" in args:
        at = args.index("--hosts")
        try:
            hosts = [int(h) for h in args[at + 1].split(",")]
        except (IndexError, ValueError):
            fail("--hosts: expected whole numbers separated by commas")
        del args[at:at + 2]
    if len(args) < 2:
        fail("usage: tools/sim_plot.py OUT.svg RESULT.json... [--hosts 16,128,1024]")
    output, sources = args[0], args[1:]
    rows = []
    platform = None
    for source in sources:
        try:
            with open(source) as f:
                result = json.load(f)
            rows += result["rows"]
            if platform is not None and result["platform"] != platform:
                fail(f"{source} is another platform than {sources[0]}")
            platform = result["platform"]
        except (OSError, ValueError, KeyError) as e:
            fail(f"cannot read {source}: {e}")
    source = ", ".join(sources)
    gnuplot = shutil.which("gnuplot")
    if gnuplot is None:
        fail("gnuplot not found (apt-get install gnuplot-nox)")

    script = []
    plots = []
    for n in hosts:
        panel = []
        for a in ALGORITHMS:
            for kind, key in (("sim", "bare_us"), ("model", "cost_of_us")):
                name = f"$h{n}_{a}_{kind}"
                points = [(r["bytes"], r[key]) for r in rows
                          if r["hosts"] == n and r["algorithm"] == a and r.get(key) is not None]
                if not points:
                    continue
                script.append(f"{name} << EOD")
                script += [f"{b} {us}" for b, us in sorted(points)]
                script.append("EOD")
                panel.append((name, a, kind))
        if not any(kind == "sim" for _, _, kind in panel):
            fail(f"no simulated rows for {n} hosts in {source}")
        plots.append((n, panel))

    colours = {"ring": "#1f77b4", "recursive_doubling": "#d62728", "halving_doubling": "#2ca02c"}
    script += [
        f"set terminal svg size {420 * len(plots)},420 dynamic enhanced font 'sans,10' background rgb 'white'",
        "set logscale xy",
        "set grid",
        "set format x '%.0s%cB'",
        "set xlabel 'bytes a host'",
        "set ylabel 'simulated time (us)'",
        "set key top left",
        f"set multiplot layout 1,{len(plots)} title 'all-reduce on a simulated {platform['topology']}, "
        f"{platform['link_gbits']:g} Gb/s links, {platform['link_latency_us']:g} us a link "
        f"(points: SimGrid; dashes: cost\\_of)'",
    ]
    for n, panel in plots:
        script.append(f"set title '{n} hosts'")
        parts = []
        simulated = {a for _, a, kind in panel if kind == "sim"}
        for name, a, kind in panel:
            label = a.replace('_', ' ')
            if kind == "sim":
                style = f"with linespoints pt 7 ps 0.5 lw 2 lc rgb '{colours[a]}' title '{label}'"
            elif a in simulated:
                style = f"with lines dt 2 lw 1 lc rgb '{colours[a]}' notitle"
            else:  # not simulated at this host count: the model alone
                style = f"with lines dt 2 lw 1 lc rgb '{colours[a]}' title '{label} (model only)'"
            parts.append(f"{name} using 1:2 {style}")
        script.append("plot " + ", ".join(parts))
    script.append("unset multiplot")
    done = subprocess.run([gnuplot], input="\n".join(script) + "\n", capture_output=True, text=True)
    if done.returncode != 0:
        fail(f"gnuplot failed: {done.stderr.strip()}")
    with open(output, "w") as f:
        f.write(done.stdout)


if __name__ == "__main__":
    main()
