#!/usr/bin/env bash
# bench/run.sh — zmqguard's side-by-side benchmark harness (BENCHMARKS.md).
#
#   bench/run.sh [quick] [COMPARISON...]
#
# Builds zmqguard and the programs under bench/, then runs each comparison's
# variants interleaved (A B C, then C B A, ...) for ROUNDS rounds, every
# receiver in its own process fed by its own sender process over loopback
# TCP, and prints one markdown table per comparison: median [min..max] per
# variant and per-round ratios with the issue's targets.
#
# Comparisons (default: all):
#   stats100   100-byte frames (vLLM stats vector): zmqguard SafeLoop+guard+decode,
#              zmqguard without decode, pyzmq PULL recv(), pebbe/zmq4 (libzmq via cgo)
#              RecvBytes, zmq4 Socket.Recv, raw TCP
#   outputs    157-frame EngineCoreOutputs (256 request outputs, logprobs in aux
#              frames): zmqguard's outputs receiver (full decode) vs pyzmq and
#              pebbe/zmq4 reading whole messages without decoding
#   kvevents   live KV-event batches (20 events, 6.7 KB) from a PUB: zmqguard's
#              kvevents.Subscriber (guard, sequence tracking, full decode) with one
#              source and with KV_FLEET (1,000) sources, vs a pyzmq SUB
#              recv_multipart() loop, with and without msgpack.unpackb
#   curve      the stats vector over CURVE: zmqguard sink (decode) vs pyzmq recv()
#   frame4k    4 KiB frames: zmqguard (no decode), raw TCP, pyzmq
#   push100    PUSH 100-byte messages to a pyzmq PULL: zmqguard vs zmq4
#   handshake  NIXL handshake listener, 16 REQ clients: zmqguard vs pyzmq ROUTER
#   junk       50/50 junk and valid stats frames vs a clean run: throughput, RSS, log lines
#   memory     RSS of an idle coordinator and of listeners with idle peers
#   kvindex    the in-memory KV-cache index (bench/kvindexbench) at fleet scale: ingest
#              events/s while Score runs, Score p50 of an 8k-token prompt, bytes per entry
#   micro      go test -bench figures, one test binary run per round: SafeLoop ÷
#              a hand-written loop (loop BenchmarkRatioSocket, BenchmarkRatioFake)
#              and enginecore BenchmarkDecode256's CPU per 157-frame message
#
#   bench/run.sh [quick] summary [COMPARISON...]
#
# summary: the comparisons behind BENCHMARKS.md's summary table (default
# stats100 frame4k handshake outputs kvevents micro), their tables, then the
# summary table itself (tabulate -summary: every row declared with #summary
# below, the load average at the start and end and when each comparison's
# rounds began). One command regenerates every figure of that table.
#
# quick: 1 round and small counts (for tests and CI; the numbers mean little).
# Environment: ROUNDS (default 5, quick 1), PYTHON (default /usr/bin/python3),
# BENCH_BIN (build directory, default a temporary one), BENCH_KEEP=1 keeps the
# work directory (raw outputs) and prints its path, KV_FLEET the sources of the
# kvevents fleet row (default 1000).
#
# Ports: no port is ever picked here. Every receiver binds port 0 (pyzmq:
# port *), the kernel chooses a free one, the receiver writes
# "endpoint=tcp://127.0.0.1:PORT" on stderr, and the sender is started on
# that endpoint; so the harness shares a machine with anything else.
set -euo pipefail

MODE=full
if [ "${1:-}" = quick ]; then MODE=quick; shift; fi
SUMMARY=0
if [ "${1:-}" = summary ]; then
	SUMMARY=1
	shift
	ONLY=" ${*:-stats100 frame4k handshake outputs kvevents micro} "
else
	ONLY=" ${*:-stats100 outputs kvevents curve frame4k push100 handshake junk memory kvindex micro} "
fi
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-/usr/bin/python3}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/zmqguard-bench.XXXXXX")
BIN=${BENCH_BIN:-$WORK/bin}
RESULTS=$WORK/results.tsv
# Receivers bind these; the kernel chooses the port (see bound_ep).
EP0=tcp://127.0.0.1:0
PYEP0='tcp://127.0.0.1:*'
KV_FLEET=${KV_FLEET:-1000}
PIDS=()
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)

