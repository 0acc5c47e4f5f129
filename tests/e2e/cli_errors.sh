#!/usr/bin/env bash
# cli_errors.sh — the real `spikemesh` binary on bad inputs and interruptions. Every error case
# must exit non-zero (not by a signal, no core dump) with exactly one stderr line starting
# "spikemesh: error:" that names the culprit (file, flag or key), and the checkpoint cases must
# leave the good files of the run untouched. Also: SIGUSR1 during training checkpoints at a step
# boundary, exits 0, and `--resume auto` finishes the run.
# Usage: tests/e2e/cli_errors.sh [path/to/spikemesh]   (default: $BIN, else build/bin/spikemesh)
# Needs python3 ($PY, default /usr/bin/python3) with h5py and numpy (crafting bad HDF5 files).
# Exits non-zero on any failure; last line: "cli_errors: N passed, M failed".
set -u

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=$(realpath "${1:-${BIN:-$ROOT/build/bin/spikemesh}}")
PY=${PY:-/usr/bin/python3}
export OMP_NUM_THREADS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_ess_singleton_isolated=1  # single process: no orted, faster start-up
T=$(mktemp -d /tmp/spikemesh_cli_errors.XXXXXX)
trap 'rm -rf "$T"' EXIT
cd "$T" || exit 1  # core files, if any, would land here

PASS=0
FAIL=0
pass() { PASS=$((PASS + 1)); echo "ok   $1"; }
fail() { FAIL=$((FAIL + 1)); echo "FAIL $1: $2"; }
# check NAME DETAIL COMMAND...: passes when COMMAND succeeds; DETAIL says what went wrong.
check() {
  local name=$1 detail=$2
  shift 2
  if "$@"; then pass "$name"; else fail "$name" "$detail"; fi
}

if [ ! -x "$BIN" ]; then echo "cli_errors: $BIN not built"; echo "cli_errors: 0 passed, 1 failed"; exit 1; fi
if ! "$PY" -c "import h5py, numpy" 2>/dev/null; then
  echo "cli_errors: $PY lacks h5py/numpy (make deps)"; echo "cli_errors: 0 passed, 1 failed"; exit 1
fi

# expect_error NAME NEEDLE... -- COMMAND...: non-zero exit (< 128), no core, one stderr line
# "spikemesh: error: ..." containing every NEEDLE; COMMAND is killed after 120 s (a hang).
expect_error() {
  local name=$1 needles=() rc why=""
  shift
  while [ "$1" != "--" ]; do needles+=("$1"); shift; done
  shift
  rm -f "$T"/core*
  timeout 120 "$@" >"$T/stdout" 2>"$T/err" </dev/null
  rc=$?
  local lines first
  lines=$(grep -c '' "$T/err")
  first=$(head -n 1 "$T/err")
  if [ "$rc" -eq 124 ]; then why="still running after 120 s (killed)"
  elif [ "$rc" -eq 0 ]; then why="exit code 0"
  elif [ "$rc" -ge 128 ]; then why="killed by signal $((rc - 128))"
  elif ls "$T"/core* >/dev/null 2>&1; then why="core dumped"
  elif [ "$lines" -ne 1 ]; then why="$lines stderr lines (want 1)"
  elif [[ "$first" != "spikemesh: error:"* ]]; then why="stderr does not start with 'spikemesh: error:'"
  else
    for n in "${needles[@]}"; do
      [[ "$first" == *"$n"* ]] || { why="message does not name '$n'"; break; }
    done
  fi
  if [ -z "$why" ]; then
    pass "$name"
  else
    fail "$name" "$why (exit $rc)"
    sed 's/^/       stderr: /' "$T/err" | head -n 5
  fi
}

sums() { (cd "$1" && md5sum ckpt_*.h5 metrics.h5 config.toml 2>/dev/null); }

