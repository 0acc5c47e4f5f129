#!/usr/bin/env bash
# slurm_job.sh — end-to-end check of jobs/ on a real one-node Slurm (jobs/local_slurm.sh):
#  1. `sbatch --wait` of jobs/train_dp.sbatch with 2 ranks (dp 2) on a Fashion-MNIST subset:
#     exit 0, metrics.h5 with every step, a checkpoint, the log names 2 ranks;
#  2. the early-warning path: a longer job gets USR1 (`scancel -s USR1 -b`, what
#     `--signal=B:USR1@120` does), checkpoints, exits 0, requeues itself, and the requeued job
#     resumes from that checkpoint and finishes all its steps;
#  3. jobs/import_train.sbatch: a generated mini CIFAR10-DVS imported by 2 tasks, then trained on.
# Needs root (slurmd, munged) and Debian's slurm-wlm + munge (make deps); without them it
# says why and exits 0 (skipped). Starts the local Slurm only if it is not running, and then
# stops exactly what it started. Writes only under a temporary directory. ~1–3 minutes.
# Every wait is bounded ($SM_SLURM_TIMEOUT s per job phase, default 300): on a timeout, or a
# job pending for a reason that cannot clear (PartitionConfig: the node has too few CPUs), it
# prints the job's state, pending reason and `scontrol show job`, cancels the job, stops what
# it started and fails. The jobs run $BIN (SM_BIN), not necessarily build/bin/spikemesh.
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
TIMEOUT="${SM_SLURM_TIMEOUT:-300}"   # seconds, per wait on a job
started=0
JOBS=()                              # every job this script submitted
TMP=""
cleanup() {
  local j ids=("${JOBS[@]}")
  if [ ${#ids[@]} -gt 0 ]; then
    scancel "${ids[@]}" 2>/dev/null
    # Let the cancelled jobs' steps end (KillWait=10) before the daemons go away.
    for _ in $(seq 150); do
      squeue -h -j "$(IFS=,; echo "${ids[*]}")" -t PENDING,RUNNING,SUSPENDED,COMPLETING,CONFIGURING 2>/dev/null | grep -q . || break
      sleep 0.2
    done
  fi
  if [ -n "$TMP" ]; then   # anything still running from our job (its command lines name $TMP)
    for j in $(pgrep -f -- "$TMP/" 2>/dev/null); do
      [ "$j" != $$ ] && { echo "  slurm_job: killing leftover process $j"; kill -9 "$j" 2>/dev/null; }
    done
  fi
  [ "$started" = 1 ] && timeout 60 "$ROOT/jobs/local_slurm.sh" stop >/dev/null
  [ -n "$TMP" ] && rm -rf "$TMP"
}
trap cleanup EXIT
if ! timeout 30 sinfo -h >/dev/null 2>&1; then
  timeout 120 "$ROOT/jobs/local_slurm.sh" start >/dev/null || { bad "local Slurm starts"; finish; }
  started=1
fi
TMP="$(mktemp -d "${TMPDIR:-/tmp}/slurm_job.XXXXXX")"
ok "local Slurm up ($(sinfo -h -o '%D node(s) %c cpus %T'))"

# The test job has 2 tasks x 1 CPU: a node with fewer CPUs leaves it PENDING (PartitionConfig).
node_cpus=$(sinfo -h -o %c 2>/dev/null | head -1)
host_cpus=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
if [ "${node_cpus:-0}" -lt 2 ]; then
  if [ "$host_cpus" -lt 2 ]; then echo "slurm_job: skipped (the 2-rank job needs 2 CPUs; this machine has $host_cpus)"; exit 0; fi
  bad "the Slurm node has ${node_cpus:-?} CPU(s) but this machine has $host_cpus (a local Slurm started with a wrong count? jobs/local_slurm.sh stop; then rerun)"
  finish
fi

# job_field ID KEY: one field of `scontrol show job` ("" once the job is gone).
job_field() { scontrol show job -o "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p" | head -1; }
# job_report ID: what the job is doing and why (for a failure message).
job_report() {
  echo "       squeue: $(squeue -h -j "$1" -o '%i %T %r' 2>/dev/null | head -1)"
  scontrol show job "$1" 2>/dev/null | sed 's/^/       /'
  echo "       node: $(sinfo -h -N -o '%N %T cpus(A/I/O/T)=%C' 2>/dev/null | head -1)"
  [ -f "$TMP/slurm-$1.out" ] && tail -n 10 "$TMP/slurm-$1.out" | sed 's/^/       out: /'
}
# give_up ID MESSAGE: fail with the job's state and reason, cancel it, stop (cleanup), exit.
give_up() { bad "$2"; job_report "$1"; scancel "$1" 2>/dev/null; finish; }
# wait_job ID SECONDS: until the job ends; 0 when it COMPLETED with exit code 0:0, else 1.
# Gives up (never returns) after SECONDS, or when it pends for a reason that cannot clear.
wait_job() {
  local id=$1 deadline=$(( $(date +%s) + $2 )) st reason stuck=0
  while :; do
    st=$(job_field "$id" JobState)
    case "$st" in
      COMPLETED) [ "$(job_field "$id" ExitCode)" = 0:0 ]; return ;;
      FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|BOOT_FAIL|DEADLINE|PREEMPTED)
        echo "       job $id ended $st (exit $(job_field "$id" ExitCode))"; return 1 ;;
      "") give_up "$id" "job $id vanished from Slurm before it was seen to end" ;;
      PENDING)
        reason=$(job_field "$id" Reason)
        case "$reason" in
          PartitionConfig|PartitionNodeLimit|PartitionTimeLimit|BadConstraints)
            stuck=$((stuck + 1))
            [ $stuck -ge 10 ] && give_up "$id" "job $id can never start: PENDING ($reason)" ;;
          *) stuck=0 ;;
        esac ;;
    esac
    [ "$(date +%s)" -ge "$deadline" ] && give_up "$id" "job $id did not end within $2 s (state ${st:-?})"
    sleep 0.5
  done
}
# wait_for_line ID FILE PATTERN SECONDS: until FILE has a line matching PATTERN (grep -E).
wait_for_line() {
  local deadline=$(( $(date +%s) + $4 ))
  until grep -qE "$3" "$2" 2>/dev/null; do
    [ "$(date +%s)" -ge "$deadline" ] && give_up "$1" "job $1: no line matching '$3' within $4 s"
    sleep 0.2
  done
}

