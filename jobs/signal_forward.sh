# signal_forward.sh — sourced by the sbatch scripts: run a job step so that Slurm's early
# warning signal reaches the trainer, and requeue the job when it stopped early.
#   sm_run_step CMD...   runs CMD in the background, forwards USR1/TERM to it, waits.
# With `#SBATCH --signal=B:USR1@120` Slurm signals only this batch shell 120 s before the
# time limit; the trap forwards it to srun, which passes it to every task; the trainer
# finishes its step, checkpoints and exits 0; the script then requeues the job, and the
# requeued job (same SLURM_JOB_ID, same output/<job id>) resumes with --resume auto.
SM_SIGNALLED=0
sm_run_step() {
  "$@" &
  local pid=$!
  trap 'SM_SIGNALLED=1; echo "job: signal received, asking the step to checkpoint and stop"; kill -USR1 '"$pid"' 2>/dev/null' USR1
  trap 'SM_SIGNALLED=1; kill -TERM '"$pid"' 2>/dev/null' TERM
  local rc=0
  while true; do
    if wait "$pid"; then rc=0; else rc=$?; fi   # (set -e safe)
    kill -0 "$pid" 2>/dev/null || break   # wait was interrupted by a trapped signal: wait again
  done
  trap - USR1 TERM
  if (( rc == 0 && SM_SIGNALLED == 1 )) && [[ -n ${SLURM_JOB_ID:-} && ${SM_NO_REQUEUE:-0} != 1 ]]; then
    echo "job: stopped early with a checkpoint; requeueing $SLURM_JOB_ID"
    scontrol requeue "$SLURM_JOB_ID" || echo "job: requeue failed (is the job --requeue?)"
  fi
  return $rc
}