# ---- inputs ------------------------------------------------------------------------------
"$PY" - "$T" <<'EOF' || { echo "cli_errors: cannot craft datasets"; echo "cli_errors: 0 passed, 1 failed"; exit 1; }
import sys, h5py, numpy as np
d = sys.argv[1]
rng = np.random.default_rng(0)
def dataset(path, ntr=32, nte=16, xdtype=np.uint8, ydtype=np.int64, xrank=4, classes=10):
    f = h5py.File(path, "w")
    f.attrs["num_classes"] = classes; f.attrs["layout"] = "NCHW"; f.attrs["T"] = 0
    f.attrs["x_scale"] = 1 / 255.0
    for s, n in (("train", ntr), ("test", nte)):
        shape = (n, 1, 28, 28) if xrank == 4 else (n, 784)
        f[s + "/x"] = (rng.random(shape) * 255).astype(xdtype)
        f[s + "/y"] = rng.integers(0, classes, n).astype(ydtype)
    return f
dataset(f"{d}/good.h5").close()
with h5py.File(f"{d}/no_datasets.h5", "w") as f:
    f.attrs["num_classes"] = 10; f.attrs["layout"] = "NCHW"
    f["images"] = np.zeros((4, 1, 28, 28), np.uint8)
with dataset(f"{d}/len_mismatch.h5") as f:
    del f["train/y"]; f["train/y"] = np.zeros(31, np.int64)
with dataset(f"{d}/label_range.h5") as f:
    y = f["test/y"][()]; y[5] = 10; f["test/y"][...] = y
with dataset(f"{d}/negative_label.h5") as f:
    y = f["train/y"][()]; y[0] = -1; f["train/y"][...] = y
dataset(f"{d}/x_f64.h5", xdtype=np.float64).close()
dataset(f"{d}/y_float.h5", ydtype=np.float32).close()
dataset(f"{d}/x_rank2.h5", xrank=2).close()
dataset(f"{d}/classes3.h5", classes=3).close()
# Truncated: the file cut in the middle of /train/x's data.
big = f"{d}/big.h5"
dataset(big, ntr=64).close()
with h5py.File(big) as f:
    cut = f["train/x"].id.get_offset() + 64 * 784 // 2
with open(big, "rb") as src, open(f"{d}/truncated.h5", "wb") as dst:
    dst.write(src.read(cut))
open(f"{d}/not_hdf5.h5", "w").write("this is not HDF5\n")
EOF

# Common flags; each call adds --batch-size and --output (CLI11 refuses a flag given twice).
TRAIN=("$BIN" train --var C=4 --log-every 1)
OUT=(--output "$T/out")
RUN=("${TRAIN[@]}" --batch-size 8 "${OUT[@]}")

expect_error "missing dataset file" "$T/missing.h5" -- "${RUN[@]}" --data "$T/missing.h5"
expect_error "file is not HDF5" "$T/not_hdf5.h5" -- "${RUN[@]}" --data "$T/not_hdf5.h5"
expect_error "HDF5 without the expected datasets" "$T/no_datasets.h5" "/train/x" -- \
  "${RUN[@]}" --data "$T/no_datasets.h5"
expect_error "x/y length mismatch" "$T/len_mismatch.h5" "/train/y" -- "${RUN[@]}" --data "$T/len_mismatch.h5"
expect_error "label out of range" "$T/label_range.h5" "/test/y[5]" -- "${RUN[@]}" --data "$T/label_range.h5"
expect_error "negative label" "$T/negative_label.h5" "/train/y[0]" -- "${RUN[@]}" --data "$T/negative_label.h5"
expect_error "x of dtype f64" "$T/x_f64.h5" "/train/x" -- "${RUN[@]}" --data "$T/x_f64.h5"
expect_error "y of dtype f32" "$T/y_float.h5" "/train/y" -- "${RUN[@]}" --data "$T/y_float.h5"
expect_error "x of wrong rank" "$T/x_rank2.h5" "/train/x" -- "${RUN[@]}" --data "$T/x_rank2.h5"
expect_error "truncated HDF5 dataset" "$T/truncated.h5" -- "${RUN[@]}" --data "$T/truncated.h5"
expect_error "classes differ from the model" "$T/classes3.h5" "fmnist_csnn" -- "${RUN[@]}" --data "$T/classes3.h5"
expect_error "dataset shape differs from the model" "$T/good.h5" "cifar10dvs_vgg" -- \
  "$BIN" train --model cifar10dvs_vgg --data "$T/good.h5" "${OUT[@]}"
