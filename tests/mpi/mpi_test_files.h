// mpi_test_files.h — files the MPI tests share between ranks: the whole world as one Comm
// (built on first use, at the same point of every rank's test sequence; never freed, it
// would outlive MPI_Finalize otherwise), and scratch directories every rank sees (rank 0's
// pid names them; made and removed by rank 0 between barriers). Collective over world().
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "mpi_test_env.h"
#include "spikemesh/comm/comm.h"

namespace sm::test {

inline Comm* world_group() {
  static Comm* c = new Comm(world(), "world");
  return c;
}

// TempDir()/<prefix>_<rank 0's pid>_<tag>: the same name on every rank.
inline std::string shared_name(const std::string& prefix, const std::string& tag) {
  int pid = getpid();
  MPI_Bcast(&pid, 1, MPI_INT, 0, world());
  return ::testing::TempDir() + prefix + "_" + std::to_string(pid) + "_" + tag;
}

// An empty directory shared by all ranks.
inline std::string shared_dir(const std::string& prefix, const std::string& tag) {
  const std::string d = shared_name(prefix, tag);
  if (world_rank() == 0) EXPECT_EQ(std::system(("rm -rf '" + d + "' && mkdir -p '" + d + "'").c_str()), 0);
  MPI_Barrier(world());
  return d;
}

inline void remove_shared_dir(const std::string& d) {
  MPI_Barrier(world());
  if (world_rank() == 0) std::system(("rm -rf '" + d + "'").c_str());
  MPI_Barrier(world());
}

}  // namespace sm::test
