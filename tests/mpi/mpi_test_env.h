// mpi_test_env.h — what MPI tests (tests/mpi/*.cpp) may use from the MPI-aware test main
// (tests/mpi/mpi_test_main.cpp). Every rank runs every test; the main gathers failures from
// all ranks, rank 0 reports them, and the exit code is non-zero on every rank if any rank
// failed. Rules for tests:
//   * never return early on one rank before a collective (use EXPECT_*, not ASSERT_*, on
//     rank-dependent data); the comm watchdog (60 s in tests) aborts a hung run;
//   * build what you need from world(): Comm(world(), ...) or Mesh::create(world(), ...).
#pragma once
#include <mpi.h>

namespace sm::test {

// A duplicate of the world communicator owned by the test main.
MPI_Comm world();
int world_rank();
int world_size();

}  // namespace sm::test

// Skips the current test unless the world has exactly / at least n ranks (every rank skips
// alike, so collectives stay matched).
#define SM_REQUIRE_WORLD_SIZE(n)                                                          \
  do {                                                                                    \
    if (::sm::test::world_size() != (n)) GTEST_SKIP() << "needs " << (n) << " ranks";     \
  } while (0)
#define SM_REQUIRE_WORLD_AT_LEAST(n)                                                      \
  do {                                                                                    \
    if (::sm::test::world_size() < (n)) GTEST_SKIP() << "needs at least " << (n) << " ranks"; \
  } while (0)