cleanup() {
	local p
	for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
	if [ "${BENCH_KEEP:-0}" = 1 ]; then echo "work directory kept: $WORK" >&2; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

if [ $MODE = quick ]; then
	ROUNDS=${ROUNDS:-1}
	N_STATS=200000 N_ZMQ4=20000 N_4K=50000 N_PUSH=200000 N_PUSH_ZMQ4=20000
	N_JUNK=400000 HS_DURATION=500ms IDLE_CONNS=100 MEM_ROUNDS=1 N_OUT=2000 N_CURVE=50000 N_KV=5000
	KVI_ROUNDS=1 KVI_BLOCKS=200000 KVI_EVENTS=200000 KVI_SCORES=2000
	MICRO_LOOP=20x MICRO_DECODE=200x
else
	ROUNDS=${ROUNDS:-5}
	N_STATS=4000000 N_ZMQ4=200000 N_4K=500000 N_PUSH=2000000 N_PUSH_ZMQ4=100000
	N_JUNK=6000000 HS_DURATION=3s IDLE_CONNS=1000 MEM_ROUNDS=3 N_OUT=20000 N_CURVE=1000000 N_KV=200000
	KVI_ROUNDS=3 KVI_BLOCKS=10000000 KVI_EVENTS=4000000 KVI_SCORES=20000
	MICRO_LOOP=300x MICRO_DECODE=20000x
fi

log() { printf '%s %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
want() { [[ "$ONLY" == *" $1 "* ]]; }
rec() { (IFS=$'\t'; echo "$*") >>"$RESULTS"; }
# round_load CMP ROUND: the 1-minute load average as a comparison's round starts.
round_load() { rec load "$1" "$2" "$(cut -d' ' -f1 /proc/loadavg)"; }
# jf FIELD FILE: a numeric field of the JSON line in FILE, or NaN.
jf() {
	local v
	v=$(sed -n "s/.*\"$1\": *\([-0-9.eE+]*\).*/\1/p" "$2" 2>/dev/null | head -n1)
	echo "${v:-NaN}"
}
# order ROUND A B C...: the variants, reversed in even rounds.
order() {
	local r=$1; shift
	if (( r % 2 == 0 )); then
		local out=() i
		for (( i = $#; i >= 1; i-- )); do out+=("${!i}"); done
		echo "${out[@]}"
	else
		echo "$@"
	fi
}
# finish PID SECONDS: wait for PID, killing it after SECONDS.
finish() {
	local pid=$1 t=$2 i
	for (( i = 0; i < t * 10; i++ )); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	kill -9 "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
}
# wait_for FILE PATTERN SECONDS: wait until FILE contains PATTERN.
wait_for() {
	local i
	for (( i = 0; i < $3 * 20; i++ )); do
		grep -q -- "$2" "$1" 2>/dev/null && return 0
		sleep 0.05
	done
	return 1
}
# bound_ep FILE [KEY]: the endpoint a process bound, from the
# "KEY=tcp://HOST:PORT" it writes on stderr (FILE) once bound (KEY:
# endpoint by default; zmqguard's text log, load.Bound, bench/py/*); waits
# 30 s at most, and returns 1 (printing nothing) if the line never comes.
bound_ep() {
	local key=${2:-endpoint} i ep
	for (( i = 0; i < 600; i++ )); do
		ep=$(sed -n "s|.*[[:space:]]$key=\(tcp://[^[:space:]\"]*\).*|\1|p" "$1" 2>/dev/null | head -n1)
		if [ -n "$ep" ]; then echo "$ep"; return 0; fi
		sleep 0.05
	done
	return 1
}
# rss_settled PID: the RSS of PID (KiB) once it has stopped moving: three
# samples 200 ms apart within 1% of each other, 10 s at most.
rss_settled() {
	local pid=$1 i a b c
	a=$(rss_kib "$pid"); sleep 0.2; b=$(rss_kib "$pid"); c=$b
	for (( i = 0; i < 50; i++ )); do
		sleep 0.2
		c=$(rss_kib "$pid")
		awk -v a="$a" -v b="$b" -v c="$c" 'function d(x, y) { return x > y ? x - y : y - x }
			BEGIN { exit !(c > 0 && d(a, c) <= c / 100 && d(b, c) <= c / 100) }' && break
		a=$b b=$c
	done
	echo "$c"
}
# cpu_ns OUT N: CPU ns per message of a receiver: from OUT.time (GNU time's
# "user system" seconds for the whole process, start-up included) when
# present, else the cpu_ns_per_msg of its JSON line (first to last message).
cpu_ns() {
	if [ -s "$1.time" ]; then
		tail -n1 "$1.time" | awk -v n="$2" '{if (NF == 2 && n > 0) printf "%.0f", ($1 + $2) * 1e9 / n; else print "NaN"}'
	else
		jf cpu_ns_per_msg "$1.rx"
	fi
}
rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status" 2>/dev/null || echo NaN; }
have_python() { "$PY" -c 'import zmq, msgpack' 2>/dev/null; }

rec '#cmp' load '1-min load' "Load average (1 minute) as each comparison's rounds started (the machine's other work; every variant of a round shares it)"

# ---------------------------------------------------------------- build
log "building into $BIN"
mkdir -p "$BIN"
(cd "$ROOT" && go build -o "$BIN/" ./cmd/zmqguard ./bench/sender ./bench/rawtcp ./bench/zmq4recv ./bench/outputsrx ./bench/kvrx \
	./bench/pushsend ./bench/handshake-load ./bench/idle ./bench/kvindexbench ./bench/tabulate)
# pebbe/zmq4 (libzmq through cgo) is its own module, so that the main one
# stays pure Go; it needs libzmq's headers (Debian: libzmq3-dev).
PEBBEOK=0
if ! want stats100 && ! want outputs; then
	: # no comparison selected has a pebbe variant: no cgo build
elif [ ! -f /usr/include/zmq.h ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
	log "libzmq3-dev missing: installing it for the pebbe/zmq4 comparison"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libzmq3-dev >/dev/null 2>&1 || true
fi
if ! want stats100 && ! want outputs; then
	:
elif command -v gcc >/dev/null && [ -f /usr/include/zmq.h ] &&
	(cd "$ROOT/bench/pebbe" && CGO_ENABLED=1 go build -o "$BIN/pebberecv" .) 2>"$WORK/pebbe.err"; then
	PEBBEOK=1
else
	log "SKIP: pebbe/zmq4 (libzmq via cgo) comparison NOT RUN: cannot build bench/pebbe ($(head -c 300 "$WORK/pebbe.err" 2>/dev/null | tr '\n' ' '); needs gcc and libzmq3-dev)"
fi
PYOK=1
if ! have_python; then
	PYOK=0
	log "WARNING: $PY cannot import zmq and msgpack: pyzmq variants skipped (apt-get install python3-zmq python3-msgpack)"
fi

# ---------------------------------------------------------------- receivers
# rx KIND N: run a receiver in the foreground, bound on a port the kernel
# chooses (it writes the endpoint on stderr; see bound_ep).
rx() {
	local ep=$EP0 n=$2
	case $1 in py*) ep=$PYEP0 ;; esac
	set -- "$1" "$ep" "$n"
	case $1 in
	sink-stats) exec /usr/bin/time -f '%U %S' -o "$TIMEFILE" "$BIN/zmqguard" sink --bind "$ep" --decode stats --count "$3" --log-format text ;;
	sink-none) exec /usr/bin/time -f '%U %S' -o "$TIMEFILE" "$BIN/zmqguard" sink --bind "$ep" --decode none --count "$3" --log-format text ;;
	pyzmq) exec "$PY" "$ROOT/bench/py/pull.py" "$ep" "$3" ;;
	zmq4) exec "$BIN/zmq4recv" --bind "$ep" --count "$3" ;;
	pebbe) exec "$BIN/pebberecv" --bind "$ep" --count "$3" ;;
	pebbe-mp) exec "$BIN/pebberecv" --bind "$ep" --count "$3" --multipart ;;
	pyzmq-mp) exec "$PY" "$ROOT/bench/py/pull.py" "$ep" "$3" multipart ;;
	outputsrx) exec "$BIN/outputsrx" --bind "$ep" --count "$3" ;;
	kvrx) exec "$BIN/kvrx" --bind "$ep" --count "$3" ;;
	pyzmq-sub) exec "$PY" "$ROOT/bench/py/sub.py" "$ep" "$3" ;;
	pyzmq-sub-decode) exec "$PY" "$ROOT/bench/py/sub.py" "$ep" "$3" decode ;;
	sink-curve) exec /usr/bin/time -f '%U %S' -o "$TIMEFILE" "$BIN/zmqguard" sink --bind "$ep" --decode stats --count "$3" --log-format text \
		--curve-secret-key-file "$WORK/curve/server.key_secret" --curve-allow "$WORK/curve/clients" ;;
	pyzmq-curve) PULL_CURVE_SECRET=$WORK/curve/server.key_secret exec "$PY" "$ROOT/bench/py/pull.py" "$ep" "$3" ;;
	rawtcp) exec "$BIN/rawtcp" --bind "$ep" --count "$3" ;;
	*) echo "unknown receiver $1" >&2; return 2 ;;
	esac
}

