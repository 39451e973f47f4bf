#!/usr/bin/env bash
# Fuzz campaign: runs every native fuzz target of the module (found with
# `go test -list '^Fuzz'`) for FUZZTIME each, one after the other, at the
# lowest CPU priority, and writes one line per target to a TSV file:
#   package  target  fuzztime  execs  new_interesting  corpus_total  result
# A failing target leaves its crasher where Go puts it
# (PKG/testdata/fuzz/TARGET/<hash>): fix the bug, keep the file (it becomes a
# seed that `go test` replays), and rerun.
#
# usage: reliability/fuzz.sh [FUZZTIME] [OUT.tsv] [TARGET-REGEXP]
#   FUZZTIME       per target, a Go duration (default 10m, as the issue asks;
#                  about 25 targets make that over four hours)
#   OUT.tsv        results file (default reliability/fuzz-results.tsv)
#   TARGET-REGEXP  only targets whose name matches (default: all)
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"
fuzztime=${1:-10m}
out=${2:-reliability/fuzz-results.tsv}
only=${3:-.}
logdir=$(mktemp -d /tmp/zmqguard-fuzz.XXXXXX)
printf 'package\ttarget\tfuzztime\texecs\tnew_interesting\tcorpus_total\tresult\n' >"$out"
fail=0
start=$(date +%s)
for pkg in $(go list ./...); do
  for target in $(go test -list '^Fuzz' "$pkg" 2>/dev/null | grep '^Fuzz' | grep -E -- "$only" || true); do
    log="$logdir/$(basename "$pkg")-$target.log"
    echo "--- $pkg $target ($fuzztime)"
    nice -n 19 go test -run='^$' -fuzz="^${target}\$" -fuzztime="$fuzztime" "$pkg" >"$log" 2>&1
    rc=$?
    # The last progress line reads:
    # fuzz: elapsed: 1m0s, execs: 123456 (2057/sec), new interesting: 3 (total: 40)
    last=$(grep -E '^fuzz: elapsed: .*execs: ' "$log" | tail -n 1)
    execs=$(sed -nE 's/.*execs: ([0-9]+).*/\1/p' <<<"$last")
    newi=$(sed -nE 's/.*new interesting: ([0-9]+).*/\1/p' <<<"$last")
    total=$(sed -nE 's/.*\(total: ([0-9]+)\).*/\1/p' <<<"$last")
    result=PASS
    if [ "$rc" -ne 0 ]; then
      result=FAIL; fail=1
      echo "    FAILED: log kept in $log"; grep -E -A20 -- '--- FAIL|panic:|Failing input' "$log" | head -n 40
    fi
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$pkg" "$target" "$fuzztime" "${execs:-0}" "${newi:-0}" "${total:-0}" "$result" | tee -a "$out"
  done
done
awk -F'\t' 'NR>1 {n++; e+=$4; if ($7!="PASS") f++} END {printf "targets %d, execs %d, failing %d\n", n, e, f}' "$out"
echo "elapsed $(( $(date +%s) - start ))s; logs in $logdir"
exit $fail
