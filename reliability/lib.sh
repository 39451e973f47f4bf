# Helpers shared by soak.sh and faults.sh (sourced, not run). They expect
# $ZMQGUARD to name a built zmqguard binary.

# start_coordinator DIR ENGINES [EXTRA FLAGS...]: starts a coordinator on
# free loopback ports; sets cpid, front, backout, backpub, and cdebug: the
# debug endpoint's host:port when the flags include --debug-addr (e.g.
# --debug-addr 127.0.0.1:0), else empty. Logs (JSON) go to
# DIR/coordinator.err, the counters line to DIR/coordinator.out.
start_coordinator() {
  local dir=$1 engines=$2; shift 2
  "$ZMQGUARD" --log-format json coordinator --front tcp://127.0.0.1:0 --back-output tcp://127.0.0.1:0 \
    --back-publish tcp://127.0.0.1:0 --engines "$engines" "$@" >"$dir/coordinator.out" 2>"$dir/coordinator.err" &
  cpid=$!
  wait_line "$dir/coordinator.err" '"msg":"coordinator running"'
  front=$(json_field "$dir/coordinator.err" front)
  backout=$(json_field "$dir/coordinator.err" back_output)
  backpub=$(json_field "$dir/coordinator.err" back_publish)
  cdebug=$(json_field "$dir/coordinator.err" debug_addr)
}

# start_listener DIR ENGINE_ID [BIND] [LOGNAME] [EXTRA FLAGS...]: starts a
# handshake listener (on a free port unless BIND is given; "" for the
# default); sets lpid, listener, and ldebug as start_coordinator sets cdebug.
start_listener() {
  local dir=$1 id=$2 bind=${3:-tcp://127.0.0.1:0} name=${4:-listener}
  shift $(( $# < 4 ? $# : 4 ))
  "$ZMQGUARD" --log-format json handshake-listener --bind "$bind" --engine-id "$id" "$@" \
    >"$dir/$name.out" 2>"$dir/$name.err" &
  lpid=$!
  wait_line "$dir/$name.err" '"msg":"handshake listener serving"'
  listener=$(json_field "$dir/$name.err" endpoint)
  ldebug=$(json_field "$dir/$name.err" debug_addr)
}

# wait_line FILE PATTERN: waits (10 s at most) until FILE has a line with PATTERN.
wait_line() {
  for _ in $(seq 200); do
    grep -q -- "$2" "$1" 2>/dev/null && return 0
    sleep 0.05
  done
  echo "timed out waiting for $2 in $1:"; cat "$1"; return 1
}

# wait_until SECONDS DESCRIPTION CMD...: runs CMD every 100 ms until it
# succeeds, SECONDS at most (a wait on a condition, never a bare sleep);
# prints DESCRIPTION and returns 1 on timeout.
wait_until() {
  local secs=$1 what=$2 i; shift 2
  for (( i = 0; i < secs * 10; i++ )); do
    "$@" && return 0
    sleep 0.1
  done
  echo "timed out after ${secs}s waiting for: $what"; return 1
}

# fds_at_least PID N / fds_at_most PID N: PID has at least / at most N open
# descriptors (for wait_until).
fds_at_least() { [ "$(fds "$1")" -ge "$2" ]; }
fds_at_most() { [ "$(fds "$1")" -le "$2" ]; }

# json_field FILE KEY: the first string value of KEY in FILE's JSON lines.
json_field() {
  grep -o "\"$2\":\"[^\"]*\"" "$1" | head -n 1 | cut -d'"' -f4
}

# stop_proc PID NAME: SIGTERM, wait, print the process's counters line.
stop_proc() {
  local pid=$1 name=$2 dir=${3:-$tmp}
  kill -TERM "$pid" 2>/dev/null || { echo "{\"$name\":\"already exited\"}"; return; }
  wait "$pid" 2>/dev/null || true
  tail -n 1 "$dir/$name.out"
}

# rss PID: resident set size in kB; fds PID: open descriptors; threads PID.
rss() { awk '/^VmRSS:/ {print $2}' /proc/"$1"/status; }
fds() { ls /proc/"$1"/fd | wc -l; }
threads() { awk '/^Threads:/ {print $2}' /proc/"$1"/status; }
# cpu PID: user+system CPU seconds so far.
cpu() { awk -v hz="$(getconf CLK_TCK)" '{printf "%.2f", ($14+$15)/hz}' /proc/"$1"/stat; }
