#!/usr/bin/env bash
# run_shards.sh — runs a GoogleTest binary as N gtest shards at once (make sanitize's unit
# tests): shard i gets GTEST_SHARD_INDEX=i of GTEST_TOTAL_SHARDS=N, OMP_NUM_THREADS=1 and the
# variables in $SAN_ENV (space-separated NAME=VALUE words), its output in DIR/shard-i.log.
# Every shard runs to the end; then each log's failures (or its last lines when it died
# without a gtest summary, e.g. a sanitizer report) are printed and the exit status is
# non-zero if any shard failed. Each shard is limited to SHARD_TIMEOUT seconds (default 2400).
#
#   SAN_ENV='ASAN_OPTIONS=...' tests/sanitize/run_shards.sh N BINARY DIR [gtest flags...]
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

pids=()
for ((i = 0; i < shards; i++)); do
  env "${env_words[@]}" OMP_NUM_THREADS=1 GTEST_TOTAL_SHARDS="$shards" GTEST_SHARD_INDEX="$i" \
    timeout "${SHARD_TIMEOUT:-2400}" "$bin" --gtest_color=no --gtest_brief=1 "$@" > "$dir/shard-$i.log" 2>&1 &
  pids+=($!)
done

failed=0
for ((i = 0; i < shards; i++)); do
  wait "${pids[$i]}"
  rc=$?
  log="$dir/shard-$i.log"
  passed=$(grep -o '^\[  PASSED  \] [0-9]* tests\?' "$log" | grep -o '[0-9]*' || true)
  if [ "$rc" -eq 0 ]; then
    echo "shard $((i + 1))/$shards: ${passed:-0} tests passed"
  else
    failed=1
    [ "$rc" -eq 124 ] && why="timed out after ${SHARD_TIMEOUT:-2400} s" || why="exit $rc"
    echo "shard $((i + 1))/$shards FAILED ($why); $log:"
    if grep -q '^\[  FAILED  \]' "$log"; then grep -B30 '^\[  FAILED  \]' "$log" | head -200
    else tail -60 "$log"; fi
  fi
done
exit $failed
