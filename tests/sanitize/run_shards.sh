#!/usr/bin/env bash
# run_shards.sh — runs a GoogleTest binary as N gtest shards, SHARD_JOBS of them at once
# (default N; make sanitize's unit tests): shard i gets GTEST_SHARD_INDEX=i of
# GTEST_TOTAL_SHARDS=N, OMP_NUM_THREADS=1 and the variables in $SAN_ENV (space-separated
# NAME=VALUE words), its output in DIR/shard-i.log and its test times in DIR/shard-i.json.
# More shards than jobs even out the load: a shard that holds a slow test keeps one core while
# the others go through the rest. Every shard runs to the end; each is reported as it ends
# (its tests, seconds and slowest tests; on failure its failures, or its last lines when it
# died without a gtest summary, e.g. a sanitizer report), and the exit status is non-zero if
# any shard failed. Each shard is limited to SHARD_TIMEOUT seconds (default 2400).
#
#   SAN_ENV='ASAN_OPTIONS=...' [SHARD_JOBS=2] tests/sanitize/run_shards.sh N BINARY DIR [gtest flags...]
set -uo pipefail
if [ $# -lt 3 ] || ! [[ "$1" =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: SAN_ENV='NAME=VALUE ...' $0 SHARDS BINARY LOG_DIR [gtest flags...]" >&2
  exit 2
fi
shards=$1 bin=$2 dir=$3
shift 3
[ -x "$bin" ] || { echo "run_shards.sh: $bin: not an executable" >&2; exit 2; }
mkdir -p "$dir"
read -r -a env_words <<< "${SAN_ENV:-}"

jobs=${SHARD_JOBS:-$shards}
[[ "$jobs" =~ ^[1-9][0-9]*$ ]] || { echo "run_shards.sh: SHARD_JOBS=$jobs: not a positive integer" >&2; exit 2; }

declare -A shard_of start_of
failed=0
report() {  # report PID RC: one line per shard, its failures when it failed
  local i=${shard_of[$1]} rc=$2 log passed slowest
  log="$dir/shard-$i.log"
  passed=$(grep -o '^\[  PASSED  \] [0-9]* tests\?' "$log" | grep -o '[0-9]*' || true)
  slowest=$(python3 - "$dir/shard-$i.json" 2>/dev/null <<'PYEOF' || true
import json, sys
t = [(float(c["time"].rstrip("s")), s["name"] + "." + c["name"])
     for s in json.load(open(sys.argv[1]))["testsuites"] for c in s["testsuite"]]
print(", ".join(f"{n} {x:.1f} s" for x, n in sorted(t, reverse=True)[:3]))
PYEOF
)
  if [ "$rc" -eq 0 ]; then
    echo "shard $((i + 1))/$shards: ${passed:-0} tests passed in $(( $(date +%s) - start_of[$1] )) s (slowest: ${slowest:-?})"
  else
    failed=1
    [ "$rc" -eq 124 ] && why="timed out after ${SHARD_TIMEOUT:-2400} s" || why="exit $rc"
    echo "shard $((i + 1))/$shards FAILED ($why); $log:"
    if grep -q '^\[  FAILED  \]' "$log"; then grep -B30 '^\[  FAILED  \]' "$log" | head -200
    else tail -60 "$log"; fi
  fi
}
running=0
for ((i = 0; i < shards; i++)); do
  if [ "$running" -ge "$jobs" ]; then
    wait -n -p done_pid; rc=$?
    report "$done_pid" "$rc"; running=$((running - 1))
  fi
  env "${env_words[@]}" OMP_NUM_THREADS=1 GTEST_TOTAL_SHARDS="$shards" GTEST_SHARD_INDEX="$i" \
    timeout "${SHARD_TIMEOUT:-2400}" "$bin" --gtest_color=no --gtest_brief=1 --gtest_output="json:$dir/shard-$i.json" "$@" \
    > "$dir/shard-$i.log" 2>&1 &
  shard_of[$!]=$i; start_of[$!]=$(date +%s); running=$((running + 1))
done
while [ "$running" -gt 0 ]; do
  wait -n -p done_pid; rc=$?
  report "$done_pid" "$rc"; running=$((running - 1))
done
exit $failed
