#!/usr/bin/env bash
# event_import_bench.sh — the import and read-throughput figures of docs/results.md for `spikemesh data`
# from a CIFAR10-DVS-sized synthetic archive (FILES_PER_CLASS x 10 AEDAT 2.0 files of
# ~EVENTS events each, as published recordings hold ~100k) written by tests/ref/events_ref.py's
# writer, imported at 1 and 2 ranks, deflated and not (T 10 at 128x128, and 48x48 as
# SpikingJelly's VGG recipe feeds), then `spikemesh data bench` reading each file the way
# training does. Prints one table; everything runs in a scratch folder removed at the end.
# Usage: bash bench/event_import_bench.sh   [FILES_PER_CLASS=40 EVENTS=100000 BIN=build/bin/spikemesh]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${BIN:-$ROOT/build/bin/spikemesh}"
PY=/usr/bin/python3
FILES_PER_CLASS=${FILES_PER_CLASS:-40}
EVENTS=${EVENTS:-100000}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
W="$(mktemp -d "${TMPDIR:-/tmp}/event_import_bench.XXXXXX")"
trap 'rm -rf "$W"' EXIT

"$PY" - "$ROOT/tests/ref" "$W/c10" "$FILES_PER_CLASS" "$EVENTS" <<'PYEOF'
import os, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
from events_ref import CIFAR_CLASSES, cifar_address, write_aedat2
root, per_class, events = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
rng = np.random.default_rng(26)
for c in CIFAR_CLASSES:
    os.makedirs(os.path.join(root, c))
    for i in range(per_class):
        n = int(events * rng.uniform(0.5, 1.5))
        x, y, p = rng.integers(0, 128, n), rng.integers(0, 128, n), rng.integers(0, 2, n)
        t = np.cumsum(rng.integers(0, 30, n)).astype(np.uint32)
        write_aedat2(os.path.join(root, c, f"cifar10_{c}_{i}.aedat"), cifar_address(x, y, p), t)
PYEOF
MB=$(du -sm "$W/c10" | cut -f1)
N=$((FILES_PER_CLASS * 10))
REPEATS=${REPEATS:-3}
echo "archive: $N AEDAT 2.0 files, ~$EVENTS events each, $MB MB; $(env -u OMP_NUM_THREADS nproc) cores, $(date -u +%F);" \
  "medians of $REPEATS runs"
printf '%-34s %6s %9s %9s %8s %16s\n' "import" "ranks" "seconds" "files/s" "file MB" "read samples/s"
run() {  # run LABEL NP ARGS...
  local label=$1 np=$2
  shift 2
  local launch=(mpirun --bind-to none -np "$np" "$BIN")  # both under mpirun: the same start-up
  local times=() reads=()
  for _ in $(seq "$REPEATS"); do
    local t0 t1
    t0=$(date +%s.%N)
    "${launch[@]}" data cifar10-dvs --from "$W/c10" --out "$W/out.h5" --overwrite "$@" >"$W/log" 2>&1 ||
      { echo "import failed: $label"; tail -3 "$W/log"; exit 1; }
    t1=$(date +%s.%N)
    times+=("$(echo "$t1 - $t0" | bc -l)")
    reads+=("$("$BIN" data bench "$W/out.h5" --batch-size 16 --batches 20 2>&1 |
      grep 'prefetch thread' | grep -o '[0-9.]* samples/s' | cut -d' ' -f1)")
  done
  local secs read size
  secs=$(printf '%s\n' "${times[@]}" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
  read=$(printf '%s\n' "${reads[@]}" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
  size=$(du -m "$W/out.h5" | cut -f1)
  printf '%-34s %6d %9.2f %9.1f %8s %16s\n' "$label" "$np" "$secs" "$(echo "$N / $secs" | bc -l)" "$size" "$read"
}
run "T 10, 128x128, u8, deflate 1" 1 --deflate 1
run "T 10, 128x128, u8, uncompressed" 1 --deflate 0
run "T 10, 128x128, u8, deflate 1" 2 --deflate 1
run "T 10, 128x128, u8, uncompressed" 2 --deflate 0
run "T 10, 48x48, f32, deflate 1" 2 --size 48 --deflate 1
run "T 10, 48x48, f32, uncompressed" 2 --size 48 --deflate 0
