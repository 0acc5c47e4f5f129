#!/usr/bin/env bash
# local_slurm.sh — a one-node Slurm cluster on localhost (Debian's slurm-wlm + munge), for
# tests and for trying the sbatch scripts in jobs/ without a cluster.
#   jobs/local_slurm.sh start    start munged, slurmctld, slurmd; print the SLURM_CONF to export
#   jobs/local_slurm.sh stop     stop exactly the daemons this script started (by PID)
#   jobs/local_slurm.sh status   sinfo
# State lives in $SM_SLURM_DIR (default /tmp/spikemesh-slurm): slurm.conf, logs, spool, PIDs.
# Invariants: only processes whose PIDs this script recorded are ever stopped; a second
# `start` while running is a no-op; needs root (slurmd, munged as user munge).
set -euo pipefail
DIR=${SM_SLURM_DIR:-/tmp/spikemesh-slurm}
CONF=$DIR/slurm.conf
cmd=${1:-}

die() { echo "local_slurm: $*" >&2; exit 1; }
alive() { [[ -f $DIR/$1.pid ]] && kill -0 "$(cat "$DIR/$1.pid")" 2>/dev/null; }

write_conf() {
  local cpus sockets cores mem
  # The CPUs this process may run on: plain `nproc` honours OMP_NUM_THREADS / OMP_THREAD_LIMIT
  # (OMP_NUM_THREADS=1 would make a 1-CPU node on which a 2-task job pends forever).
  cpus=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc); sockets=1; cores=$cpus
  mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 1024 ))
  mkdir -p "$DIR"/{spool/ctld,spool/d,log}
  cat > "$CONF" <<CONF
ClusterName=spikemesh-local
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$DIR/spool/ctld
SlurmdSpoolDir=$DIR/spool/d
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
SlurmctldPort=${SM_SLURMCTLD_PORT:-16817}
SlurmdPort=${SM_SLURMD_PORT:-16818}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=pmix
ReturnToService=2
SchedulerType=sched/backfill
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
KillWait=10
InactiveLimit=0
MinJobAge=30
NodeName=localhost CPUs=$cpus Sockets=$sockets CoresPerSocket=$cores ThreadsPerCore=1 RealMemory=$mem State=UNKNOWN
PartitionName=local Nodes=localhost Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
}

start() {
  [[ $(id -u) == 0 ]] || die "needs root (slurmd and munged); run as root or use a real cluster"
  command -v slurmctld >/dev/null || die "slurm-wlm is not installed (make deps installs it)"
  command -v munged >/dev/null || die "munge is not installed (make deps installs it)"
  if alive slurmctld && alive slurmd; then
    local have; have=$(sed -n 's/^NodeName=.* CPUs=\([0-9]*\) .*/\1/p' "$CONF" 2>/dev/null)
    [[ $have == "$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)" ]] ||
      echo "local_slurm: warning: running with CPUs=$have from $CONF; '$0 stop' and start again to resize" >&2
    echo "local Slurm already running; export SLURM_CONF=$CONF"; return
  fi
  write_conf
  # munge: key once, daemon as user munge with its own socket directory
  if [[ ! -s /etc/munge/munge.key ]]; then
    install -d -o munge -g munge -m 700 /etc/munge
    dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key status=none
    chown munge:munge /etc/munge/munge.key; chmod 400 /etc/munge/munge.key
  fi
  install -d -o munge -g munge /run/munge
  if ! munge -n </dev/null >/dev/null 2>&1; then
    install -d -o munge -g munge /var/lib/munge /var/log/munge
    runuser -u munge -- munged --pid-file=/run/munge/munged.pid 2>/dev/null || true
    for _ in $(seq 50); do munge -n </dev/null >/dev/null 2>&1 && break; sleep 0.1; done
    munge -n </dev/null >/dev/null 2>&1 || die "munged did not start"
    cp /run/munge/munged.pid "$DIR/munged.pid"
  fi
  slurmctld -f "$CONF"
  slurmd -f "$CONF" -N localhost
  for _ in $(seq 100); do
    if SLURM_CONF=$CONF sinfo -h -o '%T' 2>/dev/null | grep -qE '^(idle|mixed|allocated)'; then
      echo "local Slurm up: export SLURM_CONF=$CONF"; return
    fi
    sleep 0.2
  done
  die "slurm did not come up; see $DIR/log/"
}

stop() {
  local p
  for p in slurmd slurmctld munged; do
    if alive "$p"; then
      local pid; pid=$(cat "$DIR/$p.pid")
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$DIR/$p.pid"
  done
  echo "local Slurm stopped"
}

case "$cmd" in
  start) start ;;
  stop) stop ;;
  status) SLURM_CONF=$CONF sinfo ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
