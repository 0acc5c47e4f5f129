#!/usr/bin/env bash
# run.sh — `make test-cluster`: spikemesh on a virtual Slurm cluster of 3 nodes
# (tests/cluster/virtual_cluster.sh: one network, UTS and mount namespace per node, Open MPI
# over TCP between them, the project directory as the shared file system, /tmp node-local).
#   0. a node that never registers: `up` fails naming it and why (its link is down)
#   then up over a cluster left by a killed run (torn down first; one in use is refused)
#   1. placement: `srun -N 2 -n 4 plan` shows the hosts; tp across nodes warns naming them; CPU
#      threads per rank follow each node's ranks; GPU by local rank (plan --gpus-per-node);
#      salloc + mpirun (oob and btl on the bridge) spans the nodes too
#   2. srun -N 2 -n 4 train dp x tp (tp inside a node) = one rank (fp64), checkpoint every 4;
#      the checkpoint written from two nodes is read by one rank on the third (resume to step 8)
#   3. sbatch --nodes 2 jobs/train_multinode.sbatch (SM_TP=2, one fake GPU per task bound by
#      Slurm: each local rank shows its own) = one rank
#   4. pp across nodes (stages on node1 and node2) = one rank accumulating its 2 microbatches;
#      dp across 3 nodes with ZeRO-1 = one rank
#   5. faults: more nodes than exist (Slurm's reason), a checkpoint directory on node-local /tmp
#      (refused on every rank before training), MPI's ports blocked to node3 (one line per
#      waiting rank naming the peer, within --comm-timeout)
#   6. scancel --signal=TERM of a 2-node job, and sbatch --time=1 --signal=B:USR1@50: checkpoint,
#      exit 0 on every node
#   7. a lost node (SIGKILL of node3's slurmd and ranks, its link unplugged) in a dp-3 job:
#      the job fails within --comm-timeout naming the lost rank and host; a second submission on
#      the remaining 2 nodes (dp 2, same global batch) resumes from the last complete checkpoint
#      on the one-rank trajectory
# Every reference is a one-rank fp64 run of the same global batch (6). Jobs whose checks name
# hosts ask for them (-w): Slurm may otherwise pick any idle node. Needs root. Every wait is
# bounded; the cluster is torn down on exit (also on failure or timeout) and the run checks that
# nothing of it is left. Writes under build/test-cluster/ (removed unless SM_KEEP=1). ~5 min.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
. "$ROOT/tests/cluster/lib.sh"  # BIN, PY, VC, NET, ok/bad; Open MPI's settings; vc, job_field, job_report, wait_job, wait_line, same_losses
export SM_VC_OWNER=$$   # the clusters this run brings up are its own (a killed run's are torn down by the next)
section() { echo "== $1 [$(( $(date +%s) - T0 )) s]"; }

[ "$(id -u)" = 0 ] || { echo "test-cluster: needs root (network namespaces, slurmd, munged)"; exit 1; }
for c in slurmctld slurmd munged nsenter unshare ip tc; do
  command -v $c >/dev/null || { echo "test-cluster: $c is missing (make deps)"; exit 1; }
done
[ -x "$BIN" ] || { echo "test-cluster: $BIN not built (make)"; exit 1; }

