// test_pp_costs.cpp — the pipeline's unit dry run (parallel/pipeline/pp_costs.h): output shapes chain
// through the model, the model's state is left as it was, the activation dtype is checked, and
// on a GPU a bf16 dry run (mixed precision) runs in bf16: same shapes, fewer saved bytes than
// the f32 run of the same model.
#include <gtest/gtest.h>

#include <cstring>

#include "error_of.h"
#include "gpu_test_util.h"
#include "spikemesh/layers/ctx.h"
#include "spikemesh/models/model.h"
#include "spikemesh/models/spec_loader.h"
#include "spikemesh/parallel/pipeline/pp_costs.h"

namespace sm {
namespace {

// A narrow CSNN: three units (two conv-BN-neuron-pool blocks with running statistics, the
// classifier), small enough for the sanitizer build's f64 kernels.
std::unique_ptr<Model> tiny_model(DType dt, Device dev) {
  ModelOverrides ov;
  ov.T = 2;
  ov.vars["C"] = 8;
  auto m = load_builtin_model("fmnist_csnn", ov);
  m->finalize(dt, dev, 7);
  return m;
}

TEST(PpCosts, ShapesChainAndTheModelStateIsRestored) {
  auto m = tiny_model(DType::F64, Device::cpu());
  std::vector<Tensor> before;
  for (Buffer* b : m->buffers()) before.push_back(b->value.clone());
  const UnitDryRun d = dry_run_units(*m, 2, Ctx{}, true, DType::F64);
  ASSERT_EQ(d.out_shape.size(), m->units.size());
  ASSERT_EQ(d.ms.size(), m->units.size());
  for (size_t u = 0; u < d.ms.size(); ++u) {
    EXPECT_GT(d.ms[u], 0.0) << "unit " << u;
    EXPECT_GE(d.saved_mb[u], 0.0) << "unit " << u;
  }
  EXPECT_EQ(d.out_shape.back(), (Shape{10}));  // the classifier's logits
  // What a unit keeps of its input is at most the input: [T 2, 2 samples, ...], f64
  ASSERT_EQ(d.input_kept_mb.size(), m->units.size());
  for (size_t u = 0; u < d.ms.size(); ++u) {
    double in_mb = 2 * 2 * 8 / 1048576.0;
    for (int64_t x : u == 0 ? m->info.input_shape : d.out_shape[u - 1]) in_mb *= static_cast<double>(x);
    EXPECT_GE(d.input_kept_mb[u], 0.0) << "unit " << u;
    EXPECT_LE(d.input_kept_mb[u], in_mb + 1e-9) << "unit " << u;
  }
  std::vector<Buffer*> after = m->buffers();
  ASSERT_EQ(after.size(), before.size());
  for (size_t i = 0; i < after.size(); ++i) {  // running statistics (f64) and batch counts (i64), bytewise
    ASSERT_EQ(before[i].nbytes(), after[i]->value.nbytes());
    EXPECT_EQ(std::memcmp(before[i].raw(), after[i]->value.raw(), before[i].nbytes()), 0) << "buffer " << i << " changed";
  }
}

TEST(PpCosts, RefusesAnActivationDtypeTheModelCannotRunHere) {
  auto m = tiny_model(DType::F32, Device::cpu());
  const std::string e = error_of([&] { dry_run_units(*m, 1, Ctx{}, false, DType::BF16); });
  EXPECT_NE(e.find("dry run in bf16"), std::string::npos) << e;
}

TEST(GpuPpCosts, Bf16DryRunKeepsShapesAndSavesLess) {
  SKIP_WITHOUT_GPU();
  auto m = tiny_model(DType::F32, gputest::gpu());
  const UnitDryRun f32 = dry_run_units(*m, 2, Ctx{}, true, DType::F32);
  const UnitDryRun bf16 = dry_run_units(*m, 2, Ctx{}, true, DType::BF16);
  ASSERT_EQ(f32.out_shape, bf16.out_shape);
  double saved32 = 0, saved16 = 0;
  for (size_t u = 0; u < f32.saved_mb.size(); ++u) saved32 += f32.saved_mb[u], saved16 += bf16.saved_mb[u];
  EXPECT_LT(saved16, saved32) << "a bf16 dry run keeps bf16 tensors for backward";
  for (double ms : bf16.ms) EXPECT_GT(ms, 0.0);
}

}  // namespace
}  // namespace sm
