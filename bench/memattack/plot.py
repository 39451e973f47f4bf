#!/usr/bin/python3
"""Plot memattack CSVs: RSS and heap in use over time, one line per mode.

Usage: plot.py OUT.png RUN.csv [RUN.csv ...]
"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    fig, (ax1, ax2) = plt.subplots(2, 1, sharex=True, figsize=(8, 6))
    title = "PULL socket, 1,000 peers each holding a 1 MiB message minus one byte"
    for path in sys.argv[2:]:
        with open(path) as f:
            rows = list(csv.DictReader(f))
        if not rows:
            continue
        mode = rows[0]["mode"]
        if mode.endswith("-flood"):
            title = "PULL socket, 1,000 peers flooding 1 MiB messages, application takes 1/ms"
        if mode.endswith("-burst"):
            title = "PULL socket, 1,000 peers each sending a 512 KiB burst, then idle"
        t = [float(r["seconds"]) for r in rows]
        ax1.plot(t, [float(r["rss_mib"]) for r in rows], label=mode)
        ax2.plot(t, [float(r["heap_inuse_mib"]) for r in rows], label=mode)
        phases = [(float(r["seconds"]), r["phase"]) for r in rows]
        for i in range(1, len(phases)):
            if phases[i][1] != phases[i - 1][1]:
                for ax in (ax1, ax2):
                    ax.axvline(phases[i][0], color="grey", linestyle=":", linewidth=0.8)
    ax1.set_ylabel("RSS (MiB)")
    ax2.set_ylabel("heap in use (MiB)")
    ax2.set_xlabel("seconds (dotted: attack starts, attackers leave)")
    ax1.legend()
    ax1.set_title(title)
    fig.tight_layout()
    fig.savefig(sys.argv[1], dpi=90)


main()
