#!/usr/bin/env bash
# chaos.sh — kills at random moments on the virtual Slurm cluster (tests/cluster/virtual_cluster.sh),
# resubmissions with --resume auto until the run reaches its last step, then the proof:
#   a 2-rank data-parallel run (SM_CHAOS_MODE=pp: 2 pipeline stages, 1F1B, 2 microbatches) of
#   fmnist_csnn (C=8, T=4, fp64, global batch 6, a checkpoint every 4 steps) is submitted with
#   jobs/train_dp.sbatch; in each of TRIALS rounds, at a random moment
#   after it has started stepping (seeded, printed), either one rank is SIGKILLed or — once, late —
#   a whole node (node3: its processes and network, `kill-node`); the job must fail, every
#   complete checkpoint of the run must verify, and the run is resubmitted — on two nodes, or on
#   one node with both ranks ("fewer nodes"; after the node loss always on node1-2), dp 2 every
#   time (pp 2 likewise) so that the arithmetic is that of the reference; the last submission runs
#   to the end;
#   checkpoints are written in the background (--ckpt-async auto), each slowed down by
#   SM_CHAOS_SLOW_WRITE_MS (default 5) per tensor (test hook SPIKEMESH_TEST_SLOW_BACKGROUND_MS) so
#   that kills land during writes too (each such kill is named);
#   then: every checkpoint a submission resumed from verifies (no damaged one was ever loaded), the
#   final parameters and batch-norm buffers equal an uninterrupted run's bit for bit, and no
#   spikemesh process or job is left.
# Usage (root): BIN=build/bin/spikemesh tests/cluster/chaos.sh [TRIALS=3] [SEED]   (make chaos N=...)
# `make test-cluster` runs 2 trials after its own stages (tests/cluster/run.sh, SM_CHAOS_TRIALS).
# With SM_VC_UP=1 the caller's cluster is used (and left up); otherwise one is brought up and down.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
. "$ROOT/tests/cluster/lib.sh"  # BIN, PY, VC, NET, ok/bad; Open MPI's settings; vc, job_field, wait_job, wait_line
TRIALS="${1:-${SM_CHAOS_TRIALS:-3}}"
SEED="${2:-${SM_CHAOS_SEED:-$(( $(date +%s) % 100000 ))}}"
STEPS="${SM_CHAOS_STEPS:-300}"
MODE="${SM_CHAOS_MODE:-dp}"   # dp: 2 data-parallel ranks; pp: 2 pipeline stages (1F1B, 2 microbatches)
export SPIKEMESH_TEST_SLOW_BACKGROUND_MS="${SM_CHAOS_SLOW_WRITE_MS:-5}"  # kills during background writes too
own_cluster=1; [ "${SM_VC_UP:-0}" = 1 ] && own_cluster=0
[ "$(id -u)" = 0 ] || { echo "chaos: needs root (the virtual cluster)"; exit 1; }
[ -x "$BIN" ] || { echo "chaos: $BIN not built (make)"; exit 1; }
WORK="$ROOT/build/test-cluster/chaos.$$"   # the shared file system
rm -rf "$WORK"; mkdir -p "$WORK"; cd "$WORK" || exit 1
JOBS=()
cleanup() {
  local rc=$?
  [ ${#JOBS[@]} -gt 0 ] && "$VC" exec scancel "${JOBS[@]}" 2>/dev/null
  if [ $own_cluster = 1 ]; then
    "$VC" down >/dev/null 2>&1
    local left; left=$("$VC" leftovers)
    if [ -n "$left" ]; then bad "teardown left:"; echo "$left" | sed 's/^/       /'; fi
  fi
  cd "$ROOT"
  if [ "$fail" -eq 0 ] && [ "${SM_KEEP:-0}" != 1 ]; then rm -rf "$WORK"; else echo "chaos: files kept in $WORK"; fi
  echo "chaos: seed $SEED, $pass passed, $fail failed in $(( $(date +%s) - T0 )) s"
  [ "$fail" -eq 0 ] && [ "$rc" -eq 0 ] && exit 0
  exit 1
}
trap cleanup EXIT
trap 'echo "chaos: interrupted"; exit 1' INT TERM
RANDOM=$SEED
echo "chaos: seed $SEED (rerun: SM_CHAOS_MODE=$MODE tests/cluster/chaos.sh $TRIALS $SEED), $TRIALS trials, $STEPS steps, $MODE"
[ "$MODE" = pp ] && ARGS_MODE=(--pp-schedule 1f1b --pp-microbatches 2) || ARGS_MODE=(--sync-bn)

if [ $own_cluster = 1 ]; then
  export SM_VC_OWNER=$$
  timeout 120 "$VC" up >up.log 2>&1 || { bad "virtual cluster up"; cat up.log; exit 1; }
fi
fmnist_data data.h5 11
ARGS=(--model fmnist_csnn --var C=8 --T 4 --data "$WORK/data.h5" --global-batch-size 6 --precision fp64 --seed 5
      --epochs 100000 --eval-batch-size 12 --log-every 1 --comm-timeout 10 --ckpt-every 4 --max-steps "$STEPS" "${ARGS_MODE[@]}")
# submit NAME NODES: a 2-rank job of run NAME on NODES ("node[1-2]": one rank each; "nodeK": both);
# its id in JID (not printed: a command substitution would lose JOBS, which the cleanup cancels)
submit() {
  local n=2 per=1
  [[ $2 == node? ]] && { n=1; per=2; }
  local id
  local mesh="2 1 1"; [ "$MODE" = pp ] && mesh="1 1 2"
  id=$(cd "$ROOT" && SM_BIN="$BIN" SM_OUTPUT="$WORK/out" SM_RUN="$1" SM_MODE="$MODE" SM_MESH="$mesh" \
    vc sbatch --parsable --no-requeue --nodes $n \
    --ntasks-per-node $per -w "$2" --output="$WORK/slurm-%j.out" jobs/train_dp.sbatch "${ARGS[@]}")
  id=${id%%;*}; JOBS+=("$id"); JID=$id
}
# verify_all RUN: every complete checkpoint of the run verifies (each one verified is listed in
# VERIFIED: a later resume must load one of them; --keep prunes them afterwards)
VERIFIED=" "
verify_all() {
  local f bad_one=""
  for f in out/"$1"/ckpt_*.h5; do
    [ -e "$f" ] || continue
    if timeout 60 "$BIN" ckpt verify "$f" >/dev/null 2>&1; then VERIFIED="$VERIFIED$(basename "$f") "
    else bad_one="$bad_one $(basename "$f")"; fi
  done
  [ -z "$bad_one" ] || { echo "       damaged complete checkpoint(s):$bad_one"; return 1; }
}

echo "== uninterrupted reference [$(( $(date +%s) - T0 )) s]"
submit ref "node[1-2]"; rid=$JID
wait_job "$rid" 600 && ok "uninterrupted 2-rank run to step $STEPS (job $rid)" || { bad "reference run"; exit 1; }

# next_nodes: sets `nodes`, where the next submission runs (before node3 is lost: node2+node3,
# node1+node2 or one node; after: node1+node2 or one of them) — dp 2 every time. Not called in a
# command substitution: a subshell would draw from its own RANDOM and the seed would not replay.
next_nodes() {
  local opts=("node[2-3]" "node[1-2]" "node1")
  [ $node_lost = 1 ] && opts=("node[1-2]" "node1" "node2")
  nodes=${opts[$((RANDOM % ${#opts[@]}))]}
}
kills=0; node_lost=0; resumes=0; during_write=0
nodes="node[2-3]"
submit chaos "$nodes"; jid=$JID
for trial in $(seq "$TRIALS"); do
  delay_ms=$(( 300 + RANDOM % 2500 ))
  # a whole node at most once, from the second trial on, when the job has a rank on node3
  kind=rank; [ $node_lost = 0 ] && [ "$trial" -ge 2 ] && [ "$nodes" = "node[2-3]" ] && [ $((RANDOM % 2)) = 0 ] && kind=node
  if ! wait_line "slurm-$jid.out" "^epoch .* step [0-9]+/" 120; then bad "trial $trial: job $jid never stepped"; job_report "$jid"; break; fi
  sleep "$(printf '%d.%03d' $((delay_ms / 1000)) $((delay_ms % 1000)))"
  step=$(grep -oE "^epoch .* step [0-9]+" "slurm-$jid.out" | tail -n 1 | grep -oE "[0-9]+$")
  if [ "$(job_field "$jid" JobState)" != RUNNING ]; then
    echo "  trial $trial: job $jid ended before the kill (${delay_ms} ms after its first step)"; break
  fi
  inflight=$(ls out/chaos/ckpt_*.h5.tmp 2>/dev/null | head -n 1)
  [ -n "$inflight" ] && during_write=$((during_write + 1))
  if [ $kind = node ]; then
    echo "  trial $trial: ${delay_ms} ms after the first step (near step ${step:-?}): node3 lost (kill-node)"
    "$VC" kill-node 3 >/dev/null; node_lost=1
  else
    victims=($(pgrep -f "^$BIN train .*--run-name chaos"))
    [ ${#victims[@]} -gt 0 ] || { echo "  trial $trial: no rank left to kill"; break; }
    v=${victims[$((RANDOM % ${#victims[@]}))]}
    echo "  trial $trial: ${delay_ms} ms after the first step (near step ${step:-?}): SIGKILL rank pid $v"
    kill -9 "$v" 2>/dev/null
  fi
  [ -n "$inflight" ] && echo "       (a checkpoint was being written in the background: $(basename "$inflight"))"
  if wait_job "$jid" 120; then echo "       (job $jid completed anyway)"; break; fi
  kills=$((kills + 1))  # a kill that made the job fail
  verify_all chaos && ok "trial $trial: job $jid failed after the $kind kill; every complete checkpoint verifies ($(ls out/chaos/ckpt_*.h5 2>/dev/null | wc -l) kept, $(ls out/chaos/*.tmp 2>/dev/null | wc -l) partial)" ||
    bad "trial $trial: a damaged complete checkpoint"
  next_nodes
  submit chaos "$nodes"; jid=$JID; resumes=$((resumes + 1))
  echo "       resubmitted on $nodes as job $jid"
done
if wait_job "$jid" 600; then ok "the last submission (job $jid) ran to step $STEPS"; else bad "the last submission (job $jid)"; fi

# Every checkpoint a submission resumed from had verified after the kill before it (it may be
# pruned by now); the end equals the reference bit for bit.
loaded=$(grep -hoE "resumed from [^ ]+" slurm-*.out 2>/dev/null | awk '{print $3}' | sort -u)
bad_loaded=""
for f in $loaded; do [[ $VERIFIED == *" $(basename "$f") "* ]] || bad_loaded="$bad_loaded $f"; done
[ -z "$bad_loaded" ] && ok "$(echo "$loaded" | grep -c .) checkpoint(s) resumed from, each verified after the kill before it" ||
  bad "a resume loaded a checkpoint not verified as complete:$bad_loaded"
last=$(printf 'out/%s/ckpt_%09d.h5' chaos "$STEPS")
if "$PY" - "out/ref/ckpt_$(printf %09d "$STEPS").h5" "$last" <<'PYEOF'
import sys, h5py
with h5py.File(sys.argv[1]) as a, h5py.File(sys.argv[2]) as b:
    for g in ("params", "buffers"):
        assert sorted(a[g]) == sorted(b[g]), g
        for k in a[g]:
            assert a[g][k][()].tobytes() == b[g][k][()].tobytes(), f"{g}/{k} differs"
PYEOF
then ok "after $kills kill(s) and $resumes resubmission(s): parameters and buffers at step $STEPS equal the uninterrupted run's, bit for bit"
else bad "final state differs from the uninterrupted run"; fi
sleep 1
left=$(pgrep -f "^$BIN train" | wc -l)
queued=$(vc squeue -h 2>/dev/null | wc -l)
[ "$left" = 0 ] && [ "$queued" = 0 ] && ok "nothing left running (no spikemesh process, no job)" ||
  bad "left running: $left spikemesh process(es), $queued job(s)"
[ $kills -ge 1 ] && [ $resumes -ge 1 ] && ok "$kills kill(s) made a job fail, $resumes resubmission(s) resumed" ||
  bad "no chaos happened ($kills effective kills, $resumes resubmissions): the jobs ended before the kills (more SM_CHAOS_STEPS)"
echo "chaos: $TRIALS trials, $kills kills (node lost: $node_lost; $during_write during a background checkpoint write), $resumes resubmissions"
