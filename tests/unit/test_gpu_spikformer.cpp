// test_gpu_spikformer.cpp — the CUDA pieces Spikformer adds against the CPU
// reference: the spiking self-attention kernels (kernels/cuda/spiking_attention.h: popcount
// and tiled-GEMM forward, backward from values and from bits), the Mean kernels, the ssa and
// mean layers' CUDA hooks, and a whole small Spikformer training step on the device = the
// CPU step. Skipped without a GPU.
//
// Tolerances:
//  * SSA forward on spikes: EXACT in every dtype — both paths form the integer sums exactly
//    and round once: the result is the CPU f32 value rounded to T.
//  * everything else, f32: 1e-5 relative (all_close: |got - want| <= 1e-5·|want| + 1e-5·max|want|;
//    the GPU accumulates in f32, the CPU SSA in double).
//  * bf16: 1e-2 and f16: 2e-3 relative (same form). Inputs are rounded to T before the CPU
//    sees them, the sums run in f32 and intermediates (A, dA) stay f32, so the only
//    rounding that matters is the single one on store: 2^-9 (bf16), 2^-11 (f16); the bounds
//    leave a factor ~4-5 for the f32 accumulation differences.
//  * whole step: loss 1e-5, gradients 5e-3 in relative L2 (a spike within rounding of a
//    threshold may flip between cuDNN/cuBLAS and the CPU kernels, as in test_gpu_step.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "gpu_test_util.h"
#include "spikemesh/layers/loss.h"
#include "spikemesh/layers/mean.h"
#include "spikemesh/layers/spiking_attention.h"
#include "spikemesh/models/spec_loader.h"
#include "test_gpu_util.h"

#ifdef SPIKEMESH_HAVE_CUDA
#include "spikemesh/kernels/cpu/spiking_attention.h"
#include "spikemesh/kernels/cuda/bitpack.h"
#include "spikemesh/kernels/cuda/mean.h"
#include "spikemesh/kernels/cuda/spiking_attention.h"
#endif

