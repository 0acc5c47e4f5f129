#!/usr/bin/env bash
# plot_check.sh — end-to-end check of scripts/plot_metrics.py on a real (tiny) training run:
# trains fmnist_csnn (C=4) for 2 epochs of 10 steps on a 320-image Fashion-MNIST subset into a
# temporary --output directory, plots its metrics.h5, and checks that every PNG exists, is
# non-empty and is a PNG, and that a missing run directory / metrics.h5 gives exit status 2.
# Prints
# "plot_check: N passed, M failed" and exits non-zero when anything failed. A few seconds.
#   tests/e2e/plot_check.sh            (from anywhere; BIN=... and PY=... override the tools)
# Data: a subset of input/fashion_mnist.h5 when present, else of a file imported into the
# temporary directory from Debian's dataset-fashion-mnist. Nothing outside it is written.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BIN="${BIN:-$ROOT/build/bin/spikemesh}"
PY="${PY:-/usr/bin/python3}"
PLOT="$ROOT/scripts/plot_metrics.py"
PLOTS=(loss accuracy firing_rate step_time lr throughput)

pass=0
fail=0
ok() { pass=$((pass + 1)); echo "  ok   $1"; }
bad() { fail=$((fail + 1)); echo "  FAIL $1"; }
check() {  # check "description" command...
  local what="$1"; shift
  if "$@"; then ok "$what"; else bad "$what"; fi
}
finish() {
  echo "plot_check: $pass passed, $fail failed"
  [ "$fail" -eq 0 ]
  exit $?
}

[ -x "$BIN" ] || { echo "plot_check: $BIN not built (run 'make')"; bad "spikemesh binary exists"; finish; }
[ -f "$PLOT" ] || { bad "$PLOT exists"; finish; }

TMP="$(mktemp -d "${TMPDIR:-/tmp}/plot_check.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT

SRC="$ROOT/input/fashion_mnist.h5"
if [ ! -f "$SRC" ]; then
  SRC="$TMP/fashion_mnist.h5"
  if ! "$BIN" data fashion-mnist --out "$SRC" >"$TMP/import.log" 2>&1; then
    cat "$TMP/import.log"
    bad "import Fashion-MNIST (Debian package dataset-fashion-mnist)"
    finish
  fi
fi
# The first 320 training / 500 test images, same schema and attributes: 10 steps per epoch and
# a quick evaluation, so 2 epochs give 20 steps, 2 evaluations and an epoch boundary.
DATA="$TMP/fmnist_small.h5"
if "$PY" - "$SRC" "$DATA" <<'PYEOF'
import sys
import h5py
with h5py.File(sys.argv[1], "r") as src, h5py.File(sys.argv[2], "w") as dst:
    for k, v in src.attrs.items():
        dst.attrs[k] = v
    for split, n in (("train", 320), ("test", 500)):
        x = src[split + "/x"]
        dst.create_dataset(split + "/x", data=x[:n], chunks=(1,) + x.shape[1:])
        dst.create_dataset(split + "/y", data=src[split + "/y"][:n])
PYEOF
then
  ok "Fashion-MNIST subset written (320 train / 500 test)"
else
  bad "Fashion-MNIST subset written (320 train / 500 test)"
  finish
fi

# 1. A tiny real run: 2 epochs of 10 steps, checkpoints at 10 and 20, an evaluation per epoch.
RUN="$TMP/out/plot_probe"
if "$BIN" train --model fmnist_csnn --var C=4 --data "$DATA" --batch-size 32 --epochs 2 --ckpt-every 10 \
     --log-every 10 --output "$TMP/out" --run-name plot_probe --threads 1 >"$TMP/train.log" 2>&1; then
  ok "spikemesh train (2 epochs, 20 steps) exits 0"
else
  cat "$TMP/train.log"
  bad "spikemesh train (2 epochs, 20 steps) exits 0"
  finish
fi
check "run directory holds metrics.h5, log.txt, config.toml" \
  test -s "$RUN/metrics.h5" -a -s "$RUN/log.txt" -a -s "$RUN/config.toml"

# 2. Plots into --out.
if "$PY" "$PLOT" "$RUN" --out "$TMP/plots" >"$TMP/plot.log" 2>&1; then
  ok "plot_metrics.py exits 0"
else
  cat "$TMP/plot.log"
  bad "plot_metrics.py exits 0"
fi
for p in "${PLOTS[@]}"; do
  f="$TMP/plots/$p.png"
  if [ -s "$f" ] && [ "$(head -c 8 "$f" | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ]; then
    ok "$p.png written ($(stat -c %s "$f") bytes, PNG signature)"
  else
    bad "$p.png written, non-empty, a PNG"
  fi
done
check "the script read 20 steps and 2 evaluations" grep -q "20 steps, 2 evaluations" "$TMP/plot.log"

# 3. Clear errors, exit status 2.
"$PY" "$PLOT" "$TMP/no_such_run" >/dev/null 2>"$TMP/err1.log"
rc=$?
check "missing RUN_DIR: exit 2 with a message" bash -c "[ $rc -eq 2 ] && grep -q 'no such run directory' '$TMP/err1.log'"
mkdir -p "$TMP/empty_run"
"$PY" "$PLOT" "$TMP/empty_run" >/dev/null 2>"$TMP/err2.log"
rc=$?
check "RUN_DIR without metrics.h5: exit 2 with a message" bash -c "[ $rc -eq 2 ] && grep -q 'metrics.h5: not found' '$TMP/err2.log'"

finish
