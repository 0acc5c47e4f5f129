// test_gpu_neuron.cpp — the CUDA LIF / PLIF / IF kernels against the CPU kernels
// (kernels/cpu/neuron.h, the reference) on fresh random inputs: every option combination,
// odd sizes (M not a multiple of 32, T = 1, T beyond one register chunk), f32 / bf16 / f16
// activations, a starting membrane, binary inputs given as packed bits, smooth mode.
// Spikes must be equal (a neuron may differ only from a step where |h - v_th| < 1e-6, and
// is then left out of the other comparisons); packed spike bits must equal the CPU's
// bitpack of the CPU spikes; grad_x / v / grad_r within f32 (1e-5) or bf16 (2e-2) tolerance.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "test_gpu_util.h"

#ifdef SPIKEMESH_HAVE_CUDA
#include "spikemesh/core/bitpack.h"
#include "spikemesh/core/tensor.h"
#include "spikemesh/kernels/cpu/neuron.h"
#include "spikemesh/kernels/cuda/bitpack.h"
#include "spikemesh/kernels/cuda/neuron.h"

namespace sm {
namespace {

using gpu_test::DeviceArray;

enum class Kind { LIF, IF };
enum class Reset { HardZero, HardNeg, Soft };

struct NeuronCase {
  Kind kind;
  bool decay_input;
  Reset reset;
  bool detach;
  cpu::SurrogateFn surrogate;
};

cpu::NeuronKernelConfig make_config(const NeuronCase& k) {
  cpu::NeuronKernelConfig c;
  c.r = k.kind == Kind::IF ? 0.0 : 1.0 / 3.0;
  c.decay_input = k.kind == Kind::IF ? false : k.decay_input;
  c.v_threshold = 1.0;
  c.hard_reset = k.reset != Reset::Soft;
  c.v_reset = k.reset == Reset::HardNeg ? -0.3 : 0.0;
  c.detach_reset = k.detach;
  c.surrogate = k.surrogate;
  c.alpha = k.surrogate == cpu::SurrogateFn::Sigmoid ? 4.0 : 2.0;
  return c;
}

std::string case_name(const cpu::NeuronKernelConfig& c) {
  std::string s = c.r == 0.0 ? "IF" : "LIF";
  s += c.decay_input ? "_decay" : "_nodecay";
  s += !c.hard_reset ? "_soft" : c.v_reset == 0.0 ? "_hard0" : "_hardneg";
  s += c.detach_reset ? "_detach" : "_attached";
  s += c.surrogate == cpu::SurrogateFn::Sigmoid ? "_sigmoid" : "_atan";
  if (c.smooth) s += "_smooth";
  return s;
}

// Pre-spike membranes h[t·M + i] along the CPU trajectory (a plain f32 re-run of the
// equations; used only to excuse spikes decided within 1e-6 of the threshold).
std::vector<float> cpu_membranes(const cpu::NeuronKernelConfig& c, const std::vector<float>& x,
                                 const std::vector<float>* v0, int64_t T, int64_t M) {
  std::vector<float> h(x.size());
  const float r = static_cast<float>(c.r), vth = static_cast<float>(c.v_threshold);
  const float vrc = c.hard_reset ? static_cast<float>(c.v_reset) : 0.0f;
  for (int64_t i = 0; i < M; ++i) {
    float v = v0 ? (*v0)[i] : static_cast<float>(c.rest());
    for (int64_t t = 0; t < T; ++t) {
      const float xt = x[t * M + i];
      const float ht = c.decay_input ? v + r * (xt - (v - vrc)) : v - r * (v - vrc) + xt;
      h[t * M + i] = ht;
      const float s = ht >= vth ? 1.0f : 0.0f;
      v = c.hard_reset ? s * static_cast<float>(c.v_reset) + (1.0f - s) * ht : ht - s * vth;
    }
  }
  return h;
}

struct RunOptions {
  int64_t T = 4, M = 1000;
  bool with_v0 = false;
  bool binary_input = false;  // x in {0, 1}, handed to backward as packed bits
  uint64_t seed = 1;
};

template <typename S>
void check_case(const cpu::NeuronKernelConfig& c, const RunOptions& o) {
  const int64_t T = o.T, M = o.M, TM = T * M;
  const std::string what = case_name(c) + " " + gpu_test::type_name<S>() + " T=" + std::to_string(T) +
                           " M=" + std::to_string(M) + (o.with_v0 ? " v0" : "") +
                           (o.binary_input ? " bits" : "");
  SCOPED_TRACE(what);
  // Inputs reach about 2.5 v_th per step whether or not the input is decayed by r = 1/3.
  const double gain = c.decay_input ? 3.0 : 1.0;
  std::vector<float> x = o.binary_input ? gpu_test::random_floats(TM, o.seed, 0.0, 2.0)
                                        : gpu_test::random_floats(TM, o.seed, -1.0 * gain, 2.5 * gain);
  if (o.binary_input)
    for (float& e : x) e = e >= 1.0f ? 1.0f : 0.0f;
  // What the kernels see: the inputs rounded to the storage type.
  const std::vector<S> x_s = gpu_test::to_storage<S>(x);
  x = gpu_test::to_floats(x_s);
  const std::vector<S> gs_s = gpu_test::to_storage<S>(gpu_test::random_floats(TM, o.seed + 1, -1.0, 1.0));
  const std::vector<float> gs = gpu_test::to_floats(gs_s);
  std::vector<float> v0 = gpu_test::random_floats(M, o.seed + 2, -0.5, 0.9);
  const bool rate_grad = !(c.decay_input && c.r <= 0.0);

  // CPU reference (f32 kernel on the same values).
  std::vector<float> v_cpu = v0, spikes_cpu(TM), gx_cpu(TM);
  const int64_t fired_cpu = cpu::neuron_forward<float>(c, x.data(), T, M, o.with_v0 ? v_cpu.data() : nullptr,
                                                       spikes_cpu.data());
  double grad_r_cpu = 0.0;
  cpu::neuron_backward<float>(c, gs.data(), x.data(), o.with_v0 ? v0.data() : nullptr, T, M, gx_cpu.data(),
                              rate_grad ? &grad_r_cpu : nullptr);

  // GPU.
  DeviceArray<S> d_x(x_s), d_gs(gs_s), d_spikes(TM), d_gx(TM);
  DeviceArray<float> d_v(v0);
  DeviceArray<uint32_t> d_bits(cuda::spike_words(TM)), d_xbits(cuda::spike_words(TM));
  DeviceArray<int64_t> d_fired(1);
  DeviceArray<double> d_grad_r(1);
  const bool bits = !c.smooth;
  cuda::neuron_forward_cuda<S>(c, d_x.get(), T, M, o.with_v0 ? d_v.get() : nullptr, d_spikes.get(),
                               bits ? d_bits.get() : nullptr, d_fired.get(), nullptr);
  if (o.binary_input) cuda::pack_bits_cuda<S>(d_x.get(), TM, d_xbits.get(), nullptr);
  DeviceArray<float> d_v0(v0);  // the forward's starting membrane (d_v now holds v_{T-1})
  cuda::neuron_backward_cuda<S>(c, d_gs.get(), o.binary_input ? nullptr : d_x.get(),
                                o.binary_input ? d_xbits.get() : nullptr, o.with_v0 ? d_v0.get() : nullptr,
                                T, M, d_gx.get(), rate_grad ? d_grad_r.get() : nullptr, nullptr);
  const std::vector<float> spikes = gpu_test::to_floats(d_spikes.download());
  const std::vector<float> gx = gpu_test::to_floats(d_gx.download());
  const std::vector<float> v_gpu = d_v.download();

  // Spikes: equal, except a neuron whose first difference is at |h - v_th| < 1e-6.
  std::vector<char> flipped(M, 0);
  int64_t n_flipped = 0;
  if (!c.smooth) {
    const std::vector<float> h = cpu_membranes(c, x, o.with_v0 ? &v0 : nullptr, T, M);
    for (int64_t i = 0; i < M; ++i) {
      for (int64_t t = 0; t < T; ++t) {
        const int64_t e = t * M + i;
        ASSERT_TRUE(spikes[e] == 0.0f || spikes[e] == 1.0f) << "spike " << spikes[e] << " at " << e;
        if (spikes[e] != spikes_cpu[e]) {
          ASSERT_LT(std::fabs(h[e] - static_cast<float>(c.v_threshold)), 1e-6)
              << "spike differs at t=" << t << " i=" << i << " with h=" << h[e];
          flipped[i] = 1;
          ++n_flipped;
          break;
        }
      }
    }
    EXPECT_LE(n_flipped, std::max<int64_t>(1, M / 100)) << "too many near-threshold flips";
  } else {
    EXPECT_TRUE(gpu_test::all_close(spikes, spikes_cpu, 1e-5, "smooth spikes"));
  }

  // The other results, over neurons that did not flip.
  auto keep = [&](const std::vector<float>& v, bool per_step) {
    std::vector<float> out;
    for (int64_t e = 0; e < static_cast<int64_t>(v.size()); ++e)
      if (!flipped[per_step ? e % M : e]) out.push_back(v[e]);
    return out;
  };
  const double rtol = gpu_test::storage_rtol<S>();
  EXPECT_TRUE(gpu_test::all_close(keep(gx, true), keep(gx_cpu, true), rtol, "grad_x"));
  if (o.with_v0) {
    EXPECT_TRUE(gpu_test::all_close(keep(v_gpu, false), keep(v_cpu, false), 1e-5, "final v"));
  } else {
    EXPECT_EQ(v_gpu, v0) << "v must not be touched when not passed";
  }

  if (n_flipped == 0) {
    if (!c.smooth) {  // smooth: h may differ by ulps
      EXPECT_EQ(d_fired.download()[0], fired_cpu);
    }
    if (rate_grad) {
      const double g = d_grad_r.download()[0];
      EXPECT_NEAR(g, grad_r_cpu, (sizeof(S) == 4 ? 1e-4 : 2e-2) * (1.0 + std::fabs(grad_r_cpu))) << "grad_r";
    }
  }

  // Packed bits: the CPU's bitpack of the CPU spikes, byte for byte; padding bits zero.
  if (bits && n_flipped == 0) {
    Tensor sp = Tensor::empty({TM}, DType::F32);
    std::copy(spikes_cpu.begin(), spikes_cpu.end(), sp.data<float>());
    const Tensor packed = pack_bits(sp);  // u8 [ceil(TM / 8)]
    const std::vector<uint32_t> words = d_bits.download();
    const auto* bytes = reinterpret_cast<const uint8_t*>(words.data());
    for (int64_t b = 0; b < packed.numel(); ++b)
      ASSERT_EQ(bytes[b], packed.data<uint8_t>()[b]) << "spike bit byte " << b;
    for (int64_t b = packed.numel(); b < static_cast<int64_t>(words.size() * 4); ++b)
      ASSERT_EQ(bytes[b], 0) << "padding byte " << b;
  }
}

std::vector<NeuronCase> all_cases() {
  std::vector<NeuronCase> cases;
  for (Kind kind : {Kind::LIF, Kind::IF})
    for (bool decay : {true, false}) {
      if (kind == Kind::IF && decay) continue;
      for (Reset reset : {Reset::HardZero, Reset::HardNeg, Reset::Soft})
        for (bool detach : {false, true})
          for (cpu::SurrogateFn sur : {cpu::SurrogateFn::Sigmoid, cpu::SurrogateFn::ATan})
            cases.push_back({kind, decay, reset, detach, sur});
    }
  return cases;
}

TEST(GpuNeuron, EveryOptionMatchesCpuF32) {
  SM_SKIP_WITHOUT_GPU();
  uint64_t seed = 100;
  for (const NeuronCase& k : all_cases()) {
    RunOptions o;
    o.T = 4;
    o.M = 1000;  // not a multiple of 32
    o.seed = seed += 10;
    check_case<float>(make_config(k), o);
    if (HasFatalFailure()) return;
  }
}

TEST(GpuNeuron, OddShapesAndLongSequences) {
  SM_SKIP_WITHOUT_GPU();
  const NeuronCase lif{Kind::LIF, true, Reset::HardZero, false, cpu::SurrogateFn::Sigmoid};
  const NeuronCase soft{Kind::LIF, false, Reset::Soft, true, cpu::SurrogateFn::ATan};
  uint64_t seed = 500;
  for (const NeuronCase& k : {lif, soft})
    for (int64_t T : {1, 3, 16, 17, 40})  // 16: one full chunk; 17, 40: checkpointed chunks
      for (int64_t M : {1, 31, 96, 1000}) {
        for (bool v0 : {false, true}) {
          RunOptions o;
          o.T = T;
          o.M = M;
          o.with_v0 = v0;
          o.seed = seed += 10;
          check_case<float>(make_config(k), o);
          if (HasFatalFailure()) return;
        }
      }
}

TEST(GpuNeuron, LargeAlignedM) {
  SM_SKIP_WITHOUT_GPU();
  // M a multiple of 32 uses the direct ballot-word store; large enough for many blocks.
  const NeuronCase k{Kind::LIF, true, Reset::HardNeg, false, cpu::SurrogateFn::Sigmoid};
  RunOptions o;
  o.T = 6;
  o.M = 32 * 4099;
  o.with_v0 = true;
  o.seed = 900;
  check_case<float>(make_config(k), o);
}

TEST(GpuNeuron, Bf16AndF16Activations) {
  SM_SKIP_WITHOUT_GPU();
  uint64_t seed = 1200;
  for (const NeuronCase& k : {NeuronCase{Kind::LIF, true, Reset::HardZero, false, cpu::SurrogateFn::Sigmoid},
                              NeuronCase{Kind::LIF, false, Reset::Soft, false, cpu::SurrogateFn::ATan},
                              NeuronCase{Kind::IF, false, Reset::HardNeg, true, cpu::SurrogateFn::Sigmoid}})
    for (int64_t T : {1, 5, 20}) {
      RunOptions o;
      o.T = T;
      o.M = 777;
      o.with_v0 = T == 5;
      o.seed = seed += 10;
      check_case<__nv_bfloat16>(make_config(k), o);
      if (HasFatalFailure()) return;
      o.seed = seed += 10;
      check_case<__half>(make_config(k), o);
      if (HasFatalFailure()) return;
    }
}

TEST(GpuNeuron, BinaryInputFromPackedBits) {
  SM_SKIP_WITHOUT_GPU();
  uint64_t seed = 1500;
  for (const NeuronCase& k : {NeuronCase{Kind::IF, false, Reset::HardZero, false, cpu::SurrogateFn::Sigmoid},
                              NeuronCase{Kind::LIF, true, Reset::Soft, false, cpu::SurrogateFn::ATan}})
    for (int64_t T : {2, 19}) {
      RunOptions o;
      o.T = T;
      o.M = 333;
      o.binary_input = true;
      o.seed = seed += 10;
      cpu::NeuronKernelConfig c = make_config(k);
      c.v_threshold = 1.5;  // binary inputs: fire every other step or so
      check_case<float>(c, o);
      if (HasFatalFailure()) return;
      o.seed = seed += 10;
      check_case<__nv_bfloat16>(c, o);
      if (HasFatalFailure()) return;
    }
}

TEST(GpuNeuron, SmoothModeMatchesCpu) {
  SM_SKIP_WITHOUT_GPU();
  uint64_t seed = 1800;
  for (const NeuronCase& k : all_cases()) {
    cpu::NeuronKernelConfig c = make_config(k);
    c.smooth = true;
    RunOptions o;
    o.T = 5;
    o.M = 100;
    o.seed = seed += 10;
    check_case<float>(c, o);
    if (HasFatalFailure()) return;
  }
}

TEST(GpuNeuron, PackUnpackRoundTripMatchesCpuBitpack) {
  SM_SKIP_WITHOUT_GPU();
  for (int64_t n : {1, 7, 8, 31, 32, 33, 1000, 4096 + 5}) {
    std::vector<float> x = gpu_test::random_floats(n, 2000 + n, 0.0, 2.0);
    for (float& e : x) e = e >= 1.0f ? 1.0f : 0.0f;
    DeviceArray<float> d_x(x), d_back(n);
    DeviceArray<uint32_t> d_bits(cuda::spike_words(n));
    cuda::pack_bits_cuda<float>(d_x.get(), n, d_bits.get(), nullptr);
    cuda::unpack_bits_cuda<float>(d_bits.get(), n, d_back.get(), nullptr);
    EXPECT_EQ(d_back.download(), x) << "n=" << n;
    Tensor t = Tensor::empty({n}, DType::F32);
    std::copy(x.begin(), x.end(), t.data<float>());
    const Tensor packed = pack_bits(t);
    const std::vector<uint32_t> words = d_bits.download();
    const auto* bytes = reinterpret_cast<const uint8_t*>(words.data());
    for (int64_t b = 0; b < packed.numel(); ++b) ASSERT_EQ(bytes[b], packed.data<uint8_t>()[b]) << "n=" << n;
    for (int64_t b = packed.numel(); b < static_cast<int64_t>(4 * words.size()); ++b) ASSERT_EQ(bytes[b], 0);
  }
}

}  // namespace
}  // namespace sm

#else  // !SPIKEMESH_HAVE_CUDA

TEST(GpuNeuron, SkippedWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }

#endif
