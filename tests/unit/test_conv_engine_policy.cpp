// test_conv_engine_policy.cpp — the CUDA-free parts of the cuDNN convolutions
// (kernels/conv_engine_policy.h), on the CPU: the engine filter by numerical notes under each
// policy and precision, the options each policy maps to, the plan-cache key (every option
// separates plans), SPIKEMESH_CUDNN_API's names and the workspace limit.
#include <gtest/gtest.h>

#include <cstdlib>
#include <set>
#include <vector>

#include "spikemesh/core/error.h"
#include "spikemesh/kernels/conv_engine_policy.h"
#include "spikemesh/kernels/conv_policy.h"

namespace sm {
namespace {

using cuda::ConvOptions;

ConvOptions options_of(const char* policy, Fp32Precision conv_fp32 = Fp32Precision::IEEE) {
  GpuNumerics n;
  n.conv = conv_policy_from_name(policy);
  n.conv_fp32 = conv_fp32;
  return cuda::conv_options_of(n);
}

bool admits(const char* policy, Fp32Precision p, DType dt, unsigned notes) {
  return cuda::engine_rejection(notes, dt, options_of(policy, p)).empty();
}

TEST(ConvEnginePolicy, PoliciesMapToTheirOptions) {
  const ConvOptions exact = options_of("exact"), det = options_of("deterministic-tuned"), fast = options_of("fast");
  EXPECT_TRUE(exact.deterministic && !exact.allow_imprecise && !exact.tuned && !exact.allow_tf32);
  EXPECT_TRUE(det.deterministic && det.allow_imprecise && det.tuned);
  EXPECT_TRUE(!fast.deterministic && fast.allow_imprecise && !fast.tuned);
  EXPECT_TRUE(options_of("exact", Fp32Precision::TF32).allow_tf32);
  EXPECT_EQ(exact.api, cuda::ConvApi::Auto);
  EXPECT_EQ(exact.layout, cuda::ConvLayout::NCHW);
  EXPECT_EQ(exact.max_workspace_bytes, 0u);  // from free memory
}

TEST(ConvEnginePolicy, FilterByNumericalNotesPerPolicy) {
  using cuda::kNoteDownConvertInputs;
  using cuda::kNoteFft;
  using cuda::kNoteNondeterministic;
  using cuda::kNoteReducedPrecisionReduction;
  using cuda::kNoteStrictNanProp;
  using cuda::kNoteTensorCore;
  using cuda::kNoteWinograd;
  const Fp32Precision ieee = Fp32Precision::IEEE, tf32 = Fp32Precision::TF32;
  for (const char* policy : {"exact", "exact-tuned", "deterministic", "deterministic-tuned", "fast", "fast-tuned"}) {
    const std::string name = policy;
    const bool deterministic = name.rfind("fast", 0) != 0;
    const bool transforms = name.rfind("exact", 0) != 0;
    for (Fp32Precision p : {ieee, tf32})
      for (DType dt : {DType::F32, DType::BF16, DType::F16}) {
        const bool f32 = dt == DType::F32;
        const std::string what = name + " " + fp32_precision_name(p) + " " + dtype_name(dt);
        EXPECT_TRUE(admits(policy, p, dt, 0)) << what;  // a plain FMA engine: always
        EXPECT_TRUE(admits(policy, p, dt, kNoteStrictNanProp)) << what;
        EXPECT_EQ(admits(policy, p, dt, kNoteNondeterministic), !deterministic) << what;
        EXPECT_FALSE(admits(policy, p, dt, kNoteDownConvertInputs)) << what;
        EXPECT_FALSE(admits(policy, p, dt, kNoteReducedPrecisionReduction)) << what;
        EXPECT_EQ(admits(policy, p, dt, kNoteTensorCore), !f32 || p == tf32) << what;
        EXPECT_EQ(admits(policy, p, dt, kNoteFft), !f32 || transforms) << what;
        EXPECT_EQ(admits(policy, p, dt, kNoteWinograd), !f32 || transforms) << what;
        // Several notes: rejected when any one is.
        EXPECT_EQ(admits(policy, p, dt, kNoteTensorCore | kNoteWinograd),
                  (!f32 || p == tf32) && (!f32 || transforms))
            << what;
        EXPECT_EQ(admits(policy, p, dt, kNoteTensorCore | kNoteNondeterministic),
                  (!f32 || p == tf32) && !deterministic)
            << what;
      }
  }
}

TEST(ConvEnginePolicy, RejectionNamesItsReason) {
  const ConvOptions exact = options_of("exact");
  EXPECT_NE(cuda::engine_rejection(cuda::kNoteTensorCore, DType::F32, exact).find("TF32"), std::string::npos);
  EXPECT_NE(cuda::engine_rejection(cuda::kNoteNondeterministic, DType::F32, exact).find("nondeterministic"),
            std::string::npos);
  EXPECT_NE(cuda::engine_rejection(cuda::kNoteWinograd, DType::F32, exact).find("Winograd"), std::string::npos);
  EXPECT_EQ(cuda::engine_notes_text(0), "none");
  EXPECT_EQ(cuda::engine_notes_text(cuda::kNoteTensorCore | cuda::kNoteWinograd), "tensor-core,winograd");
}

TEST(ConvEnginePolicy, PlanKeySeparatesEveryOption) {
  cpu::Conv2dGeometry g;
  g.batch = 8, g.in_channels = 16, g.height = 12, g.width = 12, g.out_channels = 32, g.kernel = 3, g.padding = 1;
  std::vector<ConvOptions> all;
  for (const char* policy : {"exact", "exact-tuned", "deterministic", "deterministic-tuned", "fast", "fast-tuned"})
    for (Fp32Precision p : {Fp32Precision::IEEE, Fp32Precision::TF32}) all.push_back(options_of(policy, p));
  const size_t policies = all.size();
  for (size_t i = 0; i < policies; ++i) {
    ConvOptions o = all[i];
    o.api = cuda::ConvApi::Graph;
    all.push_back(o);
    o.api = cuda::ConvApi::Legacy;
    all.push_back(o);
    o = all[i];
    o.layout = cuda::ConvLayout::NHWC;
    all.push_back(o);
    o = all[i];
    o.max_workspace_bytes = size_t{64} << 20;
    all.push_back(o);
  }
  std::set<cuda::ConvPlanKey> keys;
  for (const ConvOptions& o : all) keys.insert(cuda::conv_plan_key(0, g, DType::F32, o));
  EXPECT_EQ(keys.size(), all.size());  // no two option sets share a plan
  // The same options on another device, dtype or shape: another plan; the same: the same.
  const ConvOptions o = all.front();
  EXPECT_EQ(cuda::conv_plan_key(0, g, DType::F32, o), cuda::conv_plan_key(0, g, DType::F32, options_of("exact")));
  EXPECT_NE(cuda::conv_plan_key(1, g, DType::F32, o), cuda::conv_plan_key(0, g, DType::F32, o));
  EXPECT_NE(cuda::conv_plan_key(0, g, DType::BF16, o), cuda::conv_plan_key(0, g, DType::F32, o));
  for (int64_t cpu::Conv2dGeometry::*field :
       {&cpu::Conv2dGeometry::batch, &cpu::Conv2dGeometry::in_channels, &cpu::Conv2dGeometry::height,
        &cpu::Conv2dGeometry::width, &cpu::Conv2dGeometry::out_channels, &cpu::Conv2dGeometry::kernel,
        &cpu::Conv2dGeometry::stride, &cpu::Conv2dGeometry::padding}) {
    cpu::Conv2dGeometry h = g;
    h.*field += 1;
    EXPECT_NE(cuda::conv_plan_key(0, h, DType::F32, o), cuda::conv_plan_key(0, g, DType::F32, o));
  }
}

TEST(ConvEnginePolicy, ApiNamesAndEnvironment) {
  EXPECT_EQ(cuda::conv_api_from_name(""), cuda::ConvApi::Auto);
  EXPECT_EQ(cuda::conv_api_from_name("auto"), cuda::ConvApi::Auto);
  EXPECT_EQ(cuda::conv_api_from_name("graph"), cuda::ConvApi::Graph);
  EXPECT_EQ(cuda::conv_api_from_name("legacy"), cuda::ConvApi::Legacy);
  for (cuda::ConvApi a : {cuda::ConvApi::Auto, cuda::ConvApi::Graph, cuda::ConvApi::Legacy})
    EXPECT_EQ(cuda::conv_api_from_name(cuda::conv_api_name(a)), a);
  for (const char* bad : {"Graph", "v8", "graph ", "none"}) {
    try {
      (void)cuda::conv_api_from_name(bad);
      ADD_FAILURE() << bad << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Input);
      const std::string m = e.what();
      EXPECT_NE(m.find(std::string("SPIKEMESH_CUDNN_API=") + bad), std::string::npos) << m;
      EXPECT_NE(m.find("graph, legacy"), std::string::npos) << m;
    }
  }
  const char* old = std::getenv("SPIKEMESH_CUDNN_API");
  const std::string saved = old ? old : "";
  setenv("SPIKEMESH_CUDNN_API", "legacy", 1);
  EXPECT_EQ(cuda::conv_api_from_env(), cuda::ConvApi::Legacy);
  setenv("SPIKEMESH_CUDNN_API", "grpah", 1);
  EXPECT_THROW((void)cuda::conv_api_from_env(), Error);
  unsetenv("SPIKEMESH_CUDNN_API");
  EXPECT_EQ(cuda::conv_api_from_env(), cuda::ConvApi::Auto);
  if (old) setenv("SPIKEMESH_CUDNN_API", saved.c_str(), 1);
}

TEST(ConvEnginePolicy, WorkspaceLimitFromFreeMemoryBounded) {
  const size_t gib = size_t{1} << 30;
  EXPECT_EQ(cuda::workspace_limit(size_t{512} << 20, 100 * gib), size_t{512} << 20);  // explicit: as asked
  EXPECT_EQ(cuda::workspace_limit(0, 8 * gib), 2 * gib);                              // a quarter of free
  EXPECT_EQ(cuda::workspace_limit(0, 140 * gib), cuda::kWorkspaceCap);                // capped at 4 GiB
  EXPECT_EQ(cuda::kWorkspaceCap, 4 * gib);
  EXPECT_EQ(cuda::workspace_limit(0, 0), 0u);
}

}  // namespace
}  // namespace sm
