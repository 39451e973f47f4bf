#!/usr/bin/env bash
# Re-measures issue 37's "many addresses" rows against one zmqguard binary,
# on loopback. Usage: run.sh ZMQGUARD_BIN ATTACK_BIN [rows...]
# (ATTACK_BIN: go build -o ATK ./reliability/fairshare37)
# rows: pull (4,200 addresses against `sink`), replay (300 addresses against
# kv-publish's replay port), http-idle (1,024 idle keep-alive connections
# from one host to kv-index --http) and http-big (200 clients posting 8 MiB
# /score bodies), each with an honest router asking /score meanwhile;
# http-big-nice is http-big with the attacking clients' process under
# `nice -n 19` (on a deployment the attacker's CPU is another host's; the
# server and the honest router run at normal priority in both). Each row
# starts its own CLI process (kernel-chosen ports, read from its JSON start
# line), runs one bounded attack, prints the attack's JSON lines (for
# http-big: the honest router's, then the flood's) with `uptime` before,
# and stops the process.
# outputs6 and outputs3 run issue 37's heavy engines against `zmqguard
# outputs` (reliability/fairshare/outputs row11: 6 or 3 engines sending
# valid 7.5 MB EngineCoreOutputs back to back from a child process, an
# honest engine sending a small message every 20 ms, its delay measured to
# its line on the CLI's stdout); outputs6-nice runs those engines under
# `nice -n 19`. The harness is built from this tree unless FS37_FSO names
# a binary of it.
# FS37_N overrides the attacking addresses of the pull row; FS37_FOR the
# http and outputs rows' duration (default 20 s and 15 s), FS37_BIG the
# big-body clients.
set -euo pipefail
bin=$1 atk=$2
shift 2
rows=${*:-pull replay}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fairshare37.XXXXXX")
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT

# field FILE MSG KEY: waits (up to 20 s) for a JSON log line with msg MSG
# on FILE and prints its KEY.
field() {
  for _ in $(seq 200); do
    v=$(python3 - "$1" "$2" "$3" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    try: d = json.loads(l)
    except ValueError: continue
    if d.get("msg") == sys.argv[2] and sys.argv[3] in d:
        print(d[sys.argv[3]]); break
PY
)
    [ -n "$v" ] && { echo "$v"; return; }
    sleep 0.1 # polling the log for the start line, bounded by the loop
  done
  echo "no '$2' line with $3 in $1" >&2; cat "$1" >&2; return 1
}

stop() { kill "$pid"; wait "$pid" 2>/dev/null || true; pid=; }

for row in $rows; do
  echo "# $row: $(uptime)"
  case $row in
  pull)
    "$bin" sink --bind tcp://127.0.0.1:0 --log-format json 2>"$tmp/pull.log" >/dev/null &
    pid=$!
    ep=$(field "$tmp/pull.log" "sink receiving" endpoint)
    "$atk" pull -addr "${ep#tcp://}" -n "${FS37_N:-4200}" -honest 64 -new 4
    stop
    ;;
  replay)
    "$bin" kv-publish --bind tcp://127.0.0.1:0 --replay-bind tcp://127.0.0.1:0 --rate 100 --log-format json \
      2>"$tmp/replay.log" >/dev/null &
    pid=$!
    ep=$(field "$tmp/replay.log" "kv-publish" replay)
    "$atk" replay -addr "${ep#tcp://}" -n 300 -replays 71
    stop
    ;;
  http-idle|http-big|http-big-nice)
    # kv-index --http with one source that never answers (a closed port).
    "$bin" kv-index --connect tcp://127.0.0.1:1 --http 127.0.0.1:0 --log-format json 2>"$tmp/$row.log" >/dev/null &
    pid=$!
    ha=$(field "$tmp/$row.log" "kv-index endpoint serving" http_addr)
    if [ "$row" = http-idle ]; then
      "$atk" http -addr "$ha" -mode idle -idle 1024 -for "${FS37_FOR:-35s}"
    else
      nice=
      [ "$row" = http-big-nice ] && nice="nice -n 19"
      # The flood in a process of its own (bounded: -for 5m, stopped below).
      $nice "$atk" flood -addr "$ha" -big "${FS37_BIG:-200}" -for 5m >"$tmp/flood.json" &
      fpid=$!
      "$atk" http -addr "$ha" -mode big -pid "$pid" -for "${FS37_FOR:-20s}"
      kill -TERM "$fpid"
      wait "$fpid" || true
      cat "$tmp/flood.json"
    fi
    stop
    ;;
  outputs6|outputs3|outputs6-nice)
    fso=${FS37_FSO:-}
    if [ -z "$fso" ]; then
      (cd "$(dirname "$0")/../.." && go build -o "$tmp/fso" ./reliability/fairshare/outputs)
      fso=$tmp/fso
    fi
    n=6 attackers=process
    [ "$row" = outputs3 ] && n=3
    [ "$row" = outputs6-nice ] && attackers=nice
    # Bounded: the harness stops the CLI after -for plus at most 30 s of
    # printing, and gives up 90 s past -for.
    "$fso" -bin "$bin" -for "${FS37_FOR:-15s}" -huge 1024x1830 -engines "$n" -attackers "$attackers" row11
    ;;
  *)
    echo "unknown row $row" >&2
    exit 2
    ;;
  esac
done
