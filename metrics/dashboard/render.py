#!/usr/bin/python3
"""Render the README's metrics picture from a real `zmqguard demo` run.

Runs `zmqguard demo --metrics-addr 127.0.0.1:0` (building the binary into a
temporary directory unless --bin is given), reads the port the kernel chose
from the demo's "metrics endpoint serving" log line, scrapes /metrics every
--interval seconds while it runs, saves the samples as CSV (--samples) and
draws four panels with matplotlib: message drops by reason per component,
refused connections by reason, handshakes per second, and queue depth in
bytes per socket (send queues and receive queue, with the HWM drops at the
end).
--from-samples re-draws a saved CSV without running anything.

Needs Debian's python3-matplotlib and python3-prometheus-client (the
exposition is parsed with prometheus_client's own parser). Everything runs
on loopback and ends by itself: the demo runs for --duration seconds, every
scrape has a 5 s timeout, and the whole run is bounded by duration + 60 s.

    /usr/bin/python3 metrics/dashboard/render.py --duration 20 \
        --samples metrics/dashboard/demo-samples.csv.gz --out metrics/dashboard/demo.png
    /usr/bin/python3 metrics/dashboard/render.py \
        --from-samples metrics/dashboard/demo-samples.csv.gz --out /tmp/again.png
"""

import argparse
import collections
import csv
import gzip
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def read_metrics_addr(stream, found):
    """Reads the demo's JSON log lines (stderr) until they end; puts the
    address of the "metrics endpoint serving" line in found["addr"] and
    sets found["event"]. The demo binds 127.0.0.1:0: the kernel chooses the
    port, none is picked here."""
    for line in stream:
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if rec.get("msg") == "metrics endpoint serving" and "metrics_addr" in rec:
            found["addr"] = rec["metrics_addr"]
            found["event"].set()
    found["event"].set()  # stderr closed: the demo is gone


def scrape(url):
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(url, timeout=5) as resp:
        text = resp.read().decode("utf-8")
    out = []
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name.startswith("zmqguard_"):
                out.append((s.name, json.dumps(s.labels, sort_keys=True), s.value))
    return out


def record(args):
    """Runs the demo and returns [(t, name, labels_json, value)]."""
    bin_path = args.bin
    tmp = None
    if not bin_path:
        tmp = tempfile.mkdtemp(prefix="zmqguard-render-")
        bin_path = os.path.join(tmp, "zmqguard")
        subprocess.run(["go", "build", "-o", bin_path, "./cmd/zmqguard"], cwd=REPO, check=True, timeout=600)
    cmd = [bin_path, "demo", "--duration", "%ds" % args.duration, "--metrics-addr", "127.0.0.1:0",
           "--log-format", "json", "--log-level", "info"]
    print("running:", " ".join(cmd), file=sys.stderr)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    found = {"addr": None, "event": threading.Event()}
    reader = threading.Thread(target=read_metrics_addr, args=(proc.stderr, found), daemon=True)
    reader.start()
    rows = []
    t0 = time.monotonic()
    deadline = t0 + args.duration + 60
    url = None
    try:
        if not found["event"].wait(timeout=60) or not found["addr"]:
            raise SystemExit("the demo logged no metrics endpoint within 60 s")
        url = "http://%s/metrics" % found["addr"]
        while proc.poll() is None and time.monotonic() < deadline:
            t = time.monotonic() - t0
            try:
                for name, labels, value in scrape(url):
                    rows.append((round(t, 3), name, labels, value))
            except OSError:
                pass  # not listening yet, or already closed
            time.sleep(args.interval)
        if proc.poll() is None:
            proc.kill()
            raise SystemExit("demo did not end in time")
        table = proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
    print(table, file=sys.stderr)
    if proc.returncode != 0:
        raise SystemExit("demo exited %d" % proc.returncode)
    if not rows:
        raise SystemExit("no samples scraped from %s" % url)
    return rows


# DRAWN are the families the panels read; --samples keeps only these.
DRAWN = {"zmqguard_loop_messages_dropped_total", "zmqguard_socket_refused_total",
         "zmqguard_handshake_requests_served_total", "zmqguard_handshake_error_replies_total",
         "zmqguard_socket_peers", "zmqguard_socket_hwm_dropped_messages_total",
         "zmqguard_socket_send_queue_bytes", "zmqguard_socket_receive_queue_bytes"}


def open_text(path, mode):
    if path.endswith(".gz"):
        return gzip.open(path, mode + "t", newline="")
    return open(path, mode, newline="")


def save(rows, path):
    """Writes the drawn families' samples as CSV (gzipped for a .gz path)."""
    with open_text(path, "w") as f:
        w = csv.writer(f)
        w.writerow(["t", "name", "labels", "value"])
        w.writerows(r for r in rows if r[1] in DRAWN)


def load(path):
    with open_text(path, "r") as f:
        r = csv.reader(f)
        next(r)
        return [(float(t), n, l, float(v)) for t, n, l, v in r]


def series(rows, name, key):
    """{key(labels): [(t, v)]} for the samples of name."""
    out = collections.defaultdict(dict)
    for t, n, l, v in rows:
        if n == name:
            k = key(json.loads(l))
            out[k][t] = out[k].get(t, 0) + v  # sum samples that share a key
    return {k: sorted(d.items()) for k, d in out.items()}