# pair OUT KIND N SENDER-ARGS...: one receiver process and one sender
# process (started on the endpoint the receiver reports); the receiver's
# JSON line ends up in OUT.rx (and, for the sink, its CPU time in OUT.time).
pair() {
	local out=$1 kind=$2 n=$3 ep; shift 3
	TIMEFILE=$out.time rx "$kind" "$n" >"$out.rx" 2>"$out.rx.err" &
	local rp=$!
	PIDS+=("$rp")
	if ep=$(bound_ep "$out.rx.err"); then
		timeout 300 "$BIN/sender" --connect "$ep" --count "$n" "$@" >"$out.tx" 2>"$out.tx.err" || true
		finish "$rp" 30
	else
		log "  $kind reported no bound endpoint"
		finish "$rp" 0
	fi
	if [ ! -s "$out.rx" ]; then log "  $kind failed: $(tail -n 3 "$out.rx.err" "$out.tx.err" 2>/dev/null | tr '\n' ' ')"; fi
}

# ---------------------------------------------------------------- stats100
if want stats100; then
	rec '#cmp' stats100 'msgs/s' "Receive loop, 100-byte frames (the 101-byte vLLM stats vector), one sender process, loopback TCP"
	rec '#target' stats100 zmqguard '>=' 2000000
	rec '#ratio' stats100 zmqguard pyzmq '>=' 2.0
	rec '#ratio' stats100 zmqguard pebbe '>=' 2.0
	rec '#ratio' stats100 zmqguard zmq4
	rec '#ratio' stats100 zmqguard rawtcp
	rec '#ratio' stats100 zmqguard-nodecode pyzmq
	rec '#note' stats100 "zmqguard = \`zmqguard sink --decode stats\`: hardened PULL (stream guard on) under a SafeLoop decoding every frame as EngineCoreOutputs (one validating pass, enginecore.DecodeHeader, into a reused value); zmqguard-nodecode = \`--decode none\`; pyzmq = bench/py/pull.py, sock.recv() only; pebbe = bench/pebbe, libzmq through cgo (pebbe/zmq4 PULL RecvBytes only); zmq4 = go-zeromq/zmq4 PULL Socket.Recv ($N_ZMQ4 messages); rawtcp = bench/rawtcp, the unguarded ceiling. Others: $N_STATS messages."
	rec '#cmp' stats100-cpu 'CPU ns/msg' "Same runs: CPU time per message of the receiving process, every thread (lower is better; ratios > 1 favour zmqguard)"
	rec '#ratio' stats100-cpu pyzmq zmqguard '>=' 2.0
	rec '#ratio' stats100-cpu pebbe zmqguard '>=' 2.0
	rec '#ratio' stats100-cpu zmq4 zmqguard
	rec '#ratio' stats100-cpu rawtcp zmqguard
	rec '#note' stats100-cpu "zmqguard: GNU time over the whole sink process (start-up included); pyzmq: time.process_time() from the first to the last message; pebbe, zmq4 and rawtcp: getrusage over the same span (libzmq's I/O thread included for pebbe). CPU time is what a loaded machine shares out, so these ratios move far less than the msgs/s ones."
	rec '#cmp' stats100-allocs 'allocs/msg' "Same runs: heap allocations per message in the receiving process (runtime.MemStats, first to last message)"
	rec '#target' stats100-allocs zmqguard '<=' 2
	variants="zmqguard zmqguard-nodecode pyzmq pebbe zmq4 rawtcp"
	for (( r = 1; r <= ROUNDS; r++ )); do
		round_load stats100 $r
		for v in $(order $r $variants); do
			[ $v = pyzmq ] && [ $PYOK = 0 ] && continue
			[ $v = pebbe ] && [ $PEBBEOK = 0 ] && continue
			out=$WORK/stats100.$v.$r
			case $v in
			zmqguard) pair "$out" sink-stats $N_STATS --stats ;;
			zmqguard-nodecode) pair "$out" sink-none $N_STATS --stats ;;
			pyzmq) pair "$out" pyzmq $N_STATS --stats ;;
			pebbe) pair "$out" pebbe $N_STATS --stats ;;
			zmq4) pair "$out" zmq4 $N_ZMQ4 --stats ;;
			rawtcp) pair "$out" rawtcp $N_STATS --stats ;;
			esac
			n=$N_STATS; [ $v = zmq4 ] && n=$N_ZMQ4
			rec stats100 $v $r "$(jf msgs_per_sec "$out.rx")"
			rec stats100-cpu $v $r "$(cpu_ns "$out" $n)"
			[ $v = pyzmq ] || rec stats100-allocs $v $r "$(jf allocs_per_msg "$out.rx")"
			log "stats100 round $r $v: $(jf msgs_per_sec "$out.rx") msgs/s"
		done
	done
fi

# ---------------------------------------------------------------- outputs
if want outputs; then
	rec '#cmp' outputs 'msgs/s' "Engine output receiver, 157-frame EngineCoreOutputs messages (256 request outputs, 52 with logprobs, every array in an aux frame; 9.1 KB), $N_OUT messages"
	rec '#ratio' outputs zmqguard pyzmq
	rec '#ratio' outputs zmqguard pebbe
	rec '#note' outputs "zmqguard = bench/outputsrx: outputs.Receiver (guarded PULL + SafeLoop + enginecore.Decode of every output and array, handler counting); pyzmq = bench/py/pull.py with recv_multipart(), no decode; pebbe = bench/pebbe with RecvMessageBytes, no decode."
	rec '#cmp' outputs-cpu 'CPU ns/msg' "Same runs: CPU time per 157-frame message of the receiving process (lower is better)"
	rec '#ratio' outputs-cpu pyzmq zmqguard
	rec '#ratio' outputs-cpu pebbe zmqguard
	rec '#cmp' outputs-allocs 'allocs/msg' "Same runs: heap allocations per 157-frame message in the receiving process"
	variants="zmqguard pyzmq pebbe"
	for (( r = 1; r <= ROUNDS; r++ )); do
		round_load outputs $r
		for v in $(order $r $variants); do
			[ $v = pyzmq ] && [ $PYOK = 0 ] && continue
			[ $v = pebbe ] && [ $PEBBEOK = 0 ] && continue
			out=$WORK/outputs.$v.$r
			case $v in
			zmqguard) pair "$out" outputsrx $N_OUT --outputs ;;
			pyzmq) pair "$out" pyzmq-mp $N_OUT --outputs ;;
			pebbe) pair "$out" pebbe-mp $N_OUT --outputs ;;
			esac
			rec outputs $v $r "$(jf msgs_per_sec "$out.rx")"
			rec outputs-cpu $v $r "$(jf cpu_ns_per_msg "$out.rx")"
			[ $v = pyzmq ] || rec outputs-allocs $v $r "$(jf allocs_per_msg "$out.rx")"
			log "outputs round $r $v: $(jf msgs_per_sec "$out.rx") msgs/s"
		done
	done
