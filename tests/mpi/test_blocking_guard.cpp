// test_blocking_guard.cpp — guarded_collective and BlockingDeadline (comm/blocking_guard.h) on
// real ranks: a matched guarded call runs its body once per rank and passes its errors through;
// the dataset open compares what every rank saw. The FAILURE paths end the job (MPI_Abort), so
// they cannot run inside this test process: BlockingGuardAbort.* run only when the variable
// SPIKEMESH_GUARD_ABORT_CASE names a case (tests/e2e/reliability.sh starts each under mpirun
// and checks the message, the exit status and the time):
//   mismatch   rank 0 and the others arrive at different operations
//   missing    the last rank never arrives
//   stuck      every rank arrives, rank 0's body blocks in a raw MPI_Recv that never matches
#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include "mpi_test_env.h"
#include "spikemesh/comm/agree.h"
#include "spikemesh/comm/blocking_guard.h"
#include "spikemesh/comm/comm.h"
#include "spikemesh/core/error.h"

namespace sm {
namespace {

TEST(BlockingGuard, MatchedCallRunsTheBodyOnEveryRank) {
  Comm comm(test::world(), "guard");
  int runs = 0;
  for (int i = 0; i < 3; ++i) guarded_collective(comm, "operation " + std::to_string(i), [&] { ++runs; });
  EXPECT_EQ(runs, 3);
  // The body may itself be collective over the comm.
  std::vector<double> v{1.0};
  guarded_collective(comm, "a reduction", [&] { all_reduce_doubles(comm, v, ReduceOp::Sum); });
  EXPECT_EQ(v[0], static_cast<double>(comm.size()));
}

TEST(BlockingGuard, ErrorsOfTheBodyPropagate) {
  Comm comm(test::world(), "guard");
  try {
    guarded_collective(comm, "a failing body", [&] {
      agree_on_error(&comm, [&] {
        if (comm.rank() == comm.size() - 1) SM_INPUT_ERROR("body failed on the last rank");
      });
    });
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Input);
    EXPECT_NE(std::string(e.what()).find("body failed on the last rank"), std::string::npos);
  }
  // The comm is usable afterwards.
  int after = 0;
  guarded_collective(comm, "after an error", [&] { ++after; });
  EXPECT_EQ(after, 1);
}

TEST(BlockingGuard, DeadlineDisarmedAfterTheCall) {
  // A deadline of 1 s around fast calls, then 2 s idle: nothing fires once disarmed.
  const double before = comm_timeout_seconds();
  set_comm_timeout_seconds(1.0);
  for (int i = 0; i < 5; ++i) BlockingDeadline d("a fast call", test::world());
  std::this_thread::sleep_for(std::chrono::milliseconds(2000));
  set_comm_timeout_seconds(before);
  SUCCEED();
}

TEST(BlockingGuardAbort, EndsTheJob) {
  const char* c = std::getenv("SPIKEMESH_GUARD_ABORT_CASE");
  if (!c) GTEST_SKIP() << "runs under tests/e2e/reliability.sh (SPIKEMESH_GUARD_ABORT_CASE)";
  const std::string which = c;
  set_comm_timeout_seconds(3.0);
  Comm comm(test::world(), "guard");
  const int last = comm.size() - 1;
  if (which == "mismatch") {
    guarded_collective(comm, comm.rank() == 0 ? "a collective read of /test/x" : "closing a dataset", [] {});
  } else if (which == "missing") {
    if (comm.rank() == last) std::this_thread::sleep_for(std::chrono::seconds(60));
    guarded_collective(comm, "a collective read of /test/x", [] {});
  } else if (which == "stuck") {
    guarded_collective(comm, "a body blocked in MPI", [&] {
      if (comm.rank() != 0) return;
      int x = 0;
      MPI_Recv(&x, 1, MPI_INT, MPI_ANY_SOURCE, 12345, comm.mpi_comm(), MPI_STATUS_IGNORE);
    });
    std::this_thread::sleep_for(std::chrono::seconds(60));  // the others wait for the abort
  }
  ADD_FAILURE() << "the job was not ended (case " << which << ")";
}

}  // namespace
}  // namespace sm
