#!/usr/bin/env python3
"""Summarises and plots a soak's samples (reliability/soak.sh writes them).

usage: plot.py [--no-plot] [--warmup SECONDS] SOAK.csv OUT.png

The CSV has the columns t,process,rss_kb,threads,fds,cpu_s and, since the
processes export them (--debug-addr), goroutines,heap_inuse_kb (one row per
process per second; an empty cell is a sample the debug endpoint did not
answer). Older CSVs without the last two columns are read as before. For each
process and metric it prints the value at the end of the warm-up, the
minimum, maximum and mean after it, the last value, the least-squares slope
per minute after warm-up, and a verdict: flat when the mean of the last minute
is within the tolerance of the mean of the first minute after warm-up (RSS and
HeapInuse 10 %, threads 2, fds and goroutines 10 % or 5). The PNG (Debian's
python3-matplotlib) shows memory (RSS solid, HeapInuse dashed), goroutines,
OS threads, fds and CPU per process over time, with the warm-up shaded.
"""

import argparse
import csv
import sys
from collections import defaultdict

# (column, label, conversion for the plot); the optional ones are plotted
# and judged only when the CSV has them.
METRICS = [
    ("rss_kb", "RSS (MiB)", lambda v: v / 1024.0),
    ("heap_inuse_kb", "HeapInuse (MiB)", lambda v: v / 1024.0),
    ("goroutines", "goroutines", float),
    ("threads", "OS threads", float),
    ("fds", "open fds", float),
]
OPTIONAL = {"heap_inuse_kb", "goroutines"}


def slope_per_minute(ts, vs):
    n = len(ts)
    if n < 2:
        return 0.0
    mt, mv = sum(ts) / n, sum(vs) / n
    den = sum((t - mt) ** 2 for t in ts)
    if den == 0:
        return 0.0
    return 60.0 * sum((t - mt) * (v - mv) for t, v in zip(ts, vs)) / den


def window_mean(ts, vs, lo, hi):
    sel = [v for t, v in zip(ts, vs) if lo <= t < hi]
    return sum(sel) / len(sel) if sel else float("nan")


def flat(metric, first, last):
    if metric in ("rss_kb", "heap_inuse_kb"):
        return abs(last - first) <= 0.10 * first
    if metric == "threads":
        return abs(last - first) <= 2
    return abs(last - first) <= max(5.0, 0.10 * first)


