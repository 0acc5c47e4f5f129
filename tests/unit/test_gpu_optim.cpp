// test_gpu_optim.cpp — the fused CUDA optimizer steps (SGD with/without momentum, Nesterov,
// weight decay; Adam; AdamW; bf16 copy-out) over 5 steps against the CPU optimizers
// (optim/optimizer.h), and the deterministic global grad norm + clipping against
// clip_grad_norm (optim/grad_clip.h), with odd sizes and several tensors. f32: 1e-5.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "test_gpu_util.h"

#ifdef SPIKEMESH_HAVE_CUDA
#include "spikemesh/kernels/cuda/optim.h"
#include "spikemesh/optim/grad_clip.h"
#include "spikemesh/optim/optimizer.h"

namespace sm {
namespace {

using gpu_test::DeviceArray;

std::unique_ptr<Param> make_param(const std::string& name, int64_t n, const std::vector<float>& value,
                                  bool decay) {
  auto p = std::make_unique<Param>();
  p->name = p->local_name = name;
  p->shape = p->local_shape = {n};
  p->weight_decay = decay;
  p->value = Tensor::zeros({n}, DType::F32);
  p->grad = Tensor::zeros({n}, DType::F32);
  std::copy(value.begin(), value.end(), p->value.data<float>());
  return p;
}

std::vector<float> floats_of(const Tensor& t) {
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

// Runs `steps` optimizer steps on the CPU and on the GPU from the same start and grads.
void check_optimizer(const OptimizerConfig& cfg, int64_t n, uint64_t seed) {
  SCOPED_TRACE(cfg.name + " momentum=" + std::to_string(cfg.momentum) + (cfg.nesterov ? " nesterov" : "") +
               " wd=" + std::to_string(cfg.weight_decay) + " n=" + std::to_string(n));
  const std::vector<float> p0 = gpu_test::random_floats(n, seed, -1.0, 1.0);
  auto param = make_param("w", n, p0, true);
  auto opt = make_optimizer(cfg, {param.get()});

  DeviceArray<float> d_p(p0), d_g(n), d_s1(std::vector<float>(n, 0.0f)), d_s2(std::vector<float>(n, 0.0f));
  DeviceArray<__nv_bfloat16> d_pb(n);
  const bool sgd = cfg.name == "sgd";
  for (int step = 1; step <= 5; ++step) {
    const std::vector<float> g = gpu_test::random_floats(n, seed + 100 * step, -0.5, 0.5);
    std::copy(g.begin(), g.end(), param->grad.data<float>());
    opt->step();
    d_g.upload(g);
    if (sgd) {
      cuda::SgdStepArgs a;
      a.lr = cfg.lr;
      a.weight_decay = cfg.weight_decay;
      a.momentum = cfg.momentum;
      a.nesterov = cfg.nesterov;
      cuda::sgd_step_cuda(d_p.get(), d_g.get(), cfg.momentum != 0.0 ? d_s1.get() : nullptr, n, a, d_pb.get(),
                          nullptr);
    } else {
      const cuda::AdamStepArgs a = cuda::adam_step_args(cfg.lr, cfg.beta1, cfg.beta2, cfg.eps, cfg.weight_decay,
                                                        cfg.name == "adamw", step);
      cuda::adam_step_cuda(d_p.get(), d_g.get(), d_s1.get(), d_s2.get(), n, a, d_pb.get(), nullptr);
    }
  }
  const std::vector<float> p_gpu = d_p.download();
  EXPECT_TRUE(gpu_test::all_close(p_gpu, floats_of(param->value), 1e-5, "param"));
  const std::vector<OptimState> states = opt->state();
  if (!states.empty()) {
    EXPECT_TRUE(gpu_test::all_close(d_s1.download(), floats_of(*states[0].value), 1e-5, states[0].state_name));
  }
  if (states.size() > 1) {
    EXPECT_TRUE(gpu_test::all_close(d_s2.download(), floats_of(*states[1].value), 1e-5, states[1].state_name));
  }
  // The bf16 copy is the updated f32 weight rounded to nearest even.
  const std::vector<__nv_bfloat16> pb = d_pb.download();
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(gpu_test::to_float(pb[i]), gpu_test::to_float(gpu_test::from_float<__nv_bfloat16>(p_gpu[i])))
        << "bf16 copy at " << i;
}

TEST(GpuOptim, SgdMatchesCpu) {
  SM_SKIP_WITHOUT_GPU();
  uint64_t seed = 10;
  for (double momentum : {0.0, 0.9})
    for (bool nesterov : {false, true})
      for (double wd : {0.0, 1e-2}) {
        if (nesterov && momentum == 0.0) continue;
        OptimizerConfig c;
        c.name = "sgd";
        c.lr = 0.05;
        c.momentum = momentum;
        c.nesterov = nesterov;
        c.weight_decay = wd;
        for (int64_t n : {1, 1000, 100003}) check_optimizer(c, n, seed += 1000);
      }
}

TEST(GpuOptim, AdamAndAdamWMatchCpu) {
  SM_SKIP_WITHOUT_GPU();
  uint64_t seed = 50000;
  for (const char* name : {"adam", "adamw"})
    for (double wd : {0.0, 0.05}) {
      OptimizerConfig c;
      c.name = name;
      c.lr = 1e-2;
      c.weight_decay = wd;
      c.beta1 = 0.9;
      c.beta2 = 0.99;
      c.eps = 1e-8;
      for (int64_t n : {1, 1000, 100003}) check_optimizer(c, n, seed += 1000);
    }
}

TEST(GpuOptim, GradNormAndClippingMatchCpu) {
  SM_SKIP_WITHOUT_GPU();
  const std::vector<int64_t> sizes = {1, 8191, 8192, 8193, 100003, 37};
  for (double max_norm : {0.0, 1.0, 1e6}) {
    SCOPED_TRACE("max_norm " + std::to_string(max_norm));
    std::vector<std::unique_ptr<Param>> params;
    std::vector<Param*> ptrs;
    std::vector<std::unique_ptr<DeviceArray<float>>> dev;
    std::vector<cuda::GradSpan> spans;
    for (size_t k = 0; k < sizes.size(); ++k) {
      const int64_t n = sizes[k];
      params.push_back(make_param("p" + std::to_string(k), n, std::vector<float>(n, 0.0f), true));
      const std::vector<float> g = gpu_test::random_floats(n, 70 + k, -1.0, 1.0);
      std::copy(g.begin(), g.end(), params.back()->grad.data<float>());
      ptrs.push_back(params.back().get());
      dev.push_back(std::make_unique<DeviceArray<float>>(g));
      spans.push_back({dev.back()->get(), n});
    }
    spans.insert(spans.begin() + 2, cuda::GradSpan{nullptr, 0});  // an empty tensor (GPU side only)
    DeviceArray<double> d_sumsq(1);
    cuda::grad_sum_squares_cuda(spans, d_sumsq.get(), nullptr);
    cuda::clip_grads_cuda(spans, d_sumsq.get(), max_norm, nullptr);
    const double norm_cpu = clip_grad_norm(ptrs, max_norm);
    const double norm_gpu = std::sqrt(d_sumsq.download()[0]);
    EXPECT_NEAR(norm_gpu, norm_cpu, 1e-12 * norm_cpu) << "norm";
    for (size_t k = 0; k < sizes.size(); ++k)
      EXPECT_TRUE(gpu_test::all_close(dev[k]->download(), floats_of(params[k]->grad), 1e-6, "grad " + std::to_string(k)));
    // Deterministic: the same sum again, bit for bit.
    const double first = d_sumsq.download()[0];
    cuda::grad_sum_squares_cuda(spans, d_sumsq.get(), nullptr);
    const double again = d_sumsq.download()[0];
    if (max_norm == 0.0) {
      EXPECT_EQ(again, first) << "repeat";
    }
  }
}

}  // namespace
}  // namespace sm

#else  // !SPIKEMESH_HAVE_CUDA

TEST(GpuOptim, SkippedWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }

#endif
