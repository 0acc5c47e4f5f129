// test_step_profile.cpp — the one-step time table of `bench --profile` on a GPU
// (layers/step_profile.h), built from hand-made timings: merging calls of one (layer, pass),
// sorting, shares of the step, the remainder, the per-type aggregate, the JSON shape and the
// printed text; and the CUDA-event recorder's behaviour without a GPU (disarmed, refused).
#include <gtest/gtest.h>

#include "spikemesh/core/error.h"
#include "spikemesh/layers/gpu_layer_profile.h"
#include "spikemesh/layers/step_profile.h"

namespace sm {
namespace {

std::vector<PassTiming> sample_timings() {
  return {
      {"features.0.conv", "conv2d", ProfilePass::Forward, 2.0},
      {"features.0.lif", "neuron", ProfilePass::Forward, 1.0},
      {"features.1.conv", "conv2d", ProfilePass::Forward, 3.0},
      {"features.1.conv", "conv2d", ProfilePass::Forward, 1.0},  // a second call: summed
      {"features.1.conv", "conv2d", ProfilePass::BackwardInput, 4.5},
      {"features.1.conv", "conv2d", ProfilePass::BackwardWeight, 0.5},
      {"features.0.lif", "neuron", ProfilePass::Backward, 1.0},
      {"", "flatten", ProfilePass::Forward, 0.25},  // no name: the type stands in
  };
}

TEST(StepProfile, MergesSortsAndShares) {
  const StepProfile p = build_step_profile(sample_timings(), 20.0, "test");
  ASSERT_EQ(p.rows.size(), 7u);
  // 4.5 (bi), 4.0 (fwd, 2 calls), 2.0, then the two 1.0 ties by layer name then pass order, ...
  EXPECT_EQ(p.rows[0].layer, "features.1.conv");
  EXPECT_EQ(p.rows[0].pass, ProfilePass::BackwardInput);
  EXPECT_DOUBLE_EQ(p.rows[0].ms, 4.5);
  EXPECT_EQ(p.rows[1].layer, "features.1.conv");
  EXPECT_EQ(p.rows[1].pass, ProfilePass::Forward);
  EXPECT_DOUBLE_EQ(p.rows[1].ms, 4.0);
  EXPECT_EQ(p.rows[1].calls, 2);
  EXPECT_EQ(p.rows[2].layer, "features.0.conv");
  EXPECT_EQ(p.rows[3].layer, "features.0.lif");
  EXPECT_EQ(p.rows[3].pass, ProfilePass::Forward);
  EXPECT_EQ(p.rows[4].layer, "features.0.lif");
  EXPECT_EQ(p.rows[4].pass, ProfilePass::Backward);
  EXPECT_EQ(p.rows[5].pass, ProfilePass::BackwardWeight);
  EXPECT_EQ(p.rows[6].layer, "flatten");
  EXPECT_EQ(p.rows[6].type, "flatten");
  for (size_t i = 1; i < p.rows.size(); ++i) EXPECT_GE(p.rows[i - 1].ms, p.rows[i].ms);
  EXPECT_DOUBLE_EQ(p.rows[0].share, 4.5 / 20.0);
  EXPECT_DOUBLE_EQ(p.layers_ms, 13.25);
  EXPECT_DOUBLE_EQ(p.rest_ms, 20.0 - 13.25);
  EXPECT_DOUBLE_EQ(p.step_ms, 20.0);
  EXPECT_EQ(p.source, "test");
}

TEST(StepProfile, PerTypeAggregate) {
  const StepProfile p = build_step_profile(sample_timings(), 20.0, "test");
  ASSERT_EQ(p.types.size(), 3u);
  EXPECT_EQ(p.types[0].type, "conv2d");
  EXPECT_DOUBLE_EQ(p.types[0].forward_ms, 6.0);
  EXPECT_DOUBLE_EQ(p.types[0].backward_ms, 5.0);  // backward-input + backward-weight
  EXPECT_EQ(p.types[0].layers, 2);
  EXPECT_DOUBLE_EQ(p.types[0].share, 11.0 / 20.0);
  EXPECT_EQ(p.types[1].type, "neuron");
  EXPECT_DOUBLE_EQ(p.types[1].forward_ms, 1.0);
  EXPECT_DOUBLE_EQ(p.types[1].backward_ms, 1.0);
  EXPECT_EQ(p.types[1].layers, 1);
  EXPECT_EQ(p.types[2].type, "flatten");
  double sum = 0.0;
  for (const StepProfileType& t : p.types) sum += t.total_ms();
  EXPECT_DOUBLE_EQ(sum, p.layers_ms);
}

TEST(StepProfile, RestClampedAndNoStepTime) {
  // Rows summing past the step (overlapping leaves): the rest is 0, not negative.
  const StepProfile over = build_step_profile(sample_timings(), 10.0, "test");
  EXPECT_DOUBLE_EQ(over.rest_ms, 0.0);
  // No step time: shares are 0, never a division by zero.
  const StepProfile none = build_step_profile(sample_timings(), 0.0, "test");
  for (const StepProfileRow& r : none.rows) EXPECT_EQ(r.share, 0.0);
  for (const StepProfileType& t : none.types) EXPECT_EQ(t.share, 0.0);
  const StepProfile empty = build_step_profile({}, 5.0, "test");
  EXPECT_TRUE(empty.rows.empty());
  EXPECT_TRUE(empty.types.empty());
  EXPECT_DOUBLE_EQ(empty.rest_ms, 5.0);
}

TEST(StepProfile, JsonShape) {
  StepProfile p = build_step_profile(sample_timings(), 20.0, "cuda-events");
  nlohmann::ordered_json j = step_profile_json(p);
  EXPECT_EQ(j["source"], "cuda-events");
  EXPECT_DOUBLE_EQ(j["step_ms"].get<double>(), 20.0);
  EXPECT_DOUBLE_EQ(j["layers_ms"].get<double>(), 13.25);
  EXPECT_DOUBLE_EQ(j["rest_ms"].get<double>(), 6.75);
  EXPECT_FALSE(j.contains("optimizer_phase_ms"));  // unknown: left out
  ASSERT_EQ(j["rows"].size(), p.rows.size());
  const auto& r0 = j["rows"][0];
  EXPECT_EQ(r0["layer"], "features.1.conv");
  EXPECT_EQ(r0["type"], "conv2d");
  EXPECT_EQ(r0["pass"], "backward-input");
  EXPECT_DOUBLE_EQ(r0["ms"].get<double>(), 4.5);
  EXPECT_DOUBLE_EQ(r0["share"].get<double>(), 0.225);
  EXPECT_EQ(r0["calls"], 1);
  std::vector<std::string> keys;
  for (auto it = r0.begin(); it != r0.end(); ++it) keys.push_back(it.key());
  EXPECT_EQ(keys, (std::vector<std::string>{"layer", "type", "pass", "ms", "share", "calls"}));
  ASSERT_EQ(j["types"].size(), 3u);
  EXPECT_EQ(j["types"][0]["type"], "conv2d");
  EXPECT_DOUBLE_EQ(j["types"][0]["backward_ms"].get<double>(), 5.0);
  EXPECT_EQ(j["types"][0]["layers"], 2);
  p.optimizer_phase_ms = 1.5;
  j = step_profile_json(p);
  EXPECT_DOUBLE_EQ(j["optimizer_phase_ms"].get<double>(), 1.5);
  // it survives a round trip through text (the record is one JSON line)
  EXPECT_EQ(nlohmann::ordered_json::parse(j.dump()), j);
}

TEST(StepProfile, PassNames) {
  EXPECT_STREQ(profile_pass_name(ProfilePass::Forward), "forward");
  EXPECT_STREQ(profile_pass_name(ProfilePass::Backward), "backward");
  EXPECT_STREQ(profile_pass_name(ProfilePass::BackwardInput), "backward-input");
  EXPECT_STREQ(profile_pass_name(ProfilePass::BackwardWeight), "backward-weight");
}

TEST(StepProfile, TextTableRowsRestAndTypes) {
  StepProfile p = build_step_profile(sample_timings(), 20.0, "cuda-events");
  p.optimizer_phase_ms = 1.5;
  const std::string all = format_step_profile(p, 0);
  EXPECT_NE(all.find("one step, per layer and pass (cuda-events): 20.000 ms, of which layers 13.250 ms"),
            std::string::npos)
      << all;
  EXPECT_NE(all.find("features.1.conv"), std::string::npos);
  EXPECT_NE(all.find("backward-weight"), std::string::npos);
  EXPECT_NE(all.find("(rest: optimizer, loss, gaps)"), std::string::npos);
  EXPECT_NE(all.find("6.750"), std::string::npos);  // the rest
  EXPECT_NE(all.find("optimizer phase alone: 1.500 ms"), std::string::npos);
  EXPECT_NE(all.find("per layer type"), std::string::npos);
  EXPECT_EQ(all.find("more rows"), std::string::npos);
  // the first row printed is the largest
  EXPECT_LT(all.find("backward-input"), all.find("backward-weight"));
  // two rows shown: the other five summed in one line (2.0 + 1 + 1 + 0.5 + 0.25 = 4.75 ms)
  const std::string two = format_step_profile(p, 2);
  EXPECT_NE(two.find("(5 more rows)"), std::string::npos) << two;
  EXPECT_NE(two.find("4.750"), std::string::npos) << two;
  EXPECT_EQ(two.find("features.0.lif"), std::string::npos);
  for (size_t at = 0; at < all.size();) {  // every line indented by two spaces
    EXPECT_EQ(all.compare(at, 2, "  "), 0);
    at = all.find('\n', at) + 1;
  }
}

TEST(StepProfileRecorder, DisarmedByDefaultAndRefusedOnCpu) {
  EXPECT_FALSE(gpu_profile_armed());
  EXPECT_THROW(gpu_profile_begin_step(Device::cpu()), Error);
  EXPECT_FALSE(gpu_profile_armed());
}

}  // namespace
}  // namespace sm
