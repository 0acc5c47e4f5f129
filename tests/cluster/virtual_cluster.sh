#!/usr/bin/env bash
# virtual_cluster.sh — a Slurm cluster of N "nodes" on this one machine, for the multi-node
# tests (make test-cluster) and for trying jobs/ across nodes without a cluster.
#   virtual_cluster.sh up        build it: namespaces, network, munge, slurmctld, N slurmd; wait
#                                (bounded) until every node is idle, else say which is not and why
#   virtual_cluster.sh down      tear down exactly what `up` made (daemons by PID, every process
#                                left in a node, the namespaces; mounts go with their namespace)
#   virtual_cluster.sh exec CMD  run CMD on the login node (node1's network): sbatch, srun, squeue...
#   virtual_cluster.sh kill-node I   SIGKILL everything on node I (slurmd, slurmstepd, ranks) and
#                                unplug its network: a lost node
#   virtual_cluster.sh firewall I / unfirewall I   block / unblock MPI's TCP ports to and from node I
#   virtual_cluster.sh leftovers prints whatever of a cluster is still there (nothing after down)
#   virtual_cluster.sh status    sinfo -N and the daemons' PIDs
# A node is a network namespace smn<I> (address $SM_VC_NET.1<I>, interface eth0 on a bridge in a
# switch namespace smsw: no address or link of the test range exists in the root namespace), a
# UTS namespace (hostname node<I>) and a mount namespace with a private tmpfs on /tmp (node-local
# scratch). Everything else is shared, as on a cluster: the project directory (and the rest of
# the file system) is the cluster file system; munged (root namespace, a Unix socket) is shared.
# slurmctld runs on node1. Ports: $SM_VC_PORT (slurmctld) and +1 (slurmd), unique per node address.
# Invariants: needs root; state under $SM_VC_DIR (default /var/tmp/spikemesh-vc, not /tmp, which is
# per node); `down` is idempotent and stops only what this script recorded or what runs inside
# its namespaces; every wait is bounded.
#   SM_VC_NODES (3)  SM_VC_CPUS (2 per node)  SM_VC_GPUS (2 fake GPUs per node)  SM_VC_NET (10.77.0)  SM_VC_PORT (17817)
#   SM_VC_REGISTER_TIMEOUT (60 s)  SM_VC_UNPLUGGED ("": node numbers whose network stays down)
#   SM_VC_OWNER (the caller's PID): the process the cluster belongs to; `up` finding a cluster
#   whose owner is gone (a run killed before its teardown) tears that one down first
set -euo pipefail
DIR=${SM_VC_DIR:-/var/tmp/spikemesh-vc}
NODES=${SM_VC_NODES:-3}
CPUS=${SM_VC_CPUS:-2}
GPUS=${SM_VC_GPUS:-2}   # fake GPUs per node (placeholders for Slurm's GPU binding)
NET=${SM_VC_NET:-10.77.0}
PORT=${SM_VC_PORT:-17817}
CONF=$DIR/slurm.conf
SW=smsw   # the switch namespace (holds the bridge)

