// mesh_internal.h — facts about this process that only mesh.cpp may ask MPI_COMM_WORLD for
// (docs/architecture.md §1: main.cpp and comm/mesh alone name it). Internal to src/comm/.
#pragma once
#include <string>

namespace sm::comm_detail {

// This process's rank in MPI_COMM_WORLD (for messages naming world ranks).
int process_world_rank();
// MPI processor name of this process.
std::string process_host();

}  // namespace sm::comm_detail
