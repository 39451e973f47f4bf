#!/usr/bin/env bash
# Re-measures issue 29 rows 1, 9 and 10 against one zmqguard binary, on
# loopback. Usage: run.sh ZMQGUARD_BIN ATTACK_BIN [rows...]   (rows: 1 1r 9 10;
# 1r is row 1 on kv-publish's replay port)
# Each row starts its own CLI process (kernel-chosen ports, read from its
# JSON start line), runs one bounded attack, prints the attack's JSON line
# and stops the process. G1_HB sets row 10's --heartbeat-interval (default 0: off).
set -euo pipefail
bin=$1 atk=$2
shift 2
rows=${*:-1 1r 9 10}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fairshare-g1.XXXXXX")
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
  case $row in
  1)
    "$bin" handshake-listener --bind tcp://127.0.0.1:0 --engine-id e --log-format json 2>"$tmp/l1.log" >/dev/null &
    pid=$!
    ep=$(field "$tmp/l1.log" "handshake listener serving" endpoint)
    "$atk" conns -addr "${ep#tcp://}" -n "${G1_CONNS:-4096}" -honest 12
    stop
    ;;
  1r)
    # kv-publish's replay ROUTER (cap 256 replay clients).
    "$bin" kv-publish --bind tcp://127.0.0.1:0 --replay-bind tcp://127.0.0.1:0 --rate 100 --log-format json \
      2>"$tmp/l1r.log" >/dev/null &
    pid=$!
    ep=$(field "$tmp/l1r.log" "kv-publish" replay)
    "$atk" conns -addr "${ep#tcp://}" -n 256 -honest 12
    stop
    ;;
  9)
    "$bin" handshake-listener --bind tcp://127.0.0.1:0 --engine-id e --log-format json --metrics-addr 127.0.0.1:0 \
      2>"$tmp/l9.log" >/dev/null &
    pid=$!
    ep=$(field "$tmp/l9.log" "handshake listener serving" endpoint)
    ma=$(field "$tmp/l9.log" "handshake listener serving" metrics_addr)
    "$atk" http -http "$ma" -zmq "${ep#tcp://}" -pid "$pid" -big 300 -idle "${G1_IDLE:-19000}" -honest 20
    stop
    ;;
  10)
    mkdir -p "$tmp/srv" "$tmp/cli"
    "$bin" keygen --out "$tmp/srv" --name s >/dev/null
    "$bin" keygen --out "$tmp/cli" --name c >/dev/null
    mkdir -p "$tmp/allow" && cp "$tmp/cli/c.key" "$tmp/allow/"
    "$bin" handshake-listener --bind tcp://127.0.0.1:0 --engine-id e --log-format json --heartbeat-interval "${G1_HB:-0}" \
      --curve-secret-key-file "$tmp/srv/s.key_secret" --curve-allow "$tmp/allow" 2>"$tmp/l10.log" >/dev/null &
    pid=$!
    ep=$(field "$tmp/l10.log" "handshake listener serving" endpoint)
    "$atk" curve -addr "${ep#tcp://}" -server "$tmp/srv/s.key" -client "$tmp/cli/c.key_secret" -hold 45s
    stop
    ;;
  esac
done
