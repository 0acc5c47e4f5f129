// test_node_local.cpp — what each rank decides about its own node, without communication:
// the GPU of a local rank for a given (fake) number of visible GPUs (core/device.h), and the
// heartbeat files that let a comm timeout name the ranks that stopped (comm/heartbeat.h):
// fresh, old and missing files against this rank's own.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <ctime>
#include <fstream>
#include <string>

#include "spikemesh/comm/heartbeat.h"
#include "spikemesh/core/device.h"
#include "spikemesh/core/error.h"

namespace sm {
namespace {

TEST(GpuForLocalRank, ConsecutiveGpusPerNodeAndWrapAround) {
  // Independent table: 4 ranks on a node with 1, 2, 4 and 8 visible GPUs.
  const int expect[4][4] = {{0, 0, 0, 0}, {0, 1, 0, 1}, {0, 1, 2, 3}, {0, 1, 2, 3}};
  const int visible[4] = {1, 2, 4, 8};
  for (int v = 0; v < 4; ++v)
    for (int r = 0; r < 4; ++r) {
      const Device d = gpu_for_local_rank(r, visible[v]);
      EXPECT_TRUE(d.is_cuda());
      EXPECT_EQ(d.ordinal, expect[v][r]) << "local rank " << r << ", " << visible[v] << " visible";
    }
  EXPECT_EQ(gpu_for_local_rank(5, 1).str(), "cuda:0");  // --gpus-per-task=1: every task sees its own as cuda:0
}

TEST(GpuForLocalRank, RejectsNoGpuAndNegativeRanks) {
  EXPECT_THROW(gpu_for_local_rank(0, 0), Error);
  EXPECT_THROW(gpu_for_local_rank(-1, 2), Error);
}

std::string temp_dir() {
  char tmpl[] = "/tmp/sm_heartbeat_XXXXXX";
  const char* d = mkdtemp(tmpl);
  EXPECT_NE(d, nullptr);
  return d ? d : "";
}

void touch(const std::string& path, double seconds_ago) {
  std::ofstream(path).put('x');
  struct timespec ts[2];
  clock_gettime(CLOCK_REALTIME, &ts[0]);
  ts[0].tv_sec -= static_cast<time_t>(seconds_ago);
  ts[1] = ts[0];
  ASSERT_EQ(utimensat(AT_FDCWD, path.c_str(), ts, 0), 0);
}

TEST(Heartbeat, NamesOldAndMissingRanksOnly) {
  const std::string dir = temp_dir();
  EXPECT_EQ(stale_heartbeats(), "");  // none running: nothing to say
  start_heartbeat(dir, 1, 4, 0.5);    // this process is world rank 1 of 4
  touch(dir + "/rank.0", 0);          // alive
  touch(dir + "/rank.2", 30);         // stopped 30 s ago
  // rank.3 never written
  const std::string s = stale_heartbeats();
  EXPECT_EQ(s.find("0 ("), std::string::npos) << s;
  EXPECT_NE(s.find("2 (last 30 s ago)"), std::string::npos) << s;
  EXPECT_NE(s.find("3 (none)"), std::string::npos) << s;
  EXPECT_EQ(s.find("1 ("), std::string::npos) << s;  // never itself
  struct stat st {};
  EXPECT_EQ(::stat((dir + "/rank.1").c_str(), &st), 0);
  stop_heartbeat();
  EXPECT_NE(::stat((dir + "/rank.1").c_str(), &st), 0) << "stop removes this rank's file";
  EXPECT_EQ(stale_heartbeats(), "");
  std::remove((dir + "/rank.0").c_str());
  std::remove((dir + "/rank.2").c_str());
  ::rmdir(dir.c_str());
}

TEST(Heartbeat, KeepsItsOwnFileFresh) {
  const std::string dir = temp_dir();
  start_heartbeat(dir, 0, 2, 0.1);
  touch(dir + "/rank.0", 20);  // as if the thread had stalled: it must refresh within an interval
  usleep(400 * 1000);
  touch(dir + "/rank.1", 0);  // the other rank beats now
  EXPECT_EQ(stale_heartbeats(), "");
  stop_heartbeat();
  std::remove((dir + "/rank.1").c_str());
  ::rmdir(dir.c_str());
}

}  // namespace
}  // namespace sm