def load(path):
    """Returns process -> column -> [(t, value)], skipping empty cells, and
    the set of columns the file has."""
    data = defaultdict(lambda: defaultdict(list))
    with open(path) as f:
        r = csv.DictReader(f)
        cols = set(r.fieldnames or [])
        for row in r:
            t = float(row["t"])
            d = data[row["process"]]
            for metric, _, _ in METRICS + [("cpu_s", "", None)]:
                v = (row.get(metric) or "").strip()
                if v:
                    d[metric].append((t, float(v)))
    return data, cols


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--no-plot", action="store_true")
    ap.add_argument("--warmup", type=float, default=60.0, help="seconds excluded at the start (default 60)")
    ap.add_argument("csv")
    ap.add_argument("png")
    a = ap.parse_args()

    data, cols = load(a.csv)
    if not data:
        sys.exit("no samples in " + a.csv)
    metrics = [m for m in METRICS if m[0] in cols]
    missing = [m[0] for m in METRICS if m[0] in OPTIONAL and m[0] not in cols]

    end = max(max(t for t, _ in d["rss_kb"]) for d in data.values())
    warm = min(a.warmup, end / 4)
    print("soak samples: %s, %.0f s, warm-up %.0f s excluded" % (a.csv, end, warm))
    if missing:
        print("(no %s column in this CSV: written before the processes exported them)" % " or ".join(missing))
    print("%-12s %-13s %10s %10s %10s %10s %10s %12s  %s" % (
        "process", "metric", "warm-end", "min", "max", "mean", "last", "slope/min", "verdict"))
    all_flat = True
    for proc in sorted(data):
        d = data[proc]
        for metric, _, _ in metrics:
            pts = [(t, v) for t, v in d[metric] if t >= warm]
            if not pts:
                print("%-12s %-13s %s" % (proc, metric, "no samples after warm-up"))
                continue
            ts, vs = [p[0] for p in pts], [p[1] for p in pts]
            first = window_mean(ts, vs, warm, warm + 60)
            last = window_mean(ts, vs, end - 60, end + 1)
            ok = flat(metric, first, last)
            all_flat &= ok
            gaps = len([t for t, _ in d["rss_kb"] if t >= warm]) - len(pts)
            print("%-12s %-13s %10.1f %10.1f %10.1f %10.1f %10.1f %12.2f  %s%s" % (
                proc, metric, vs[0], min(vs), max(vs), sum(vs) / len(vs), vs[-1],
                slope_per_minute(ts, vs),
                "flat" if ok else "NOT FLAT (first minute %.1f, last minute %.1f)" % (first, last),
                " (%d samples missing)" % gaps if gaps > 0 else ""))
        cpu = d["cpu_s"]
        print("%-12s %-13s %s" % (proc, "cpu", "%.1f s CPU in %.0f s (%.0f%% of one core)" % (
            cpu[-1][1], cpu[-1][0], 100.0 * cpu[-1][1] / max(1.0, cpu[-1][0]))))
    print("verdict: " + ("all flat after warm-up" if all_flat else "NOT all flat after warm-up"))
    # The sampler is a 1 s shell loop at the run's priority: a longer gap
    # means the machine did not run the (niced) soak at all for that long.
    ts = sorted(set(t for t, _ in data[sorted(data)[0]]["rss_kb"]))
    gaps = [(a, b) for a, b in zip(ts, ts[1:]) if b - a > 2]
    if gaps:
        print("sampler stalls (> 2 s without a sample: the niced run got no CPU): %d, %.0f s in all: %s" % (
            len(gaps), sum(b - a for a, b in gaps), ", ".join("%d-%d s" % g for g in gaps)))
    else:
        print("sampler stalls: none (every second sampled within 2 s)")

    if a.no_plot:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # Panels: memory (RSS, with HeapInuse dashed beside it when present),
    # then every other metric, then CPU.
    panels = [[m for m in metrics if m[0] in ("rss_kb", "heap_inuse_kb")]]
    panels += [[m] for m in metrics if m[0] not in ("rss_kb", "heap_inuse_kb")]
    fig, axes = plt.subplots(len(panels) + 1, 1, figsize=(10, 2.3 * (len(panels) + 1) + 1), sharex=True)
    colours = {proc: "C%d" % i for i, proc in enumerate(sorted(data))}
    for ax, panel in zip(axes, panels):
        for metric, label, conv in panel:
            style = "--" if metric == "heap_inuse_kb" else "-"
            for proc in sorted(data):
                pts = data[proc][metric]
                ax.plot([t for t, _ in pts], [conv(v) for _, v in pts], style, color=colours[proc],
                        label=proc if len(panel) == 1 else "%s %s" % (proc, label.split(" ")[0]), linewidth=1)
        ax.set_ylabel("memory (MiB)" if len(panel) > 1 else panel[0][1])
        ax.set_ylim(bottom=0)
        ax.axvspan(0, warm, color="0.9")
        ax.grid(True, alpha=0.3)
        ax.legend(loc="upper left", fontsize=8)
    ax = axes[-1]
    for proc in sorted(data):
        pts = data[proc]["cpu_s"]
        rates = [0.0] + [
            100.0 * (c1 - c0) / max(1e-9, t1 - t0) for (t0, c0), (t1, c1) in zip(pts, pts[1:])
        ]
        ax.plot([t for t, _ in pts], rates, color=colours[proc], label=proc, linewidth=0.6)
    ax.set_ylabel("CPU (% of a core)")
    ax.set_ylim(bottom=0)
    ax.axvspan(0, warm, color="0.9")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper left", fontsize=8)
    ax.set_xlabel("seconds (shaded: warm-up, excluded from the verdict)")
    fig.suptitle("zmqguard soak: coordinator and handshake listener under valid traffic + junk at full rate")
    fig.tight_layout()
    fig.savefig(a.png, dpi=80)
    print("plot: " + a.png)


if __name__ == "__main__":
    main()
