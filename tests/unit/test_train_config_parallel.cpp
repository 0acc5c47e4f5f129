// test_train_config_parallel.cpp — the parallelism keys of the training configuration:
// defaults (one rank, no sharding), --mesh-shape as an integer list from flags and from TOML
// (and back), the data-parallel flags, and validation messages naming the flag (modes not
// implemented yet, sharding without dp, bad sizes and dtypes).
#include <gtest/gtest.h>

#include "error_of.h"
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "spikemesh/core/error.h"
#include "spikemesh/train/train_config.h"
#include "train_cli.h"

namespace sm {
namespace {

TrainConfig resolve_args(const std::vector<std::string>& args) { return test::resolve_train_args(args); }

}  // namespace

TEST(TrainConfigParallel, DefaultsAreOneRank) {
  TrainConfig c = resolve_args({"--data", "d.h5"});
  EXPECT_EQ(c.parallel.distributed_mode, "none");
  EXPECT_TRUE(c.parallel.mesh_shape.empty());
  EXPECT_EQ(c.parallel.optimizer_sharding, "none");
  EXPECT_EQ(c.parallel.grad_accum, 1);
  EXPECT_EQ(c.parallel.global_batch_size, 0);
  EXPECT_FALSE(c.parallel.sync_bn);
  EXPECT_TRUE(c.parallel.fsdp_reshard_after_forward);
  EXPECT_EQ(c.parallel.bucket_mb, 25.0);
  EXPECT_EQ(c.parallel.comm, "auto");
}

TEST(TrainConfigParallel, FlagsAndMeshShapeList) {
  TrainConfig c = resolve_args({"--data", "d.h5", "--distributed-mode", "fsdp", "--mesh-shape", "4", "1", "1",
                                "--grad-accum", "2", "--sync-bn", "--no-fsdp-reshard-after-forward",
                                "--fsdp-param-dtype", "bf16", "--fsdp-reduce-dtype", "fp32", "--global-batch-size", "64",
                                "--comm-timeout", "30"});
  EXPECT_EQ(c.parallel.distributed_mode, "fsdp");
  EXPECT_EQ(c.parallel.mesh_shape, (std::vector<int64_t>{4, 1, 1}));
  EXPECT_EQ(c.parallel.grad_accum, 2);
  EXPECT_TRUE(c.parallel.sync_bn);
  EXPECT_FALSE(c.parallel.fsdp_reshard_after_forward);
  EXPECT_EQ(c.parallel.fsdp_param_dtype, "bf16");
  EXPECT_EQ(c.parallel.fsdp_reduce_dtype, "fp32");
  EXPECT_EQ(c.parallel.global_batch_size, 64);
  EXPECT_EQ(c.parallel.comm_timeout, 30.0);
}

TEST(TrainConfigParallel, MeshShapeFromTomlAndBack) {
  const std::string path = ::testing::TempDir() + "sm_tcp_" + std::to_string(getpid()) + ".toml";
  std::ofstream(path) << "data = \"d.h5\"\ndistributed-mode = \"dp\"\nmesh-shape = [2, 1, 1]\n"
                         "optimizer-sharding = \"zero2\"\nbucket-mb = 4.5\n";
  TrainConfig c = resolve_args({"--config", path});
  EXPECT_EQ(c.parallel.mesh_shape, (std::vector<int64_t>{2, 1, 1}));
  EXPECT_EQ(c.parallel.optimizer_sharding, "zero2");
  EXPECT_EQ(c.parallel.bucket_mb, 4.5);
  // Flags replace the file's list (not append to it).
  TrainConfig f = resolve_args({"--config", path, "--mesh-shape", "4"});
  EXPECT_EQ(f.parallel.mesh_shape, (std::vector<int64_t>{4}));
  // The resolved TOML reads back into the same configuration.
  TrainConfig back;
  TrainConfigResolver rb(back);
  TrainConfig orig;
  TrainConfigResolver ro(orig);
  test::parse_and_resolve(ro, {"--config", path});
  const std::string out = ::testing::TempDir() + "sm_tcp_out_" + std::to_string(getpid()) + ".toml";
  std::ofstream(out) << ro.to_toml();
  rb.apply_toml_file(out);
  EXPECT_EQ(rb.to_toml(), ro.to_toml());
  EXPECT_EQ(back.parallel.mesh_shape, (std::vector<int64_t>{2, 1, 1}));
  std::remove(path.c_str());
  std::remove(out.c_str());
}

TEST(TrainConfigParallel, ValidationNamesTheFlag) {
  struct Case {
    std::vector<std::string> args;
    std::string needle;
  };
  const std::vector<Case> cases = {
      {{"--distributed-mode", "auto", "--grad-accum", "2"}, "--distributed-mode auto with --grad-accum 2"},
      {{"--distributed-mode", "auto", "--prefer", "fast"}, "--prefer must be speed, memory or capacity, got 'fast'"},
      {{"--prefer", "speed"}, "--prefer speed with --distributed-mode none"},
      {{"--pp-schedule", "pipedream"}, "--pp-schedule"},
      {{"--pp-transport", "nvlink"}, "--pp-transport must be auto, staged or channels"},
      {{"--pp-virtual-stages", "0"}, "--pp-virtual-stages"},
      {{"--pp-microbatches", "-1"}, "--pp-microbatches"},
      {{"--pp-timeline-steps", "-1"}, "--pp-timeline-steps"},
      {{"--distributed-mode", "ddp"}, "--distributed-mode"},
      {{"--optimizer-sharding", "zero3"}, "--optimizer-sharding"},
      {{"--optimizer-sharding", "zero"}, "needs --distributed-mode dp"},
      {{"--distributed-mode", "fsdp", "--optimizer-sharding", "zero"}, "fsdp always shards"},
      {{"--mesh-shape", "2", "0"}, "--mesh-shape"},
      {{"--mesh-shape", "1", "1", "1", "1"}, "at most 3"},
      {{"--bucket-mb", "0"}, "--bucket-mb"},
      {{"--grad-accum", "0"}, "--grad-accum"},
      {{"--global-batch-size", "-8"}, "--global-batch-size"},
      {{"--comm", "gloo"}, "--comm"},
      {{"--comm-timeout", "-1"}, "--comm-timeout"},
      {{"--fsdp-param-dtype", "fp16"}, "--fsdp-param-dtype"},
      {{"--fsdp-reduce-dtype", "int8"}, "--fsdp-reduce-dtype"},
      {{"--check-replicas", "-2"}, "--check-replicas"},
      {{"--mesh-shape", "two"}, "--mesh-shape"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = {"--data", "d.h5"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    std::string e = error_of([&] { resolve_args(args); });
    EXPECT_NE(e.find(c.needle), std::string::npos) << c.args[0] << " " << c.args[1] << ": '" << e << "'";
  }
}

}  // namespace sm
