#!/usr/bin/env bash
# run_all.sh — runs e2e scripts JOBS at a time (make test-e2e). Most scripts spend their time
# starting mpirun, waiting on Slurm or on timeouts, not computing, so two at once fill the
# cores that one leaves idle. Each script's output goes to its own log and is printed whole,
# under a "== tests/e2e/NAME.sh ==" header, when the script ends; a script passes when it
# exits 0. Every script runs to the end; then the failed ones are listed and the exit status
# is non-zero if any failed. The slowest scripts start first (shortest overall time).
#
#   BIN=build/bin/spikemesh PY=/usr/bin/python3 tests/e2e/lib/run_all.sh JOBS NAME... (NAME: pp_train or tests/e2e/pp_train.sh)
set -uo pipefail
if [ $# -lt 2 ] || ! [[ "$1" =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: BIN=... PY=... $0 JOBS NAME..." >&2
  exit 2
fi
jobs=$1
shift
dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"  # tests/e2e
# The longest scripts first (slurm_job waits on Slurm for about 1.5 min; the others 30-60 s).
first=(slurm_job event_import pp_train reliability eval dp_train)
names=()
for n in "$@"; do
  n="$(basename "$n" .sh)"
  [ -f "$dir/$n.sh" ] || { echo "run_all.sh: no e2e script tests/e2e/$n.sh" >&2; exit 2; }
  names+=("$n")
done
order=()
for f in "${first[@]}"; do [[ " ${names[*]} " == *" $f "* ]] && order+=("$f"); done
for n in "${names[@]}"; do [[ " ${first[*]} " == *" $n "* ]] || order+=("$n"); done

logs="$(mktemp -d "${TMPDIR:-/tmp}/e2e-logs.XXXXXX")"
trap 'rm -rf "$logs"' EXIT
declare -A name_of start_of
failed=()
finish() {  # finish PID RC: print the script's log under its header
  local pid=$1 rc=$2 n="${name_of[$1]}"
  echo "== tests/e2e/$n.sh [started $(date -d "@${start_of[$pid]}" +%T), $(( $(date +%s) - start_of[$pid] )) s] =="
  cat "$logs/$n.log"
  if [ "$rc" -ne 0 ]; then failed+=("$n"); echo "== tests/e2e/$n.sh FAILED (exit $rc) =="; fi
}
running=0
for n in "${order[@]}"; do
  if [ "$running" -ge "$jobs" ]; then
    wait -n -p done_pid; rc=$?
    finish "$done_pid" "$rc"; running=$((running - 1))
  fi
  bash "$dir/$n.sh" >"$logs/$n.log" 2>&1 </dev/null &
  name_of[$!]=$n; start_of[$!]=$(date +%s); running=$((running + 1))
done
while [ "$running" -gt 0 ]; do
  wait -n -p done_pid; rc=$?
  finish "$done_pid" "$rc"; running=$((running - 1))
done
if [ "${#failed[@]}" -gt 0 ]; then
  echo "== e2e: ${#failed[@]} of ${#order[@]} scripts FAILED: ${failed[*]} =="
  exit 1
fi
echo "== e2e: all ${#order[@]} scripts passed =="
