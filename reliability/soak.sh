#!/usr/bin/env bash
# Soak: runs `zmqguard coordinator` (one engine) and `zmqguard
# handshake-listener` on loopback, drives them with `loadgen soak` (valid
# handshakes, engine stats, wave notices and wake-ups, plus junk of every kind
# at full rate) for DURATION, and samples each process every second:
# resident memory (VmRSS), OS threads (Threads; the processes do not export a
# goroutine count) and open file descriptors (/proc/PID/fd), plus CPU time.
#
# usage: reliability/soak.sh [DURATION] [OUTDIR]
#   DURATION  a Go duration (default 10m)
#   OUTDIR    default reliability/ (writes soak.csv, soak-summary.txt, soak.png,
#             soak-counters.jsonl, soak-loadgen.json)
# The whole run is niced (nice -n 19). The plot needs python3-matplotlib
# (Debian: apt-get install python3-matplotlib); without it the CSV and the
# summary are still written.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"
duration=${1:-10m}
out=${2:-reliability}
mkdir -p "$out"
tmp=$(mktemp -d /tmp/zmqguard-soak.XXXXXX)
renice -n 19 $$ >/dev/null
. reliability/lib.sh

go build -o "$tmp/zmqguard" ./cmd/zmqguard
go build -o "$tmp/loadgen" ./reliability/loadgen
ZMQGUARD=$tmp/zmqguard

start_coordinator "$tmp" 1
start_listener "$tmp" soak-engine
trap 'kill $cpid $lpid 2>/dev/null || true; kill $(jobs -p) 2>/dev/null || true' EXIT
echo "coordinator pid $cpid: front $front, back output $backout, back publish $backpub"
echo "listener pid $lpid: $listener"

csv=$out/soak.csv
echo "t,process,rss_kb,threads,fds,cpu_s" >"$csv"
sample() { # seconds-since-start name pid
  local rss thr fds cpu
  rss=$(awk '/^VmRSS:/ {print $2}' /proc/"$3"/status 2>/dev/null) || return 0
  thr=$(awk '/^Threads:/ {print $2}' /proc/"$3"/status 2>/dev/null) || return 0
  fds=$(ls /proc/"$3"/fd 2>/dev/null | wc -l)
  cpu=$(awk -v hz="$(getconf CLK_TCK)" '{printf "%.2f", ($14+$15)/hz}' /proc/"$3"/stat 2>/dev/null) || return 0
  echo "$1,$2,$rss,$thr,$fds,$cpu" >>"$csv"
}
t0=$(date +%s)
(
  while kill -0 "$cpid" 2>/dev/null && kill -0 "$lpid" 2>/dev/null; do
    now=$(( $(date +%s) - t0 ))
    sample "$now" coordinator "$cpid"
    sample "$now" listener "$lpid"
    sleep 1
  done
) &
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
