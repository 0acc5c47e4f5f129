// reachability.h — the first messages of a job: every rank exchanges one small message with
// its neighbours in the world ring (world rank - 1 and + 1) before any collective, under the
// watchdog. A rank whose network cannot reach another node's (a firewall, Open MPI on the
// wrong interface, a node unplugged) then fails within --comm-timeout with one line naming
// the peer it waits for, instead of hanging inside the first MPI_Comm_dup.
// Invariant: collective over `world`; one message each way per neighbour; a ring reaches every
// node from its neighbours whenever each node holds consecutive ranks (srun, mpirun by slot).
#pragma once
#include <mpi.h>

namespace sm {

// Collective over `world`. Waits at most comm_timeout_seconds(); on timeout prints the
// watchdog's line ("... waiting for data from world rank(s) 2") and aborts the job.
void check_ring_reachable(MPI_Comm world);

}  // namespace sm