fi

# ---------------------------------------------------------------- kvevents
# pair_fleet OUT N: bench/kvrx following KV_FLEET sources (each bound on a
# port the kernel picks, listed in a file) and one bench/sender connected to
# all of them as their publishers, N batches in all.
pair_fleet() {
	local out=$1 n=$2
	rm -f "$out.eps"
	"$BIN/kvrx" --sources "$KV_FLEET" --endpoints "$out.eps" --count "$n" >"$out.rx" 2>"$out.rx.err" &
	local rp=$!
	PIDS+=("$rp")
	timeout 300 "$BIN/sender" --kvevents --connect-file "$out.eps" --count "$n" --wait 60s >"$out.tx" 2>"$out.tx.err" || true
	finish "$rp" 60
	if [ ! -s "$out.rx" ]; then log "  kvrx fleet failed: $(tail -n 3 "$out.rx.err" "$out.tx.err" 2>/dev/null | tr '\n' ' ')"; fi
}
# per_event VALUE: VALUE (per batch) divided among the batch's events; times
# for rates (events/s).
per_event() { awk -v v="$1" -v n="$KV_EVENTS" 'BEGIN {if (v == "NaN" || v == "") print "NaN"; else printf "%.1f", v / n}'; }
times_events() { awk -v v="$1" -v n="$KV_EVENTS" 'BEGIN {if (v == "NaN" || v == "") print "NaN"; else printf "%.0f", v * n}'; }
if want kvevents; then
	KV_EVENTS=20
	rec '#cmp' kvevents 'msgs/s' "KV-event subscriber, live batches [topic, seq, payload] (20 map-form events: 16 BlockStored of 4 blocks and 64 tokens, 4 BlockRemoved; 6.7 KB), $N_KV batches"
	rec '#ratio' kvevents zmqguard pyzmq
	rec '#ratio' kvevents zmqguard pyzmq-decode
	rec '#ratio' kvevents zmqguard-fleet zmqguard
	rec '#note' kvevents "zmqguard = bench/kvrx: kvevents.Subscriber, one source with its SUB bound (guarded SUB + SafeLoop + envelope + sequence tracking + one-pass validating decode of every event), handler counting; zmqguard-fleet = the same Subscriber following $KV_FLEET sources (each its own bound SUB; bench/sender --connect-file connects to all of them and writes 4 batches to each in turn, every connection with its own sequence), the same $N_KV batches in all; pyzmq = bench/py/sub.py, SUB bound, recv_multipart() only (no decode, no sequence check); pyzmq-decode = the same plus msgpack.unpackb of each payload (no validation); publisher = bench/sender --kvevents (guarded ZMTP as PUB, pre-encoded messages renumbered per write)."
	rec '#cmp' kvevents-cpu 'CPU ns/msg' "Same runs: CPU time per batch of the receiving process, every thread, first to last batch (lower is better; ratios > 1 favour zmqguard: the reference's CPU per batch ÷ zmqguard's, i.e. batches per CPU-second)"
	rec '#ratio' kvevents-cpu pyzmq zmqguard '>=' 1.0
	rec '#ratio' kvevents-cpu pyzmq-decode zmqguard '>=' 5.0
	rec '#ratio' kvevents-cpu zmqguard zmqguard-fleet
	rec '#cmp' kvevents-event 'CPU ns/event' "Same runs: CPU time per event (per batch ÷ $KV_EVENTS): socket, envelope, sequence tracking, decode and handler call"
	rec '#target' kvevents-event zmqguard '<=' 250
	rec '#target' kvevents-event zmqguard-fleet '<=' 250
	rec '#cmp' kvevents-events 'events/s' "Same runs: events per second (batches/s × $KV_EVENTS)"
	rec '#target' kvevents-events zmqguard '>=' 3000000
	rec '#cmp' kvevents-allocs 'allocs/msg' "Same runs: heap allocations per batch in the receiving process"
	variants="zmqguard zmqguard-fleet pyzmq pyzmq-decode"
	for (( r = 1; r <= ROUNDS; r++ )); do
		round_load kvevents $r
		for v in $(order $r $variants); do
			case $v in pyzmq*) [ $PYOK = 0 ] && continue ;; esac
			out=$WORK/kvevents.$v.$r
			case $v in
			zmqguard) pair "$out" kvrx $N_KV --kvevents ;;
			zmqguard-fleet) pair_fleet "$out" $N_KV ;;
			pyzmq) pair "$out" pyzmq-sub $N_KV --kvevents ;;
			pyzmq-decode) pair "$out" pyzmq-sub-decode $N_KV --kvevents ;;
			esac
			rate=$(jf msgs_per_sec "$out.rx") cpu=$(jf cpu_ns_per_msg "$out.rx")
			rec kvevents $v $r "$rate"
			rec kvevents-cpu $v $r "$cpu"
			rec kvevents-event $v $r "$(per_event "$cpu")"
			rec kvevents-events $v $r "$(times_events "$rate")"
			case $v in zmqguard*) rec kvevents-allocs $v $r "$(jf allocs_per_msg "$out.rx")" ;; esac
			log "kvevents round $r $v: $rate msgs/s, $cpu CPU ns/msg"
		done
	done
fi

