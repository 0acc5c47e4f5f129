// test_gpu_neuron_variants.cpp — the vectorised compile-time variants of the CUDA neuron
// kernels against the generic kernels (the previous one-neuron-per-thread kernels, run here by
// handing the same data one element off 16-byte alignment): spikes, final membrane, firing
// count, grad_x and the membrane-gradient carry must be equal BIT FOR BIT for every reset
// mode, surrogate, decay_input, detach and smooth setting, f32 / bf16 / f16, short and
// chunked (long) T; the rate gradient (summed in another order) within 1e-12. The bits the
// forward writes equal the separate pack kernel's; the fused batch-norm apply (x read through
// a per-channel affine) equals bn_normalize_cuda followed by the neuron, bitwise, forward and
// backward, in both kernel families. kernels/neuron_variant.h says which family runs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "test_gpu_util.h"

#ifdef SPIKEMESH_HAVE_CUDA
#include "spikemesh/kernels/cpu/batchnorm.h"
#include "spikemesh/kernels/cpu/neuron.h"
#include "spikemesh/kernels/cuda/batchnorm.h"
#include "spikemesh/kernels/cuda/bitpack.h"
#include "spikemesh/kernels/cuda/neuron.h"
#include "spikemesh/kernels/neuron_variant.h"

namespace sm {
namespace {

using gpu_test::DeviceArray;

template <typename U>
bool same_bits(const std::vector<U>& a, const std::vector<U>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(U)) == 0);
}

std::vector<cpu::NeuronKernelConfig> every_config() {
  std::vector<cpu::NeuronKernelConfig> out;
  for (int kind = 0; kind < 2; ++kind)  // LIF, IF
    for (bool decay : {true, false})
      for (int reset = 0; reset < 3; ++reset)  // hard to 0, hard to -0.3, soft
        for (bool detach : {false, true})
          for (auto sur : {cpu::SurrogateFn::Sigmoid, cpu::SurrogateFn::ATan})
            for (bool smooth : {false, true}) {
              if (kind == 1 && decay) continue;
              cpu::NeuronKernelConfig c;
              c.r = kind == 1 ? 0.0 : 1.0 / 3.0;
              c.decay_input = decay;
              c.hard_reset = reset != 2;
              c.v_reset = reset == 1 ? -0.3 : 0.0;
              c.detach_reset = detach;
              c.surrogate = sur;
              c.alpha = sur == cpu::SurrogateFn::Sigmoid ? 4.0 : 2.0;
              c.smooth = smooth;
              out.push_back(c);
            }
  return out;
}

// Everything one forward + backward produces.
template <typename S>
struct Outputs {
  std::vector<S> spikes, grad_x;
  std::vector<float> v, grad_v_out;
  std::vector<uint32_t> bits, packed;
  int64_t fired = 0;
  double grad_r = 0.0;
};

// Runs the kernels on (x, grad_s) placed `offset` elements into their buffers (offset 1
// breaks 16-byte alignment: the generic kernels run).
template <typename S>
Outputs<S> run(const cpu::NeuronKernelConfig& c, const std::vector<S>& x, const std::vector<S>& gs,
               const std::vector<float>& v0, const std::vector<float>& gv_in, int64_t T, int64_t M, int offset,
               const cuda::NeuronAffineCuda* affine = nullptr) {
  const int64_t TM = T * M;
  std::vector<S> xp(TM + offset), gp(TM + offset);
  std::copy(x.begin(), x.end(), xp.begin() + offset);
  std::copy(gs.begin(), gs.end(), gp.begin() + offset);
  DeviceArray<S> d_x(xp), d_gs(gp), d_spikes(TM + offset), d_gx(TM + offset);
  DeviceArray<float> d_v(v0), d_v0(v0), d_gv_in(gv_in), d_gv_out(M);
  DeviceArray<uint32_t> d_bits(cuda::spike_words(TM)), d_packed(cuda::spike_words(TM));
  DeviceArray<int64_t> d_fired(1);
  DeviceArray<double> d_grad_r(1);
  const bool bits = !c.smooth;
  const bool rate = !(c.decay_input && c.r <= 0.0);
  cuda::neuron_forward_cuda<S>(c, d_x.get() + offset, T, M, d_v.get(), d_spikes.get() + offset,
                               bits ? d_bits.get() : nullptr, d_fired.get(), nullptr, affine);
  if (bits) cuda::pack_bits_cuda<S>(d_spikes.get() + offset, TM, d_packed.get(), nullptr);
  cuda::neuron_backward_cuda<S>(c, d_gs.get() + offset, d_x.get() + offset, nullptr, d_v0.get(), T, M,
                                d_gx.get() + offset, rate ? d_grad_r.get() : nullptr, nullptr, d_gv_in.get(),
                                d_gv_out.get(), affine);
  Outputs<S> o;
  std::vector<S> sp = d_spikes.download(), gx = d_gx.download();
  o.spikes.assign(sp.begin() + offset, sp.end());
  o.grad_x.assign(gx.begin() + offset, gx.end());
  o.v = d_v.download();
  o.grad_v_out = d_gv_out.download();
  if (bits) {
    o.bits = d_bits.download();
    o.packed = d_packed.download();
  }
  o.fired = d_fired.download()[0];
  o.grad_r = rate ? d_grad_r.download()[0] : 0.0;
  return o;
}

