// agree.h — making the ranks of a group agree (docs/architecture.md §9: one clear message, non-zero
// exit on every rank, never a hang) and the small broadcasts, gathers and reductions that
// collective code around the training loop and collective I/O needs.
// Every function taking a Comm is COLLECTIVE OVER THAT COMM (all of its ranks call it, in the
// same order); a `Comm*` argument may be nullptr, meaning "this process alone": then no
// communication happens at all (no MPI call), so single-process code paths need no MPI_Init.
// Pattern for local work that may fail on some ranks only: run it under agree_on_error()
// (any error kind) or collective_check() (Input errors); it must not call collectives on the
// same comm (a rank that threw before reaching one would leave the others waiting).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "spikemesh/comm/comm.h"

namespace sm {

// 64-bit FNV-1a of a string (configuration hashes, signatures). Local.
uint64_t text_hash(const std::string& s);

// Collective over `group` (nullptr: runs `local` alone, no communication). Runs `local`; when
// it threw on any rank (sm::Error of any kind, or another std::exception, reported as an
// Internal error naming the rank), EVERY rank throws the error of the lowest failing rank:
// same ErrorKind, same message. Alone, the error is thrown as it would be in a group. Input errors therefore stay Input errors everywhere and the
// front end prints rank 0's copy once.
void agree_on_error(Comm* group, const std::function<void()>& local);

// Collective over `comm`. Runs `f`; when it throws sm::Error(Input) on any rank, every rank
// throws one Input error with the message of the lowest failing rank (prefixed "rank k: "
// when k != 0). Other exceptions are rethrown on the failing rank only (the front end aborts
// the job).
void collective_check(Comm& comm, const std::function<void()>& f);

// Collective over `comm`: Input error on every rank when the ranks hold different `text`
// (e.g. the resolved configuration): names the ranks that differ from rank 0 and `what`.
void check_same_text(Comm& comm, const std::string& text, const std::string& what);

// Collective over `comm`: `s` of rank `root` on every rank.
std::string broadcast_string(Comm& comm, const std::string& s, int root);
// Collective over `comm`: `v` of rank `root` on every rank (any length; resized).
void broadcast_i64s(Comm& comm, std::vector<int64_t>& v, int root);
// Collective over `comm`: rank `root` returns every rank's `mine` concatenated in rank order
// (lengths may differ); the other ranks return an empty vector.
std::vector<int64_t> gather_i64s(Comm& comm, const std::vector<int64_t>& mine, int root);

// Collective over `comm`: every rank's `mine` (any bytes, lengths may differ), in rank order, on
// every rank.
std::vector<std::string> all_gather_strings(Comm& comm, const std::string& mine);

// Collective over `comm`: true on every rank when `local` is true on at least one rank.
bool any_rank(Comm& comm, bool local);

// Collective over `comm`: element-wise sum / max of `v` over the ranks, in place (f64;
// bitwise identical on every rank; the vector must have the same length everywhere).
void all_reduce_doubles(Comm& comm, std::vector<double>& v, ReduceOp op);

}  // namespace sm
