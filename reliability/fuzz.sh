#!/usr/bin/env bash
# Fuzz campaign: runs every native fuzz target of the module (found with
# `go test -list '^Fuzz'`) for FUZZTIME each at the lowest CPU priority and
# writes one line per target to a TSV file:
#   package  target  fuzztime  workers  execs  new_interesting  corpus_total  result
# A failing target leaves its crasher where Go puts it
# (PKG/testdata/fuzz/TARGET/<hash>): fix the bug, keep the file (it becomes a
# seed that `go test` replays), and rerun.
#
# usage: reliability/fuzz.sh [FUZZTIME] [OUT.tsv] [TARGET-REGEXP]
#   FUZZTIME       per target, a Go duration (default 10m, as the issue asks)
#   OUT.tsv        results file (default reliability/fuzz-results.tsv)
#   TARGET-REGEXP  only targets whose name matches (default: all)
# environment:
#   JOBS           targets fuzzed at once (default 1). With JOBS=2 on a
#                  2-CPU machine, each target gets one worker (-parallel=1)
#                  and 24 targets × 10m take two hours instead of four.
#   WORKERS        -parallel for each target (default: all CPUs / JOBS)
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"
fuzztime=${1:-10m}
out=${2:-reliability/fuzz-results.tsv}
only=${3:-.}
jobs=${JOBS:-1}
workers=${WORKERS:-$(( $(nproc) / jobs > 0 ? $(nproc) / jobs : 1 ))}
logdir=$(mktemp -d "${TMPDIR:-/tmp}/zmqguard-fuzz.XXXXXX")
printf 'package\ttarget\tfuzztime\tworkers\texecs\tnew_interesting\tcorpus_total\tresult\n' >"$out"
start=$(date +%s)

# Build every test binary first so that the timed runs do not compile.
go test -count=1 -run='^$' ./... >/dev/null

fuzz_one() { # pkg target
  local pkg=$1 target=$2
  local log="$logdir/$(basename "$pkg")-$target.log"
  echo "--- $(date -u +%H:%M:%S) $pkg $target ($fuzztime, $workers workers)"
  nice -n 19 go test -run='^$' -fuzz="^${target}\$" -fuzztime="$fuzztime" -parallel="$workers" "$pkg" >"$log" 2>&1
  local rc=$?
  # The last progress line reads:
  # fuzz: elapsed: 1m0s, execs: 123456 (2057/sec), new interesting: 3 (total: 40)
  local last execs newi total result=PASS
  last=$(grep -E '^fuzz: elapsed: .*execs: ' "$log" | tail -n 1)
  execs=$(sed -nE 's/.*execs: ([0-9]+).*/\1/p' <<<"$last")
  newi=$(sed -nE 's/.*new interesting: ([0-9]+).*/\1/p' <<<"$last")
  total=$(sed -nE 's/.*\(total: ([0-9]+)\).*/\1/p' <<<"$last")
  if [ "$rc" -ne 0 ]; then
    result=FAIL
    echo "    FAILED: log kept in $log"; grep -E -A20 -- '--- FAIL|panic:|Failing input' "$log" | head -n 40
  fi
  # One printf per line: appends of a short line from parallel jobs do not interleave.
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$pkg" "$target" "$fuzztime" "$workers" "${execs:-0}" "${newi:-0}" "${total:-0}" "$result" >>"$out"
  printf '%s\t%s\t%s\t%s\t%s\n' "$pkg" "$target" "${execs:-0}" "${newi:-0}" "$result"
}

running=0
for pkg in $(go list ./...); do
  for target in $(go test -list '^Fuzz' "$pkg" 2>/dev/null | grep '^Fuzz' | grep -E -- "$only" || true); do
    if [ "$running" -ge "$jobs" ]; then wait -n; running=$((running - 1)); fi
    fuzz_one "$pkg" "$target" &
    running=$((running + 1))
  done
done
wait
awk -F'\t' 'NR>1 {n++; e+=$5; if ($8!="PASS") f++} END {printf "targets %d, execs %d, failing %d\n", n, e, f}' "$out"
echo "elapsed $(( $(date +%s) - start ))s; logs in $logdir"
! grep -q 'FAIL$' "$out"