# ---------------------------------------------------------------- curve
if want curve; then
	mkdir -p "$WORK/curve/clients"
	"$BIN/zmqguard" keygen --out "$WORK/curve" --name server >/dev/null
	"$BIN/zmqguard" keygen --out "$WORK/curve/clients" --name client >/dev/null
	rec '#cmp' curve 'msgs/s' "Receive loop over CURVE, 100-byte frames (the stats vector), $N_CURVE messages"
	rec '#ratio' curve zmqguard pyzmq
	rec '#note' curve "zmqguard = \`zmqguard sink --decode stats\` with --curve-secret-key-file and --curve-allow (CURVE server, one allowed client key; every message decrypted, then guarded and decoded); pyzmq = bench/py/pull.py as a CURVE server (curve_server, no ZAP handler), recv() only; sender = bench/sender --curve (zmtpguard CURVE client, one WriteMessage per message, Flush every 64), which may be the limit here."
	rec '#cmp' curve-cpu 'CPU ns/msg' "Same runs: CPU time per CURVE message of the receiving process (lower is better)"
	rec '#ratio' curve-cpu pyzmq zmqguard
	variants="zmqguard pyzmq"
	for (( r = 1; r <= ROUNDS; r++ )); do
		round_load curve $r
		for v in $(order $r $variants); do
			[ $v = pyzmq ] && [ $PYOK = 0 ] && continue
			out=$WORK/curve.$v.$r
			case $v in
			zmqguard) pair "$out" sink-curve $N_CURVE --stats --curve "$WORK/curve" ;;
			pyzmq) pair "$out" pyzmq-curve $N_CURVE --stats --curve "$WORK/curve" ;;
			esac
			rec curve $v $r "$(jf msgs_per_sec "$out.rx")"
			rec curve-cpu $v $r "$(cpu_ns "$out" $N_CURVE)"
			log "curve round $r $v: $(jf msgs_per_sec "$out.rx") msgs/s"
		done
	done
fi

# ---------------------------------------------------------------- frame4k
if want frame4k; then
	rec '#cmp' frame4k 'msgs/s' "Receive loop, 4 KiB frames, $N_4K messages"
	rec '#ratio' frame4k zmqguard rawtcp '>=' 0.9
	rec '#ratio' frame4k zmqguard pyzmq
	rec '#note' frame4k "zmqguard = \`zmqguard sink --decode none\` (guarded PULL + SafeLoop, no decode: a 4 KiB frame is not a stats message); rawtcp copies each body into a reused buffer like every receiver does."
	rec '#cmp' frame4k-cpu 'CPU ns/msg' "Same runs: CPU time per 4 KiB message of the receiving process (lower is better)"
	rec '#ratio' frame4k-cpu rawtcp zmqguard '>=' 0.8
	rec '#ratio' frame4k-cpu pyzmq zmqguard
	variants="zmqguard rawtcp pyzmq"
	for (( r = 1; r <= ROUNDS; r++ )); do
		round_load frame4k $r
		for v in $(order $r $variants); do
			[ $v = pyzmq ] && [ $PYOK = 0 ] && continue
			out=$WORK/frame4k.$v.$r
			case $v in
			zmqguard) pair "$out" sink-none $N_4K --size 4096 ;;
			rawtcp) pair "$out" rawtcp $N_4K --size 4096 ;;
			pyzmq) pair "$out" pyzmq $N_4K --size 4096 ;;
			esac
			rec frame4k $v $r "$(jf msgs_per_sec "$out.rx")"
			rec frame4k-cpu $v $r "$(cpu_ns "$out" $N_4K)"
			log "frame4k round $r $v: $(jf msgs_per_sec "$out.rx") msgs/s"
		done
	done
fi

# ---------------------------------------------------------------- push100
if want push100 && [ $PYOK = 1 ]; then
	rec '#cmp' push100 'msgs/s' "PUSH sending 100-byte messages to a pyzmq PULL (rate measured by the receiver)"
	rec '#target' push100 zmqguard '>=' 1000000
	rec '#ratio' push100 zmqguard zmq4
	rec '#note' push100 "zmqguard = bench/pushsend on socket.NewPush ($N_PUSH messages); zmq4 = the same program on go-zeromq/zmq4's PUSH ($N_PUSH_ZMQ4 messages); receiver bench/py/pull_sink.py."
	for (( r = 1; r <= ROUNDS; r++ )); do
		round_load push100 $r
		for v in $(order $r zmqguard zmq4); do
			out=$WORK/push100.$v.$r
			n=$N_PUSH; [ $v = zmq4 ] && n=$N_PUSH_ZMQ4
			"$PY" "$ROOT/bench/py/pull_sink.py" "$PYEP0" $n 100 >"$out.rx" 2>"$out.rx.err" &
			rp=$!
			PIDS+=("$rp")
			if ep=$(bound_ep "$out.rx.err"); then
				timeout 300 "$BIN/pushsend" --connect "$ep" --count $n --impl $v >"$out.tx" 2>"$out.tx.err" || true
			else
				log "  pull_sink.py reported no bound endpoint: $(tail -n 3 "$out.rx.err")"
			fi
			finish "$rp" 30
			rec push100 $v $r "$(jf msgs_per_sec "$out.rx")"
			log "push100 round $r $v: $(jf msgs_per_sec "$out.rx") msgs/s"
		done
	done
fi

# ---------------------------------------------------------------- handshake
if want handshake && [ $PYOK = 1 ]; then
	rec '#cmp' handshake 'req/s' "NIXL handshake listener (V3 request: decode + lookup + reply), 16 concurrent REQ clients, $HS_DURATION window"
	rec '#ratio' handshake zmqguard pyzmq '>=' 3
	rec '#cmp' handshake-cpu 'CPU µs/req' "Same runs: listener CPU time per request served (whole process, start-up included; lower is better)"
	rec '#ratio' handshake-cpu pyzmq zmqguard '>=' 3.0
	rec '#note' handshake "zmqguard = \`zmqguard handshake-listener\` (hardened ROUTER + SafeLoop + guarded decode); pyzmq = bench/py/router_listener.py (recv_multipart, msgpack.unpackb, dict lookup, send_multipart with msgpack.packb(time.perf_counter()), as vLLM's V3 listener); load = bench/handshake-load, 16 REQ connections (guarded ZMTP, framed by hand, one goroutine each) in one process."
	for (( r = 1; r <= ROUNDS; r++ )); do
		round_load handshake $r
		for v in $(order $r zmqguard pyzmq); do
			out=$WORK/handshake.$v.$r
			if [ $v = zmqguard ]; then
				/usr/bin/time -f '%U %S' -o "$out.time" "$BIN/zmqguard" handshake-listener --bind "$EP0" --engine-id bench --log-format text >"$out.srv" 2>"$out.srv.err" &
			else
				/usr/bin/time -f '%U %S' -o "$out.time" "$PY" "$ROOT/bench/py/router_listener.py" "$PYEP0" bench >"$out.srv" 2>"$out.srv.err" &
			fi
			sp=$!
			PIDS+=("$sp")
			if ep=$(bound_ep "$out.srv.err"); then
				timeout 120 "$BIN/handshake-load" --connect "$ep" --clients 16 --duration $HS_DURATION >"$out.rx" 2>"$out.rx.err" || true
			else
				log "  $v listener reported no bound endpoint: $(tail -n 3 "$out.srv.err")"
			fi
			pkill -TERM -P "$sp" 2>/dev/null || true # the listener, not GNU time
			finish "$sp" 10
			rec handshake $v $r "$(jf req_per_sec "$out.rx")"
			if [ $v = zmqguard ]; then served=$(jf V3 "$out.srv"); else served=$(jf served "$out.srv"); fi
			rec handshake-cpu $v $r "$(tail -n1 "$out.time" 2>/dev/null | awk -v n="$served" '{if (NF == 2 && n > 0) printf "%.1f", ($1 + $2) * 1e6 / n; else print "NaN"}')"
			log "handshake round $r $v: $(jf req_per_sec "$out.rx") req/s (p50 $(jf p50_us "$out.rx") us)"
		done
	done
