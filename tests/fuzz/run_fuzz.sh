#!/usr/bin/env bash
# run_fuzz.sh — the run half of `make fuzz` (tests/README.md): runs each libFuzzer harness
# BUILD/bin/<h> for SECONDS, JOBS harnesses at a time, then prints one line per harness:
# seconds, executions, coverage (cov/ft of libFuzzer's last stats line) and findings.
#   usage: tests/fuzz/run_fuzz.sh BUILD SECONDS JOBS HARNESS...
# New corpus inputs go to BUILD/corpus/<h>/ (seeded by reading tests/fuzz/corpus/<h>/ and
# tests/fuzz/regressions/<h>/, which are never written); crash / leak / timeout / OOM inputs
# to BUILD/crashes/<h>/; the full log to BUILD/logs/<h>.log. Exit status 1 when any harness
# has findings (an input in BUILD/crashes/<h>/ from this run) or did not run.
set -u
build=$1 seconds=$2 jobs=$3
shift 3
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$build/logs"

run_one() {
  local h=$1 bin="$build/bin/$1"
  mkdir -p "$build/corpus/$h" "$build/crashes/$h"
  rm -f "$build/crashes/$h"/{crash,leak,timeout,oom,slow-unit}-* "$build/logs/$h.log"
  local dict=() extra=()
  [ -f "$here/$h.dict" ] && dict=(-dict="$here/$h.dict")
  [ -d "$here/regressions/$h" ] && extra=("$here/regressions/$h")
  local t0=$SECONDS
  # -timeout 1: an input running > 1 s is a finding (hang); -rss_limit_mb: also the malloc
  # limit (one allocation over it is an OOM finding); libFuzzer stops at the first finding.
  OMP_NUM_THREADS=1 ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=0 \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "$bin" -max_total_time="$seconds" -timeout=1 -rss_limit_mb=2048 -max_len=8192 -print_final_stats=1 \
    -artifact_prefix="$build/crashes/$h/" "${dict[@]}" \
    "$build/corpus/$h" "$here/corpus/$h" "${extra[@]}" >"$build/logs/$h.log" 2>&1
  echo $? >"$build/logs/$h.rc"
  echo $((SECONDS - t0)) >"$build/logs/$h.secs"
}

pids=()
for h in "$@"; do
  echo "fuzzing $h for ${seconds}s (log: $build/logs/$h.log)"
  run_one "$h" &
  pids+=($!)
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do sleep 1; done
done
wait

status=0
printf '%-20s %8s %12s %8s %8s %9s  %s\n' harness seconds execs cov ft findings "crash inputs"
for h in "$@"; do
  log="$build/logs/$h.log"
  execs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | tail -1 | awk '{print $2}')
  [ -z "$execs" ] && execs=$(grep -oE '^#[0-9]+' "$log" | tail -1 | tr -d '#')
  secs=$(cat "$build/logs/$h.secs" 2>/dev/null || echo "?")  # wall seconds of the run
  cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -1 | awk '{print $2}')
  ft=$(grep -oE 'ft: [0-9]+' "$log" | tail -1 | awk '{print $2}')
  found=$(find "$build/crashes/$h" -maxdepth 1 -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' \) | wc -l)
  rc=$(cat "$build/logs/$h.rc" 2>/dev/null || echo "?")
  [ "$found" -gt 0 ] || [ "$rc" != 0 ] && status=1
  printf '%-20s %8s %12s %8s %8s %9s  %s\n' "$h" "$secs" "${execs:-?}" "${cov:-?}" "${ft:-?}" "$found" \
    "$( [ "$found" -gt 0 ] && echo "$build/crashes/$h/ (rc $rc)" || { [ "$rc" != 0 ] && echo "rc $rc: see $log"; } )"
done
exit $status