check "bad inputs write nothing" "$T/out was created" [ ! -e "$T/out" ]

# ---- flags and config ----------------------------------------------------------------------
expect_error "unknown flag" "--bogus-flag" -- "${RUN[@]}" --data "$T/good.h5" --bogus-flag 3
printf 'data = "%s"\nbatch_sise = 4\n' "$T/good.h5" >"$T/unknown_key.toml"
expect_error "unknown config key" "$T/unknown_key.toml" "batch_sise" -- "$BIN" train --config "$T/unknown_key.toml"
printf 'data = "%s"\nepochs = "many"\n' "$T/good.h5" >"$T/bad_type.toml"
expect_error "config value of the wrong type" "$T/bad_type.toml" "epochs" -- "$BIN" train --config "$T/bad_type.toml"
expect_error "missing config file" "$T/nope.toml" -- "$BIN" train --config "$T/nope.toml"
expect_error "batch size 0" "--batch-size" -- "${TRAIN[@]}" "${OUT[@]}" --data "$T/good.h5" --batch-size 0
expect_error "batch size negative" "--batch-size" -- "${TRAIN[@]}" "${OUT[@]}" --data "$T/good.h5" --batch-size -4
expect_error "batch size not a number" "--batch-size" -- "${TRAIN[@]}" "${OUT[@]}" --data "$T/good.h5" --batch-size eight
expect_error "epochs negative" "--epochs" -- "${RUN[@]}" --data "$T/good.h5" --epochs -1
# T (time steps) >= 1 wherever it is given; 0 used to mean "the spec's T" and trained.
expect_error "train --T 0" "--T" ">= 1" -- "${RUN[@]}" --data "$T/good.h5" --T 0
expect_error "train --T negative" "--T" ">= 1" -- "${RUN[@]}" --data "$T/good.h5" --T -3
printf 'data = "%s"\nT = -1\n' "$T/good.h5" >"$T/t_neg.toml"
expect_error "config T negative" "$T/t_neg.toml" "--T" -- "$BIN" train --config "$T/t_neg.toml"
expect_error "model --T 0" "--T" ">= 1" -- "$BIN" model --model fmnist_csnn --T 0
expect_error "model --T not a number" "--T" -- "$BIN" model --model fmnist_csnn --T four
expect_error "bench --T 0" "--T" ">= 1" -- "$BIN" bench --model fmnist_csnn --var C=4 --T 0 --steps 1 --warmup 0
expect_error "bench --T negative" "--T" ">= 1" -- "$BIN" bench --model fmnist_csnn --var C=4 --T -1 --steps 1 --warmup 0
# A spec whose T is a variable: --var can make the spec's own T < 1.
sed -e 's/^T = [0-9]*$/T = "S"/' -e 's/^\[vars\]$/[vars]\nS = 2/' "$ROOT/input/models/fmnist_csnn.toml" >"$T/t_var.toml"
expect_error "spec T from --var S=0" "$T/t_var.toml" "'T'" -- "$BIN" model --model-spec "$T/t_var.toml" --var S=0
expect_error "batch larger than the training set" "$T/good.h5" -- "${TRAIN[@]}" "${OUT[@]}" --data "$T/good.h5" --batch-size 64
expect_error "unknown optimizer" "--optimizer" "lamb" -- "${RUN[@]}" --data "$T/good.h5" --optimizer lamb
expect_error "negative momentum" "momentum" -- "${RUN[@]}" --data "$T/good.h5" --optimizer sgd --momentum -1
expect_error "unknown model" "no_such_model" -- "$BIN" train --model no_such_model --data "$T/good.h5"
expect_error "unwritable output (path under a file)" "/etc/hostname/x" -- \
  "${TRAIN[@]}" --batch-size 8 --data "$T/good.h5" --output /etc/hostname/x
expect_error "unwritable output (/proc)" "/proc/forbidden" -- "${TRAIN[@]}" --batch-size 8 --data "$T/good.h5" --output /proc/forbidden