fi

# ---------------------------------------------------------------- junk
# log_lines ERRFILE: every drop log line; log_max_per_reason ERRFILE: the
# number of summary lines ("dropped messages", not the first-drop warning)
# of the reason with the most.
log_lines() { grep -c 'msg="zmqguard: dropped' "$1" 2>/dev/null || true; }
log_max_per_reason() {
	{ grep 'msg="zmqguard: dropped messages"' "$1" 2>/dev/null || true; } | sed -n 's/.* reason=\([a-z-]*\).*/\1/p' |
		sort | uniq -c | sort -rn | awk 'NR==1 {print $1} END {if (NR==0) print 0}'
}
if want junk; then
	rec '#cmp' junk 'frames/s' "50/50 junk and valid stats frames at full rate vs a clean run: frames handled per second (valid + dropped)"
	rec '#ratio' junk junk50 clean '>=' 0.9
	rec '#cmp' junk-valid 'valid msgs/s' "Same runs: valid messages per second"
	rec '#ratio' junk-valid junk50 clean
	rec '#cmp' junk-rss 'MiB' "Same runs: peak RSS of the receiving process"
	rec '#target' junk-rss junk50 '<=' 64
	rec '#cmp' junk-log 'lines/s' "Same runs: drop log lines per second of run for the busiest reason (the rate-limited summaries written while running; the one-time first-drop warning and the final summary at exit excluded)"
	rec '#target' junk-log junk50 '<=' 1
	rec '#note' junk "Receiver: \`zmqguard sink --decode stats\` until $N_JUNK valid messages; junk50: every valid frame is followed by a junk frame, alternately \`45\` (a msgpack int, vLLM's crash seed) and \`a3e08080\` (a str with invalid UTF-8), each dropped and counted as reason decode. frames/s = valid msgs/s × 2 in the junk run."
	for (( r = 1; r <= ROUNDS; r++ )); do
		round_load junk $r
		for v in $(order $r clean junk50); do
			out=$WORK/junk.$v.$r
			/usr/bin/time -f '%M' -o "$out.rss" "$BIN/zmqguard" sink --bind "$EP0" --decode stats --count $N_JUNK --log-format text >"$out.rx" 2>"$out.rx.err" &
			rp=$!
			PIDS+=("$rp")
			args=(--stats); [ $v = junk50 ] && args+=(--junk)
			if ep=$(bound_ep "$out.rx.err"); then
				timeout 300 "$BIN/sender" --connect "$ep" --count $N_JUNK "${args[@]}" >"$out.tx" 2>"$out.tx.err" || true
			else
				log "  sink reported no bound endpoint: $(tail -n 3 "$out.rx.err")"
			fi
			finish "$rp" 30
			valid=$(jf msgs_per_sec "$out.rx")
			secs=$(jf seconds "$out.rx")
			mult=1; [ $v = junk50 ] && mult=2
			rec junk $v $r "$(awk -v a="$valid" -v m=$mult 'BEGIN {print a * m}')"
			rec junk-valid $v $r "$valid"
			rss=$(tail -n1 "$out.rss" 2>/dev/null || echo NaN)
			rec junk-rss $v $r "$(awk -v k="$rss" 'BEGIN {printf "%.1f", k / 1024}')"
			lines=$(log_max_per_reason "$out.rx.err")
			rec junk-log $v $r "$(awk -v l="$lines" -v s="$secs" 'BEGIN {if (l > 0) l--; if (s > 0) printf "%.2f", l / s; else print "NaN"}')"
			log "junk round $r $v: $valid valid msgs/s, rss $rss KiB, $(log_lines "$out.rx.err") drop log lines in ${secs}s, dropped $(jf dropped "$out.rx")"
		done
	done
fi