die() { echo "virtual_cluster: $*" >&2; exit 1; }
say() { echo "virtual_cluster: $*"; }
ns_of() { echo "smn$1"; }
on_login() { nsenter --net=/run/netns/smn1 env SLURM_CONF="$CONF" "$@"; }
alive() { [[ -f $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

write_conf() {
  mkdir -p "$DIR"/{spool/ctld,log}
  local i
  {
    cat <<CONF
# Written by tests/cluster/virtual_cluster.sh: $NODES nodes in network namespaces.
ClusterName=spikemesh-vc
SlurmctldHost=node1($NET.11)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$DIR/spool/ctld
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.%n.log
SlurmctldPort=$PORT
SlurmdPort=$((PORT + 1))
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=pmix
ReturnToService=2
SchedulerType=sched/backfill
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
KillWait=5
InactiveLimit=0
MinJobAge=300
SlurmdTimeout=15
MessageTimeout=10
CONF
    echo "GresTypes=gpu"
    for i in $(seq "$NODES"); do
      echo "NodeName=node$i NodeAddr=$NET.1$i NodeHostname=node$i CPUs=$CPUS Gres=gpu:$GPUS State=UNKNOWN"
    done
    echo "PartitionName=vc Nodes=node[1-$NODES] Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES"
  } >"$CONF"
  # Fake GPUs: Slurm allocates and binds them (CUDA_VISIBLE_DEVICES per task) from these
  # placeholder character devices (/dev/null's numbers); no process can use them as a GPU.
  mkdir -p "$DIR/dev"
  local g
  for g in $(seq 0 $((GPUS - 1))); do rm -f "$DIR/dev/gpu$g"; mknod -m 600 "$DIR/dev/gpu$g" c 1 3; done  # as /dev/null
  echo "AutoDetect=off
NodeName=node[1-$NODES] Name=gpu File=$DIR/dev/gpu[0-$((GPUS - 1))]" >"$DIR/gres.conf"
}

start_munge() {
  if munge -n </dev/null >/dev/null 2>&1; then return; fi
  if [[ ! -s /etc/munge/munge.key ]]; then
    install -d -o munge -g munge -m 700 /etc/munge
    dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key status=none
    chown munge:munge /etc/munge/munge.key; chmod 400 /etc/munge/munge.key
  fi
  install -d -o munge -g munge /run/munge /var/lib/munge /var/log/munge
  runuser -u munge -- munged --pid-file=/run/munge/munged.pid 2>/dev/null || true
  for _ in $(seq 50); do munge -n </dev/null >/dev/null 2>&1 && break; sleep 0.1; done
  munge -n </dev/null >/dev/null 2>&1 || die "munged did not start"
  cp /run/munge/munged.pid "$DIR/munged.pid"
}

make_network() {
  local i unplugged=" ${SM_VC_UNPLUGGED:-} "
  ip netns add $SW
  ip -n $SW link add br0 type bridge
  ip -n $SW link set br0 up
  for i in $(seq "$NODES"); do
    ip netns add "$(ns_of "$i")"
    ip -n $SW link add "v$i" type veth peer name eth0 netns "$(ns_of "$i")"
    ip -n $SW link set "v$i" master br0
    ip -n $SW link set "v$i" up
    ip -n "$(ns_of "$i")" link set lo up
    ip -n "$(ns_of "$i")" addr add "$NET.1$i/24" dev eth0
    [[ $unplugged == *" $i "* ]] || ip -n "$(ns_of "$i")" link set eth0 up
  done
}

# start_node I: slurmd (and on node1 slurmctld) inside node I's namespaces.
start_node() {
  local i=$1 ctld=""
  [[ $i == 1 ]] && ctld="slurmctld -f $CONF;"
  mkdir -p "$DIR/spool/node$i"
  nsenter --net="/run/netns/$(ns_of "$i")" unshare --uts --mount --propagation private \
    sh -c "hostname node$i; mount -t tmpfs -o size=512m,mode=1777 tmpfs /tmp; $ctld exec slurmd -f $CONF -N node$i"
}

node_report() {
  on_login sinfo -N -h -o '  %N %T reason=%E' 2>/dev/null || echo "  (slurmctld does not answer: $DIR/log/slurmctld.log)"
  local i
  for i in $(seq "$NODES"); do
    [[ -f $DIR/log/slurmd.node$i.log ]] && tail -n 3 "$DIR/log/slurmd.node$i.log" | sed "s/^/  slurmd node$i: /"
  done
}

up() {
  [[ $(id -u) == 0 ]] || die "needs root (network namespaces, slurmd, munged)"
  local c
  for c in slurmctld slurmd munged nsenter unshare ip; do command -v $c >/dev/null || die "$c is not installed (make deps)"; done
  if [[ -e /run/netns/$SW ]]; then  # one is up: in use, or left by a run that was killed
    if [[ -f $DIR/owner.pid ]] && ! alive "$DIR/owner.pid"; then
      say "a cluster left by process $(cat "$DIR/owner.pid"), which is gone (a killed run): tearing it down first"
      down
    else
      local owner="its owner unknown"  # none recorded: a cluster made before owners were
      [[ -f $DIR/owner.pid ]] && owner="made by process $(cat "$DIR/owner.pid"), still running"
      die "a virtual cluster is already up ($DIR, $owner); '$0 down' first"
    fi
  fi
  rm -rf "$DIR/spool" "$DIR/log"   # a fresh cluster: no jobs or node states from an earlier one
  mkdir -p "$DIR"
  echo "${SM_VC_OWNER:-$PPID}" >"$DIR/owner.pid"  # whose cluster it is: a later `up` tears it down once that process is gone
  write_conf
  start_munge
  make_network
  local i
  for i in $(seq "$NODES"); do start_node "$i"; done
  local deadline=$(($(date +%s) + ${SM_VC_REGISTER_TIMEOUT:-60})) idle
  while :; do
    idle=$(on_login sinfo -N -h -o '%N %T' 2>/dev/null | awk '$2 ~ /^(idle|mixed|allocated)$/' | wc -l)
    [[ $idle == "$NODES" ]] && { say "up: $NODES nodes idle; run commands with '$0 exec CMD' (SLURM_CONF=$CONF)"; return; }
    if (($(date +%s) >= deadline)); then
      echo "virtual_cluster: only $idle of $NODES nodes registered within ${SM_VC_REGISTER_TIMEOUT:-60} s:" >&2
      node_report >&2
      for i in $(seq "$NODES"); do
        if ! on_login sinfo -N -h -n "node$i" -o '%T' 2>/dev/null | grep -qE '^(idle|mixed|allocated)$'; then
          [[ $(ip -n "$(ns_of "$i")" -o link show eth0 2>/dev/null) == *"state DOWN"* ]] &&
            echo "virtual_cluster: node$i never registered: its network link is down (no route to slurmctld at $NET.11)" >&2 ||
            echo "virtual_cluster: node$i never registered: see $DIR/log/slurmd.node$i.log" >&2
        fi
      done
      exit 1
    fi
    sleep 0.3
  done
}

# kill_procs_in NS: SIGKILL every process whose network namespace is NS.
kill_procs_in() {
  local pids
  pids=$(ip netns pids "$1" 2>/dev/null || true)
  [[ -n $pids ]] && kill -9 $pids 2>/dev/null || true
}

kill_node() {
  local i=$1 ns; ns=$(ns_of "$1")
  [[ -e /run/netns/$ns ]] || die "no node$i"
  ip -n "$ns" link set eth0 down
  kill_procs_in "$ns"
  say "node$i lost: its processes killed (SIGKILL), its network unplugged"
}

down() {
  local f pid i
  # Daemons first (politely), so that slurmctld saves its state and nothing respawns.
  for f in "$DIR"/slurmd.node*.pid "$DIR/slurmctld.pid"; do
    if alive "$f"; then kill "$(cat "$f")" 2>/dev/null || true; fi
  done
  for _ in $(seq 50); do
    local any=0
    for f in "$DIR"/slurmd.node*.pid "$DIR/slurmctld.pid"; do alive "$f" && any=1; done
    ((any)) || break
    sleep 0.1
  done
  # Then anything still living on a node (job steps, ranks, stuck daemons).
  for f in /run/netns/smn*; do [[ -e $f ]] && kill_procs_in "$(basename "$f")"; done
  for _ in $(seq 50); do
    local left=""
    for f in /run/netns/smn*; do [[ -e $f ]] && left+=$(ip netns pids "$(basename "$f")" 2>/dev/null); done
    [[ -z $left ]] && break
    sleep 0.1
  done
  for f in /run/netns/smn* /run/netns/$SW; do [[ -e $f ]] && ip netns del "$(basename "$f")"; done
  if alive "$DIR/munged.pid"; then
    pid=$(cat "$DIR/munged.pid"); kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  fi
  rm -f "$DIR"/*.pid
  rm -rf "$DIR/dev"   # the fake GPUs' device nodes
  say "down"
}

# firewall I: MPI's TCP ports ($SM_VC_MPI_PORT_MIN, 64 of them; jobs set Open MPI's
# btl_tcp_port_min_v4/range_v4 to match) no longer pass to or from node I; Slurm's still do.
# Packets to those ports go to an 8 bit/s class (this kernel offers no drop action): a
# connection attempt simply never completes, as behind a firewall that drops.
firewall() {
  local i=$1 min=${SM_VC_MPI_PORT_MIN:-40000} dev ns
  (( min % 64 == 0 )) || die "SM_VC_MPI_PORT_MIN must be a multiple of 64 (one u32 mask covers the range)"
  for ns_dev in "$(ns_of "$i") eth0" "$SW v$i"; do  # node I's way out, and the switch's way in to node I
    read -r ns dev <<<"$ns_dev"
    nsenter --net="/run/netns/$ns" sh -ec "
      tc qdisc add dev $dev root handle 1: htb default 1
      tc class add dev $dev parent 1: classid 1:1 htb rate 10gbit
      tc class add dev $dev parent 1: classid 1:2 htb rate 8bit ceil 8bit burst 1 cburst 1
      tc filter add dev $dev parent 1: protocol ip prio 1 u32 match ip dport $min 0xffc0 flowid 1:2" 2>/dev/null ||
      die "could not install the port filter on $dev in $ns (tc with htb and u32 needed)"
  done
  say "node$i: TCP ports $min-$((min + 63)) blocked both ways"
}

unfirewall() {
  nsenter --net="/run/netns/$(ns_of "$1")" tc qdisc del dev eth0 root 2>/dev/null || true
  nsenter --net="/run/netns/$SW" tc qdisc del dev "v$1" root 2>/dev/null || true
}

# leftovers: what of a virtual cluster is still present (nothing when torn down completely):
# its namespaces, its daemons, any process in a node's network namespace.
leftovers() {
  local f
  for f in /run/netns/smn* /run/netns/$SW; do [[ -e $f ]] && echo "namespace $(basename "$f")"; done
  pgrep -a -f "slurm(ctld|d) -f $CONF" | sed 's/^/process /' || true
  # Any process in another network or mount namespace (a node's; its private /tmp lives as
  # long as one does). Kernel threads and helpers without a command line are not ours.
  local net mnt p cmd; net=$(readlink /proc/$$/ns/net); mnt=$(readlink /proc/$$/ns/mnt)
  for p in /proc/[0-9]*; do
    [[ $(readlink "$p/ns/net" 2>/dev/null || echo "$net") == "$net" &&
       $(readlink "$p/ns/mnt" 2>/dev/null || echo "$mnt") == "$mnt" ]] && continue
    cmd=$(tr '\0' ' ' <"$p/cmdline" 2>/dev/null)
    [[ -n $cmd ]] && echo "process ${p#/proc/} in a node's namespace: $cmd"
  done
  return 0
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  exec) shift; on_login "$@" ;;
  kill-node) kill_node "${2:?node number}" ;;
  firewall) firewall "${2:?node number}" ;;
  unfirewall) unfirewall "${2:?node number}" ;;
  start-node) start_node "${2:?node number}" ;;
  leftovers) leftovers ;;
  status) on_login sinfo -N; for f in "$DIR"/*.pid; do [[ -f $f ]] && echo "$(basename "$f" .pid) $(cat "$f")"; done ;;
  *) echo "usage: $0 up|down|exec CMD...|kill-node I|start-node I|firewall I|unfirewall I|leftovers|status" >&2; exit 2 ;;
esac