# A small dataset: 1280 train / 500 test Fashion-MNIST images.
SRC="$ROOT/input/fashion_mnist.h5"
if [ ! -f "$SRC" ]; then
  SRC="$TMP/fmnist.h5"; timeout 300 "$BIN" data fashion-mnist --out "$SRC" >/dev/null || { bad "import"; finish; }
fi
DATA="$TMP/fmnist_small.h5"
timeout 120 "$PY" - "$SRC" "$DATA" <<'PYEOF' || { bad "dataset subset"; finish; }
import sys, h5py
with h5py.File(sys.argv[1], "r") as s, h5py.File(sys.argv[2], "w") as d:
    for k, v in s.attrs.items(): d.attrs[k] = v
    for split, n in (("train", 1280), ("test", 500)):
        x = s[split + "/x"]
        d.create_dataset(split + "/x", data=x[:n], chunks=(1,) + x.shape[1:])
        d.create_dataset(split + "/y", data=s[split + "/y"][:n])
PYEOF

submit() {  # submit SBATCH-ARGS... -- TRAIN-ARGS...; prints the job id (never waits for the job)
  local sb=() ; while [ "$1" != -- ]; do sb+=("$1"); shift; done; shift
  (cd "$ROOT" && SM_BIN="$BIN" SM_OUTPUT="$TMP/out" timeout 60 sbatch --parsable --ntasks-per-node=2 --cpus-per-task=1 \
     --output="$TMP/slurm-%j.out" "${sb[@]}" jobs/train_dp.sbatch \
     --model fmnist_csnn --var C=4 --data "$DATA" --batch-size 16 --log-every 10 "$@")
}

# 1. A real job, waited for (bounded).
jid=$(submit -- --epochs 1 --ckpt-every 20) && [ -n "$jid" ] || { bad "sbatch train_dp.sbatch"; finish; }
jid=${jid%%;*}; JOBS+=("$jid")
if wait_job "$jid" "$TIMEOUT"; then ok "sbatch train_dp.sbatch (2 ranks) completes with exit 0 (job $jid)"; else
  bad "sbatch train_dp.sbatch exits 0 (job $jid)"; job_report "$jid"; finish; fi
