// heartbeat.h — signs of life through a shared directory, so that a job blocked inside a
// collective can name the ranks that stopped (a lost node, a killed process) even where MPI
// cannot tell (inside MPI-IO/HDF5, or before peers are known).
// Every rank sets the modification time of <dir>/rank.<world rank> to "now" every interval
// from a background thread; a blocked rank compares the others' times with its own file's
// (one file system's clock: the nodes' clocks need not agree).
// Invariants: no MPI calls (the watchdog asks while the main thread is inside MPI); one
// heartbeat per process; stop() (or process exit) ends it and removes this rank's file.
#pragma once
#include <string>

namespace sm {

// Starts this rank's heartbeat in `dir` (which every rank shares and the caller created);
// interval_s > 0. A second start replaces the first.
void start_heartbeat(const std::string& dir, int world_rank, int world_size, double interval_s);
// Ends the heartbeat and removes this rank's file (no-op when none runs).
void stop_heartbeat();
// Ranks whose heartbeat is older than twice the interval compared with this rank's:
// "2 on node3 (last 14 s ago)"; "" when every rank is alive or no heartbeat runs. Hosts come
// from the mesh (comm_detail::set_world_hosts).
std::string stale_heartbeats();

}  // namespace sm