def rate(points, window=2.0):
    """Per-second rate of a counter over a trailing window of seconds."""
    ts, vs, j = [], [], 0
    for i, (t, v) in enumerate(points):
        while points[j][0] < t - window:
            j += 1
        if i > j:
            t0, v0 = points[j]
            ts.append(t)
            vs.append(max(v - v0, 0) / (t - t0))
    return ts, vs


def draw(rows, out):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(13, 7.5), dpi=100)
    times = sorted({t for t, _, _, _ in rows})
    step = (times[-1] - times[0]) / (len(times) - 1) if len(times) > 1 else 0
    fig.suptitle("zmqguard demo under the built-in scanner: %d scrapes of /metrics, one every %.1f s"
                 % (len(times), step), fontsize=12)
    # One colour per reason in both drop panels, one line style per component.
    reasons = ["transport", "handshake", "oversize", "envelope", "decode", "validate", "unknown-rank",
               "decoder-panic", "policy", "auth", "unsupported"]
    colour = {r: plt.get_cmap("tab20")(i) for i, r in enumerate(reasons)}
    styles = ["-", "--", ":", "-."]

    ax = axes[0][0]
    drops = series(rows, "zmqguard_loop_messages_dropped_total", lambda l: (l["loop"], l["reason"]))
    loops = sorted({loop for loop, _ in drops})
    for (loop, reason), pts in sorted(drops.items()):
        if pts[-1][1] == 0:
            continue
        ax.plot(*rate(pts), label="%s %s" % (loop, reason), linewidth=1.3, color=colour.get(reason),
                linestyle=styles[loops.index(loop) % len(styles)])
    ax.set_title("message drops by reason per component (/s)\nzmqguard_loop_messages_dropped_total", fontsize=9)
    ax.legend(fontsize=6.5, ncol=2)

    ax = axes[0][1]
    viol = series(rows, "zmqguard_socket_refused_total", lambda l: l["reason"])
    for reason, pts in sorted(viol.items()):
        if pts[-1][1] == 0:
            continue
        ax.plot(*rate(pts), label=reason, linewidth=1.3, color=colour.get(reason))
    ax.set_title("refused connections by reason, 4 sockets summed (/s)\nzmqguard_socket_refused_total",
                 fontsize=9)
    ax.legend(fontsize=7)

    ax = axes[1][0]
    for name, label in [("zmqguard_handshake_requests_served_total", "NIXL requests served"),
                        ("zmqguard_handshake_error_replies_total", "unserved-rank error replies")]:
        for _, pts in series(rows, name, lambda l: l["socket"]).items():
            ax.plot(*rate(pts), label=label, linewidth=1.2)
    ax.set_title("handshakes (/s)\nzmqguard_handshake_requests_served_total, _error_replies_total", fontsize=9)
    ax.legend(fontsize=7)

    ax = axes[1][1]
    colours = plt.get_cmap("tab10")
    for name, style, what in [("zmqguard_socket_send_queue_bytes", "-", "send"),
                              ("zmqguard_socket_receive_queue_bytes", "--", "receive")]:
        for i, (sock, pts) in enumerate(sorted(series(rows, name, lambda l: l["socket"]).items())):
            peak = max(v for _, v in pts)
            ax.plot([t for t, _ in pts], [v for _, v in pts], label="%s %s (max %d B)" % (sock, what, peak),
                    linewidth=1.2, drawstyle="steps-post", linestyle=style, color=colours(i))
    hwm = series(rows, "zmqguard_socket_hwm_dropped_messages_total", lambda l: "all")
    total_hwm = hwm.get("all", [(0, 0)])[-1][1]
    ax.set_title("queue depth per socket, bytes (gauges, sampled; HWM queue drops at the end: %d)\n"
                 "zmqguard_socket_send_queue_bytes, _receive_queue_bytes" % total_hwm, fontsize=9)
    ax.legend(fontsize=6.5, ncol=2, loc="center right")

    for a in axes.flat:
        a.set_xlabel("seconds", fontsize=8)
        a.tick_params(labelsize=7)
        a.grid(alpha=0.3)
        a.set_ylim(bottom=0)
    fig.tight_layout()
    fig.savefig(out)
    print("wrote", out, file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration", type=int, default=20, help="demo duration in seconds")
    ap.add_argument("--interval", type=float, default=0.5, help="scrape interval in seconds")
    ap.add_argument("--bin", help="zmqguard binary (default: go build ./cmd/zmqguard)")
    ap.add_argument("--samples", help="save the scraped samples to this CSV")
    ap.add_argument("--from-samples", help="draw from this CSV instead of running the demo")
    ap.add_argument("--out", default=os.path.join(REPO, "metrics", "dashboard", "demo.png"))
    args = ap.parse_args()
    if not 1 <= args.duration <= 600 or not 0.1 <= args.interval <= 10:
        ap.error("--duration must be in [1, 600] and --interval in [0.1, 10]")
    rows = load(args.from_samples) if args.from_samples else record(args)
    if args.samples and not args.from_samples:
        save(rows, args.samples)
    draw(rows, args.out)


if __name__ == "__main__":
    main()
