// test_parallel_config.cpp — the one parallel configuration (parallel/parallel_config.h): every
// command that takes the parallel flags registers every row of the one table with the same help;
// the table, train's TOML keys and the mapping onto LayoutOptions agree; the batch arithmetic of
// the plan (layout_plan.h, BatchPlan) against hand-computed cases.
#include <gtest/gtest.h>

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "spikemesh/app/commands.h"
#include "spikemesh/core/config_keys.h"
#include "spikemesh/core/error.h"
#include "spikemesh/parallel/layout_plan.h"
#include "spikemesh/parallel/parallel_config.h"
#include "spikemesh/train/train_config.h"

namespace sm {
namespace {

TEST(ParallelConfig, EveryCommandRegistersEveryParallelFlagIdentically) {
  CLI::App app;
  AppEnv env;
  register_all_commands(app, env);
  ASSERT_GT(parallel_keys().size(), 30u);
  for (const std::string& key : parallel_keys()) {
    std::string help;
    for (const char* name : {"train", "bench", "plan", "eval", "calibrate"}) {
      CLI::App* cmd = app.get_subcommand(name);
      const CLI::Option* opt = cmd->get_option_no_throw("--" + key);
      ASSERT_NE(opt, nullptr) << name << " lacks --" << key;
      if (help.empty()) help = opt->get_description();
      EXPECT_EQ(opt->get_description(), help) << name << " --" << key;
    }
  }
  // commtest: the mesh rows only.
  CLI::App* commtest = app.get_subcommand("commtest");
  EXPECT_NE(commtest->get_option_no_throw("--mesh-shape"), nullptr);
  EXPECT_NE(commtest->get_option_no_throw("--comm-timeout"), nullptr);
  EXPECT_EQ(commtest->get_option_no_throw("--pp-schedule"), nullptr);
}

TEST(ParallelConfig, TrainTomlHoldsEveryParallelKey) {
  TrainConfig c;
  TrainConfigResolver r(c);
  const std::string toml = r.to_toml();
  for (const std::string& key : parallel_keys()) EXPECT_NE(toml.find("\n" + key + " = "), std::string::npos) << key;
}

TEST(ParallelConfig, FlagsReachTheLayoutOptions) {
  ParallelConfig c;
  ConfigKeys keys;
  add_parallel_keys(keys, c);
  keys.set("distributed-mode", "pp", "--distributed-mode");
  keys.set("pp-delay-wgrad", "true", "--pp-delay-wgrad");
  keys.set("pp-virtual-stages", "2", "--pp-virtual-stages");
  keys.set("memopt-level", "1", "--memopt-level");
  keys.set("fsdp-param-dtype", "bf16", "--fsdp-param-dtype");
  keys.set("optimizer-sharding", "zero", "--optimizer-sharding");
  const LayoutOptions o = layout_options(c, DType::F64);
  EXPECT_EQ(o.mode, "pp");
  EXPECT_TRUE(o.pp_delay_wgrad);
  EXPECT_EQ(o.pp_virtual_stages, 2);
  EXPECT_EQ(o.memopt.level, 1);
  EXPECT_EQ(o.strategy.param_dtype, DType::BF16);
  EXPECT_EQ(o.strategy.reduce_dtype, DType::F64);  // "" takes the master dtype
  EXPECT_EQ(o.strategy.sharding, "zero");
  EXPECT_THROW(keys.set("pp-virtual-stages", "0", "--pp-virtual-stages"), Error);  // the table's range
}

// plan_batch for `req` on mesh dp x 1 x pp (pp > 1: 1f1b, microbatches as given).
BatchPlan batches(int dp, int pp, BatchRequest req, int microbatches = 0) {
  LayoutOptions o;
  o.mode = pp > 1 ? "pp" : dp > 1 ? "dp" : "none";
  o.pp_microbatches = microbatches;
  return plan_layout(o, MeshShape{dp, 1, pp}, dp * pp, req).batch;
}

TEST(ParallelConfig, BatchArithmeticByHand) {
  BatchPlan b = batches(2, 1, {8, 0, 3});  // --batch-size 8 --grad-accum 3 on dp 2
  EXPECT_EQ(b.micro, 8);
  EXPECT_EQ(b.accum, 3);
  EXPECT_EQ(b.replica, 24);
  EXPECT_EQ(b.global, 48);
  b = batches(4, 1, {8, 96, 2});  // --global-batch-size 96 = dp 4 x accum 2 x 12
  EXPECT_EQ(b.micro, 12);
  EXPECT_EQ(b.replica, 24);
  EXPECT_EQ(b.global, 96);
  b = batches(2, 2, {8, 0, 1}, 4);  // pp: a replica's 8 samples in 4 microbatches of 2
  EXPECT_EQ(b.replica, 8);
  EXPECT_EQ(b.accum, 4);
  EXPECT_EQ(b.micro, 2);
  EXPECT_EQ(b.global, 16);
  b = batches(2, 2, {1, 24, 1}, 3);  // pp: --global-batch-size 24 over dp 2 -> 12 per replica
  EXPECT_EQ(b.replica, 12);
  EXPECT_EQ(b.micro, 4);
  EXPECT_THROW(batches(4, 1, {8, 90, 2}), Error);     // 90 not divisible by dp 4 x accum 2
  EXPECT_THROW(batches(2, 2, {8, 0, 2}, 4), Error);   // --grad-accum with pp
  EXPECT_THROW(batches(3, 2, {8, 16, 1}, 2), Error);  // 16 not divisible by dp 3
}

}  // namespace
}  // namespace sm