# ---- checkpoints ---------------------------------------------------------------------------
# A good run: 2 epochs x 4 steps, checkpoints at 3, 6 and 8.
if "${RUN[@]}" --data "$T/good.h5" --epochs 2 --ckpt-every 3 --run-name good >"$T/out.log" 2>&1 &&
  [ -f "$T/out/good/ckpt_000000008.h5" ]; then
  pass "good run"
else
  fail "good run" "$(tail -3 "$T/out.log")"
fi
GOOD="$T/out/good"
BEFORE=$(sums "$GOOD")

# Corrupted checkpoint: bytes flipped inside /params/conv_fc.0.weight of a copy.
"$PY" - "$GOOD/ckpt_000000008.h5" "$T/corrupt.h5" <<'EOF'
import sys, shutil, h5py
src, dst = sys.argv[1:3]
shutil.copy(src, dst)
with h5py.File(dst, "r") as f:
    off = f["params/conv_fc.0.weight"].id.get_offset()
with open(dst, "r+b") as f:
    f.seek(off + 8); b = bytearray(f.read(8)); f.seek(off + 8); f.write(bytes(x ^ 0xA5 for x in b))
EOF
expect_error "resume from a corrupted checkpoint" "$T/corrupt.h5" "/params/conv_fc.0.weight" -- \
  "${RUN[@]}" --data "$T/good.h5" --epochs 3 --run-name good --resume "$T/corrupt.h5"
check "corrupted resume leaves the run intact" "files changed" [ "$(sums "$GOOD")" = "$BEFORE" ]

# An incomplete checkpoint (no `complete` attribute) named explicitly.
"$PY" - "$GOOD/ckpt_000000008.h5" "$T/incomplete.h5" <<'EOF'
import sys, shutil, h5py
shutil.copy(sys.argv[1], sys.argv[2])
with h5py.File(sys.argv[2], "r+") as f:
    del f["meta"].attrs["complete"]
EOF
expect_error "resume from an incomplete checkpoint" "$T/incomplete.h5" "incomplete" -- \
  "${RUN[@]}" --data "$T/good.h5" --epochs 3 --run-name good --resume "$T/incomplete.h5"
expect_error "resume from a missing checkpoint" "$T/no_ckpt.h5" -- \
  "${RUN[@]}" --data "$T/good.h5" --epochs 3 --run-name good --resume "$T/no_ckpt.h5"

# A checkpoint of a different model (a spec named "other", same input shape).
cat >"$T/other.toml" <<'EOF'
[model]
name = "other"
input = [1, 28, 28]
num_classes = 10
T = 2
loss = "mean_ce"
input_kind = "static"

[[unit]]
name = "net"
layers = [
  { type = "flatten" },
  { type = "linear", in_features = 784, out_features = 10 },
  { type = "lif" },
]
EOF
if "$BIN" train --model-spec "$T/other.toml" --data "$T/good.h5" --batch-size 8 --output "$T/out" \
  --run-name other --max-steps 2 >"$T/out.log" 2>&1 && [ -f "$T/out/other/ckpt_000000002.h5" ]; then
  pass "run of another model"
else
  fail "run of another model" "$(tail -3 "$T/out.log")"
fi
expect_error "checkpoint of a different model" "other" "fmnist_csnn" -- \
  "${RUN[@]}" --data "$T/good.h5" --epochs 3 --run-name good --resume "$T/out/other/ckpt_000000002.h5"
check "foreign resume leaves the run intact" "files changed" [ "$(sums "$GOOD")" = "$BEFORE" ]

# Disk full while checkpointing: a file-size limit between metrics.h5 and one checkpoint (at C=8
# a checkpoint is ~3x metrics.h5), SIGXFSZ ignored so a write fails with EFBIG as a full disk
# fails with ENOSPC. The previous checkpoint survives and the run resumes from it later.
DF=("$BIN" train --var C=8 --batch-size 8 --data "$T/good.h5" "${OUT[@]}" --run-name full --log-every 1)
"${DF[@]}" --epochs 1 >"$T/out.log" 2>&1 || fail "disk-full set-up run" "$(tail -2 "$T/out.log")"
FULL="$T/out/full"
CKPT_B=$(stat -c %s "$FULL/ckpt_000000004.h5" 2>/dev/null || echo 0)
META_B=$(stat -c %s "$FULL/metrics.h5" 2>/dev/null || echo 0)
LIMIT_KB=$(((META_B + CKPT_B) / 2 / 1024))
BEFORE=$(sums "$FULL")
if [ $((META_B + 65536)) -ge $((LIMIT_KB * 1024)) ]; then
  fail "disk full while checkpointing" "metrics.h5 ($META_B B) too close to the limit ($LIMIT_KB KiB); checkpoint $CKPT_B B"
