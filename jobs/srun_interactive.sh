#!/usr/bin/env bash
# srun_interactive.sh — an interactive session: allocate, then run steps by hand.
#   salloc --nodes=1 --ntasks=4 --cpus-per-task=1 --time=01:00:00   # (add --gpus-per-task=1 on GPUs)
#   bash jobs/srun_interactive.sh                                    # inside the allocation
# Each command below is one job step; Ctrl-C stops a step, the allocation stays.
set -euo pipefail
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/env.sh"
cd "$SM_ROOT"
N=${SLURM_NTASKS:-2}
run() { echo "+ $*"; "$@"; }
run srun --mpi="$SM_SRUN_MPI" -n "$N" "$SM_BIN" plan --mesh-shape "$N" 1 1          # who is in which group
run srun --mpi="$SM_SRUN_MPI" -n "$N" "$SM_BIN" commtest --max-bytes 16777216       # check the network first
run srun --mpi="$SM_SRUN_MPI" -n "$N" "$SM_BIN" train --config input/configs/default.toml \
    --distributed-mode dp --mesh-shape "$N" 1 1 --run-name "interactive-$N" --max-steps 100 --resume auto
