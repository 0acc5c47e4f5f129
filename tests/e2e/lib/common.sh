# common.sh — the prologue shared by e2e scripts (sourced, not run): ROOT, BIN (the binary
# under test), PY (Debian's python3), Open MPI as root with one thread per rank, ok/bad
# counters and a scratch directory $TMP removed on exit. Usage: E2E_NAME=x; . lib/common.sh
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
BIN="${BIN:-$ROOT/build/bin/spikemesh}"
case "$BIN" in /*) ;; *) BIN="$PWD/$BIN" ;; esac  # absolute: scripts may cd into $TMP
PY="${PY:-/usr/bin/python3}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
pass=0; fail=0
ok() { pass=$((pass + 1)); echo "  ok   $1"; }
bad() { fail=$((fail + 1)); echo "  FAIL $1"; }
TMP="$(mktemp -d "${TMPDIR:-/tmp}/${E2E_NAME:-e2e}.XXXXXX")"; trap 'rm -rf "$TMP"' EXIT
