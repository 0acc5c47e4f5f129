# common.sh — the prologue shared by e2e scripts (sourced, not run): ROOT, BIN (the binary
# under test), PY (Debian's python3), Open MPI as root with one thread per rank, ok/bad
# counters, expect_error (a refusal as the Standards want it) and a scratch directory $TMP
# removed on exit. Usage: E2E_NAME=x; . lib/common.sh
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
BIN="${BIN:-$ROOT/build/bin/spikemesh}"
case "$BIN" in /*) ;; *) BIN="$PWD/$BIN" ;; esac  # absolute: scripts may cd into $TMP
PY="${PY:-/usr/bin/python3}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
pass=0; fail=0
ok() { pass=$((pass + 1)); echo "  ok   $1"; }
bad() { fail=$((fail + 1)); echo "  FAIL $1"; }
# fmnist_h5 FILE: a Fashion-MNIST-shaped dataset (u8 NCHW 28x28, 10 classes, 32 train + 16
# test samples, seeded random contents) for runs that need the real format, not real data.
fmnist_h5() { "$PY" "$ROOT/tests/ref/fmnist_like.py" "$1"; }
# ckpt_same A B [--group G] [--min N]: every dataset of two checkpoints (under G) bitwise equal.
ckpt_same() { "$PY" "$ROOT/tests/ref/ckpt_same.py" "$@"; }
# same_losses A/metrics.h5 B/metrics.h5 [--exact] [--differ] [--subset]: the same steps, finite
# losses, B's equal A's (1e-9), or differ (tests/ref/same_losses.py).
same_losses() { "$PY" "$ROOT/tests/ref/same_losses.py" "$@"; }
# expect_error NAME NEEDLE... -- COMMAND...: exit in 1..127 within 120 s, exactly one
# "spikemesh: error:" line on stderr holding every NEEDLE, stderr printable (no raw file bytes)
# and free of Open MPI's abort messages.
expect_error() {
  local name=$1 needles=() rc why=""
  shift
  while [ "$1" != "--" ]; do needles+=("$1"); shift; done
  shift
  timeout 150 "$@" >out.log 2>err.log </dev/null
  rc=$?
  local n msg
  n=$(grep -c '^spikemesh: error:' err.log)
  msg=$(grep '^spikemesh: error:' err.log | head -n 1)
  if [ "$rc" -eq 124 ]; then why="still running after 120 s"
  elif [ "$rc" -eq 0 ]; then why="exit code 0"
  elif [ "$rc" -ge 128 ]; then why="killed by signal $((rc - 128))"
  elif [ "$n" -ne 1 ]; then why="$n 'spikemesh: error:' lines (want 1)"
  elif grep -qE 'MPI_ABORT|ORTE_ERROR|Data unpack|mpirun has exited|mpirun noticed' err.log out.log; then
    why="Open MPI abort output"
  elif LC_ALL=C grep -q '[^[:print:][:space:]]' err.log; then why="raw bytes on stderr"
  else
    for s in "${needles[@]}"; do
      [[ "$msg" == *"$s"* ]] || { why="message does not contain '$s'"; break; }
    done
  fi
  if [ -z "$why" ]; then ok "$name"; else bad "$name: $why (exit $rc)"; LC_ALL=C cat -v err.log | head -n 6 | sed 's/^/       /'; fi
}

TMP="$(mktemp -d "${TMPDIR:-/tmp}/${E2E_NAME:-e2e}.XXXXXX")"; trap "[ -n \"\${KEEP_TMP:-}\" ] || rm -rf \"\$TMP\"" EXIT