else
  # shellcheck disable=SC2016  # $1/$@ expand in the inner shell
  expect_error "disk full while checkpointing" "ckpt_000000005.h5" -- \
    bash -c 'trap "" XFSZ; ulimit -f "$1"; shift; exec "$@"' _ "$LIMIT_KB" \
    "${DF[@]}" --epochs 2 --ckpt-every 1 --resume auto
fi
no_tmp_files() { ! compgen -G "$1/*.tmp" >/dev/null; }
check "no .tmp after disk full" "$(ls "$FULL")" no_tmp_files "$FULL"
check "checkpoints untouched by disk full" "$(ls "$FULL")" \
  [ "$(cd "$FULL" && md5sum ckpt_*.h5)" = "$(echo "$BEFORE" | grep ckpt_)" ]
if "$BIN" ckpt info "$FULL/ckpt_000000004.h5" >"$T/info" 2>"$T/err" && grep -q "step 4," "$T/info"; then
  pass "previous checkpoint loadable after disk full"
else
  fail "previous checkpoint loadable after disk full" "ckpt info failed"
fi
if "${DF[@]}" --epochs 2 --resume auto >"$T/out.log" 2>&1 &&
  grep -q "resumed from $FULL/ckpt_000000004.h5" "$FULL/log.txt" && [ -f "$FULL/ckpt_000000008.h5" ]; then
  pass "resume after disk full"
else
  fail "resume after disk full" "$(tail -3 "$T/out.log")"
fi

# ---- a real signal -----------------------------------------------------------------------
# SIGUSR1 after the first progress line: finish the step, checkpoint, exit 0; then resume.
"${RUN[@]}" --data "$T/good.h5" --epochs 500 --run-name sig >"$T/sig.log" 2>&1 &
PID=$!
for _ in $(seq 1 600); do
  grep -q "step 1/" "$T/out/sig/log.txt" 2>/dev/null && break
  sleep 0.05
done
kill -USR1 "$PID" 2>/dev/null
for _ in $(seq 1 1200); do kill -0 "$PID" 2>/dev/null || break; sleep 0.1; done  # at most 120 s
if kill -0 "$PID" 2>/dev/null; then kill -TERM "$PID"; sleep 2; kill -KILL "$PID" 2>/dev/null; fi
wait "$PID"
RC=$?
CK=$(ls "$T/out/sig"/ckpt_*.h5 2>/dev/null | tail -n 1)
if [ "$RC" -eq 0 ] && [ -n "$CK" ] && grep -q "stop requested" "$T/out/sig/log.txt" &&
  ! grep -q "step 2000/2000" "$T/out/sig/log.txt"; then
  pass "SIGUSR1 checkpoints and exits 0"
else
  fail "SIGUSR1 checkpoints and exits 0" "exit $RC, checkpoint '${CK}', $(tail -2 "$T/sig.log")"
fi
STEP=$(basename "${CK:-ckpt_0.h5}" .h5 | sed 's/ckpt_0*//')
STEP=${STEP:-0}
if "${RUN[@]}" --data "$T/good.h5" --epochs $(((STEP + 7) / 4 + 1)) --run-name sig --resume auto \
  >"$T/sig2.log" 2>&1 && grep -q "resumed from $CK" "$T/out/sig/log.txt"; then
  pass "resume after SIGUSR1"
else
  fail "resume after SIGUSR1" "$(tail -3 "$T/sig2.log")"
fi

echo "cli_errors: $PASS passed, $FAIL failed"
[ "$FAIL" -eq 0 ]
