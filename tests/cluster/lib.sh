# lib.sh — the common set-up and helpers of the virtual-cluster scripts (tests/cluster/run.sh,
# chaos.sh), sourced right after they set ROOT; the helpers run in the working directory that
# holds slurm-<id>.out. Every wait is bounded.

BIN="${BIN:-$ROOT/build/bin/spikemesh}"
case "$BIN" in /*) ;; *) BIN="$ROOT/$BIN" ;; esac
PY="${PY:-/usr/bin/python3}"
VC="$ROOT/tests/cluster/virtual_cluster.sh"
export SM_VC_DIR="${SM_VC_DIR:-/var/tmp/spikemesh-vc}"
export SLURM_CONF="$SM_VC_DIR/slurm.conf"
NET=${SM_VC_NET:-10.77.0}
pass=0; fail=0; T0=$(date +%s)
ok() { pass=$((pass + 1)); echo "  ok   $1"; }
bad() { fail=$((fail + 1)); echo "  FAIL $1"; }

# Open MPI between the namespaces: TCP only, on the bridge's range, its ports where the
# firewall test expects them. srun and sbatch pass the environment to the tasks.
export OMPI_MCA_btl=tcp,self OMPI_MCA_btl_tcp_if_include=$NET.0/24
export OMPI_MCA_btl_tcp_port_min_v4=40000 OMPI_MCA_btl_tcp_port_range_v4=64
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
# vc CMD...: CMD on the login node (sbatch, srun, squeue, ...), bounded.
vc() { timeout "${VC_TIMEOUT:-180}" "$VC" exec "$@"; }

# job_field ID KEY: one field of `scontrol show job`.
job_field() { vc scontrol show job -o "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p" | head -1; }
job_report() {
  echo "       $(vc squeue -h -j "$1" -o '%i %T %r %N' 2>/dev/null)"
  vc sinfo -N -h -o '       %N %T %E' 2>/dev/null
  # the output's last progress line (they overwrite each other with \r), then what else it said
  [ -f "slurm-$1.out" ] && { tr '\r' '\n' <"slurm-$1.out" | grep '^epoch' | tail -n 1
                             tr '\r' '\n' <"slurm-$1.out" | grep -v '^epoch' | grep -v '^ *$' | tail -n 40; } | sed 's/^/       out: /'
}
# wait_job ID SECONDS: 0 when the job COMPLETED with 0:0; 1 when it ended otherwise or the
# time ran out (then it is cancelled), printing its state, reason and output.
wait_job() {
  local id=$1 deadline=$(( $(date +%s) + $2 )) st reason stuck=0
  while :; do
    st=$(job_field "$id" JobState)
    if [ "$st" = PENDING ]; then   # reasons that never clear by waiting: say so now
      reason=$(job_field "$id" Reason)
      case "$reason" in
        PartitionNodeLimit|PartitionConfig|BadConstraints|PartitionTimeLimit) stuck=$((stuck + 1)) ;;
        *) stuck=0 ;;
      esac
      if [ $stuck -ge 5 ]; then
        echo "       job $id can never start: PENDING ($reason)"; job_report "$id"; vc scancel "$id"; return 1
      fi
    fi
    case "$st" in
      COMPLETED) [ "$(job_field "$id" ExitCode)" = 0:0 ] && return 0; job_report "$id"; return 1 ;;
      FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|BOOT_FAIL|DEADLINE|PREEMPTED) return 1 ;;
    esac
    if [ "$(date +%s)" -ge "$deadline" ]; then
      echo "       job $id still ${st:-unknown} after $2 s:"; job_report "$id"; vc scancel "$id"; return 1
    fi
    sleep 0.3
  done
}
# wait_line FILE PATTERN SECONDS: until FILE has a line matching PATTERN (grep -E).
wait_line() {
  local deadline=$(( $(date +%s) + $3 ))
  until grep -qE "$2" "$1" 2>/dev/null; do [ "$(date +%s)" -ge "$deadline" ] && return 1; sleep 0.2; done
}
# same_losses A.h5 B.h5 [N]: step/loss equal (relative 1e-9) over the first N steps (all of B's).
same_losses() {
  "$PY" - "$@" <<'PYEOF'
import sys, h5py
a = h5py.File(sys.argv[1], "r")["step/loss"][:]
b = h5py.File(sys.argv[2], "r")["step/loss"][:]
n = int(sys.argv[3]) if len(sys.argv) > 3 else len(b)
assert len(b) == n and len(a) >= n and n > 0, f"lengths: reference {len(a)}, run {len(b)}, expected {n}"
for i in range(n):
    assert abs(a[i] - b[i]) <= 1e-9 * max(abs(a[i]), abs(b[i]), 1e-30), f"step {i + 1}: {a[i]!r} vs {b[i]!r}"
PYEOF
}

# fmnist_data FILE SEED: a Fashion-MNIST-shaped file (36 train / 12 test samples, 10 classes)
fmnist_data() { "$PY" "$ROOT/tests/ref/fmnist_like.py" "$1" --seed "$2" --train 36 --test 12; }
