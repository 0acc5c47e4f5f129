// test_gpu_loss.cpp — the CUDA time-mean + cross-entropy and firing-rate + MSE kernels
// against the CPU losses (layers/loss.cpp over kernels/cpu/loss.h): loss value, correct
// count (ties: first maximum wins) and the [T, N, K] gradient, for T = 1 and odd N, K,
// f32 (1e-5) and bf16 / f16 outputs (2e-2), with a gradient scale.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "test_gpu_util.h"

#ifdef SPIKEMESH_HAVE_CUDA
#include "spikemesh/core/tensor.h"
#include "spikemesh/kernels/cuda/loss.h"
#include "spikemesh/layers/loss.h"

namespace sm {
namespace {

using gpu_test::DeviceArray;

template <typename S>
void check_loss(const std::string& kind, int64_t T, int64_t N, int64_t K, bool spikes, uint64_t seed) {
  SCOPED_TRACE(kind + " " + gpu_test::type_name<S>() + " T=" + std::to_string(T) + " N=" + std::to_string(N) +
               " K=" + std::to_string(K) + (spikes ? " spikes" : ""));
  std::vector<float> out = gpu_test::random_floats(T * N * K, seed, -3.0, 3.0);
  if (spikes)  // spike counts: many ties in the time mean
    for (float& v : out) v = v > 1.0f ? 1.0f : 0.0f;
  const std::vector<S> out_s = gpu_test::to_storage<S>(out);
  out = gpu_test::to_floats(out_s);
  std::vector<int64_t> labels(N);
  const std::vector<float> lr = gpu_test::random_floats(N, seed + 1, 0.0, static_cast<double>(K));
  for (int64_t i = 0; i < N; ++i) labels[i] = std::min<int64_t>(K - 1, static_cast<int64_t>(lr[i]));
  const double grad_scale = 0.75;

  // CPU loss layer (f32 output tensor holding exactly the storage values).
  auto loss = make_loss(kind);
  Tensor t_out = Tensor::empty({T, N, K}, DType::F32);
  std::copy(out.begin(), out.end(), t_out.data<float>());
  Tensor t_lab = Tensor::empty({N}, DType::I64);
  std::copy(labels.begin(), labels.end(), t_lab.data<int64_t>());
  const LossResult r = loss->forward(t_out, t_lab);
  const Tensor d_cpu = loss->backward(grad_scale);  // [T, N, K]
  std::vector<float> dout_cpu(d_cpu.data<float>(), d_cpu.data<float>() + d_cpu.numel());

  // GPU.
  DeviceArray<S> d_out(out_s), d_dout(T * N * K);
  DeviceArray<int64_t> d_lab(labels), d_correct(1);
  DeviceArray<double> d_mean(N * K), d_loss(1), d_grad(N * K);
  cuda::time_mean_cuda<S>(d_out.get(), T, N, K, d_mean.get(), nullptr);
  if (kind == "mean_ce")
    cuda::cross_entropy_cuda(d_mean.get(), d_lab.get(), N, K, d_loss.get(), d_correct.get(), d_grad.get(), nullptr);
  else
    cuda::rate_mse_cuda(d_mean.get(), d_lab.get(), N, K, d_loss.get(), d_correct.get(), d_grad.get(), nullptr);
  cuda::broadcast_over_time_cuda<S>(d_grad.get(), T, N, K, grad_scale / static_cast<double>(T), d_dout.get(),
                                    nullptr);

  // The loss is computed in double from the same values on both sides.
  EXPECT_NEAR(d_loss.download()[0], r.loss, 1e-12 * (1.0 + std::fabs(r.loss))) << "loss";
  EXPECT_EQ(d_correct.download()[0], r.correct) << "correct";
  EXPECT_TRUE(gpu_test::all_close(gpu_test::to_floats(d_dout.download()), dout_cpu, gpu_test::storage_rtol<S>(),
                                  "dL/dout"));
}

TEST(GpuLoss, MeanCrossEntropyMatchesCpu) {
  SM_SKIP_WITHOUT_GPU();
  uint64_t seed = 10;
  for (int64_t T : {1, 4, 10})
    for (int64_t N : {1, 7, 300})
      for (int64_t K : {2, 10, 101}) {
        check_loss<float>("mean_ce", T, N, K, false, seed += 10);
        check_loss<float>("mean_ce", T, N, K, true, seed += 10);
        check_loss<__nv_bfloat16>("mean_ce", T, N, K, true, seed += 10);
        check_loss<__half>("mean_ce", T, N, K, false, seed += 10);
        if (HasFatalFailure()) return;
      }
}

TEST(GpuLoss, RateMseMatchesCpu) {
  SM_SKIP_WITHOUT_GPU();
  uint64_t seed = 5000;
  for (int64_t T : {1, 4, 10})
    for (int64_t N : {1, 7, 300})
      for (int64_t K : {2, 10, 101}) {
        check_loss<float>("rate_mse", T, N, K, true, seed += 10);
        check_loss<float>("rate_mse", T, N, K, false, seed += 10);
        check_loss<__nv_bfloat16>("rate_mse", T, N, K, true, seed += 10);
        if (HasFatalFailure()) return;
      }
}

// Soft targets (mixing augmentations) on a GPU output: the wrapper reduces the small [T, N, K]
// output on the host and sends the gradient back to the device in the output's dtype; the
// result equals the CPU loss on the same values.
TEST(GpuLoss, SoftTargetsOnAGpuOutputEqualTheCpuLoss) {
  SM_SKIP_WITHOUT_GPU();
  const int64_t T = 3, N = 5, K = 4;
  const std::vector<float> out = gpu_test::random_floats(T * N * K, 77, -2.0, 2.0);
  Tensor t_out = Tensor::empty({T, N, K}, DType::F32);
  std::copy(out.begin(), out.end(), t_out.data<float>());
  Tensor labels = Tensor::empty({N}, DType::I64), soft = Tensor::zeros({N, K}, DType::F64);
  for (int64_t i = 0; i < N; ++i) {
    labels.data<int64_t>()[i] = i % K;
    soft.data<double>()[i * K + i % K] += 0.7;
    soft.data<double>()[i * K + (i + 1) % K] += 0.3;
  }
  for (const char* kind : {"mean_ce", "rate_mse"}) {
    auto cpu = make_loss(kind);
    auto dev = with_cuda_support(make_loss(kind));
    const LossResult rc = cpu->forward(t_out, labels, 0, soft);
    const LossResult rg = dev->forward(t_out.to(Device::cuda(0)), labels, 0, soft);
    EXPECT_EQ(rg.loss, rc.loss) << kind;
    EXPECT_EQ(rg.correct, rc.correct) << kind;
    const Tensor gc = cpu->backward(0.5), gg = dev->backward(0.5);
    ASSERT_TRUE(gg.device().is_cuda()) << kind;
    ASSERT_EQ(gg.dtype(), DType::F32) << kind;
    const Tensor gh = gg.to(Device::cpu());
    for (int64_t i = 0; i < gc.numel(); ++i) ASSERT_EQ(gh.data<float>()[i], gc.data<float>()[i]) << kind << " " << i;
  }
}

}  // namespace
}  // namespace sm

#else  // !SPIKEMESH_HAVE_CUDA

TEST(GpuLoss, SkippedWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }

#endif