RUN="$TMP/out/$jid"
steps=$(timeout 60 "$PY" -c "import h5py,sys; print(len(h5py.File(sys.argv[1])['step/loss']))" "$RUN/metrics.h5" 2>/dev/null)
[ "$steps" = 40 ] && ok "metrics.h5 holds all 40 steps (1280 / (16 x 2))" || bad "metrics.h5 holds 40 steps (got '$steps')"
ls "$RUN"/ckpt_*.h5 >/dev/null 2>&1 && ok "checkpoint written" || bad "checkpoint written"
grep -q "2 ranks" "$TMP/slurm-$jid.out" && ok "job log reports 2 ranks" || bad "job log reports 2 ranks"

# 2. Early warning: USR1 -> checkpoint, exit 0, requeue, resume, finish.
jid=$(submit -- --epochs 40 --ckpt-every 1000) && [ -n "$jid" ] || { bad "submit long job"; finish; }
jid=${jid%%;*}; JOBS+=("$jid")
out="$TMP/slurm-$jid.out"
wait_for_line "$jid" "$out" "^epoch 1/40 step 20/" "$TIMEOUT"
scancel -s USR1 -b "$jid"
wait_for_line "$jid" "$out" "requeueing $jid" 120
ok "USR1: step checkpointed, exited 0, job requeued"
ckpt_step=$(sed -n 's/.*checkpointing at step \([0-9]*\).*/\1/p' "$out" | head -1)
# Requeued jobs wait for a begin time (~2 min): once Slurm has requeued it, let it start now.
deadline=$(( $(date +%s) + 60 ))
until [ "$(job_field "$jid" Restarts)" -ge 1 ] 2>/dev/null; do
  [ "$(date +%s)" -ge "$deadline" ] && give_up "$jid" "job $jid was not requeued by Slurm within 60 s"
  sleep 0.2
done
# slurmd refuses a launch whose credential dates from the second the old one was revoked
# ("Job credential revoked"): start it a moment later.
sleep 2
scontrol update jobid="$jid" StartTime=now >/dev/null 2>&1
wait_job "$jid" "$TIMEOUT" || { bad "requeued job $jid completes with exit 0"; job_report "$jid"; }
grep -q "resumed from .*ckpt_0*${ckpt_step}.h5 at step ${ckpt_step}" "$out" \
  && ok "requeued job resumed from the checkpoint at step $ckpt_step" || bad "requeued job resumed at step $ckpt_step"
grep -q "^done: 1600 steps" "$out" && ok "resumed job finished all 1600 steps" || { bad "resumed job finished 1600 steps"; tail -5 "$out"; }

# 3. jobs/import_train.sbatch: a generated mini CIFAR10-DVS imported by both tasks, then trained on.
"$PY" "$ROOT/tests/ref/events_ref.py" gen cifar10-dvs "$TMP/c10" --per-class 4 --seed 9 >/dev/null || { bad "generate"; finish; }
jid=$(cd "$ROOT" && SM_BIN="$BIN" SM_OUTPUT="$TMP/out" SM_FROM="$TMP/c10" SM_DATA="$TMP/c10.h5" \
  SM_IMPORT_ARGS="--T 4 --size 48 --train-ratio 0.5" timeout 60 sbatch --parsable --ntasks-per-node=2 --cpus-per-task=1 \
  --output="$TMP/slurm-%j.out" jobs/import_train.sbatch --model cifar10dvs_vgg --T 4 --batch-size 2 --max-steps 1 \
  --device cpu) && [ -n "$jid" ] || { bad "sbatch import_train.sbatch"; finish; }
jid=${jid%%;*}; JOBS+=("$jid")
out="$TMP/slurm-$jid.out"
if wait_job "$jid" "$TIMEOUT" && grep -q "wrote $TMP/c10.h5: 20 train + 20 test samples" "$out" &&
  grep -q "^done: 1 steps" "$out"; then ok "sbatch import_train.sbatch imports with 2 tasks, then trains (job $jid)"
else bad "sbatch import_train.sbatch (job $jid)"; tail -n 5 "$out"; fi
finish
