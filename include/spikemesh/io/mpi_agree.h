// mpi_agree.h — turning one rank's failure into the same error on every rank of a
// communicator (DESIGN §8: one clear message, non-zero exit everywhere, never a hang).
// Pattern: local work (no collective inside!) runs under agree_on_error(); the call then
// agrees over the communicator: if any rank threw, EVERY rank throws the error of the
// lowest failing rank (same ErrorKind, same message). Input errors therefore stay Input
// errors on all ranks, and the front end prints rank 0's copy once.
// Also small broadcast helpers for strings and blobs used by collective I/O.
#pragma once
#include <mpi.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "spikemesh/core/error.h"

namespace sm {

// Collective over `comm`: runs `local` on this rank, then agrees (one MPI_Allreduce, plus a
// broadcast of the message when some rank failed). `local` must not call collectives on
// `comm` (a rank that threw before reaching one would leave the others waiting).
void agree_on_error(MPI_Comm comm, const std::function<void()>& local);

// Collective over `comm`: the same agreement for an error already caught by the caller
// (`failed` with kind/message) — throws on every rank when any rank failed.
void agree_on_error(MPI_Comm comm, bool failed, ErrorKind kind, const std::string& message);

// Collective over `comm`: every rank returns root's `s` / `v`.
void bcast_string(MPI_Comm comm, std::string& s, int root = 0);
void bcast_i64s(MPI_Comm comm, std::vector<int64_t>& v, int root = 0);

int comm_rank(MPI_Comm comm);
int comm_size(MPI_Comm comm);

}  // namespace sm