WORK="$ROOT/build/test-cluster/run.$$"   # on the shared file system: every node sees it
rm -rf "$WORK"; mkdir -p "$WORK"; cd "$WORK" || exit 1
JOBS=()
cleanup() {
  local rc=$?
  [ ${#JOBS[@]} -gt 0 ] && "$VC" exec scancel "${JOBS[@]}" 2>/dev/null
  "$VC" down >/dev/null 2>&1
  local left; left=$("$VC" leftovers)
  if [ -n "$left" ]; then echo "  FAIL teardown left:"; echo "$left" | sed 's/^/       /'; fail=$((fail + 1))
  else echo "  ok   teardown: no namespace, daemon or node process left"; pass=$((pass + 1)); fi
  cd "$ROOT"
  if [ "$fail" -eq 0 ] && [ "${SM_KEEP:-0}" != 1 ]; then rm -rf "$WORK"; else echo "test-cluster: files kept in $WORK"; fi
  echo "test-cluster: $pass passed, $fail failed in $(( $(date +%s) - T0 )) s"
  [ "$fail" -eq 0 ] && [ "$rc" -eq 0 ] && exit 0
  exit 1
}
trap cleanup EXIT
trap 'echo "test-cluster: interrupted"; exit 1' INT TERM


section "0. a node that never registers"
if SM_VC_UNPLUGGED=3 SM_VC_REGISTER_TIMEOUT=15 timeout 60 "$VC" up >unplugged.log 2>&1; then
  bad "up with node3 unplugged fails"
elif grep -q "node3 never registered: its network link is down" unplugged.log && grep -qE "node3 (down|unknown)\*? reason" unplugged.log; then
  ok "up with node3's link down fails within 15 s naming node3 (down, not responding) and why"
else bad "the failure names node3 and why"; sed 's/^/       /' unplugged.log; fi
"$VC" down >/dev/null 2>&1

section "cluster up (over one left by a killed run)"
# A run killed before its teardown leaves its cluster up: it belongs to a process that is gone
# (here a shell that has exited), so the next `up` tears it down first; one whose owner is
# still running (this run's) is refused, naming that process.
gone=$(sh -c 'echo $$')
if ! SM_VC_OWNER=$gone timeout 120 "$VC" up >stale.log 2>&1; then bad "virtual cluster up"; cat stale.log; exit 1; fi
if ! timeout 120 "$VC" up >up.log 2>&1; then bad "virtual cluster up over a killed run's"; cat up.log; exit 1; fi
if grep -q "left by process $gone, which is gone" up.log; then ok "a killed run's cluster (process $gone gone) is torn down by the next up"
else bad "up over a killed run's cluster says so"; sed 's/^/       /' up.log; fi
if ! timeout 30 "$VC" up >inuse.log 2>&1 && grep -q "already up.*made by process $$, still running" inuse.log; then
  ok "up over a cluster in use is refused, naming its process"
else bad "up over a cluster in use"; sed 's/^/       /' inuse.log; fi
ok "3 nodes up: $(vc sinfo -h -N -o '%N:%T' | tr '\n' ' ')"

# Data: a Fashion-MNIST-shaped file (36 train / 12 test samples) on the shared file system.
fmnist_data data.h5 7
# ARGS: the run's settings (jobs/train_dp.sbatch adds --output, --run-name, --resume auto);
# TRAIN: the same as a srun command line.
ARGS=(--model fmnist_csnn --var C=4 --T 2 --data "$WORK/data.h5" --global-batch-size 6 --precision fp64 --seed 5
      --epochs 100000 --lr-schedule constant --sync-bn --eval-batch-size 12 --log-every 1 --comm-timeout 10)
TRAIN=(train "${ARGS[@]}" --output "$WORK/out")
section "one-rank reference (150 steps)"
timeout 300 "$BIN" "${TRAIN[@]}" --max-steps 150 --run-name ref >ref.log 2>&1 && ok "one-rank reference" ||
  { bad "one-rank reference"; tail -5 ref.log; exit 1; }
REF="$WORK/out/ref/metrics.h5"

section "1. placement"
vc srun -N 2 -w "node[1-2]" -n 4 "$BIN" plan --mesh-shape 2 2 1 >plan.log 2>&1
if grep -qE "^ +0 +0 +0 +0 +0 +node1$" plan.log && grep -qE "^ +3 +1 +1 +0 +1 +node2$" plan.log &&
   grep -q "4 ranks on 2 nodes" plan.log && ! grep -q "warning" plan.log; then
  ok "srun -N 2 -n 4 plan --mesh-shape 2 2 1: ranks 0,1 on node1, 2,3 on node2, tp inside a node, no warning"
else bad "plan shows the hosts"; cat plan.log; fi
vc srun -N 2 -w "node[1-2]" -n 4 "$BIN" plan --mesh-shape 1 4 1 >plan_tp4.log 2>&1
if [ "$(grep -c 'spans 2 nodes (0,1 on node1, 2,3 on node2): tp traffic' plan_tp4.log)" = 1 ]; then
  ok "tp group across nodes: one warning naming the hosts"
else bad "tp across nodes warns once naming the hosts"; cat plan_tp4.log; fi
vc srun -N 2 -w "node[1-2]" -n 3 env -u OMP_NUM_THREADS "$BIN" plan --mesh-shape 3 1 1 >plan_threads.log 2>&1
if grep -q "node1: ranks 0,1 (2 on the node): 1 thread each" plan_threads.log &&
   grep -q "node2: rank 2 (1 on the node): $(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc) thread" plan_threads.log; then
  ok "threads per rank follow each node's ranks (2 ranks: 1 thread each; 1 rank: every core)"
else bad "threads per rank by node"; cat plan_threads.log; fi
vc srun -N 2 -w "node[1-2]" -n 4 "$BIN" plan --mesh-shape 4 1 1 --gpus-per-node 2 >plan_gpu.log 2>&1
if grep -q "node1: ranks 0,1 (2 on the node): 0: cuda:0; 1: cuda:1" plan_gpu.log &&
   grep -q "node2: ranks 2,3 (2 on the node): 2: cuda:0; 3: cuda:1" plan_gpu.log && ! grep -q "share GPUs" plan_gpu.log; then
  ok "GPU by local rank (--gpus-per-node 2): cuda:0, cuda:1 on each node"
else bad "GPU selection by local rank"; cat plan_gpu.log; fi
vc srun -N 2 -w "node[1-2]" -n 4 "$BIN" plan --mesh-shape 4 1 1 --gpus-per-node 1 >plan_gpu1.log 2>&1
[ "$(grep -c 'has 2 ranks for 1 GPU: ranks share GPUs' plan_gpu1.log)" = 2 ] &&
  ok "2 ranks per node for 1 GPU: each node warns once" || { bad "GPU sharing warning"; cat plan_gpu1.log; }
vc salloc -N 2 -w "node[1-2]" -n 4 mpirun --bind-to none --mca oob_tcp_if_include $NET.0/24 "$BIN" plan --mesh-shape 2 2 1 >plan_mpirun.log 2>&1
grep -q "4 ranks on 2 nodes" plan_mpirun.log && grep -qE " node2$" plan_mpirun.log &&
  ok "salloc -N 2 + mpirun (oob/btl on the bridge): 4 ranks on 2 nodes" || { bad "salloc + mpirun"; tail -5 plan_mpirun.log; }

section "2. srun -N 2 -n 4 train dp x tp; read back by one rank"
vc srun -N 2 -w "node[1-2]" -n 4 "$BIN" "${TRAIN[@]}" --distributed-mode dp --mesh-shape 2 2 1 --max-steps 4 --ckpt-every 4 \
  --run-name dptp >dptp.log 2>&1
if same_losses "$REF" out/dptp/metrics.h5 4 && grep -q "node2: ranks 2,3" dptp.log; then
  ok "srun -N 2 -n 4 train dp 2 x tp 2 (tp inside each node) = one rank over 4 steps"
else bad "dp x tp across 2 nodes = one rank"; tail -5 dptp.log; fi
vc srun -N 1 -n 1 -w node3 "$BIN" "${TRAIN[@]}" --max-steps 8 --run-name dptp --resume auto >dptp_read.log 2>&1
if grep -q "resumed from .*ckpt_000000004.h5 at step 4" dptp_read.log && same_losses "$REF" out/dptp/metrics.h5 8; then
  ok "the checkpoint written from node1 + node2 (dp x tp) is read by one rank on node3, which continues on the trajectory"
else bad "checkpoint read by one rank on another node"; tail -5 dptp_read.log; fi

section "3. sbatch --nodes 2 jobs/train_multinode.sbatch, dp x tp, one (fake) GPU per task"
# The script as a cluster gets it (#SBATCH --gpus-per-task=1 --gpu-bind=single:1), sized down to
# this cluster on the command line. The fake GPUs cannot run anything: the ranks train on the
# CPU (fp64) and report the GPU Slurm bound to each.
jid=$(cd "$ROOT" && SM_BIN="$BIN" SM_OUTPUT="$WORK/out" SM_TP=2 vc sbatch --parsable --nodes 2 --nodelist "node[1-2]" --ntasks-per-node 2 \
  --cpus-per-task 1 --output="$WORK/slurm-%j.out" jobs/train_multinode.sbatch "${ARGS[@]}" --max-steps 6)
jid=${jid%%;*}; JOBS+=("$jid")
if [ -n "$jid" ] && wait_job "$jid" 180 && same_losses "$REF" "out/$jid/metrics.h5" 6 &&
   grep -q "4 ranks on node\[1-2\] (2 per node), mode dp, mesh 2 2 1" "slurm-$jid.out"; then
  ok "sbatch --nodes 2 train_multinode.sbatch (SM_TP=2: tp inside each node) = one rank over 6 steps (job $jid)"
else bad "sbatch --nodes 2 dp x tp (job $jid)"; tail -5 "slurm-$jid.out"; fi
if grep -q "node1: ranks 0,1 (2 on the node): 0: 1 thread (CUDA_VISIBLE_DEVICES=0); 1: 1 thread (CUDA_VISIBLE_DEVICES=1)" "slurm-$jid.out" &&
   grep -q "node2: ranks 2,3 (2 on the node): 2: 1 thread (CUDA_VISIBLE_DEVICES=0); 3: 1 thread (CUDA_VISIBLE_DEVICES=1)" "slurm-$jid.out"; then
  ok "--gpus-per-task=1 --gpu-bind=single:1: each local rank of a node gets its own GPU, shown per rank"
else bad "GPU binding per local rank"; grep -A3 "^placement" "slurm-$jid.out"; fi

section "4. pp across nodes; dp across 3 nodes with ZeRO-1"
# A pipeline step runs 2 microbatches (batch norm per microbatch): the reference accumulates 2.
timeout 300 "$BIN" "${TRAIN[@]}" --max-steps 5 --grad-accum 2 --run-name ref_accum2 >ref_accum2.log 2>&1 ||
  { bad "one-rank reference with --grad-accum 2"; tail -3 ref_accum2.log; }
vc srun -N 2 -w "node[1-2]" -n 2 "$BIN" "${TRAIN[@]}" --distributed-mode pp --mesh-shape 1 1 2 --pp-microbatches 2 --max-steps 5 --run-name pp >pp.log 2>&1
if same_losses out/ref_accum2/metrics.h5 out/pp/metrics.h5 5 && grep -q "node1: rank 0 " pp.log && grep -q "node2: rank 1 " pp.log; then
  ok "pp 2 (2 microbatches) with stage 0 on node1, stage 1 on node2 = one rank with --grad-accum 2 over 5 steps"
else bad "pp across nodes"; tail -5 pp.log; fi
vc srun -N 3 -n 3 "$BIN" "${TRAIN[@]}" --distributed-mode dp --optimizer-sharding zero --max-steps 5 --run-name zero1 >zero1.log 2>&1
if same_losses "$REF" out/zero1/metrics.h5 5 && grep -q "node3: rank 2 " zero1.log; then
  ok "dp 3 over node1..3 with ZeRO-1 = one rank over 5 steps"
else bad "ZeRO-1 across nodes"; tail -5 zero1.log; fi

section "5. faults"
jid=$(vc sbatch --parsable --nodes 4 --output=/dev/null --wrap true 2>sbatch4.err); rc=$?
jid=${jid%%;*}; [ -n "$jid" ] && JOBS+=("$jid")
if [ $rc -ne 0 ] && grep -q "Requested node configuration is not available" sbatch4.err; then
  ok "sbatch --nodes 4 on 3 nodes: refused at submission ($(tail -1 sbatch4.err))"
elif [ -n "$jid" ] && ! wait_job "$jid" 60 >sbatch4.log && grep -qE "can never start: PENDING \(Partition(NodeLimit|Config)\)" sbatch4.log; then
  ok "sbatch --nodes 4 on 3 nodes: Slurm's reason surfaced: $(grep -o 'PENDING ([A-Za-z]*)' sbatch4.log)"
else bad "4 nodes refused with Slurm's reason"; cat sbatch4.err sbatch4.log 2>/dev/null; fi
vc srun -N 2 -w "node[1-2]" -n 2 "$BIN" train "${ARGS[@]}" --max-steps 2 --distributed-mode dp --output /tmp/node-local --run-name x >local.log 2>&1
rc=$?
if [ $rc -ne 0 ] && grep -q "spikemesh: error: --output: rank 1 (rank 1 on node2) does not see the directory /tmp/node-local/x" local.log &&
   grep -q "node1: task 0: Exited with exit code 1" local.log && grep -q "node2: task 1: Exited with exit code 1" local.log &&
   ! grep -q "^epoch" local.log; then
  ok "--output on node-local /tmp: refused on every rank before training, naming the rank and host that cannot see it"
else bad "node-local checkpoint directory refused"; cat local.log; fi
"$VC" firewall 3 >/dev/null
t=$(date +%s)
vc srun -N 3 -n 3 "$BIN" plan --mesh-shape 3 1 1 --comm-timeout 6 >fw.log 2>&1; rc=$?
dt=$(( $(date +%s) - t ))
"$VC" unfirewall 3
if [ $rc -ne 0 ] && [ $dt -le 30 ] &&
   grep -qE "within 6 s \(--comm-timeout\) on rank [01] on node[12]; waiting for a first message from world rank\(s\) 2\." fw.log; then
  ok "node3 unreachable on MPI's ports: $(grep -oE 'rank [01] on node[12]; waiting for a first message from world rank\(s\) 2' fw.log | head -1) (--comm-timeout 6; ended after $dt s)"
else bad "unreachable peer named within the timeout (rc $rc, $dt s)"; grep -v "^$" fw.log | head -8; fi

section "6. Slurm's signals to a 2-node job: scancel --signal=TERM, --signal=B:USR1@50"
jid=$(cd "$ROOT" && SM_BIN="$BIN" SM_OUTPUT="$WORK/out" vc sbatch --parsable --nodes 2 --ntasks-per-node 1 \
  --output="$WORK/slurm-%j.out" jobs/train_dp.sbatch "${ARGS[@]}" --max-steps 100000)
jid=${jid%%;*}; JOBS+=("$jid")
if wait_line "slurm-$jid.out" "^epoch .* step [0-9]+/" 120; then
  vc scancel --signal=TERM "$jid"
  if wait_job "$jid" 120 && grep -q "stop requested (signal 15): checkpointing at step" "slurm-$jid.out"; then
    step=$(sed -n 's/.*checkpointing at step \([0-9]*\).*/\1/p' "slurm-$jid.out" | head -1)
    f=$(printf 'out/%s/ckpt_%09d.h5' "$jid" "$step")
    timeout 60 "$BIN" ckpt verify "$f" >/dev/null 2>&1 &&
      ok "SIGTERM to both nodes' ranks: checkpoint at step $step (verified), every task exit 0, job COMPLETED (job $jid)" ||
      bad "checkpoint $f verifies"
  else bad "SIGTERM: checkpoint and exit 0 (job $jid)"; tail -5 "slurm-$jid.out"; fi
else bad "2-node job started (job $jid)"; job_report "$jid"; fi

# Slurm's own early warning: --signal=B:USR1@50 with a 1-minute limit reaches the batch shell
# (Slurm checks limits every ~30 s), which forwards USR1 to the step on both nodes.
jid=$(cd "$ROOT" && SM_BIN="$BIN" SM_OUTPUT="$WORK/out" SM_NO_REQUEUE=1 vc sbatch --parsable --nodes 2 --ntasks-per-node 1 \
  --time=1 --signal=B:USR1@50 --output="$WORK/slurm-%j.out" jobs/train_dp.sbatch "${ARGS[@]}" --max-steps 100000000)
jid=${jid%%;*}; JOBS+=("$jid")
if wait_job "$jid" 90 && grep -q "stop requested (signal 10): checkpointing at step" "slurm-$jid.out"; then
  step=$(sed -n 's/.*checkpointing at step \([0-9]*\).*/\1/p' "slurm-$jid.out" | head -1)
  timeout 60 "$BIN" ckpt verify "$(printf 'out/%s/ckpt_%09d.h5' "$jid" "$step")" >/dev/null 2>&1 &&
    ok "sbatch --time=1 --signal=B:USR1@50 on 2 nodes: USR1 forwarded, checkpoint at step $step (verified), exit 0 (job $jid)" ||
    bad "USR1 checkpoint verifies (job $jid)"
else bad "--signal=B:USR1@50: checkpoint and exit 0 (job $jid)"; grep -v "^epoch" "slurm-$jid.out" | tail -5; fi

section "7. a lost node"
jid=$(cd "$ROOT" && SM_BIN="$BIN" SM_OUTPUT="$WORK/out" vc sbatch --parsable --no-requeue --nodes 3 --ntasks-per-node 1 \
  --output="$WORK/slurm-%j.out" jobs/train_dp.sbatch "${ARGS[@]}" --max-steps 100000 --ckpt-every 5)
jid=${jid%%;*}; JOBS+=("$jid")
if wait_line "slurm-$jid.out" "^epoch .* step (1[0-9]|[2-9][0-9])/" 120; then
  # a complete checkpoint to resume from first (checkpoints are written in the background, so
  # the one of step 5 may still be in flight at step 10)
  for i in $(seq 1 300); do ls out/"$jid"/ckpt_*.h5 >/dev/null 2>&1 && break; sleep 0.2; done
  t=$(date +%s)
  "$VC" kill-node 3 >/dev/null
  wait_line "slurm-$jid.out" "comm timeout: " 60; dt=$(( $(date +%s) - t ))
  wait_job "$jid" 120; st=$(job_field "$jid" JobState); dt2=$(( $(date +%s) - t ))
  if [ "$st" = FAILED ] && [ $dt -le 16 ] && grep -qE "comm timeout: .*world rank\(s\) 2 on node3" "slurm-$jid.out"; then
    ok "node3 killed mid-run: a rank stopped after $dt s (--comm-timeout 10) naming world rank 2 on node3; job FAILED after $dt2 s"
  else bad "lost node: fails within the timeout naming rank 2 on node3 (state $st; $dt s, $dt2 s)"; grep -v "^epoch" "slurm-$jid.out" | tail -12; fi
  # The newest complete checkpoint: what --resume auto must pick (a write cut short by the
  # kill leaves only a .tmp, never a ckpt_*.h5).
  last=$(ls out/"$jid"/ckpt_*.h5 2>/dev/null | sort | tail -1)
  partial=$(ls out/"$jid"/ 2>/dev/null | grep -c '\.tmp$')
  cstep=$(basename "${last:-ckpt_0.h5}" .h5); cstep=$((10#${cstep#ckpt_}))
  jid2=$(cd "$ROOT" && SM_BIN="$BIN" SM_OUTPUT="$WORK/out" SM_RUN="$jid" vc sbatch --parsable --nodes 2 --ntasks-per-node 1 \
    --output="$WORK/slurm-%j.out" jobs/train_dp.sbatch "${ARGS[@]}" --max-steps $((cstep + 5)) --ckpt-every 5)
  jid2=${jid2%%;*}; JOBS+=("$jid2")
  if wait_job "$jid2" 180 && grep -qE "resumed from .*ckpt_0*${cstep}\.h5 at step ${cstep}" "slurm-$jid2.out" &&
     grep -q "2 ranks on node\[1-2\]" "slurm-$jid2.out" && timeout 60 "$BIN" ckpt verify "$last" >/dev/null 2>&1 &&
     same_losses "$REF" "out/$jid/metrics.h5" $((cstep + 5)); then
    ok "resubmitted on node1,node2 (dp 2, global batch 6): resumed from the complete checkpoint at step $cstep ($partial partial file(s) left by the kill, not loaded), on the one-rank trajectory to step $((cstep + 5)) (job $jid2)"
  else bad "resume on 2 nodes after the loss (job $jid2)"; tail -6 "slurm-$jid2.out"; fi
else bad "3-node job reached step 10 (job $jid)"; job_report "$jid"; fi
