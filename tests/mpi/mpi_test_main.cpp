// mpi_test_main.cpp — GoogleTest main for MPI tests: MPI_Init, every rank runs the tests,
// only rank 0 prints GoogleTest's progress, failures of every rank are gathered and
// reported by rank 0 ("rank R: Suite.Test: message"), and every rank exits non-zero when
// any rank failed. Run: mpirun -np N build/bin/spikemesh_mpi_tests --gtest_color=no
// This file and the app's main.cpp are the places that name MPI_COMM_WORLD.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <string>
#include <vector>

#include "mpi_test_env.h"
#include "spikemesh/comm/comm.h"
#include "spikemesh/core/error.h"
#include "spikemesh/core/log.h"

namespace sm::test {
namespace {
MPI_Comm g_world = MPI_COMM_NULL;
int g_rank = 0, g_size = 1;

// Records every failed assertion of this rank as one line.
class FailureCollector : public ::testing::EmptyTestEventListener {
 public:
  // The name is remembered here: UnitTest::current_test_info() must not be called from
  // OnTestPartResult (GoogleTest holds its mutex there: deadlock).
  void OnTestStart(const ::testing::TestInfo& info) override {
    current = std::string(info.test_suite_name()) + "." + info.name();
  }
  void OnTestEnd(const ::testing::TestInfo&) override { current = "(outside a test)"; }
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    const std::string& name = current;
    std::string msg = r.summary();
    if (msg.size() > 600) msg = msg.substr(0, 600) + "...";
    for (char& c : msg)
      if (c == '\n') c = ' ';
    lines += "rank " + std::to_string(g_rank) + ": " + name + " (" + (r.file_name() ? r.file_name() : "?") + ":" +
             std::to_string(r.line_number()) + "): " + msg + "\n";
  }
  std::string lines;
  std::string current = "(outside a test)";
};
}  // namespace

MPI_Comm world() { return g_world; }
int world_rank() { return g_rank; }
int world_size() { return g_size; }

}  // namespace sm::test

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);  // as the program: --ckpt-async
  using namespace sm::test;
  MPI_Comm_dup(MPI_COMM_WORLD, &g_world);
  MPI_Comm_rank(g_world, &g_rank);
  MPI_Comm_size(g_world, &g_size);
  char host[MPI_MAX_PROCESSOR_NAME] = {0};
  int len = 0;
  MPI_Get_processor_name(host, &len);
  sm::set_process_identity(g_rank, std::string(host, len));
  sm::log_set_rank(g_rank);
  sm::set_comm_timeout_seconds(60);  // a hung test aborts instead of blocking make test

  ::testing::InitGoogleTest(&argc, argv);
  auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
  if (g_rank != 0) delete listeners.Release(listeners.default_result_printer());
  auto* collector = new FailureCollector;
  listeners.Append(collector);  // owned by GoogleTest
  if (g_rank == 0) std::printf("[ MPI      ] %d ranks\n", g_size);

  int rc = RUN_ALL_TESTS();
  int failed = rc != 0 ? 1 : 0;

  // Gather every rank's failure lines on rank 0.
  std::string mine = collector->lines;
  if (failed && mine.empty()) mine = "rank " + std::to_string(g_rank) + ": failed (no assertion message)\n";
  int n = static_cast<int>(mine.size());
  std::vector<int> counts(g_size), displs(g_size);
  MPI_Gather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, g_world);
  std::vector<char> all;
  if (g_rank == 0) {
    int total = 0;
    for (int r = 0; r < g_size; ++r) {
      displs[r] = total;
      total += counts[r];
    }
    all.resize(static_cast<size_t>(total) + 1, 0);
  }
  MPI_Gatherv(mine.data(), n, MPI_CHAR, all.data(), counts.data(), displs.data(), MPI_CHAR, 0, g_world);
  int any_failed = 0;
  MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, g_world);
  if (g_rank == 0) {
    if (any_failed) {
      std::printf("[ MPI      ] FAILURES on %d ranks:\n%s", g_size, all.data());
    } else {
      std::printf("[ MPI      ] all %d ranks passed\n", g_size);
    }
    std::fflush(stdout);
  }
  MPI_Comm_free(&g_world);
  MPI_Finalize();
  return any_failed ? 1 : 0;
}
