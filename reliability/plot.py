#!/usr/bin/env python3
"""Summarises and plots a soak's samples (reliability/soak.sh writes them).

usage: plot.py [--no-plot] [--warmup SECONDS] SOAK.csv OUT.png

The CSV has the columns t,process,rss_kb,threads,fds,cpu_s (one row per
process per second). For each process and metric it prints the value at the
end of the warm-up, the minimum, maximum and mean after it, the last value,
the least-squares slope per minute after warm-up, and a verdict: flat when the
mean of the last minute is within the tolerance of the mean of the first
minute after warm-up (RSS 10 %, threads 2, fds 10 % or 5). The PNG (Debian's
python3-matplotlib) shows the four series per process over time, with the
warm-up shaded.
"""

import argparse
import csv
import sys
from collections import defaultdict

METRICS = [
    ("rss_kb", "RSS (MiB)", lambda v: v / 1024.0),
    ("threads", "OS threads", float),
    ("fds", "open fds", float),
]


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
    if metric == "rss_kb":
        return abs(last - first) <= 0.10 * first
    if metric == "threads":
        return abs(last - first) <= 2
    return abs(last - first) <= max(5.0, 0.10 * first)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--no-plot", action="store_true")
    ap.add_argument("--warmup", type=float, default=60.0, help="seconds excluded at the start (default 60)")
    ap.add_argument("csv")
    ap.add_argument("png")
    a = ap.parse_args()

    data = defaultdict(lambda: defaultdict(list))  # process -> column -> values
    with open(a.csv) as f:
        for row in csv.DictReader(f):
            d = data[row["process"]]
            d["t"].append(float(row["t"]))
            for k in ("rss_kb", "threads", "fds", "cpu_s"):
                d[k].append(float(row[k]))
    if not data:
        sys.exit("no samples in " + a.csv)

    end = max(max(d["t"]) for d in data.values())
    warm = min(a.warmup, end / 4)
    print("soak samples: %s, %.0f s, warm-up %.0f s excluded" % (a.csv, end, warm))
    print("%-12s %-8s %10s %10s %10s %10s %10s %12s  %s" % (
        "process", "metric", "warm-end", "min", "max", "mean", "last", "slope/min", "verdict"))
    all_flat = True
    for proc in sorted(data):
        d = data[proc]
        for metric, _, conv in METRICS:
            pts = [(t, v) for t, v in zip(d["t"], d[metric]) if t >= warm]
            if not pts:
                continue
            ts, vs = [p[0] for p in pts], [p[1] for p in pts]
            first = window_mean(ts, vs, warm, warm + 60)
            last = window_mean(ts, vs, end - 60, end + 1)
            ok = flat(metric, first, last)
            all_flat &= ok
            print("%-12s %-8s %10.1f %10.1f %10.1f %10.1f %10.1f %12.2f  %s" % (
                proc, metric, vs[0], min(vs), max(vs), sum(vs) / len(vs), vs[-1],
                slope_per_minute(ts, vs),
                "flat" if ok else "NOT FLAT (first minute %.1f, last minute %.1f)" % (first, last)))
        cpu = d["cpu_s"]
        print("%-12s %-8s %s" % (proc, "cpu", "%.1f s CPU in %.0f s (%.0f%% of one core)" % (
            cpu[-1], d["t"][-1], 100.0 * cpu[-1] / max(1.0, d["t"][-1]))))
    print("verdict: " + ("all flat after warm-up" if all_flat else "NOT all flat after warm-up"))
    # The sampler is a 1 s shell loop at the run's priority: a longer gap
    # means the machine did not run the (niced) soak at all for that long.
    ts = sorted(set(data[sorted(data)[0]]["t"]))
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

    fig, axes = plt.subplots(len(METRICS) + 1, 1, figsize=(10, 11), sharex=True)
    for ax, (metric, label, conv) in zip(axes, METRICS):
        for proc in sorted(data):
            d = data[proc]
            ax.plot(d["t"], [conv(v) for v in d[metric]], label=proc, linewidth=1)
        ax.set_ylabel(label)
        ax.set_ylim(bottom=0)
        ax.axvspan(0, warm, color="0.9")
        ax.grid(True, alpha=0.3)
        ax.legend(loc="upper left", fontsize=8)
    ax = axes[-1]
    for proc in sorted(data):
        d = data[proc]
        rates = [0.0] + [
            100.0 * (c1 - c0) / max(1e-9, t1 - t0)
            for (t0, c0), (t1, c1) in zip(zip(d["t"], d["cpu_s"]), zip(d["t"][1:], d["cpu_s"][1:]))
        ]
        ax.plot(d["t"], rates, label=proc, linewidth=0.6)
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
