#!/usr/bin/env bash
# Soak: runs `zmqguard coordinator` (one engine) and `zmqguard
# handshake-listener` on loopback, drives them with `loadgen soak` (valid
# handshakes, engine stats, wave notices and wake-ups, plus junk of every kind
# at full rate) for DURATION, and samples each process every second:
# resident memory (VmRSS), OS threads (Threads), open file descriptors
# (/proc/PID/fd) and CPU time from /proc, and the goroutine count and
# HeapInuse from the process's own debug endpoint (both run with
# --debug-addr 127.0.0.1:0; the script reads the address from the start log
# line and a python3 sampler GETs /debug/zmqguard). Before stopping the processes it
# saves their heap profiles (/debug/pprof/heap), ready for
# `go tool pprof -top FILE`.
#
# usage: reliability/soak.sh [DURATION] [OUTDIR]
#   DURATION  a Go duration (default 10m)
#   OUTDIR    default reliability/ (writes soak.csv, soak-summary.txt, soak.png,
#             soak-counters.jsonl, soak-loadgen.json, soak-coordinator-heap.pb.gz,
#             soak-listener-heap.pb.gz)
# The whole run is niced (nice -n 19). The plot needs python3-matplotlib
# (Debian: apt-get install python3-matplotlib); without it the CSV and the
# summary are still written.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"
duration=${1:-10m}
out=${2:-reliability}
mkdir -p "$out"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/zmqguard-soak.XXXXXX")
renice -n 19 $$ >/dev/null
. reliability/lib.sh

go build -o "$tmp/zmqguard" ./cmd/zmqguard
go build -o "$tmp/loadgen" ./reliability/loadgen
ZMQGUARD=$tmp/zmqguard

start_coordinator "$tmp" 1 --debug-addr 127.0.0.1:0
start_listener "$tmp" soak-engine "" listener --debug-addr 127.0.0.1:0
trap 'kill $cpid $lpid 2>/dev/null || true; kill $(jobs -p) 2>/dev/null || true' EXIT
echo "coordinator pid $cpid: front $front, back output $backout, back publish $backpub, debug http://$cdebug/debug/zmqguard"
echo "listener pid $lpid: $listener, debug http://$ldebug/debug/zmqguard"
[ -n "$cdebug" ] && [ -n "$ldebug" ] || { echo "no debug_addr in the start lines"; exit 1; }

csv=$out/soak.csv
echo "t,process,rss_kb,threads,fds,cpu_s,goroutines,heap_inuse_kb" >"$csv"
# The sampler: one python3 process (no fork per sample, so that it keeps its
# 1 s pace on a loaded machine) reading /proc and each /debug/zmqguard until
# either process exits. An empty goroutines/heap_inuse_kb cell is a sample
# the debug endpoint did not answer within 2 s.
/usr/bin/python3 - "$csv" "$(date +%s)" coordinator "$cpid" "$cdebug" listener "$lpid" "$ldebug" <<'PY' &
import json, os, sys, time, urllib.request

path, t0, args = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
procs = [(args[i], args[i + 1], args[i + 2]) for i in range(0, len(args), 3)]
hz = os.sysconf("SC_CLK_TCK")
http = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def status(pid, key):
    with open("/proc/%s/status" % pid) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])


def cpu(pid):
    with open("/proc/%s/stat" % pid) as f:
        rest = f.read().rsplit(")", 1)[1].split()  # fields from the 3rd on
    return (int(rest[11]) + int(rest[12])) / hz  # utime + stime (fields 14, 15)


def debug(addr):
    try:
        with http.open("http://%s/debug/zmqguard" % addr, timeout=2) as r:
            v = json.load(r)
        return str(v["goroutines"]), str(v["memstats"]["heap_inuse"] // 1024)
    except Exception:
        return "", ""


with open(path, "a", buffering=1) as out:
    while True:
        now = int(time.time()) - t0
        for name, pid, addr in procs:
            try:
                row = (status(pid, "VmRSS"), status(pid, "Threads"), len(os.listdir("/proc/%s/fd" % pid)), cpu(pid))
            except (OSError, IndexError, ValueError):
                sys.exit(0)  # the process is gone
            if None in row:
                sys.exit(0)  # a zombie: no VmRSS any more
            g, h = debug(addr)
            out.write("%d,%s,%d,%d,%d,%.2f,%s,%s\n" % ((now, name) + row + (g, h)))
        time.sleep(max(0.05, 1 - time.time() % 1))
PY
sampler=$!

"$tmp/loadgen" soak --duration "$duration" --listener "$listener" --front "$front" \
  --back-output "$backout" --back-publish "$backpub" >"$out/soak-loadgen.json" 2>"$tmp/loadgen.err" || {
  echo "loadgen failed:"; tail -n 20 "$tmp/loadgen.err"; }
tail -n 3 "$tmp/loadgen.err"
grep 'did not answer' "$tmp/loadgen.err" >"$out/soak-scan-misses.txt" || true
sleep 3 # let the processes take what is still in their sockets' buffers
alive=yes
kill -0 "$cpid" 2>/dev/null || alive="no: coordinator died"
kill -0 "$lpid" 2>/dev/null || alive="no: listener died"
echo "both processes alive at the end: $alive"

# Final after-check while they still run: a handshake through the CLI's probe.
"$ZMQGUARD" probe --timeout 5s "$listener" | tail -n 1

kill "$sampler" 2>/dev/null || true
# Heap profiles while the processes still hold their soak state.
for p in coordinator:$cdebug listener:$ldebug; do
  curl -s --noproxy '*' -m 60 -o "$out/soak-${p%%:*}-heap.pb.gz" "http://${p#*:}/debug/pprof/heap" &&
    echo "heap profile: $out/soak-${p%%:*}-heap.pb.gz (go tool pprof -top $out/soak-${p%%:*}-heap.pb.gz)" ||
    echo "could not fetch the ${p%%:*}'s heap profile from ${p#*:}"
done
stop_proc "$cpid" coordinator >"$out/soak-counters.jsonl"
stop_proc "$lpid" listener >>"$out/soak-counters.jsonl"
grep -c 'DATA RACE\|panic:' "$tmp"/*.err | grep -v ':0$' || true
echo "counters: $out/soak-counters.jsonl; loadgen summary: $out/soak-loadgen.json"
cat "$out/soak-loadgen.json"

if /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
  /usr/bin/python3 reliability/plot.py "$csv" "$out/soak.png" | tee "$out/soak-summary.txt"
else
  /usr/bin/python3 reliability/plot.py --no-plot "$csv" "$out/soak.png" | tee "$out/soak-summary.txt"
  echo "(python3-matplotlib missing: no PNG; apt-get install python3-matplotlib)"
fi
echo "alive at the end: $alive" >>"$out/soak-summary.txt"