# ---------------------------------------------------------------- memory
# mem_run OUT KIND TYPE: start a target, measure its RSS once it has
# settled, connect IDLE_CONNS idle peers of TYPE, measure again once settled.
mem_run() {
	local out=$1 kind=$2 typ=$3 ep
	case $kind in
	sink) "$BIN/zmqguard" sink --bind "$EP0" --count 0 --log-format text >"$out.srv" 2>"$out.srv.err" & ;;
	listener) "$BIN/zmqguard" handshake-listener --bind "$EP0" --engine-id bench --log-format text >"$out.srv" 2>"$out.srv.err" & ;;
	pyrouter) "$PY" "$ROOT/bench/py/router_listener.py" "$PYEP0" bench >"$out.srv" 2>"$out.srv.err" & ;;
	esac
	local sp=$!
	PIDS+=("$sp")
	local before=NaN after=NaN
	if ep=$(bound_ep "$out.srv.err"); then
		before=$(rss_settled $sp)
		"$BIN/idle" --connect "$ep" --conns $IDLE_CONNS --type "$typ" >"$out.idle" 2>"$out.idle.err" &
		local ip=$!
		PIDS+=("$ip")
		wait_for "$out.idle" connected 60 || log "  idle peers did not connect: $(cat "$out.idle.err")"
		after=$(rss_settled $sp)
	else
		log "  $kind did not start: $(tail -n 3 "$out.srv.err")"
	fi
	kill -TERM "$ip" 2>/dev/null || true
	finish "$ip" 10
	kill -TERM "$sp" 2>/dev/null || true
	finish "$sp" 10
	MEM_BEFORE=$before MEM_AFTER=$after
}
if want memory; then
	rec '#cmp' memory-peer 'KiB/peer' "RSS per idle connected peer ($IDLE_CONNS idle peers: RSS after − RSS before, ÷ peers)"
	rec '#target' memory-peer zmqguard-router '<=' 30
	rec '#target' memory-peer zmqguard-pull '<=' 30
	rec '#cmp' memory-base 'MiB' "RSS of an idle process (bound, no peers)"
	rec '#note' memory-peer "zmqguard-router = \`zmqguard handshake-listener\` with idle REQ peers; zmqguard-pull = \`zmqguard sink\` with idle PUSH peers; pyzmq-router = bench/py/router_listener.py with idle REQ peers. Peers: bench/idle (guarded handshake, then silence)."
	for (( r = 1; r <= MEM_ROUNDS; r++ )); do
		out=$WORK/memory.coord.$r
		"$BIN/zmqguard" coordinator --front "$EP0" --back-output "$EP0" \
			--back-publish "$EP0" --engines 2 --log-format text >"$out.srv" 2>"$out.srv.err" &
		cp=$!
		PIDS+=("$cp")
		if bound_ep "$out.srv.err" front >/dev/null; then
			rec memory-base zmqguard-coordinator $r "$(awk -v k="$(rss_settled $cp)" 'BEGIN {printf "%.1f", k / 1024}')"
		else
			log "  coordinator did not start: $(tail -n 3 "$out.srv.err")"
		fi
		kill -TERM "$cp" 2>/dev/null || true
		finish "$cp" 10
		for v in zmqguard-router zmqguard-pull pyzmq-router; do
			[ $v = pyzmq-router ] && [ $PYOK = 0 ] && continue
			out=$WORK/memory.$v.$r
			case $v in
			zmqguard-router) mem_run "$out" listener REQ ;;
			zmqguard-pull) mem_run "$out" sink PUSH ;;
			pyzmq-router) mem_run "$out" pyrouter REQ ;;
			esac
			rec memory-base $v $r "$(awk -v k="$MEM_BEFORE" 'BEGIN {printf "%.1f", k / 1024}')"
			rec memory-peer $v $r "$(awk -v a="$MEM_AFTER" -v b="$MEM_BEFORE" -v n=$IDLE_CONNS 'BEGIN {printf "%.1f", (a - b) / n}')"
			log "memory round $r $v: RSS $MEM_BEFORE -> $MEM_AFTER KiB with $IDLE_CONNS idle peers"
		done
	done
fi

# ---------------------------------------------------------------- kvindex
if want kvindex; then
	rec '#cmp' kvindex-ingest 'events/s' "KV-cache index (in memory), ingest into a 1,000-engine index of $KVI_BLOCKS blocks: 16 engines' streams, batches of 32 events (one-block BlockStored chained to the previous, BlockRemoved of the oldest, alternately), one goroutine locked to its thread"
	rec '#target' kvindex-ingest cpu-with-queries '>=' 1000000
	rec '#note' kvindex-ingest "with-queries / alone = events per wall second while another goroutine scores the 8k-token prompt without pause / with nothing else running; cpu-* = events per CPU second of the ingest thread (RUSAGE_THREAD), what one core does however loaded the machine is. bench/kvindexbench, $KVI_EVENTS events per run."
	rec '#cmp' kvindex-score 'µs' "KV-cache index (in memory), Score of an 8k-token prompt (128 blocks of 64) against 1,000 engines and $KVI_BLOCKS indexed blocks, 32 engines holding prefixes of it (1..128 blocks): median and p99 wall time of $KVI_SCORES calls, and their mean CPU time (the scoring thread's RUSAGE_THREAD ÷ calls, not inflated by other processes)"
	rec '#target' kvindex-score p50 '<=' 20
	rec '#cmp' kvindex-bytes 'B/entry' "KV-cache index (in memory), heap bytes per (block, engine, medium) entry: runtime.MemStats HeapAlloc after a GC, before and after building the $KVI_BLOCKS-block index, ÷ entries"
	rec '#target' kvindex-bytes heap '<=' 64
	for (( r = 1; r <= KVI_ROUNDS; r++ )); do
		out=$WORK/kvindex.$r
		"$BIN/kvindexbench" -blocks $KVI_BLOCKS -events $KVI_EVENTS -scores $KVI_SCORES >"$out.json" 2>"$out.err" ||
			log "kvindexbench failed: $(head -c 300 "$out.err")"
		rec kvindex-ingest with-queries $r "$(jf ingest_events_per_sec "$out.json")"
		rec kvindex-ingest cpu-with-queries $r "$(jf ingest_events_per_cpu_sec "$out.json")"
		rec kvindex-ingest alone $r "$(jf alone_events_per_sec "$out.json")"
		rec kvindex-ingest cpu-alone $r "$(jf alone_events_per_cpu_sec "$out.json")"
		rec kvindex-score p50 $r "$(jf score_p50_us "$out.json")"
		rec kvindex-score p99 $r "$(jf score_p99_us "$out.json")"
		rec kvindex-score cpu-mean $r "$(jf score_cpu_us "$out.json")"
		rec kvindex-bytes heap $r "$(jf bytes_per_entry "$out.json")"
		rec kvindex-bytes tables $r "$(jf table_bytes_per_entry "$out.json")"
		log "kvindex round $r: $(jf ingest_events_per_cpu_sec "$out.json") events/cpu-s with queries, Score p50 $(jf score_p50_us "$out.json") µs, $(jf bytes_per_entry "$out.json") B/entry"
	done
fi

