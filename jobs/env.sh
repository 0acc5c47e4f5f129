# env.sh — the environment every spikemesh job script sources (sbatch, srun, mpirun).
# Edit the module lines for your cluster; the rest derives settings from Slurm's variables.
# Invariants: CPU threads per rank = cores given to the task (never cores × ranks);
# SM_ROOT is the repository root; SM_BIN the spikemesh binary.

# --- cluster modules (examples; uncomment what your site provides) ---------------------
# module load openmpi/4.1 hdf5/1.12-parallel cuda/12.4 cudnn/9 nccl/2.21
# Nodes with several networks: the one MPI's TCP traffic should use (interface or CIDR).
# export OMPI_MCA_btl_tcp_if_include=ib0

SM_ROOT=${SM_ROOT:-${SLURM_SUBMIT_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}}
SM_BIN=${SM_BIN:-$SM_ROOT/build/bin/spikemesh}
export SM_ROOT SM_BIN

# One OpenMP team per rank, sized to the task's CPUs.
if [[ -n ${SLURM_CPUS_PER_TASK:-} ]]; then
  export OMP_NUM_THREADS=$SLURM_CPUS_PER_TASK
elif [[ -z ${OMP_NUM_THREADS:-} ]]; then
  export OMP_NUM_THREADS=1
fi
export OMP_PROC_BIND=${OMP_PROC_BIND:-close} OMP_PLACES=${OMP_PLACES:-cores}

# NCCL: report problems once per rank; let it pick interfaces unless the site pins them.
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
# Open MPI started by srun: the PMIx plugin (srun --mpi=pmix; Debian's Open MPI has no PMI-2).
export SM_SRUN_MPI=${SM_SRUN_MPI:-pmix}

# Run directory of this job: ${SM_OUTPUT:-output}/<job id> (stable across requeues, so --resume auto
# continues the same run).
SM_RUN=${SM_RUN:-${SLURM_JOB_ID:-local-$$}}
export SM_RUN

[[ -x $SM_BIN ]] || { echo "env.sh: $SM_BIN not found — build first (make)" >&2; return 1 2>/dev/null || exit 1; }