template <typename S>
void compare_families(const cpu::NeuronKernelConfig& c, int64_t T, int64_t M, uint64_t seed) {
  SCOPED_TRACE(std::string(gpu_test::type_name<S>()) + " T=" + std::to_string(T) + " M=" + std::to_string(M) +
               (c.r == 0.0 ? " IF" : " LIF") + (c.decay_input ? " decay" : "") + (c.hard_reset ? " hard" : " soft") +
               " v_reset=" + std::to_string(c.v_reset) + (c.detach_reset ? " detach" : "") +
               (c.surrogate == cpu::SurrogateFn::ATan ? " atan" : " sigmoid") + (c.smooth ? " smooth" : ""));
  const double gain = c.decay_input ? 3.0 : 1.0;
  const std::vector<S> x = gpu_test::to_storage<S>(gpu_test::random_floats(T * M, seed, -1.0 * gain, 2.5 * gain));
  const std::vector<S> gs = gpu_test::to_storage<S>(gpu_test::random_floats(T * M, seed + 1, -1.0, 1.0));
  const std::vector<float> v0 = gpu_test::random_floats(M, seed + 2, -0.5, 0.9);
  const std::vector<float> gv = gpu_test::random_floats(M, seed + 3, -0.2, 0.2);
  const bool fast_fwd = neuron_variant::forward_fast(T, M, sizeof(S), !c.smooth, {});
  const bool fast_bwd = neuron_variant::backward_fast(T, M, sizeof(S), {});
  ASSERT_TRUE(fast_fwd || fast_bwd) << "the shape must reach a vectorised kernel";
  const Outputs<S> fast = run<S>(c, x, gs, v0, gv, T, M, 0);
  const Outputs<S> generic = run<S>(c, x, gs, v0, gv, T, M, 1);
  EXPECT_TRUE(same_bits(fast.spikes, generic.spikes)) << "spikes";
  EXPECT_TRUE(same_bits(fast.v, generic.v)) << "final membrane";
  EXPECT_EQ(fast.fired, generic.fired);
  EXPECT_TRUE(same_bits(fast.grad_x, generic.grad_x)) << "grad_x";
  EXPECT_TRUE(same_bits(fast.grad_v_out, generic.grad_v_out)) << "grad_v_out";
  EXPECT_NEAR(fast.grad_r, generic.grad_r, 1e-12 * (1.0 + std::fabs(generic.grad_r))) << "grad_r";
  if (!c.smooth) {
    EXPECT_TRUE(same_bits(fast.bits, fast.packed)) << "the forward's bits vs the pack kernel's";
    EXPECT_TRUE(same_bits(generic.bits, generic.packed)) << "generic bits vs the pack kernel's";
  }
}

TEST(GpuNeuronVariants, EveryVariantEqualsTheGenericKernelBitwise) {
  SM_SKIP_WITHOUT_GPU();
  uint64_t seed = 7000;
  for (const cpu::NeuronKernelConfig& c : every_config()) {
    compare_families<float>(c, 5, 1024, seed += 10);  // one chunk; bits on whole words
    if (HasFatalFailure()) return;
  }
}

TEST(GpuNeuronVariants, LongSequencesHalfTypesAndTails) {
  SM_SKIP_WITHOUT_GPU();
  uint64_t seed = 8000;
  const std::vector<cpu::NeuronKernelConfig> cs = every_config();
  for (size_t k = 0; k < cs.size(); k += 5) {  // a spread of the variants
    for (int64_t T : {1, 16, 17, 37})          // 17, 37: checkpointed chunks
      for (int64_t M : {8, 96, 1000, 4096 + 8}) {  // 1000, 4104: vectors but no whole bit words
        compare_families<float>(cs[k], T, M, seed += 10);
        compare_families<__nv_bfloat16>(cs[k], T, M, seed += 10);
        compare_families<__half>(cs[k], T, M, seed += 10);
        if (HasFatalFailure()) return;
      }
  }
}