# ---------------------------------------------------------------- micro
if want micro; then
	log "building the micro-benchmark test binaries"
	(cd "$ROOT" && go test -c -o "$BIN/loop.test" ./loop && go test -c -o "$BIN/enginecore.test" ./enginecore)
	rec '#cmp' safeloop 'ratio' "SafeLoop ÷ hand-written loop (go test -bench, interleaved chunks of the same Receiver, fastest chunk of each; 1.0 = no overhead)"
	rec '#target' safeloop socket '>=' 0.95
	rec '#note' safeloop "socket = loop BenchmarkRatioSocket (zmqguard PUSH → PULL on loopback, 2,000-message chunks); fake = BenchmarkRatioFake (an I/O-free Receiver handing back the stats vector, 5,000-message chunks); -benchtime $MICRO_LOOP. Both loops decode the 101-byte stats vector with decodeguard.DecodeMsgp into a reused value."
	rec '#cmp' outputs-decode 'CPU ns/msg' "enginecore.Decode of the 256-output, 157-frame EngineCoreOutputs message (vLLM's full-length structs, every check), into a reused Message (go test -bench Decode256, -benchtime $MICRO_DECODE)"
	rec '#target' outputs-decode zmqguard '<=' 8000
	rec '#cmp' outputs-decode-wall 'ns/msg' "Same runs: wall time per decode"
	for (( r = 1; r <= ROUNDS; r++ )); do
		round_load micro $r
		out=$WORK/micro.$r
		(cd "$ROOT/loop" && "$BIN/loop.test" -test.run '^$' -test.bench '^Benchmark(RatioSocket|RatioFake)$' -test.benchtime "$MICRO_LOOP") >"$out.loop" 2>&1 || true
		(cd "$ROOT/enginecore" && "$BIN/enginecore.test" -test.run '^$' -test.bench '^BenchmarkDecode256$' -test.benchtime "$MICRO_DECODE") >"$out.ec" 2>&1 || true
		# metric VALUE-BEFORE-UNIT: the number before " UNIT" on the line of BENCH.
		for v in socket fake; do
			b=BenchmarkRatioSocket; [ $v = fake ] && b=BenchmarkRatioFake
			rec safeloop $v $r "$(awk -v b="$b" '$1 ~ "^"b"(-[0-9]+)?$" {for (i = 2; i < NF; i++) if ($(i+1) == "ratio") print $i}' "$out.loop" | head -n1)"
		done
		rec outputs-decode zmqguard $r "$(awk '$1 ~ /^BenchmarkDecode256(-[0-9]+)?$/ {for (i = 2; i < NF; i++) if ($(i+1) == "cpu-ns/msg") print $i}' "$out.ec" | head -n1)"
		rec outputs-decode-wall zmqguard $r "$(awk '$1 ~ /^BenchmarkDecode256(-[0-9]+)?$/ {for (i = 2; i < NF; i++) if ($(i+1) == "ns/op") print $i}' "$out.ec" | head -n1)"
		log "micro round $r: $(grep -h -o '[0-9.]* ratio' "$out.loop" | tr '\n' ' ') decode $(grep -o '[0-9]* cpu-ns/msg' "$out.ec")"
	done
fi

# ---------------------------------------------------------------- summary rows
# The rows of the summary table (tabulate -summary), each comparison's
# declared here: #summary LABEL COMPARISON A B [OP GOAL] is A÷B per round
# (B "-": A's value alone). Rows of comparisons not run are left out, so a
# comparison adds its rows here and they appear whenever it runs.
if want stats100; then
	rec '#summary' 'stats100 receive + decode vs pyzmq recv-only, msgs/s' stats100 zmqguard pyzmq '>=' 2.0
	rec '#summary' '… CPU per message (pyzmq ÷ zmqguard)' stats100-cpu pyzmq zmqguard '>=' 2.0
	rec '#summary' 'stats100 vs libzmq through cgo (pebbe), msgs/s' stats100 zmqguard pebbe '>=' 2.0
	rec '#summary' '… CPU per message (pebbe ÷ zmqguard)' stats100-cpu pebbe zmqguard '>=' 2.0
	rec '#summary' 'stats100 without decode vs raw TCP, msgs/s' stats100 zmqguard-nodecode rawtcp
	rec '#summary' '… CPU per message (rawtcp ÷ zmqguard without decode)' stats100-cpu rawtcp zmqguard-nodecode
fi
if want frame4k; then
	rec '#summary' '4 KiB frames, CPU per message (rawtcp ÷ zmqguard; ≥ 0.8 is zmqguard ≤ 1.25× raw TCP)' frame4k-cpu rawtcp zmqguard '>=' 0.8
	rec '#summary' '4 KiB frames, msgs/s vs raw TCP' frame4k zmqguard rawtcp '>=' 0.9
fi
if want handshake; then
	rec '#summary' 'NIXL handshake listener, 16 REQ clients, req/s vs pyzmq ROUTER' handshake zmqguard pyzmq '>=' 1.9
	rec '#summary' '… CPU per request (pyzmq ÷ zmqguard)' handshake-cpu pyzmq zmqguard
fi
if want outputs; then
	rec '#summary' 'Engine output receiver end to end (157 frames, full decode) vs pyzmq recv_multipart only, CPU per message (pyzmq ÷ zmqguard)' outputs-cpu pyzmq zmqguard
fi
if want kvevents; then
	rec '#summary' 'KV-event subscriber (20-event batches) vs pyzmq recv + msgpack.unpackb, batches/s' kvevents zmqguard pyzmq-decode
	rec '#summary' '… CPU per batch (pyzmq-decode ÷ zmqguard)' kvevents-cpu pyzmq-decode zmqguard '>=' 5.0
	rec '#summary' '… vs pyzmq recv only, CPU per batch (pyzmq ÷ zmqguard)' kvevents-cpu pyzmq zmqguard '>=' 1.0
	rec '#summary' 'KV-event subscriber, CPU ns per event (socket, sequence tracking, decode, handler), one source' kvevents-event zmqguard - '<=' 250
	rec '#summary' '… events/s, one source' kvevents-events zmqguard - '>=' 3000000
	rec '#summary' "… CPU ns per event, $KV_FLEET sources (the fleet case)" kvevents-event zmqguard-fleet -
fi
if want micro; then
	rec '#summary' 'SafeLoop ÷ hand-written loop, zmqguard socket (go test -bench)' safeloop socket - '>=' 0.95
	rec '#summary' '… I/O-free Receiver' safeloop fake - '>=' 0.95
	rec '#summary' 'enginecore.Decode, 256 outputs / 157 frames, CPU ns per message (go test -bench)' outputs-decode zmqguard - '<=' 8000
fi

# ---------------------------------------------------------------- report
LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)
MACHINE="$(nproc) CPUs, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1), Linux $(uname -r), $(go version | awk '{print $3}')"
rec '#meta' 'command' "bench/run.sh $([ $MODE = quick ] && echo 'quick ')$([ $SUMMARY = 1 ] && echo 'summary ')$(echo $ONLY) (ROUNDS=$ROUNDS)"
rec '#meta' 'machine' "$MACHINE"
rec '#meta' 'load average (1, 5, 15 min) at the start' "$LOAD_START"
rec '#meta' 'load average (1, 5, 15 min) at the end' "$LOAD_END"
echo
echo "zmqguard benchmarks — $(date -u +%Y-%m-%dT%H:%MZ), mode $MODE, $ROUNDS round(s), variants interleaved"
echo
echo "Machine: $MACHINE, load average at the start: $LOAD_START, at the end: $LOAD_END"
echo
"$BIN/tabulate" "$RESULTS"
if [ $SUMMARY = 1 ]; then
	echo
	echo "## Summary"
	echo
	"$BIN/tabulate" -summary "$RESULTS"
fi
if [ "${BENCH_KEEP:-0}" = 1 ]; then cp "$RESULTS" "$WORK/results.keep.tsv"; fi
