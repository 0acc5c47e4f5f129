// test_gpu_fused_bn_neuron.cpp — the fused batch norm → neuron epilogue on the GPU
// (layers/fused_epilogue.h): Conv → BN → LIF → Conv → BN → PLIF units on CUDA, fused against
// SPIKEMESH_FUSE off. With |β| > 8|γ| the unfused batch norm also keeps its input (its output
// is not recoverable), so both run the same backward: outputs, input gradient, every parameter
// gradient and the running statistics must be equal bit for bit, in f32 and bf16. With an
// ordinary β the forward outputs and statistics are still bitwise and the gradients agree to
// rounding (the unfused batch norm then works from its output). The fusion really ran, and
// the spike bits the neurons recorded for the convolutions are dropped with their tensors.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "gpu_test_util.h"
#include "gradient_check.h"
#include "spikemesh/core/spike_bits_cache.h"
#include "spikemesh/layers/batchnorm.h"
#include "spikemesh/layers/conv2d.h"
#include "spikemesh/layers/fused_epilogue.h"
#include "spikemesh/layers/neuron.h"
#include "spikemesh/layers/unit.h"

namespace sm {
namespace {

struct GpuRun {
  std::vector<Tensor> out, dx;  // host copies, f32
  Tensor grads, buffers;
  int64_t fused = 0;
};

Tensor host_f32(const Tensor& t) { return t.to(Device::cpu()).to_dtype(DType::F32); }

GpuRun run_gpu_unit(DType dt, bool fuse, bool big_beta) {
  const bool before = fused_epilogues();
  set_fused_epilogues(fuse);
  Unit u("block");
  u.add(std::make_unique<Conv2d>(Conv2dConfig{2, 6, 3, 1, 1, true, WeightInit::TorchDefault}));
  BatchNormConfig b1;
  b1.num_features = 6;
  auto bn1 = std::make_unique<BatchNorm>(b1);
  const BatchNorm* first = bn1.get();
  u.add(std::move(bn1));
  NeuronConfig lif;
  lif.tau = 2.0;
  lif.surrogate = SurrogateKind::ATan;
  lif.alpha = 2.0;
  u.add(std::make_unique<Neuron>(lif));
  u.add(std::make_unique<Conv2d>(Conv2dConfig{6, 8, 3, 1, 1, false, WeightInit::TorchDefault}));
  BatchNormConfig b2;
  b2.num_features = 8;
  auto bn2 = std::make_unique<BatchNorm>(b2);
  const BatchNorm* second = bn2.get();
  u.add(std::move(bn2));
  NeuronConfig plif;
  plif.kind = NeuronKind::PLIF;
  plif.decay_input = false;
  plif.v_threshold = 0.5;
  u.add(std::make_unique<Neuron>(plif));
  u.finalize(DType::F32, gputest::gpu(), 5);
  // Big β (|β| > 8|γ|, γ starts at 1): the unfused batch norm cannot recover x from y, keeps x.
  for (Layer* l : u.children())
    if (auto* bn = dynamic_cast<BatchNorm*>(l)) {
      const std::vector<Param*> p = bn->params();  // γ, β
      const int64_t C = p[0]->value.numel();
      Tensor beta = Tensor::empty({C}, DType::F32);
      for (int64_t c = 0; c < C; ++c) beta.data<float>()[c] = big_beta ? 9.5f + 0.25f * c : 0.1f * (c - 2);
      p[1]->value.copy_from(beta.to(gputest::gpu()));
    }
  GpuRun r;
  for (int step = 0; step < 2; ++step) {
    Tensor x = test::random_tensor({3, 4, 2, 9, 8}, DType::F32, 20 + step, -1.0, 2.0).to(gputest::gpu()).to_dtype(dt);
    Tensor dy = test::random_tensor({3, 4, 8, 9, 8}, DType::F32, 30 + step, -1.0, 1.0).to(gputest::gpu()).to_dtype(dt);
    Ctx ctx;
    u.reset_state();
    u.zero_grad();
    r.out.push_back(host_f32(u.forward(x, ctx)));
    r.dx.push_back(host_f32(u.backward_input(dy, ctx)));
  }
  r.grads = host_f32(u.flat_grad());
  std::vector<float> b;
  for (Buffer* bf : u.buffers()) {
    const Tensor h = bf->value.to(Device::cpu());
    for (int64_t i = 0; i < h.numel(); ++i) b.push_back(static_cast<float>(h.at(i)));
  }
  r.buffers = Tensor::empty({static_cast<int64_t>(b.size())}, DType::F32);
  std::copy(b.begin(), b.end(), r.buffers.data<float>());
  Ctx eval;
  eval.training = false;
  u.reset_state();
  r.out.push_back(host_f32(u.forward(test::random_tensor({3, 4, 2, 9, 8}, DType::F32, 40, -1.0, 2.0)
                                         .to(gputest::gpu())
                                         .to_dtype(dt),
                                     eval)));
  r.fused = first->fused_forwards() + second->fused_forwards();
  set_fused_epilogues(before);
  return r;
}

bool bitwise(const Tensor& a, const Tensor& b) {
  return a.numel() == b.numel() && a.dtype() == b.dtype() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

TEST(GpuFusedBnNeuron, EqualsUnfusedBitwiseWhenBothKeepTheInput) {
  SKIP_WITHOUT_GPU();
  for (DType dt : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dt));
    const GpuRun fused = run_gpu_unit(dt, true, true), plain = run_gpu_unit(dt, false, true);
    EXPECT_EQ(fused.fused, 6) << "two batch norms fused in two training forwards and one eval forward";
    EXPECT_EQ(plain.fused, 0);
    for (size_t k = 0; k < fused.out.size(); ++k) EXPECT_TRUE(bitwise(fused.out[k], plain.out[k])) << "output " << k;
    for (size_t k = 0; k < fused.dx.size(); ++k) EXPECT_TRUE(bitwise(fused.dx[k], plain.dx[k])) << "dx " << k;
    EXPECT_TRUE(bitwise(fused.grads, plain.grads)) << "parameter gradients";
    EXPECT_TRUE(bitwise(fused.buffers, plain.buffers)) << "running statistics";
  }
}

TEST(GpuFusedBnNeuron, OrdinaryBetaForwardBitwiseGradientsToRounding) {
  SKIP_WITHOUT_GPU();
  const GpuRun fused = run_gpu_unit(DType::F32, true, false), plain = run_gpu_unit(DType::F32, false, false);
  for (size_t k = 0; k < fused.out.size(); ++k) EXPECT_TRUE(bitwise(fused.out[k], plain.out[k])) << "output " << k;
  EXPECT_TRUE(bitwise(fused.buffers, plain.buffers)) << "running statistics";
  for (size_t k = 0; k < fused.dx.size(); ++k)
    EXPECT_LE(gputest::rel_err(fused.dx[k], plain.dx[k]), 1e-4) << "dx " << k;
  EXPECT_LE(gputest::grad_rel_err(fused.grads, plain.grads, gputest::max_abs(plain.grads)), 1e-4);
}

TEST(GpuFusedBnNeuron, SpikeBitsEntriesLeaveWithTheirTensors) {
  SKIP_WITHOUT_GPU();
  const size_t before = spike_bits_entries();
  { (void)run_gpu_unit(DType::F32, true, false); }
  EXPECT_EQ(spike_bits_entries(), before) << "every recorded spike tensor was freed, and its entry with it";
}

}  // namespace
}  // namespace sm