// bn_normalize_cuda then the neuron, against the neuron reading x through the same affine.
template <typename S>
void check_fused_affine(const cpu::NeuronKernelConfig& c, int64_t T, int64_t N, int64_t C, int64_t inner,
                        int offset, uint64_t seed) {
  const int64_t M = N * C * inner, TM = T * M;
  SCOPED_TRACE(std::string(gpu_test::type_name<S>()) + " T=" + std::to_string(T) + " N=" + std::to_string(N) +
               " C=" + std::to_string(C) + " inner=" + std::to_string(inner) + " offset=" + std::to_string(offset));
  const std::vector<S> x = gpu_test::to_storage<S>(gpu_test::random_floats(TM, seed, -3.0, 5.0));
  const std::vector<S> gs = gpu_test::to_storage<S>(gpu_test::random_floats(TM, seed + 1, -1.0, 1.0));
  const std::vector<float> v0 = gpu_test::random_floats(M, seed + 2, -0.5, 0.9);
  const std::vector<float> gv = gpu_test::random_floats(M, seed + 3, -0.2, 0.2);
  std::vector<double> center(C), scale(C);
  const std::vector<float> cf = gpu_test::random_floats(C, seed + 4, -1.0, 1.5);
  const std::vector<float> sf = gpu_test::random_floats(C, seed + 5, 0.3, 2.0);
  for (int64_t i = 0; i < C; ++i) {
    center[i] = cf[i] + 1e-9 * i;  // not exactly a float: the kernels round it
    scale[i] = sf[i] / 3.0;
  }
  const std::vector<float> offset_beta = gpu_test::random_floats(C, seed + 6, -0.5, 1.0);
  DeviceArray<double> d_center(center), d_scale(scale);
  DeviceArray<float> d_beta(offset_beta);
  // Unfused: y = bn_normalize(x), then the neuron on y.
  DeviceArray<S> d_x(x), d_y(TM);
  cpu::BnShape bs;
  bs.outer = T * N;
  bs.channels = C;
  bs.inner = inner;
  cuda::bn_normalize_cuda<S>(d_x.get(), bs, d_center.get(), d_scale.get(), d_beta.get(), d_y.get(), nullptr);
  const std::vector<S> y = d_y.download();
  const Outputs<S> unfused = run<S>(c, y, gs, v0, gv, T, M, offset);
  cuda::NeuronAffineCuda a;
  a.center = d_center.get();
  a.scale = d_scale.get();
  a.offset = d_beta.get();
  a.channels = C;
  a.inner = inner;
  const Outputs<S> fused = run<S>(c, x, gs, v0, gv, T, M, offset, &a);
  EXPECT_TRUE(same_bits(fused.spikes, unfused.spikes)) << "spikes";
  EXPECT_TRUE(same_bits(fused.v, unfused.v)) << "final membrane";
  EXPECT_EQ(fused.fired, unfused.fired);
  EXPECT_GT(fused.fired, 0) << "the test must fire";
  EXPECT_TRUE(same_bits(fused.grad_x, unfused.grad_x)) << "grad_x (d loss / d normalised input)";
  EXPECT_TRUE(same_bits(fused.grad_v_out, unfused.grad_v_out)) << "grad_v_out";
  EXPECT_EQ(fused.grad_r, unfused.grad_r) << "grad_r: same kernel, same order";
  if (!c.smooth) {
    EXPECT_TRUE(same_bits(fused.bits, unfused.bits)) << "bits";
  }
}

TEST(GpuNeuronVariants, FusedBatchNormApplyEqualsNormalizeThenNeuron) {
  SM_SKIP_WITHOUT_GPU();
  uint64_t seed = 9000;
  cpu::NeuronKernelConfig lif;
  lif.r = 0.5;
  cpu::NeuronKernelConfig plif_soft = lif;
  plif_soft.r = 0.37;
  plif_soft.hard_reset = false;
  plif_soft.surrogate = cpu::SurrogateFn::ATan;
  for (const cpu::NeuronKernelConfig& c : {lif, plif_soft})
    for (int offset : {0, 1})  // vectorised, generic
      for (int64_t T : {4, 20}) {
        check_fused_affine<float>(c, T, 32, 5, 3, offset, seed += 10);    // channels change inside a vector
        check_fused_affine<float>(c, T, 2, 4, 16, offset, seed += 10);    // M = 128: bits on whole words
        check_fused_affine<__nv_bfloat16>(c, T, 8, 5, 3, offset, seed += 10);
        check_fused_affine<__half>(c, T, 2, 4, 16, offset, seed += 10);
        if (HasFatalFailure()) return;
      }
}

}  // namespace
}  // namespace sm

#else  // !SPIKEMESH_HAVE_CUDA

TEST(GpuNeuronVariants, SkippedWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }

#endif