namespace sm {
namespace {

using gputest::gpu;
using gputest::rel_err;
using gputest::rel_l2;

#ifdef SPIKEMESH_HAVE_CUDA
using gpu_test::DeviceArray;

// ------------------------------------------------------------------------ SSA kernels
const cpu::SsaGeom kSsaCases[] = {
    // batch, heads, d, L
    {3, 2, 16, 4},     // the small Spikformer of the whole-step test (L = 2·2 tokens)
    {2, 2, 16, 33},    // rows not word-aligned in the flat bit string
    {2, 4, 32, 64},    // Spikformer-Ti head size
    {1, 2, 64, 196},   // 224 px / 16: 196 tokens
    {2, 1, 7, 100},    // odd d
    {1, 1, 100, 1100}, // the popcount path in several token chunks
    {1, 1, 128, 16},   // d beyond the popcount path (GEMM only)
};

std::string ssa_name(const cpu::SsaGeom& g) {
  return "B=" + std::to_string(g.batch) + " heads=" + std::to_string(g.heads) + " d=" + std::to_string(g.d) +
         " L=" + std::to_string(g.L);
}

int64_t qkv_numel(const cpu::SsaGeom& g) { return g.batch * 3 * g.C() * g.L; }
int64_t out_numel(const cpu::SsaGeom& g) { return g.batch * g.C() * g.L; }

// Spikes (0/1, ~30% ones) as floats.
std::vector<float> spikes(size_t n, uint64_t seed) {
  std::vector<float> v = gpu_test::random_floats(n, seed, 0.0, 1.0);
  for (float& x : v) x = x < 0.3f ? 1.0f : 0.0f;
  return v;
}

template <typename S> double rtol_of() { return sizeof(S) == 4 ? 1e-5 : (std::is_same<S, __half>::value ? 2e-3 : 1e-2); }

// The CPU f32 value rounded to S: what an exact kernel must produce.
template <typename S>
std::vector<float> rounded(const std::vector<float>& v) { return gpu_test::to_floats(gpu_test::to_storage<S>(v)); }

template <typename S>
void check_ssa_forward(const cpu::SsaGeom& g, uint64_t seed) {
  SCOPED_TRACE(ssa_name(g) + " " + gpu_test::type_name<S>());
  const double scale = 0.125;
  const int64_t nx = qkv_numel(g), ny = out_numel(g);
  // Spikes: popcount (where supported) and GEMM both exact.
  const std::vector<float> x = spikes(nx, seed);
  std::vector<float> ref(ny);
  cpu::ssa_forward<float>(x.data(), g, scale, true, ref.data());
  const std::vector<float> want = rounded<S>(ref);
  DeviceArray<S> d_x(gpu_test::to_storage<S>(x)), d_y(ny), d_y2(ny);
  DeviceArray<uint32_t> d_bits(cuda::spike_words(nx));
  DeviceArray<float> d_work(cuda::ssa_workspace_floats(g, cuda::SsaPath::Gemm));
  cuda::pack_bits_cuda<S>(d_x.get(), nx, d_bits.get(), nullptr);
  const bool pop = cuda::ssa_popcount_supported(g);
  EXPECT_EQ(pop, g.d <= 109);
  if (pop) {
    cuda::ssa_forward_popcount_cuda<S>(d_bits.get(), g, scale, d_y.get(), nullptr);
    EXPECT_EQ(gpu_test::to_floats(d_y.download()), want) << "popcount forward on spikes";
  }
  cuda::ssa_forward_gemm_cuda<S>(d_x.get(), g, scale, d_work.get(), d_y2.get(), nullptr);
  EXPECT_EQ(gpu_test::to_floats(d_y2.download()), want) << "GEMM forward on spikes";
  // Real values: GEMM path against the CPU's double accumulation.
  const std::vector<float> xr = rounded<S>(gpu_test::random_floats(nx, seed + 1, -1.0, 1.0));
  cpu::ssa_forward<float>(xr.data(), g, scale, false, ref.data());
  DeviceArray<S> d_xr(gpu_test::to_storage<S>(xr));
  cuda::ssa_forward_gemm_cuda<S>(d_xr.get(), g, scale, d_work.get(), d_y2.get(), nullptr);
  EXPECT_TRUE(gpu_test::all_close(gpu_test::to_floats(d_y2.download()), ref, rtol_of<S>(), "GEMM forward"));
}

template <typename S>
void check_ssa_backward(const cpu::SsaGeom& g, uint64_t seed) {
  SCOPED_TRACE(ssa_name(g) + " " + gpu_test::type_name<S>());
  const double scale = 0.125;
  const int64_t nx = qkv_numel(g), ny = out_numel(g);
  const std::vector<float> dy = rounded<S>(gpu_test::random_floats(ny, seed, -1.0, 1.0));
  DeviceArray<S> d_dy(gpu_test::to_storage<S>(dy)), d_dx(nx), d_dx2(nx);
  DeviceArray<float> d_work(cuda::ssa_backward_workspace_floats(g));
  std::vector<float> ref(nx);
  for (const bool binary : {true, false}) {
    SCOPED_TRACE(binary ? "spikes" : "values");
    const std::vector<float> x =
        binary ? spikes(nx, seed + 1) : rounded<S>(gpu_test::random_floats(nx, seed + 2, -1.0, 1.0));
    cpu::ssa_backward<float>(dy.data(), x.data(), g, scale, false, ref.data());
    DeviceArray<S> d_x(gpu_test::to_storage<S>(x));
    cuda::ssa_backward_cuda<S>(d_dy.get(), d_x.get(), nullptr, g, scale, d_work.get(), d_dx.get(), nullptr);
    const std::vector<float> got = gpu_test::to_floats(d_dx.download());
    EXPECT_TRUE(gpu_test::all_close(got, ref, rtol_of<S>(), "dqkv"));
    if (!binary) continue;
    // From the saved bits: the same 0/1 operands, so the very same bits as from values.
    DeviceArray<uint32_t> d_bits(cuda::spike_words(nx));
    cuda::pack_bits_cuda<S>(d_x.get(), nx, d_bits.get(), nullptr);
    cuda::ssa_backward_cuda<S>(d_dy.get(), nullptr, d_bits.get(), g, scale, d_work.get(), d_dx2.get(), nullptr);
    EXPECT_EQ(gpu_test::to_floats(d_dx2.download()), got) << "backward from bits != from values";
  }
}

TEST(GpuSsa, ForwardMatchesCpu) {
  SM_SKIP_WITHOUT_GPU();
  uint64_t seed = 100;
  for (const cpu::SsaGeom& g : kSsaCases) {
    check_ssa_forward<float>(g, seed += 10);
    check_ssa_forward<__nv_bfloat16>(g, seed += 10);
    check_ssa_forward<__half>(g, seed += 10);
    if (HasFailure()) return;
  }
}

TEST(GpuSsa, BackwardMatchesCpu) {
  SM_SKIP_WITHOUT_GPU();
  uint64_t seed = 300;
  for (const cpu::SsaGeom& g : kSsaCases) {
    check_ssa_backward<float>(g, seed += 10);
    check_ssa_backward<__nv_bfloat16>(g, seed += 10);
    check_ssa_backward<__half>(g, seed += 10);
    if (HasFailure()) return;
  }
}

TEST(GpuSsa, EmptyBatchLaunchesNothing) {
  SM_SKIP_WITHOUT_GPU();
  const cpu::SsaGeom g{0, 2, 16, 8};
  DeviceArray<uint32_t> bits(1);
  cuda::ssa_forward_popcount_cuda<float>(bits.get(), g, 0.125, nullptr, nullptr);
  cuda::ssa_forward_gemm_cuda<float>(nullptr, g, 0.125, nullptr, nullptr, nullptr);
  cuda::ssa_backward_cuda<float>(nullptr, nullptr, bits.get(), g, 0.125, nullptr, nullptr, nullptr);
  SM_CUDA_CHECK(cudaDeviceSynchronize());
}

// "Measure both": popcount vs GEMM forward on Spikformer-S-sized spikes (T·N = 4·16,
// 12 heads of 32, 196 tokens). Prints the times; asserts only that both agree.
TEST(GpuSsa, ForwardPathTimings) {
  SM_SKIP_WITHOUT_GPU();
  const cpu::SsaGeom g{64, 12, 32, 196};
  const int64_t nx = qkv_numel(g), ny = out_numel(g);
  DeviceArray<__nv_bfloat16> d_x(gpu_test::to_storage<__nv_bfloat16>(spikes(nx, 7))), d_y(ny), d_y2(ny);
  DeviceArray<uint32_t> d_bits(cuda::spike_words(nx));
  DeviceArray<float> d_work(cuda::ssa_workspace_floats(g, cuda::SsaPath::Gemm));
  cudaEvent_t e0, e1;
  SM_CUDA_CHECK(cudaEventCreate(&e0));
  SM_CUDA_CHECK(cudaEventCreate(&e1));
  auto time_ms = [&](auto&& f) {
    f();  // warm-up
    SM_CUDA_CHECK(cudaEventRecord(e0, nullptr));
    const int reps = 20;
    for (int r = 0; r < reps; ++r) f();
    SM_CUDA_CHECK(cudaEventRecord(e1, nullptr));
    SM_CUDA_CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    SM_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    return ms / reps;
  };
  const float pack = time_ms([&] { cuda::pack_bits_cuda<__nv_bfloat16>(d_x.get(), nx, d_bits.get(), nullptr); });
  const float pop =
      time_ms([&] { cuda::ssa_forward_popcount_cuda<__nv_bfloat16>(d_bits.get(), g, 0.125, d_y.get(), nullptr); });
  const float gemm = time_ms(
      [&] { cuda::ssa_forward_gemm_cuda<__nv_bfloat16>(d_x.get(), g, 0.125, d_work.get(), d_y2.get(), nullptr); });
  std::printf("ssa forward bf16 %s: pack %.3f ms (done anyway: the saved bits), popcount %.3f ms, gemm %.3f ms\n",
              ssa_name(g).c_str(), pack, pop, gemm);
  SM_CUDA_CHECK(cudaEventDestroy(e0));
  SM_CUDA_CHECK(cudaEventDestroy(e1));
  EXPECT_EQ(gpu_test::to_floats(d_y.download()), gpu_test::to_floats(d_y2.download()));
}

// ------------------------------------------------------------------------ Mean kernels
// The CPU layer's arithmetic (mean.cpp), in f32: sum in index order, times f32 1/D.
void mean_ref(const std::vector<float>& x, int64_t outer, int64_t d, int64_t inner, std::vector<float>& y,
              const std::vector<float>& dy, std::vector<float>& dx) {
  const float s = 1.0f / static_cast<float>(d);
  y.assign(outer * inner, 0.0f);
  dx.assign(outer * d * inner, 0.0f);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      float acc = 0;
      for (int64_t k = 0; k < d; ++k) acc += x[(o * d + k) * inner + i];
      y[o * inner + i] = acc * s;
      for (int64_t k = 0; k < d; ++k) dx[(o * d + k) * inner + i] = dy[o * inner + i] * s;
    }
}

template <typename S>
void check_mean(int64_t outer, int64_t d, int64_t inner, uint64_t seed) {
  SCOPED_TRACE("outer=" + std::to_string(outer) + " d=" + std::to_string(d) + " inner=" + std::to_string(inner) +
               " " + gpu_test::type_name<S>());
  const std::vector<float> x = rounded<S>(gpu_test::random_floats(outer * d * inner, seed, -1.0, 1.0));
  const std::vector<float> dy = rounded<S>(gpu_test::random_floats(outer * inner, seed + 1, -1.0, 1.0));
  std::vector<float> y, dx;
  mean_ref(x, outer, d, inner, y, dy, dx);
  DeviceArray<S> d_x(gpu_test::to_storage<S>(x)), d_dy(gpu_test::to_storage<S>(dy)), d_y(y.size()), d_dx(dx.size());
  cuda::mean_forward_cuda<S>(d_x.get(), outer, d, inner, d_y.get(), nullptr);
  cuda::mean_backward_cuda<S>(d_dy.get(), outer, d, inner, d_dx.get(), nullptr);
  EXPECT_TRUE(gpu_test::all_close(gpu_test::to_floats(d_y.download()), y, rtol_of<S>(), "y"));
  EXPECT_TRUE(gpu_test::all_close(gpu_test::to_floats(d_dx.download()), dx, rtol_of<S>(), "dx"));
}

TEST(GpuMean, KernelsMatchCpu) {
  SM_SKIP_WITHOUT_GPU();
  uint64_t seed = 700;
  for (const auto& c : std::vector<std::vector<int64_t>>{{6, 4, 5}, {8, 196, 1}, {1, 7, 300}, {40, 1, 3}}) {
    check_mean<float>(c[0], c[1], c[2], seed += 10);
    check_mean<__nv_bfloat16>(c[0], c[1], c[2], seed += 10);
    check_mean<__half>(c[0], c[1], c[2], seed += 10);
  }
  cuda::mean_forward_cuda<float>(nullptr, 0, 3, 5, nullptr, nullptr);  // empty: no launch
  SM_CUDA_CHECK(cudaDeviceSynchronize());
}
#endif  // SPIKEMESH_HAVE_CUDA

// ------------------------------------------------------------------------ layers
TEST(GpuSsaLayer, ForwardOnSpikesIsExactAndBackwardMatchesCpu) {
  SKIP_WITHOUT_GPU();
  const Shape shape{2, 3, 3 * 64, 16};  // [T, N, 3C, L], 4 heads of 16
  auto u = gputest::make_units([] { return std::make_unique<SpikingAttention>(4); });
  gputest::LayerCheck c;
  c.binary_input = true;
  EXPECT_EQ(gputest::compare_layer(u, shape, c), "");
  // y exactly the CPU's (integers · scale)
  const Tensor x = gputest::random_input(shape, 41, true);
  Tensor xg = x.to(gpu());
  xg.set_binary(true);
  Ctx ctx;
  const Tensor yc = u.cpu->forward(x, ctx), yg = u.gpu->forward(xg, ctx);
  EXPECT_EQ(rel_err(yg, yc), 0.0);
  EXPECT_FALSE(yg.is_binary());
  u.cpu->backward_input(Tensor::zeros(yc.shape(), DType::F32), ctx);  // release the slots
  u.gpu->backward_input(Tensor::zeros(yc.shape(), DType::F32).to(gpu()), ctx);
}

TEST(GpuSsaLayer, NonBinaryAndReducedPrecisionMatchCpu) {
  SKIP_WITHOUT_GPU();
  auto u = gputest::make_units([] { return std::make_unique<SpikingAttention>(2, 0.25); });
  gputest::LayerCheck c;  // values: the GEMM path, f32
  EXPECT_EQ(gputest::compare_layer(u, {2, 2, 3 * 32, 20}, c), "");
  for (const bool binary : {true, false}) {
    c.binary_input = binary;
    c.gpu_dtype = DType::BF16;
    c.tol = 1e-2;
    EXPECT_EQ(gputest::compare_layer(u, {2, 2, 3 * 32, 20}, c), "") << "bf16 binary=" << binary;
    c.gpu_dtype = DType::F16;
    c.tol = 2e-3;
    EXPECT_EQ(gputest::compare_layer(u, {2, 2, 3 * 32, 20}, c), "") << "f16 binary=" << binary;
  }
  // d = 128 > 109: spikes take the GEMM path, still exact in f32.
  auto wide = gputest::make_units([] { return std::make_unique<SpikingAttention>(1); });
  c = gputest::LayerCheck();
  c.binary_input = true;
  EXPECT_EQ(gputest::compare_layer(wide, {1, 2, 3 * 128, 9}, c), "");
}

TEST(GpuMeanLayer, ForwardBackwardMatchCpu) {
  SKIP_WITHOUT_GPU();
  for (const int dim : {0, 1}) {  // per-sample [8, 196]: over 8 (inner 196), over the 196 tokens
    auto u = gputest::make_units([dim] { return std::make_unique<Mean>(dim); });
    gputest::LayerCheck c;
    EXPECT_EQ(gputest::compare_layer(u, {2, 3, 8, 196}, c), "") << "dim " << dim;
    c.gpu_dtype = DType::BF16;
    c.tol = 1e-2;
    EXPECT_EQ(gputest::compare_layer(u, {2, 3, 8, 196}, c), "") << "bf16 dim " << dim;
  }
  auto u = gputest::make_units([] { return std::make_unique<Mean>(-2); });
  EXPECT_EQ(gputest::compare_layer(u, {1, 2, 4, 3, 2}, gputest::LayerCheck()), "") << "5-d input";
}

// ------------------------------------------------------------------------ whole step
// spikformer_ti at E 64, 4 heads, depth 2, 32 px (L = 4 tokens), 10 classes, T = 2.
std::unique_ptr<Model> small_spikformer() {
  ModelOverrides ov;
  ov.vars = {{"E", 64}, {"heads", 4}, {"depth", 2}, {"image_size", 32}, {"num_classes", 10}};
  ov.T = 2;
  return load_builtin_model("spikformer_ti", ov);
}

// A static image repeated over T = 2: [2, N, 3, 32, 32] in [0, 2).
Tensor static_batch(int64_t N, uint64_t seed) {
  const Tensor img = gputest::random_input({N, 3, 32, 32}, seed, false, 0.0, 2.0);
  Tensor x = Tensor::empty({2, N, 3, 32, 32}, DType::F32);
  for (int t = 0; t < 2; ++t)
    for (int64_t i = 0; i < img.numel(); ++i) x.data<float>()[t * img.numel() + i] = img.data<float>()[i];
  return x;
}

struct StepOut {
  Tensor out;  // host
  LossResult loss;
  std::vector<Tensor> grads;  // host, params() order
  std::vector<std::string> names;
};

StepOut run_step(Model& m, const Tensor& x, const Tensor& y) {
  Ctx ctx;
  ctx.seed = 7;
  ctx.training = true;
  m.reset_state();
  m.zero_grad();
  StepOut r;
  const Tensor out = m.forward(x, ctx);
  r.loss = m.loss->forward(out, y);
  m.backward(m.loss->backward(1.0), ctx);
  r.out = gputest::host_f64(out);
  for (Param* p : m.params()) {
    r.grads.push_back(gputest::host_f64(p->grad));
    r.names.push_back(p->name);
  }
  return r;
}

TEST(GpuSpikformer, SmallTrainingStepMatchesCpu) {
  SKIP_WITHOUT_GPU();
  const int64_t N = 3;
  const Tensor x = static_batch(N, 61);
  Tensor y = Tensor::empty({N}, DType::I64);
  for (int64_t i = 0; i < N; ++i) y.data<int64_t>()[i] = (3 * i + 2) % 10;
  auto mc = small_spikformer(), mg = small_spikformer();
  mc->finalize(DType::F32, Device::cpu(), 17);
  mg->finalize(DType::F32, gpu(), 17);
  const StepOut c = run_step(*mc, x, y);
  const StepOut g = run_step(*mg, x.to(gpu()), y.to(gpu()));
  EXPECT_NEAR(g.loss.loss, c.loss.loss, 1e-5 * (1 + std::fabs(c.loss.loss)));
  EXPECT_EQ(g.loss.correct, c.loss.correct);
  EXPECT_LE(rel_l2(g.out, c.out), 1e-4) << "model output";
  ASSERT_EQ(g.grads.size(), c.grads.size());
  for (size_t k = 0; k < c.grads.size(); ++k) {
    EXPECT_EQ(g.names[k], c.names[k]);
    EXPECT_LE(rel_l2(g.grads[k], c.grads[k]), 5e-3) << "grad of " << c.names[k];
  }
  const auto sc = mc->stats(), sg = mg->stats();  // firing rates, the attention LIFs included
  ASSERT_EQ(sg.size(), sc.size());
  for (size_t i = 0; i < sc.size(); ++i) {
    EXPECT_EQ(sg[i].layer, sc[i].layer);
    EXPECT_NEAR(sg[i].value, sc[i].value, 1e-3) << sc[i].layer;
  }
}

TEST(GpuSpikformer, Bf16StepIsFiniteAndCloseToF32) {
  SKIP_WITHOUT_GPU();
  const int64_t N = 3;
  const Tensor x = static_batch(N, 62).to(gpu());
  Tensor y = Tensor::empty({N}, DType::I64);
  for (int64_t i = 0; i < N; ++i) y.data<int64_t>()[i] = (7 * i + 1) % 10;
  auto mf = small_spikformer(), mb = small_spikformer();
  mf->finalize(DType::F32, gpu(), 17);
  mb->finalize(DType::F32, gpu(), 17);  // f32 masters, bf16 activations
  const StepOut f = run_step(*mf, x, y.to(gpu()));
  const StepOut b = run_step(*mb, x.to_dtype(DType::BF16), y.to(gpu()));
  EXPECT_TRUE(std::isfinite(b.loss.loss));
  EXPECT_NEAR(b.loss.loss, f.loss.loss, 0.02 * f.loss.loss);
  for (size_t k = 0; k < b.grads.size(); ++k) EXPECT_TRUE(std::isfinite(rel_l2(b.grads[k], f.grads[k]))) << b.names[k];
}

}  // namespace
}  // namespace sm
