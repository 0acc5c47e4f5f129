#!/usr/bin/env bash
# slurm_job.sh — end-to-end check of jobs/ on a real one-node Slurm (jobs/local_slurm.sh):
#  1. `sbatch --wait` of jobs/train_dp.sbatch with 2 ranks (dp 2) on a Fashion-MNIST subset:
#     exit 0, metrics.h5 with every step, a checkpoint, the log names 2 ranks;
#  2. the early-warning path: a longer job gets USR1 (`scancel -s USR1 -b`, what
#     `--signal=B:USR1@120` does), checkpoints, exits 0, requeues itself, and the requeued job
#     resumes from that checkpoint and finishes all its steps.
# Needs root (slurmd, munged) and Debian's slurm-wlm + munge (make deps); without them it
# says why and exits 0 (skipped). Starts the local Slurm only if it is not running, and then
# stops exactly what it started. Writes only under a temporary directory. ~1–3 minutes.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BIN="${BIN:-$ROOT/build/bin/spikemesh}"
PY="${PY:-/usr/bin/python3}"
pass=0; fail=0
ok() { pass=$((pass + 1)); echo "  ok   $1"; }
bad() { fail=$((fail + 1)); echo "  FAIL $1"; }
finish() { echo "slurm_job: $pass passed, $fail failed"; [ "$fail" -eq 0 ]; exit $?; }

if [ "$(id -u)" != 0 ] || ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
  echo "slurm_job: skipped (needs root and Debian's slurm-wlm + munge: make deps as root)"; exit 0
fi
[ -x "$BIN" ] || { bad "spikemesh binary $BIN exists"; finish; }

export SM_SLURM_DIR="${SM_SLURM_DIR:-/tmp/spikemesh-slurm}"
export SLURM_CONF="$SM_SLURM_DIR/slurm.conf"
started=0
if ! sinfo -h >/dev/null 2>&1; then
  "$ROOT/jobs/local_slurm.sh" start >/dev/null || { bad "local Slurm starts"; finish; }
  started=1
fi
TMP="$(mktemp -d "${TMPDIR:-/tmp}/slurm_job.XXXXXX")"
cleanup() {
  squeue -h -o %i -n spikemesh-dp 2>/dev/null | xargs -r scancel 2>/dev/null
  [ "$started" = 1 ] && "$ROOT/jobs/local_slurm.sh" stop >/dev/null
  rm -rf "$TMP"
}
trap cleanup EXIT
ok "local Slurm up ($(sinfo -h -o '%D node(s) %c cpus %T'))"

# A small dataset: 1280 train / 500 test Fashion-MNIST images.
SRC="$ROOT/input/fashion_mnist.h5"
if [ ! -f "$SRC" ]; then SRC="$TMP/fmnist.h5"; "$BIN" data fashion-mnist --out "$SRC" >/dev/null || { bad "import"; finish; }; fi
DATA="$TMP/fmnist_small.h5"
"$PY" - "$SRC" "$DATA" <<'PYEOF' || { bad "dataset subset"; finish; }
import sys, h5py
with h5py.File(sys.argv[1], "r") as s, h5py.File(sys.argv[2], "w") as d:
    for k, v in s.attrs.items(): d.attrs[k] = v
    for split, n in (("train", 1280), ("test", 500)):
        x = s[split + "/x"]
        d.create_dataset(split + "/x", data=x[:n], chunks=(1,) + x.shape[1:])
        d.create_dataset(split + "/y", data=s[split + "/y"][:n])
PYEOF

submit() {  # submit SBATCH-ARGS... -- TRAIN-ARGS...
  local sb=() ; while [ "$1" != -- ]; do sb+=("$1"); shift; done; shift
  (cd "$ROOT" && SM_OUTPUT="$TMP/out" sbatch --parsable --ntasks-per-node=2 --cpus-per-task=1 \
     --output="$TMP/slurm-%j.out" "${sb[@]}" jobs/train_dp.sbatch \
     --model fmnist_csnn --var C=4 --data "$DATA" --batch-size 16 --log-every 10 "$@")
}

# 1. A real job, waited for.
jid=$(submit --wait -- --epochs 1 --ckpt-every 20); rc=$?
if [ $rc -eq 0 ]; then ok "sbatch --wait train_dp.sbatch (2 ranks) exits 0 (job $jid)"; else
  bad "sbatch --wait train_dp.sbatch exits 0 (rc $rc)"; cat "$TMP"/slurm-*.out; finish; fi
RUN="$TMP/out/$jid"
steps=$("$PY" -c "import h5py,sys; print(len(h5py.File(sys.argv[1])['step/loss']))" "$RUN/metrics.h5" 2>/dev/null)
[ "$steps" = 40 ] && ok "metrics.h5 holds all 40 steps (1280 / (16 x 2))" || bad "metrics.h5 holds 40 steps (got '$steps')"
ls "$RUN"/ckpt_*.h5 >/dev/null 2>&1 && ok "checkpoint written" || bad "checkpoint written"
grep -q "2 ranks" "$TMP/slurm-$jid.out" && ok "job log reports 2 ranks" || bad "job log reports 2 ranks"

# 2. Early warning: USR1 -> checkpoint, exit 0, requeue, resume, finish.
jid=$(submit -- --epochs 40 --ckpt-every 1000) || { bad "submit long job"; finish; }
out="$TMP/slurm-$jid.out"
for _ in $(seq 600); do grep -q "^epoch 1/40 step 20/" "$out" 2>/dev/null && break; sleep 0.2; done
scancel -s USR1 -b "$jid"
for _ in $(seq 300); do grep -q "requeueing $jid" "$out" 2>/dev/null && break; sleep 0.2; done
grep -q "requeueing $jid" "$out" && ok "USR1: step checkpointed, exited 0, job requeued" || { bad "USR1 leads to requeue"; cat "$out"; finish; }
ckpt_step=$(sed -n 's/.*checkpointing at step \([0-9]*\).*/\1/p' "$out" | head -1)
sleep 1; scontrol update jobid="$jid" StartTime=now >/dev/null 2>&1
for _ in $(seq 900); do squeue -h -j "$jid" 2>/dev/null | grep -q . || break; sleep 0.2; done
grep -q "resumed from .*ckpt_0*${ckpt_step}.h5 at step ${ckpt_step}" "$out" \
  && ok "requeued job resumed from the checkpoint at step $ckpt_step" || bad "requeued job resumed at step $ckpt_step"
grep -q "^done: 1600 steps" "$out" && ok "resumed job finished all 1600 steps" || { bad "resumed job finished 1600 steps"; tail -5 "$out"; }
finish
